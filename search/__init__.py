"""Policy search: the AutoAugment search space, the Ray Tune + Optuna tuner, and the assembly of
the final policy.

* :class:`autoaug.search.space.SearchSpace` -- the space and the one encoding between an Optuna trial's
  parameters and a :class:`policies.Policy` (both ways).
* :class:`autoaug.search.config.SearchConfig` -- what a search is (presets, validation).
* :func:`autoaug.search.tuner.run_search` / :func:`autoaug.search.tuner.resume_search` -- run (or continue) a
  search with ``ray.tune.Tuner`` + ``OptunaSearch`` + ASHA. Its parts: ``run_dir`` (the run
  directory), ``study`` (samplers, Optuna storage, consistency check), ``reconcile`` (Optuna/Tune
  after a driver crash: the only use of their private attributes), ``progress`` (progress lines),
  ``records`` (trial records, the outcome).
* :func:`autoaug.search.assemble.assemble_policy` -- the best trials' sub-policies -> the final Policy,
  with its provenance.

Submodules are imported on demand so that ``import autoaug.search`` stays cheap.
"""
