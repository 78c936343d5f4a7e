"""Compare augmentation policies: train the same model with each over several seeds.

::

    from autoaug.launch.compare import CompareConfig, run_compare
    from autoaug.proxy_models.train_config import TrainConfig

    train = TrainConfig.from_preset("cpu", data="cifar10/train.parquet", test_data="cifar10/test.parquet")
    config = CompareConfig(train=train, policies=("cifar10-r8@latest",), seeds=(0, 1, 2),
                           out="runs/compare", store="~/.autoaug/policies")
    comparison = run_compare(config, progress=print)
    print(comparison.table())

Every (policy, seed) pair is one run of :func:`autoaug.proxy_models.train.train` with the training
configuration's ``seed`` replaced, everything else (model, data, reduced split, epochs...) shared.
Runs execute in parallel as Ray tasks, each holding ``cpus_per_run`` CPUs (and the trainer's
``num_threads`` set to match) and ``gpus_per_run`` GPUs, on an embedded local Ray or the cluster
at ``address`` (:func:`autoaug.core.ray_session.connect`).

Output folder ``out``:

* ``runs/<run id>.json`` -- one per finished run, written atomically as soon as it finishes (with
  the test pass's per-class counts); a re-run with the same ``out`` reuses them (after checking that
  they were trained with the same configuration, policy and data) and trains only what is missing;
* ``runs.csv`` -- one row per run (seed, test/validation/balanced accuracy, training time, node);
* ``results.md``, ``results.csv``, ``results.parquet`` -- one row per policy: number of seeds,
  mean, sample standard deviation and 95% confidence interval of the test accuracy and of the
  balanced accuracy (Student t), mean training time; ``results.md`` also the per-class section;
* ``comparison.png`` -- test accuracy per policy (mean, 95% CI, every seed) and mean validation
  accuracy per epoch;
* ``per_class.csv``, ``per_class.png`` -- per-class accuracy of every policy, and the classes on
  which a policy is worse than the best baseline beyond the noise
  (:mod:`~autoaug.launch.compare.per_class`);
* ``compare.json`` -- the settings of the comparison; ``evaluations.json`` -- which stored
  policies got the results attached (:meth:`autoaug.policies.store.PolicyStore.attach_evaluation`).

The package: :mod:`~autoaug.launch.compare.config` (what a comparison is),
:mod:`~autoaug.launch.compare.candidates` (the policies compared, through the one policy
resolver), :mod:`~autoaug.launch.compare.runner` (Ray tasks, saved runs),
:mod:`~autoaug.launch.compare.report` (statistics, tables, files, store evaluations),
:mod:`~autoaug.launch.compare.per_class` (balanced and per-class accuracy, classes worse than the
best baseline) and :mod:`~autoaug.launch.compare.stats` (mean and Student t interval, paired
differences, Benjamini-Hochberg; scipy).
"""

from __future__ import annotations

from autoaug.core.errors import CompareError, RunFailedError
from autoaug.launch.compare.candidates import (
    DEFAULT_BASELINES,
    Candidate,
    default_test_data,
    parse_baselines,
    resolve_candidates,
)
from autoaug.launch.compare.config import CONFIG_KEYS, CompareConfig, config_from_dict
from autoaug.launch.compare.per_class import ClassResult, PerClass
from autoaug.launch.compare.report import Comparison, PolicySummary, attach_evaluations, summarize, write_outputs
from autoaug.launch.compare.runner import run_compare, run_id
from autoaug.launch.compare.stats import PairedDifference, adjust_p_values, mean_ci, paired_difference

__all__ = [
    "DEFAULT_BASELINES",
    "CONFIG_KEYS",
    "Candidate",
    "CompareConfig",
    "ClassResult",
    "CompareError",
    "Comparison",
    "PairedDifference",
    "PerClass",
    "PolicySummary",
    "RunFailedError",
    "adjust_p_values",
    "attach_evaluations",
    "config_from_dict",
    "default_test_data",
    "mean_ci",
    "paired_difference",
    "parse_baselines",
    "resolve_candidates",
    "run_compare",
    "run_id",
    "summarize",
    "write_outputs",
]
