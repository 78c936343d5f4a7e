"""Policy search: the AutoAugment search space, the search methods, and the story every search
follows from a configuration to a stored policy. In rooms, lowest first (a module imports its own
room and lower ones: docs/ARCHITECTURE.md, "search/, in rooms"):

* the vocabulary, here: :mod:`.space` (:class:`~autoaug.search.space.SearchSpace`, the one encoding
  between an Optuna trial's parameters and a :class:`policies.Policy`), :mod:`.score`,
  :mod:`.budget`, :mod:`.run_dir`;
* :mod:`.decide` -- what a search decides around its method: calibration, noise, re-scoring,
  assembly (:func:`~autoaug.search.decide.assemble.assemble_policy`), warm start, op effects;
* :mod:`.tune` -- the plumbing to Ray Tune and Optuna: every method runs its experiments through
  :mod:`autoaug.search.tune.experiment`;
* :mod:`.methods` -- the interface a method implements and the registry of methods
  (:mod:`autoaug.search.methods.base`, ``METHODS``: the ``autoaug.methods`` entry-point group, the
  built-in ones listed in ``pyproject.toml``), each one folder owning everything about it;
* the story, here: :class:`~autoaug.search.config.SearchConfig` (what a search is: presets,
  validation, ``METHODS``), :func:`~autoaug.search.driver.run_search` /
  :func:`~autoaug.search.driver.resume_search` (run or continue a search: checks, the method,
  re-scoring, choosing, storing; docs/ARCHITECTURE.md, "A search, step by step"), :mod:`.records`
  and :mod:`.report`.

Submodules are imported on demand so that ``import autoaug.search`` stays cheap.
"""
