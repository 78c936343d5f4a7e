"""Policy search: the AutoAugment search space, the Ray Tune + Optuna tuner, and the assembly of
the final policy.

* :class:`autoaug.search.space.SearchSpace` -- the space and the one encoding between an Optuna trial's
  parameters and a :class:`policies.Policy` (both ways).
* :func:`autoaug.search.tuner.run_search` / :func:`autoaug.search.tuner.resume_search` -- run (or continue) a
  search with ``ray.tune.Tuner`` + ``OptunaSearch`` + ASHA; :class:`autoaug.search.tuner.SearchConfig`.
* :func:`autoaug.search.assemble.assemble_policy` -- the best trials' sub-policies -> the final Policy,
  with its provenance.

Submodules are imported on demand so that ``import search`` stays cheap.
"""
