"""Configuration of a policy search: :class:`SearchConfig` and the named presets.

A search configuration is a frozen dataclass holding the proxy training configuration
(:class:`autoaug.proxy_models.train.TrainConfig`, shared by every trial), the :class:`SearchSpace` and
the tuner's settings. :meth:`SearchConfig.from_dict` accepts the nested form used by YAML files
and by ``search_config.json`` in a run directory::

    preset: cpu                 # optional: start from SEARCH_PRESETS["cpu"]
    name: cifar10-resnet8
    data: /data/cifar10/train.parquet   # shortcut for train.data
    num_trials: 32
    train: {preset: cpu, epochs: 6}     # TrainConfig preset + overrides (or a full TrainConfig)
    space: {exclude_ops: [SamplePairing]}
"""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import math
import numbers
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from autoaug.search.space import SearchSpace

__all__ = [
    "SearchConfig",
    "DensityConfig",
    "METHODS",
    "DENSITY_OBJECTIVES",
    "SEARCH_PRESETS",
    "METRIC",
    "MODE",
    "default_runs_root",
    "default_search_name",
]

#: The score every trial reports after each epoch and the search maximizes: the mean validation
#: accuracy over the trial's last ``SearchConfig.score_window`` epochs (with a window of 1, the
#: epoch's own validation accuracy, which every trial also reports as ``val_accuracy``).
METRIC = "search_score"
MODE = "max"

#: Search methods: ``train`` trains the proxy model once per candidate (AutoAugment);
#: ``density`` scores candidates with fold models trained once (Fast AutoAugment's density
#: matching, :mod:`autoaug.search.density`).
METHODS = ("train", "density")
#: What a density-matching trial maximises: the fold model's accuracy on the augmented held-out
#: fold, or minus its mean cross-entropy there (chosen by measurement: docs/search.md).
DENSITY_OBJECTIVES = ("accuracy", "loss")

#: Optuna samplers selectable by name, with the extra module each needs (None: none).
RUNS_ENV_VAR = "AUTOAUG_RUNS"

# Store names (policies.store) are the strictest names involved: a search name must be one.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")

#: Named starting points; YAML files and flags override them field by field.
SEARCH_PRESETS: Mapping[str, Mapping[str, Any]] = {
    # Plumbing check in about a minute on 2 CPU cores: 4 trials of the trainer's smoke preset.
    "smoke": {
        "train": {"preset": "smoke"},
        "num_trials": 4, "concurrency": 2, "cpus_per_trial": 1, "gpus_per_trial": 0,
        "grace_period": 1, "reduction_factor": 2,
    },
    # A real, small search on a CPU machine (33-42 minutes measured on 2 idle cores): the trainer's
    # proxy-cpu preset (ResNet-8, 1,000 images, 120 epochs: long training on few images, where
    # augmentation pays off, so the proxy ranks policies like the evaluation regime does).
    # 28 trials; ASHA ranks them at epochs 20 and 60 by the mean validation accuracy of their
    # last 5 epochs (one epoch's accuracy at lr 0.15 is too noisy to rank by) and keeps a third
    # at each rung: 40 epochs per trial in ASHA's steady state (41-54 measured: the first trials
    # to reach a rung are promoted against few peers), about the trial epochs of 16 trials cut at
    # epoch 40, spread over almost twice the candidates (measured against that 16-trial search
    # over search seeds: docs/search.md, "Does the search win?").
    # The first 5 trials are AutoAugment's published CIFAR-10 sub-policies (warm start); the
    # final candidates (assembled, best trial, AutoAugment extended by what the search found,
    # survivors) are re-scored under the proxy (one fresh seed) before one is stored. Chosen by
    # measurement: docs/search.md (re-scoring with 2 seeds on 10,000 validation images was
    # measured too and chose a policy that did worse in the evaluation regime).
    "cpu": {
        "train": {"preset": "proxy-cpu"},
        "num_trials": 28, "concurrency": 2, "cpus_per_trial": 1, "gpus_per_trial": 0,
        "grace_period": 20, "reduction_factor": 3, "top_n": 5, "score_window": 5,
        "warm_start": ["autoaugment-cifar10"], "rescore": True,
    },
    # AutoAugment's proxy task (WRN-40-2, reduced CIFAR-10, 120 epochs) on GPUs, 4 trials per GPU
    # as PBA did; ASHA cuts the weak candidates at epochs 15 and 45.
    "paper": {
        "train": {"preset": "paper"},
        "num_trials": 200, "concurrency": 8, "cpus_per_trial": 2, "gpus_per_trial": 0.25,
        "grace_period": 15, "reduction_factor": 3,
    },
    # Density matching (Fast AutoAugment) on a CPU: K=5 fold models of the proxy-cpu recipe on
    # the 1,000-image search split, then T=2 rounds of B=200 scoring trials per fold, the top 10
    # of each round merged (docs/search.md, "Two methods").
    "density-cpu": {
        "method": "density",
        "train": {"preset": "proxy-cpu"},
        "concurrency": 2, "cpus_per_trial": 1, "gpus_per_trial": 0,
        "density": {"folds": 5, "rounds": 2, "trials_per_round": 200, "top_per_round": 10},
    },
}  # fmt: skip


