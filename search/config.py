"""Configuration of a policy search: :class:`SearchConfig` and the named presets.

A search configuration is a frozen dataclass holding the proxy training configuration
(:class:`autoaug.proxy_models.train.TrainConfig`, shared by every trial), the :class:`SearchSpace` and
the driver's settings. :meth:`SearchConfig.from_dict` accepts the nested form used by YAML files
and by ``search_config.json`` in a run directory::

    preset: cpu                 # optional: start from SEARCH_PRESETS["cpu"]
    name: cifar10-resnet8
    data: /data/cifar10/train.parquet   # shortcut for train.data
    num_trials: 32
    train: {preset: cpu, epochs: 6}     # TrainConfig preset + overrides (or a full TrainConfig)
    space: {exclude_ops: [SamplePairing]}   # or {family: randaugment} (search.space.FAMILIES)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from autoaug.core.values import check_keys, deep_merge, invalid, is_int, is_number
from autoaug.policies.bases import NAMES as BASE_NAMES
from autoaug.policies.names import NAME_RE, NAME_RULE
from autoaug.policies.reference import looks_like_path
from autoaug.search.budget import DURATION_HELP, parse_duration
from autoaug.search.decide.calibrate import AUTO
from autoaug.search.decide.rescore import RESCORE_SEED_OFFSET
from autoaug.search.decide.warm_start import FAMILY_REFERENCE, warm_start_family, warm_start_policies
from autoaug.search.methods.base import METHODS, Method, MethodSettings, default_method
from autoaug.search.run_dir import RUNS_ENV_VAR, default_runs_root, default_search_name
from autoaug.search.score import METRIC, MODE
from autoaug.search.space import FAMILIES, SearchSpace
from autoaug.search.tune.loggers import check_mlflow_uri
from autoaug.search.tune.study import SAMPLERS, model_samplers

__all__ = [
    "SearchConfig",
    "METHODS",
    "SEARCH_PRESETS",
    "METRIC",
    "MODE",
    "RUNS_ENV_VAR",
    "default_runs_root",
    "default_search_name",
    "deep_merge",
]

#: A method's settings class (:meth:`SearchConfig.method_settings`).
S = TypeVar("S", bound=MethodSettings)

#: The presets every method runs: the shared settings; each method's settings in each are its
#: own (``MethodSettings.PRESETS``), and a method may add presets of its own (``Method.presets``).
_SHARED_PRESETS: Mapping[str, Mapping[str, Any]] = {
    # Plumbing check in about a minute on 2 CPU cores, with any method: the trainer's smoke preset.
    "smoke": {
        "train": {"preset": "smoke"},
        "concurrency": 2,
        "cpus_per_trial": 1,
        "gpus_per_trial": 0,
    },
    # A real search on a CPU machine in 30 minutes on 2 cores: calibration, trials of the trainer's
    # proxy-cpu preset, re-scoring and a race of up to 10 runs. Chosen by benchmarks/results/trial-throughput,
    # score-noise-cifar10 and search-gain-cifar10-jpeg/race10; docs/results.md, "How the presets were chosen".
    "cpu": {
        "train": {"preset": "proxy-cpu", "max_val_size": 5000},
        "concurrency": 2,
        "cpus_per_trial": 1,
        "gpus_per_trial": 0,
        "score_window": 5,
        "warm_start": "auto",
        "base": "auto",
        "family": "auto",
        "rescore": True,
        "rescore_max_seeds": 10,
        "time_budget_s": 1800,
    },
    # A search for one GPU-hour: AutoAugment's proxy, 8 trials sharing a GPU. Sized by
    # benchmarks/gpu_check.py (benchmarks/results/gpu); docs/results.md, "How the presets were chosen".
    "gpu": {
        "train": {"preset": "paper", "max_val_size": 10000},
        "concurrency": None,
        "cpus_per_trial": 2,
        "gpus_per_trial": 0.125,
        "score_window": 5,
        "warm_start": "auto",
        "base": "auto",
        "family": "auto",
        "rescore": True,
        "rescore_max_seeds": 3,
        "time_budget_s": 3600,
    },
    # AutoAugment's proxy task (WRN-40-2, reduced CIFAR-10, 120 epochs) on GPUs, 4 trials per GPU.
    "paper": {
        "train": {"preset": "paper"},
        "concurrency": 8,
        "cpus_per_trial": 2,
        "gpus_per_trial": 0.25,
        "warm_start": "auto",
        "base": "auto",
    },
}


class _Presets(Mapping[str, Mapping[str, Any]]):
    """:data:`SEARCH_PRESETS`: the shared presets, then the methods' own, each with every
    registered method's settings for it (read when asked: a method registered later is in)."""

    def _names(self) -> list[str]:
        own = [name for m in METHODS.values() for name in m.presets]
        return list(_SHARED_PRESETS) + [n for n in own if n not in _SHARED_PRESETS]

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        if name in _SHARED_PRESETS:
            preset = dict(_SHARED_PRESETS[name])
        else:
            owner = next((m for m in METHODS.values() if name in m.presets), None)
            if owner is None:
                raise KeyError(name)
            preset = {**owner.presets[name], "method": owner.name}
        for m in METHODS.values():
            preset = deep_merge(preset, m.settings.preset(name))
        return preset

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


