"""Policy search: the AutoAugment search space, the search methods, and the story every search
follows from a configuration to a stored policy.

* :class:`autoaug.search.space.SearchSpace` -- the space and the one encoding between an Optuna
  trial's parameters and a :class:`policies.Policy` (both ways).
* :class:`autoaug.search.config.SearchConfig` -- what a search is (presets, validation, ``METHODS``).
* :func:`autoaug.search.driver.run_search` / :func:`autoaug.search.driver.resume_search` -- run (or
  continue) a search: checks, the method, re-scoring, choosing, storing (docs/ARCHITECTURE.md,
  "A search, step by step").
* :mod:`autoaug.search.methods.base` -- the interface a method implements and the registry of methods
  (``METHODS``); :mod:`autoaug.search.methods.builtin` registers the built-in ones. Each method is one
  module owning everything about it (settings, checks, presets, flags, summary); all of them run
  their Ray Tune experiments through :mod:`autoaug.search.tune.experiment`.
* :func:`autoaug.search.decide.assemble.assemble_policy` -- the best trials' sub-policies -> the final
  Policy, with its provenance.

Submodules are imported on demand so that ``import autoaug.search`` stays cheap.
"""