def _absolute_if_file(ref: str) -> str:
    """``ref`` made absolute when it names an existing policy file (other references unchanged)."""
    from autoaug.policies.reference import looks_like_path

    text = ref.strip()
    if looks_like_path(text) and os.path.isfile(os.path.expanduser(text)):
        return os.path.abspath(os.path.expanduser(text))
    return ref


@dataclass(frozen=True)
class DensityConfig:
    """The density-matching method's own settings (``SearchConfig.density``; used when
    ``SearchConfig.method == "density"``). Defaults are Fast AutoAugment's (Lim et al., 2019).

    Args:
        folds: ``K`` stratified folds of the reduced training split; fold model ``k`` trains on
            the other ``K-1`` and scores candidates on fold ``k``.
        rounds: ``T`` rounds of search per fold (each a fresh Optuna study).
        trials_per_round: ``B`` candidates scored per round.
        top_per_round: ``N`` best candidates of each round whose sub-policies join the final
            policy.
        objective: ``loss`` (default; minus the mean cross-entropy, which ranks candidates more
            repeatably than the accuracy: benchmarks/search_cost.py) or ``accuracy``.
        fold_seed: seed of the fold assignment.
    """

    folds: int = 5
    rounds: int = 2
    trials_per_round: int = 200
    top_per_round: int = 10
    objective: str = "loss"
    fold_seed: int = 0

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ValueError:
            return ValueError(f"SearchConfig.density.{name}: {getattr(self, name)!r} is invalid; expected {expected}")

        if not _is_int(self.folds) or self.folds < 2:
            raise bad("folds", "an integer >= 2")
        for name in ("rounds", "trials_per_round", "top_per_round"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad(name, "an integer >= 1")
        if self.top_per_round > self.trials_per_round:
            raise bad("top_per_round", f"at most trials_per_round ({self.trials_per_round})")
        if self.objective not in DENSITY_OBJECTIVES:
            raise bad("objective", f"one of {list(DENSITY_OBJECTIVES)}")
        if not _is_int(self.fold_seed) or not 0 <= self.fold_seed < 2**32:
            raise bad("fold_seed", "an integer in [0, 2**32)")

    @classmethod
    def from_value(cls, value: Any) -> "DensityConfig":
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"SearchConfig.density must be a mapping of its settings, got {type(value).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown density setting(s) {unknown}; expected some of {sorted(known)}")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def num_trials(self) -> int:
        """Scoring trials of the whole search: ``folds * rounds * trials_per_round``."""
        return self.folds * self.rounds * self.trials_per_round


def default_runs_root() -> str:
    """``$AUTOAUG_RUNS`` if set, else ``~/.autoaug/runs`` (expanded)."""
    return os.environ.get(RUNS_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".autoaug", "runs")