#: Named starting points; YAML files and flags override them field by field.
SEARCH_PRESETS: Mapping[str, Mapping[str, Any]] = _Presets()


def _absolute_if_file(ref: str) -> str:
    """``ref`` made absolute when it names an existing policy file (other references unchanged)."""
    text = ref.strip()
    if looks_like_path(text) and os.path.isfile(os.path.expanduser(text)):
        return os.path.abspath(os.path.expanduser(text))
    return ref


def _train_config(value: Any) -> Any:
    from autoaug.proxy_models.train_config import TrainConfig

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

    The fields shared by every method are below, then the search's method and that method's own
    settings (``method_config``): a frozen dataclass of the method's settings class
    (:class:`~autoaug.search.methods.base.MethodSettings`), checked by it, read typed with
    ``config.method_settings(PbaConfig)``. In the dict form (files, ``--set``,
    ``search_config.json``) a method's settings are a section (``pba: {population: 4}``) or, for
    the training method, top-level keys (``num_trials``); :meth:`from_dict` keeps the chosen
    method's (see there for the others'), :meth:`to_dict` writes the chosen method's only.

    Args:
        name: run name: the run directory ``{storage}/{name}``, the Optuna study and the stored
            policy's name (:data:`autoaug.policies.names.NAME_RULE`).
        train: the proxy training configuration shared by every trial (same split, model-init
            seed and data order: common random numbers). Its device ``"auto"`` becomes the one the
            trials reserve: ``"cuda"`` with ``gpus_per_trial`` > 0, else ``"cpu"``.
        space: the policy search space (its family: ``space.family``, ``--space``; :mod:`autoaug.search.space`).
        concurrency: trials running at once (``ConcurrencyLimiter``); None: as many as the
            cluster's resources allow.
        cpus_per_trial / gpus_per_trial: Ray resources of one trial (fractions of a GPU allowed);
            with ``pack`` above 1, a pack server and its trials' processes reserve
            ``cpus_per_trial`` CPUs together (the trials next to nothing), and the server its
            trials' share of a GPU, at most one (:func:`autoaug.search.tune.pack.server_gpus`).
        pack: trials trained together by one process on one device (:mod:`autoaug.search.tune.pack`):
            each still one Tune and one Optuna trial, with its own reports, checkpoints and ASHA
            fate; 1: one trial per process. Concurrency is raised to a pack when it is lower.
            Calibration's and re-scoring's runs train in packs of the same size
            (:func:`autoaug.search.decide.proxy_runs.train_runs`).
            ``"auto"``: the size that trains the most images per second on the trials' device,
            measured before the trials as the search would run it (as many packs, or trials one
            per process, at once as share the device), within its trials' share of a GPU's memory
            (:func:`autoaug.proxy_models.pack_sizing.choose_pack`; on a CPU, measured so far, one).
        sampler: Optuna sampler, one of :data:`autoaug.search.tune.study.SAMPLERS`.
        seed: seed of the sampler.
        startup_trials: a model-based sampler (``tpe``, ``gp``, ``cmaes``) proposes at random
            until this many trials have finished (complete or stopped early; warm-start trials
            count), then from its model of the scores. None: Optuna's default (10 for TPE).
        max_failures: retries of a trial that raises before it is marked failed.
        score_window: the score of a proxy training (:data:`METRIC`) after an epoch is the mean
            validation accuracy over the last ``score_window`` epochs: at a high learning rate
            one epoch's validation accuracy swings by several points, the mean over a few epochs
            ranks trials by what they learned. 1: the epoch's own validation accuracy.
        warm_start: policy references (presets such as ``autoaugment-cifar10``, policy JSON
            files, stored versions) whose sub-policies are the first candidates, ``K`` per trial
            (:mod:`autoaug.search.decide.warm_start`); or ``"auto"``: the published policies are first
            trained under the proxy on the data and the search warm-starts from the one that
            transfers best (:mod:`autoaug.search.decide.calibrate`).
        base: the base augmentation every candidate is trained on (:mod:`autoaug.policies.bases`:
            ``none``, ``crop``, ``standard``); ``"auto"``: the proxy is trained with each base
            alone before the search; of the best and the bases within the noise of it, the one
            that augments most is kept (:mod:`autoaug.search.decide.calibrate`);
            None: the space's own (``space.base``, ``standard``), as searches did before bases.
        calibration_seeds: proxy runs per base and per published policy when ``base`` or
            ``warm_start`` is ``"auto"`` (seeds ``train.seed + 2000``, ``+ 2001``, ...).
        base_extra_seeds: at most this many more rounds of the bases' race: one more proxy run
            for the best base and each base within the noise of it, while there are any, the
            choice made again on all their runs each time (0: none; with one calibration seed,
            the strongest base also runs twice in the first round, so the noise is measured).
        transfer_extra_seeds: the same for the published policies' race (0: one run each).
        calibration_from: the name of an earlier search in the same ``storage`` whose
            calibration this one reuses (``--calibration-from``): its proxy runs stand for this
            search's own, seed for seed, so nothing is trained again and the choices are made
            again on them (:func:`autoaug.search.decide.calibrate.calibration_source`). Refused before
            any work unless that search calibrated the same data, split and proxy. None: measure.
        calibration_epochs: the calibration runs' schedule: a whole run of this many epochs
            (warm-up and decay compressed to it, validated over its last ``score_window``
            epochs); None: the trials' own (``train.epochs``). Shorter runs rank bases and
            published policies as the trials' schedule does for a fraction of the CPU
            (docs/search.md, "Calibration"; the ``cpu`` preset: 30 of 120 epochs).
        family: the search space's family (:data:`autoaug.search.space.FAMILIES`, ``--space``):
            ``aa``, ``randaugment`` or ``trivialaugment`` replaces ``space.family``
            (:meth:`SearchSpace.with_family`); ``"auto"``: with ``warm_start: auto``, the family of
            the published policy that transfers best in calibration (among the families the method
            searches), warm-started from that policy as a point of it
            (:mod:`autoaug.search.decide.calibrate`); with a warm start given, the family it is a
            point of where the space's own does not take it (:meth:`with_warm_start_family`: the
            driver and ``autoaug search`` apply it), else the space's own; with none, the space's
            own; None: the space's own.
        rescore: train the final candidates a method returns (the assembled policy, the best
            single trial, ...) again under the proxy (fresh seeds) and store the best
            (:mod:`autoaug.search.decide.rescore`).
        rescore_seeds: re-scoring runs per candidate (seeds ``train.seed + 1000``, ``+ 1001``,
            ...); a candidate's re-score is the mean over them.
        rescore_max_seeds: the re-scoring race (:func:`autoaug.search.decide.rescore.race`):
            after the first ``rescore_seeds`` runs each, the candidates within the measured noise
            of the leader get one more run each, round after round, until one leads beyond the
            noise or each has this many runs (a measured candidate's calibration runs count).
            None, or not above ``rescore_seeds``: no race. Under a time budget the trials stop
            in time for rounds up to :data:`~autoaug.search.decide.rescore.RACE_RESERVED_SEEDS`
            runs each; later rounds run while the time left fits them (the summary says when
            the budget ended the race with candidates still within the noise).
        rescore_val_size: validation images of the re-scoring runs (None: ``train.val_size``);
            they validate only over their last ``score_window`` epochs, so a large set costs little.
        time_budget_s: wall-time budget of the whole search in seconds (calibration, trials,
            re-scoring, storing; summed over driver sessions): trials stop when what is left is
            what re-scoring and storing need (:mod:`autoaug.search.budget`). Given as seconds or
            as a duration (``30m``, ``1h30m``, ``90s``); None: no budget.
        storage: root of run directories: a local folder or a URI (``s3://bucket/runs``).
        optuna_storage: Optuna storage URL (``sqlite:///...``, ``postgresql://...``); None: an
            SQLite file ``optuna.db`` in the run directory (local storage only).
        store: policy store URI for the result; None: ``$AUTOAUG_STORE`` or ``~/.autoaug/policies``.
        reuse_actors: keep trial processes alive between trials (DALI pipelines build faster).
        mlflow_uri: MLflow tracking URI: one MLflow run per trial (:mod:`autoaug.search.tune.loggers`);
            None: no MLflow logging (TensorBoard event files are always written).
        verbose: 0 silent, 1 one line per finished trial, 2 also Ray Tune's status table and
            the trials' own output.
        method: one of :data:`METHODS` (default: the method that says it is, :func:`default_method`).
        method_config: that method's settings: an instance of its settings class
            (``METHODS[method].settings``), a mapping of them, or None (its defaults).
        preset: the preset of :data:`SEARCH_PRESETS` :meth:`from_dict` started from, recorded
            (in ``search_config.json`` and the provenance) for a person to read; not compared.
    """

    name: str
    train: Any  # proxy_models.train.TrainConfig (imported lazily: it pulls in torch)
    space: SearchSpace = field(default_factory=SearchSpace)
    concurrency: int | None = 2
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    pack: int | str = 1
    sampler: str = "tpe"
    seed: int = 0
    startup_trials: int | None = None
    max_failures: int = 1
    score_window: int = 1
    warm_start: tuple[str, ...] | str = ()
    base: str | None = None
    calibration_seeds: int = 1
    base_extra_seeds: int = 2
    transfer_extra_seeds: int = 1
    calibration_epochs: int | None = None
    calibration_from: str | None = None
    family: str | None = None
    rescore: bool = False
    rescore_seeds: int = 1
    rescore_max_seeds: int | None = None
    rescore_val_size: int | None = None
    time_budget_s: float | None = None
    storage: str = field(default_factory=default_runs_root)
    optuna_storage: str | None = None
    store: str | None = None
    reuse_actors: bool = True
    mlflow_uri: str | None = None
    verbose: int = 1
    method: str = field(default_factory=default_method)
    method_config: MethodSettings | Mapping[str, Any] | None = None
    preset: str | None = field(default=None, compare=False)

    def method_settings(self, settings: type[S]) -> S:
        """This search's method's settings, typed (``config.method_settings(PbaConfig).population``):
        what a method reads its settings with. ``settings`` must be the settings class of the
        method this search runs: another method's, or a class no method has, is refused in one
        ``ValueError`` line."""
        if self.method in METHODS and METHODS[self.method].settings is settings:
            return self.method_config  # type: ignore[return-value]
        owner = next((m.name for m in METHODS.values() if m.settings is settings), None)
        if owner is None:
            raise ValueError(f"no registered method has the settings {settings.__name__}; registered: {list(METHODS)}")
        raise ValueError(
            f"{settings.__name__} are the settings of method {owner!r}; this search runs method {self.method!r} "
            f"(its settings: {type(self.method_config).__name__})"
        )

    # ---------------------------------------------------------------- checks of the fields
    def __post_init__(self) -> None:
        self._check_name_train_space()
        self._check_resources()
        self._check_sampler()
        self._check_storage()
        self._check_rescore()
        self._check_time_budget()
        self._check_warm_start()
        self._check_base_and_family()
        self._check_calibration()
        self._check_method()

    def _set(self, name: str, value: Any) -> None:
        """Replace field ``name`` with its checked form (the dataclass is frozen)."""
        object.__setattr__(self, name, value)

    def _check_name_train_space(self) -> None:
        """``name``, ``train`` (built from a mapping), ``space`` (from a mapping) and ``score_window``."""
        if not isinstance(self.name, str) or not NAME_RE.fullmatch(self.name):
            raise invalid(self, "name", NAME_RULE)
        self._set("train", _train_config(self.train))
        if isinstance(self.space, Mapping):
            self._set("space", SearchSpace.from_dict(self.space))
        if not isinstance(self.space, SearchSpace):
            raise invalid(self, "space", "a SearchSpace or a mapping of its fields")
        if not is_int(self.score_window) or self.score_window < 1:
            raise invalid(self, "score_window", "an integer >= 1")

    def _check_resources(self) -> None:
        """What the trials reserve and how many run at once; ``train.device`` ``"auto"`` made the
        device they reserve."""
        if self.concurrency is not None and (not is_int(self.concurrency) or self.concurrency < 1):
            raise invalid(self, "concurrency", "an integer >= 1, or None (as many as resources allow)")
        if not is_number(self.cpus_per_trial) or self.cpus_per_trial <= 0:
            raise invalid(self, "cpus_per_trial", "a number > 0")
        if isinstance(self.pack, str) and self.pack.strip().lower() == AUTO:
            self._set("pack", AUTO)
        elif not is_int(self.pack) or not 1 <= self.pack <= 256:
            raise invalid(
                self, "pack", "an integer from 1 (one trial per process) to 256, or 'auto' (measured on the device)"
            )
        if not is_number(self.gpus_per_trial) or self.gpus_per_trial < 0:
            raise invalid(self, "gpus_per_trial", "a number >= 0 (fractions such as 0.25 share a GPU)")
        if self.gpus_per_trial > 1 and self.gpus_per_trial != int(self.gpus_per_trial):
            raise invalid(self, "gpus_per_trial", "a fraction <= 1 or a whole number of GPUs")
        if not isinstance(self.reuse_actors, bool):
            raise invalid(self, "reuse_actors", "true or false")
        self._set("cpus_per_trial", float(self.cpus_per_trial))
        self._set("gpus_per_trial", float(self.gpus_per_trial))
        if self.train.device == "auto":
            # "auto" is the device the trials reserve: Ray (2.60 here; ray-project/ray#54868) no longer
            # hides the GPUs from a worker that reserved none, so "auto" in such a trial would find the
            # node's GPUs and train on one that other trials reserved.
            device = "cuda" if self.gpus_per_trial > 0 else "cpu"
            self._set("train", dataclasses.replace(self.train, device=device))

    def _check_sampler(self) -> None:
        """The Optuna sampler, its seed and startup trials; ``max_failures``."""
        if self.sampler not in SAMPLERS:
            raise invalid(self, "sampler", f"one of {list(SAMPLERS)}")
        if not is_int(self.seed) or not 0 <= self.seed < 2**32:
            raise invalid(self, "seed", "an integer in [0, 2**32)")
        if self.startup_trials is not None:
            if not is_int(self.startup_trials) or self.startup_trials < 0:
                raise invalid(self, "startup_trials", "an integer >= 0, or None (the sampler's default)")
            if not SAMPLERS[self.sampler].models_scores:
                raise invalid(
                    self,
                    "startup_trials",
                    f"unset with sampler {self.sampler!r}, which has no model of the "
                    f"scores (or one of {model_samplers()})",
                )
        if not is_int(self.max_failures) or self.max_failures < 0:
            raise invalid(self, "max_failures", "an integer >= 0")

    def _check_storage(self) -> None:
        """Where the search writes: run directories, the Optuna study, the policy store, MLflow;
        local paths made absolute (a resumed search finds them from elsewhere); ``verbose``."""
        if not isinstance(self.storage, str) or not self.storage.strip():
            raise invalid(self, "storage", "a folder or a URI")
        if "://" not in self.storage:
            self._set("storage", os.path.abspath(os.path.expanduser(self.storage)))
        if self.optuna_storage is not None and (
            not isinstance(self.optuna_storage, str) or "://" not in self.optuna_storage
        ):
            raise invalid(
                self,
                "optuna_storage",
                "an Optuna storage URL such as sqlite:////abs/path.db or postgresql://user@host/db, or None",
            )
        if self.optuna_storage is not None and self.optuna_storage.startswith("sqlite:///"):
            # sqlite:///rel.db is relative to the working directory: pin it, as the storage folder
            path = self.optuna_storage[len("sqlite:///") :]
            if path and not path.startswith("/") and path != ":memory:":
                self._set("optuna_storage", "sqlite:///" + os.path.abspath(os.path.expanduser(path)))
        if self.store is not None and (not isinstance(self.store, str) or not self.store.strip()):
            raise invalid(self, "store", "a policy store folder or URI, or None")
        if self.mlflow_uri is not None:
            if not isinstance(self.mlflow_uri, str) or not self.mlflow_uri.strip():
                raise invalid(
                    self, "mlflow_uri", "an MLflow tracking URI (a folder, file://, sqlite://, http://) or None"
                )
            if "://" not in self.mlflow_uri and not self.mlflow_uri.startswith("databricks"):
                self._set("mlflow_uri", os.path.abspath(os.path.expanduser(self.mlflow_uri)))
        if self.verbose not in (0, 1, 2):
            raise invalid(self, "verbose", "0, 1 or 2")

    def _check_rescore(self) -> None:
        """Re-scoring the final candidates, and its race."""
        if not isinstance(self.rescore, bool):
            raise invalid(self, "rescore", "true or false")
        if not is_int(self.rescore_seeds) or not 1 <= self.rescore_seeds <= 100:
            raise invalid(self, "rescore_seeds", "an integer in [1, 100]")
        if self.rescore_max_seeds is not None and (
            not is_int(self.rescore_max_seeds) or not 1 <= self.rescore_max_seeds <= 100
        ):
            raise invalid(
                self, "rescore_max_seeds", "an integer in [1, 100], or None for no race (--rescore-max-seeds 0)"
            )
        if self.rescore_val_size is not None and (not is_int(self.rescore_val_size) or self.rescore_val_size < 1):
            raise invalid(self, "rescore_val_size", "an integer >= 1, or None (the proxy's own validation size)")

    def _check_time_budget(self) -> None:
        """``time_budget_s``: seconds or a duration (``1h30m``), made seconds."""
        if self.time_budget_s is not None:
            try:
                self._set("time_budget_s", parse_duration(self.time_budget_s))
            except ValueError:
                raise invalid(
                    self, "time_budget_s", f"{DURATION_HELP} (--time-budget), above zero, or null (no budget)"
                ) from None

    def _check_warm_start(self) -> None:
        """``warm_start``: ``"auto"``, or policy references made a tuple (files made absolute)."""
        if isinstance(self.warm_start, str) and self.warm_start.strip().lower() == AUTO:
            self._set("warm_start", AUTO)
            return
        if isinstance(self.warm_start, str):
            self._set("warm_start", (self.warm_start,) if self.warm_start else ())
        if not isinstance(self.warm_start, (list, tuple)) or not all(
            isinstance(r, str) and r.strip() for r in self.warm_start
        ):
            raise invalid(
                self,
                "warm_start",
                "a list of policy references (presets, policy JSON files, stored versions), "
                "or 'auto' (the published policy that transfers best)",
            )
        if AUTO in (r.strip().lower() for r in self.warm_start):
            raise invalid(
                self, "warm_start", "'auto' alone (the published policy that transfers best) or policy references"
            )
        # A policy file named relative to the working directory must still be found when the
        # search is resumed from elsewhere (the configuration is saved in the run directory).
        self._set("warm_start", tuple(_absolute_if_file(r) for r in self.warm_start))

    def _check_base_and_family(self) -> None:
        """``base`` and ``family``: a name given replaces the space's own; ``"auto"``: measured."""
        if self.base not in (None, AUTO):
            if not isinstance(self.base, str) or self.base not in BASE_NAMES:
                raise invalid(self, "base", f"one of {', '.join(BASE_NAMES)}, or 'auto' (measured before the search)")
            self._set("space", dataclasses.replace(self.space, base=self.base))
        # auto: measured with the warm start (warm_start auto); without it, the space's own
        if self.family not in (None, AUTO):
            if not isinstance(self.family, str) or self.family not in FAMILIES:
                raise invalid(
                    self,
                    "family",
                    f"one of {', '.join(FAMILIES)}, or 'auto' (the family of the published policy that transfers best)",
                )
            self._set("space", self.space.with_family(self.family))

    def _check_calibration(self) -> None:
        """The calibration runs (``base`` or ``warm_start`` ``"auto"``): seeds, races, schedule, reuse."""
        from autoaug.proxy_models.train_config import MAX_EPOCHS

        if not is_int(self.calibration_seeds) or not 1 <= self.calibration_seeds <= 100:
            raise invalid(self, "calibration_seeds", "an integer in [1, 100]")
        if self.calibration_epochs is not None and (
            not is_int(self.calibration_epochs) or not self.score_window <= self.calibration_epochs <= MAX_EPOCHS
        ):
            raise invalid(
                self,
                "calibration_epochs",
                f"an integer from score_window ({self.score_window}) to {MAX_EPOCHS:,} (the longest run), "
                "or None (train.epochs)",
            )
        for name in ("base_extra_seeds", "transfer_extra_seeds"):
            if not is_int(getattr(self, name)) or not 0 <= getattr(self, name) <= 100:
                raise invalid(self, name, "an integer in [0, 100]")
        if self.calibration_from is not None and (
            not isinstance(self.calibration_from, str) or not NAME_RE.fullmatch(self.calibration_from)
        ):
            raise invalid(self, "calibration_from", f"the name of an earlier search ({NAME_RULE}), or None")

    def _check_method(self) -> None:
        """``method`` registered; ``method_config`` made an instance of its settings class; ``preset``."""
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise invalid(self, "method", f"one of {list(METHODS)}")
        if self.preset is not None and not isinstance(self.preset, str):
            raise invalid(self, "preset", "the name of a preset, or null")
        settings = METHODS[self.method].settings
        value = {} if self.method_config is None else self.method_config
        if isinstance(value, MethodSettings) and not isinstance(value, settings):
            raise invalid(
                self,
                "method_config",
                f"the settings of method {self.method!r} ({settings.__name__}), or a mapping of them",
            )
        self._set("method_config", settings.from_value(value))

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchConfig:
        """Build from the nested form (see the module documentation).

        ``preset`` starts from :data:`SEARCH_PRESETS` (the other keys override it), ``data`` is
        a shortcut for ``train.data``, ``train`` may name a trainer preset, ``name`` defaults to
        a timestamped one; the chosen method's settings are its section (``pba: {...}``) or its
        top-level keys (the training method's ``num_trials``...). Another registered method's
        settings are not kept: a preset's are dropped (a preset serves every method), and those
        given with ``data`` (a file, ``--set``, a flag, a ``search_config.json`` written when every
        method's settings were saved) are checked as that method checks them -- unknown keys
        and invalid values refused -- then dropped.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"search config must be a mapping, got {type(data).__name__}")
        data = dict(data)
        preset = data.pop("preset", None)
        given = set(data)
        if preset is not None:
            if preset not in SEARCH_PRESETS:
                raise ValueError(f"unknown search preset {preset!r}; expected one of {list(SEARCH_PRESETS)}")
            layer = SEARCH_PRESETS[preset]
            if isinstance(layer.get("train"), Mapping) and isinstance(data.get("train"), Mapping):
                from autoaug.proxy_models.train_config import layer_sizing

                layer = {**layer, "train": layer_sizing(layer["train"], data["train"])}
            data = deep_merge(layer, data)
        check_keys(data, cls.config_keys(), "search config key(s)")
        settings = {m.name: m.settings.take(data) for m in METHODS.values()}
        chosen = data["method"] if "method" in data else default_method()
        if isinstance(chosen, str) and chosen in settings:
            data["method_config"] = settings.pop(chosen)
        if "data" in data:
            source = data.pop("data")
            train = data.get("train", {})
            if isinstance(train, Mapping):
                data["train"] = {**train, "data": source}
            else:
                data["train"] = dataclasses.replace(train, data=source)
        data.setdefault("name", default_search_name())
        if preset is not None:
            data["preset"] = preset
        if "train" not in data:
            raise ValueError("search config has no 'train' section and no preset to take it from")
        config = cls(**data)
        for name, value in settings.items():  # another method's settings, given: checked, not kept
            if given & METHODS[name].settings.config_keys():
                METHODS[name].settings.from_value(value)
        return config

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> SearchConfig:
        """``SearchConfig.from_dict({"preset": preset, **overrides})``."""
        return cls.from_dict({"preset": preset, **overrides})

    @classmethod
    def config_keys(cls) -> set[str]:
        """The top-level keys of the dict form: the shared fields, every registered method's keys,
        ``data`` (``train.data``) and ``preset``."""
        shared = {f.name for f in dataclasses.fields(cls)} - {"method_config"}
        return shared.union({"data", "preset"}, *(m.settings.config_keys() for m in METHODS.values()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able nested dict; ``SearchConfig.from_dict(c.to_dict()) == c``. The shared fields,
        then the chosen method's settings in their dict form (its section, or top-level keys)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "method_config"}
        out["train"] = self.train.to_dict()
        out["space"] = self.space.to_dict()
        out.update(self.method_config.dict_form())
        return out

    def replace(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes``; another ``method`` without ``method_config``: that method's defaults."""
        if changes.get("method", self.method) != self.method:
            changes.setdefault("method_config", None)
        return dataclasses.replace(self, **changes)

    # ---------------------------------------------------------------- derived
    @property
    def epochs(self) -> int:
        return self.train.epochs

    @property
    def search_method(self) -> Method:
        """The method this search runs (:data:`METHODS`)."""
        return METHODS[self.method]

    @property
    def race_seeds(self) -> int:
        """The most re-scoring runs a candidate gets: ``rescore_max_seeds``, and never fewer than
        ``rescore_seeds`` (every candidate's first round)."""
        return max(self.rescore_seeds, self.rescore_max_seeds or 0)

    def rescore_train_config(self, seed_index: int = 0) -> Any:
        """The training configuration of re-scoring run ``seed_index`` (0-based): the trials' own,
        with seed ``train.seed + RESCORE_SEED_OFFSET + seed_index``, ``rescore_val_size``
        validation images, validated only over the last ``score_window`` epochs (all the score
        reads)."""
        # A re-scoring size replaces the trials' sizing, a count or a cap (the `cpu` preset's).
        sizing = {} if self.rescore_val_size is None else {"val_size": self.rescore_val_size, "max_val_size": None}
        return dataclasses.replace(
            self.train,
            seed=(self.train.seed + RESCORE_SEED_OFFSET + seed_index) % 2**31,
            eval_from=max(1, self.train.epochs - self.score_window + 1),
            **sizing,
        )

    @property
    def storage_is_local(self) -> bool:
        return "://" not in self.storage or self.storage.startswith("file://")

    def with_warm_start_family(self) -> SearchConfig:
        """``family: auto`` (the ``cpu`` preset's) with warm-start policies given instead of measured:
        the family they are points of when it is not the space's own -- ``--preset cpu --warm-start
        randaugment`` searches around RandAugment in the ``randaugment`` family, as ``--warm-start
        auto`` does when RandAugment transfers best (:func:`warm_start_family`, among the families
        the method searches). Policies the space's own family takes (AutoAugment's in ``aa``), or
        none takes, leave the configuration as it is."""
        if self.family != AUTO or not self.warm_start or self.warm_start == AUTO:
            return self
        families = self.search_method.space_families
        family = warm_start_family(self.warm_start, self.space, families, store=self.store)
        return self if family in (None, self.space.family) else self.replace(family=family)

    # ---------------------------------------------------------------- checks
    def check_runnable(self) -> None:
        """Checks that need the whole configuration (the shared ones, then the method's own);
        raises ``ValueError`` naming the problem."""
        method = self.search_method
        method.check(self)
        if self.warm_start:
            # "auto" warm-starts from one published policy (aa: AutoAugment's 25 sub-policies)
            refs = [FAMILY_REFERENCE[self.space.family]] if self.warm_start == AUTO else self.warm_start
            warm = warm_start_policies(refs, self.space, store=self.store)
            capacity, raise_what = method.warm_start_capacity(self)
            if len(warm) > capacity:
                raise ValueError(
                    f"warm_start gives {len(warm)} candidates but the search has only {capacity} {raise_what}"
                    " or warm-start from fewer policies"
                )
        if self.train.data is None:
            raise ValueError("no training data: give --data PATH (or 'data:' in the config file)")
        device = self.train.device
        if device.startswith("cuda") and self.gpus_per_trial == 0:
            raise ValueError(
                f"train.device is {device!r} but gpus_per_trial is 0: Ray hides the GPUs from trials that "
                "reserve none; give --gpus-per-trial (0.25 shares a GPU among 4 trials), or "
                "--set train.device=cpu (or auto)"
            )
        if device.startswith("cuda:") and int(device[5:]) >= max(1, math.ceil(self.gpus_per_trial)):
            raise ValueError(
                f"train.device is {device!r} but each trial reserves {self.gpus_per_trial:g} GPU: Ray shows a "
                "trial only the GPUs it reserved, numbered from 0; --set train.device=cuda"
            )
        if device == "cpu" and self.gpus_per_trial > 0:
            raise ValueError(
                f"gpus_per_trial is {self.gpus_per_trial:g} but train.device is 'cpu': the reserved GPUs would "
                "sit idle; --set train.device=cuda (or auto), or --gpus-per-trial 0"
            )
        if self.pack != 1:
            if not self.search_method.packs:
                raise ValueError(
                    f"pack {self.pack}: the {self.method} method trains its runs one per process; --pack 1 "
                    f"(methods that train in packs: {', '.join(n for n, m in METHODS.items() if m.packs)})"
                )
            if self.train.float16_on_cuda():
                raise ValueError(
                    f"pack {self.pack}: a pack trains in float32 or bfloat16, and the trials train in float16 on "
                    "the GPU (its gradient scaler would skip every member's step when one overflows); "
                    "--set train.amp_dtype=bfloat16, or --pack 1"
                )
        if self.mlflow_uri is not None:
            check_mlflow_uri(self.mlflow_uri)
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