def default_search_name() -> str:
    return datetime.now().strftime("search-%Y%m%d-%H%M%S")


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``override``: nested mappings merged recursively, other values
    replaced. Neither input is modified. (Also the layering rule of :mod:`autoaug.launch.config`.)"""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _train_config(value: Any) -> Any:
    from autoaug.proxy_models.train import TrainConfig

    if isinstance(value, TrainConfig):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"SearchConfig.train must be a TrainConfig or a mapping (optionally with 'preset'), "
            f"got {type(value).__name__}"
        )
    overrides = dict(value)
    preset = overrides.pop("preset", None)
    if preset is None:
        return TrainConfig.from_dict(overrides)
    return TrainConfig.from_preset(preset, **overrides)


@dataclass(frozen=True)
class SearchConfig:
    """Everything that defines a search (saved as ``search_config.json`` in its run directory).

    Args:
        name: run name: the run directory ``{storage}/{name}``, the Optuna study and the stored
            policy's name (letters, digits, ``.``, ``_``, ``+``, ``-``).
        train: the proxy training configuration shared by every trial (same split, model-init
            seed and data order: common random numbers).
        space: the policy search space.
        num_trials: trials (candidate policies) to run.
        concurrency: trials running at once (``ConcurrencyLimiter``); None: as many as the
            cluster's resources allow.
        cpus_per_trial / gpus_per_trial: Ray resources of one trial (fractions of a GPU allowed).
        sampler: Optuna sampler, one of :data:`autoaug.search.study.SAMPLERS`.
        seed: seed of the sampler.
        startup_trials: a model-based sampler (``tpe``, ``gp``, ``cmaes``) proposes at random
            until this many trials have finished (complete or stopped early; warm-start trials
            count), then from its model of the scores. With ``warm_start`` giving 5 trials and
            ``startup_trials`` 5, every proposal made after the warm start has finished comes
            from the model. None: Optuna's default (10 for TPE).
        early_stopping: stop weak trials with ASHA on the validation accuracy per epoch.
        grace_period / reduction_factor: ASHA's first rung (epochs) and its reduction factor.
        max_failures: retries of a trial that raises before it is marked failed.
        top_n: best trials whose sub-policies make the final policy.
        score_window: the search score (:data:`METRIC`) after an epoch is the mean validation
            accuracy over the last ``score_window`` epochs. At a high learning rate one epoch's
            validation accuracy swings by several points from epoch to epoch; the mean over a few
            epochs ranks trials by what they learned, so ASHA's early rungs cut fewer good
            candidates by chance. 1: the epoch's own validation accuracy.
        warm_start: policy references (presets such as ``autoaugment-cifar10``, policy JSON
            files, stored versions) whose sub-policies are the first candidates, ``K`` per trial
            (:mod:`autoaug.search.warm_start`).
        rescore: train the final candidates (the assembled policy, the best single trial, ...)
            once more under the proxy (fresh seeds) and store the best (:mod:`autoaug.search.rescore`).
        rescore_seeds: re-scoring runs per candidate (seeds ``train.seed + 1000``, ``+ 1001``,
            ...); a candidate's re-score is the mean over them.
        rescore_val_size: validation images of the re-scoring runs (None: ``train.val_size``).
            The training images are the trials' own; the validation set grows (the trials'
            images and more). One model's accuracy on ``n`` images varies from seed to seed
            mostly through which images it happens to get right, a spread that shrinks as
            ``1/sqrt(n)``: 10,000 images separate candidates that 1,000 cannot. The re-scoring
            runs validate only over their last ``score_window`` epochs, so a large set costs
            little.
        storage: root of run directories: a local folder or a URI (``s3://bucket/runs``).
        optuna_storage: Optuna storage URL (``sqlite:///...``, ``postgresql://...``); None: an
            SQLite file ``optuna.db`` in the run directory (local storage only).
        store: policy store URI for the result; None: ``$AUTOAUG_STORE`` or ``~/.autoaug/policies``.
        reuse_actors: keep trial processes alive between trials (DALI pipelines build faster).
        mlflow_uri: MLflow tracking URI (a folder, ``file://``, ``sqlite://``, ``http://``): one MLflow
            run per trial in the experiment named like the search (:mod:`autoaug.search.loggers`);
            None: no MLflow logging (TensorBoard event files are always written).
        verbose: 0 silent, 1 one line per finished trial, 2 also Ray Tune's status table and
            the trials' own output.
        method: ``train`` or ``density`` (:data:`METHODS`).
        density: the density method's settings (:class:`DensityConfig`); with it,
            ``num_trials``, ``top_n``, the ASHA settings and ``rescore`` are not used.
    """

    name: str
    train: Any  # proxy_models.train.TrainConfig (imported lazily: it pulls in torch)
    space: SearchSpace = field(default_factory=SearchSpace)
    num_trials: int = 16
    concurrency: int | None = 2
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    sampler: str = "tpe"
    seed: int = 0
    startup_trials: int | None = None
    early_stopping: bool = True
    grace_period: int = 1
    reduction_factor: float = 3.0
    max_failures: int = 1
    top_n: int = 5
    score_window: int = 1
    warm_start: tuple[str, ...] = ()
    rescore: bool = False
    rescore_seeds: int = 1
    rescore_val_size: int | None = None
    storage: str = field(default_factory=default_runs_root)
    optuna_storage: str | None = None
    store: str | None = None
    reuse_actors: bool = True
    mlflow_uri: str | None = None
    verbose: int = 1
    method: str = "train"
    density: Any = field(default_factory=lambda: DensityConfig())

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ValueError:
            return ValueError(f"SearchConfig.{name}: {getattr(self, name)!r} is invalid; expected {expected}")

        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise bad("name", "1-128 characters from letters, digits, '.', '_', '+', '-', starting "
                      "with a letter or digit")  # fmt: skip
        object.__setattr__(self, "train", _train_config(self.train))
        if isinstance(self.space, Mapping):
            object.__setattr__(self, "space", SearchSpace.from_dict(self.space))
        if not isinstance(self.space, SearchSpace):
            raise bad("space", "a SearchSpace or a mapping of its fields")
        for name in ("num_trials", "grace_period", "top_n", "score_window"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad(name, "an integer >= 1")
        if self.concurrency is not None and (not _is_int(self.concurrency) or self.concurrency < 1):
            raise bad("concurrency", "an integer >= 1, or None (as many as resources allow)")
        if not _is_number(self.cpus_per_trial) or self.cpus_per_trial <= 0:
            raise bad("cpus_per_trial", "a number > 0")
        if not _is_number(self.gpus_per_trial) or self.gpus_per_trial < 0:
            raise bad("gpus_per_trial", "a number >= 0 (fractions such as 0.25 share a GPU)")
        if self.gpus_per_trial > 1 and self.gpus_per_trial != int(self.gpus_per_trial):
            raise bad("gpus_per_trial", "a fraction <= 1 or a whole number of GPUs")
        from autoaug.search.study import SAMPLERS, model_samplers

        if self.sampler not in SAMPLERS:
            raise bad("sampler", f"one of {list(SAMPLERS)}")
        if not _is_int(self.seed) or not 0 <= self.seed < 2**32:
            raise bad("seed", "an integer in [0, 2**32)")
        if self.startup_trials is not None:
            if not _is_int(self.startup_trials) or self.startup_trials < 0:
                raise bad("startup_trials", "an integer >= 0, or None (the sampler's default)")
            if not SAMPLERS[self.sampler].models_scores:
                raise bad("startup_trials", f"unset with sampler {self.sampler!r}, which has no model of the "
                          f"scores (or one of {model_samplers()})")
        if not isinstance(self.early_stopping, bool):
            raise bad("early_stopping", "true or false")
        if not _is_number(self.reduction_factor) or self.reduction_factor <= 1:
            raise bad("reduction_factor", "a number > 1")
        if not _is_int(self.max_failures) or self.max_failures < 0:
            raise bad("max_failures", "an integer >= 0")
        if not isinstance(self.storage, str) or not self.storage.strip():
            raise bad("storage", "a folder or a URI")
        if self.optuna_storage is not None and (
            not isinstance(self.optuna_storage, str) or "://" not in self.optuna_storage
        ):
            raise bad("optuna_storage", "an Optuna storage URL such as sqlite:////abs/path.db or "
                      "postgresql://user@host/db, or None")  # fmt: skip
        if self.optuna_storage is not None and self.optuna_storage.startswith("sqlite:///"):
            # sqlite:///rel.db is relative to the working directory: pin it, as the storage folder
            path = self.optuna_storage[len("sqlite:///"):]
            if path and not path.startswith("/") and path != ":memory:":
                object.__setattr__(self, "optuna_storage", "sqlite:///" + os.path.abspath(os.path.expanduser(path)))
        if self.store is not None and (not isinstance(self.store, str) or not self.store.strip()):
            raise bad("store", "a policy store folder or URI, or None")
        if self.mlflow_uri is not None:
            if not isinstance(self.mlflow_uri, str) or not self.mlflow_uri.strip():
                raise bad("mlflow_uri", "an MLflow tracking URI (a folder, file://, sqlite://, http://) or None")
            if "://" not in self.mlflow_uri and not self.mlflow_uri.startswith("databricks"):
                object.__setattr__(self, "mlflow_uri", os.path.abspath(os.path.expanduser(self.mlflow_uri)))
        if not isinstance(self.reuse_actors, bool):
            raise bad("reuse_actors", "true or false")
        if not isinstance(self.rescore, bool):
            raise bad("rescore", "true or false")
        if not _is_int(self.rescore_seeds) or not 1 <= self.rescore_seeds <= 100:
            raise bad("rescore_seeds", "an integer in [1, 100]")
        if self.rescore_val_size is not None and (not _is_int(self.rescore_val_size) or self.rescore_val_size < 1):
            raise bad("rescore_val_size", "an integer >= 1, or None (the proxy's own validation size)")
        if isinstance(self.warm_start, str):
            object.__setattr__(self, "warm_start", (self.warm_start,) if self.warm_start else ())
        if not isinstance(self.warm_start, (list, tuple)) or not all(
            isinstance(r, str) and r.strip() for r in self.warm_start
        ):
            raise bad("warm_start", "a list of policy references (presets, policy JSON files, stored versions)")
        # A policy file named relative to the working directory must still be found when the
        # search is resumed from elsewhere (the configuration is saved in the run directory).
        object.__setattr__(self, "warm_start", tuple(_absolute_if_file(r) for r in self.warm_start))
        if self.verbose not in (0, 1, 2):
            raise bad("verbose", "0, 1 or 2")
        if self.method not in METHODS:
            raise bad("method", f"one of {list(METHODS)}")
        object.__setattr__(self, "density", DensityConfig.from_value(self.density))
        object.__setattr__(self, "cpus_per_trial", float(self.cpus_per_trial))
        object.__setattr__(self, "gpus_per_trial", float(self.gpus_per_trial))
        object.__setattr__(self, "reduction_factor", float(self.reduction_factor))
        if "://" not in self.storage:
            object.__setattr__(self, "storage", os.path.abspath(os.path.expanduser(self.storage)))

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SearchConfig":
        """Build from the nested form (see the module documentation).

        ``preset`` starts from :data:`SEARCH_PRESETS` (the other keys override it), ``data`` is
        a shortcut for ``train.data``, ``train`` may name a trainer preset, ``name`` defaults to
        a timestamped one.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"search config must be a mapping, got {type(data).__name__}")
        data = dict(data)
        preset = data.pop("preset", None)
        if preset is not None:
            if preset not in SEARCH_PRESETS:
                raise ValueError(f"unknown search preset {preset!r}; expected one of {list(SEARCH_PRESETS)}")
            data = deep_merge(SEARCH_PRESETS[preset], data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known - {"data"})
        if unknown:
            raise ValueError(
                f"unknown search config key(s) {unknown}; expected some of {sorted(known | {'data', 'preset'})}"
            )
        if "data" in data:
            source = data.pop("data")
            train = data.get("train", {})
            if isinstance(train, Mapping):
                data["train"] = {**train, "data": source}
            else:
                data["train"] = dataclasses.replace(train, data=source)
        data.setdefault("name", default_search_name())
        if "train" not in data:
            raise ValueError("search config has no 'train' section and no preset to take it from")
        return cls(**data)

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "SearchConfig":
        """``SearchConfig.from_dict({"preset": preset, **overrides})``."""
        return cls.from_dict({"preset": preset, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able nested dict; ``SearchConfig.from_dict(c.to_dict()) == c``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["train"] = self.train.to_dict()
        d["space"] = self.space.to_dict()
        d["density"] = self.density.to_dict()
        return d

    def replace(self, **changes: Any) -> "SearchConfig":
        return dataclasses.replace(self, **changes)

    # ---------------------------------------------------------------- checks
    @property
    def epochs(self) -> int:
        return self.train.epochs

    def rescore_train_config(self, seed_index: int = 0) -> Any:
        """The training configuration of re-scoring run ``seed_index`` (0-based): the trials' own,
        with seed ``train.seed + RESCORE_SEED_OFFSET + seed_index``, ``rescore_val_size``
        validation images, validated only over the last ``score_window`` epochs (all the score
        reads)."""
        from autoaug.search.rescore import RESCORE_SEED_OFFSET

        return dataclasses.replace(
            self.train,
            seed=(self.train.seed + RESCORE_SEED_OFFSET + seed_index) % 2**31,
            val_size=self.train.val_size if self.rescore_val_size is None else self.rescore_val_size,
            eval_from=max(1, self.train.epochs - self.score_window + 1),
        )

    @property
    def storage_is_local(self) -> bool:
        return "://" not in self.storage or self.storage.startswith("file://")

    def check_runnable(self) -> None:
        """Checks that need the whole configuration; raises ``ValueError`` naming the problem."""
        density = self.method == "density"
        if density:
            from autoaug.search.density import check_density_config

            check_density_config(self)
        if self.warm_start:
            from autoaug.search.warm_start import warm_start_policies

            warm = warm_start_policies(self.warm_start, self.space, store=self.store)
            trials = self.density.trials_per_round if density else self.num_trials
            if len(warm) > trials:
                raise ValueError(
                    f"warm_start gives {len(warm)} candidates but the search has only {trials} "
                    + ("trials per round; raise density.trials_per_round" if density else "trials; raise --num-trials")
                    + " or warm-start from fewer policies"
                )
        if self.train.data is None:
            raise ValueError("no training data: give --data PATH (or 'data:' in the config file)")
        if density:
            pass  # the held-out folds score the candidates: no validation split, no ASHA
        elif self.train.val_size == 0:
            raise ValueError(
                "train.val_size is 0: the search scores candidates on the validation split; "
                "give a validation size (None = every image not used for training)"
            )
        if not density and (self.train.eval_every != 1 or self.train.eval_from != 1):
            setting = "eval_every" if self.train.eval_every != 1 else "eval_from"
            raise ValueError(
                f"train.{setting} is {getattr(self.train, setting)}: the search reports the validation "
                f"accuracy to Optuna and ASHA after every epoch; set {setting} to 1"
            )
        if self.early_stopping and not density:
            if self.grace_period > self.train.epochs:
                raise ValueError(
                    f"grace_period {self.grace_period} exceeds train.epochs {self.train.epochs}: ASHA "
                    "could never stop a trial; lower the grace period or disable early stopping"
                )
        device = self.train.device
        if device.startswith("cuda") and self.gpus_per_trial == 0:
            raise ValueError(
                f"train.device is {device!r} but gpus_per_trial is 0: Ray hides the GPUs from trials that "
                "reserve none; give --gpus-per-trial (0.25 shares a GPU among 4 trials), or "
                "--set train.device=cpu (or auto)"
            )
        if device == "cpu" and self.gpus_per_trial > 0:
            raise ValueError(
                f"gpus_per_trial is {self.gpus_per_trial:g} but train.device is 'cpu': the reserved GPUs would "
                "sit idle; --set train.device=cuda (or auto), or --gpus-per-trial 0"
            )
        if self.mlflow_uri is not None:
            from autoaug.search.loggers import check_mlflow_uri

            check_mlflow_uri(self.mlflow_uri)
        from autoaug.search.study import SAMPLERS

        module = SAMPLERS[self.sampler].requires
        if module is not None and importlib.util.find_spec(module) is None:
            raise ValueError(
                f"sampler {self.sampler!r} needs the Python package {module!r}, which is not "
                f"installed (pip install {module}); or choose one of "
                f"{[name for name, s in SAMPLERS.items() if s.requires is None]}"
            )
        if self.optuna_storage is None and not self.storage_is_local:
            raise ValueError(
                f"run storage {self.storage!r} is remote: the default SQLite study file needs a local "
                "folder; give an Optuna storage URL reachable from here (--optuna-storage "
                "postgresql://... or sqlite:////shared/path/study.db)"
            )
