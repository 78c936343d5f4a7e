"""The configuration of a comparison: :class:`CompareConfig` and the mapping (YAML file +
``--set`` + flags) it is built from."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoaug.core.errors import CompareError
from autoaug.core.location import is_uri
from autoaug.core.ray_session import parse_address
from autoaug.core.values import check_keys
from autoaug.launch.compare.candidates import DEFAULT_BASELINES, default_test_data, parse_baselines
from autoaug.policies.bases import check_name
from autoaug.proxy_models.train_config import TrainConfig

__all__ = ["CompareConfig", "CONFIG_KEYS", "MAX_SEEDS", "config_from_dict"]

#: The most seeds a comparison trains each policy with. Each seed is one training run per policy,
#: every run a Ray task submitted at once: 1,000 seeds of the 6 default baselines and one policy
#: are 7,000 runs, about 22 hours of 2 CPU cores at the cheapest preset (``smoke``, 23 s a run,
#: docs/compare.md), and give 95% intervals 1/40 as wide as 3 seeds do. More is a slip
#: (``--seeds 100000000`` ran out of memory listing the seeds), refused before any work.
MAX_SEEDS = 1_000


def _too_many_seeds(count: int, policies: int) -> CompareError:
    noun = "policy" if policies == 1 else "policies"
    runs = (
        f"{count:,} seeds x {policies} {noun} = {count * policies:,} training runs" if policies else f"{count:,} runs"
    )
    return CompareError(
        f"--seeds {count} is more than a comparison trains ({runs}); expected at most {MAX_SEEDS:,} seeds per "
        "policy (docs/compare.md)"
    )


@dataclasses.dataclass(frozen=True)
class CompareConfig:
    """Everything a comparison depends on.

    ``train`` is the shared training configuration (a :class:`autoaug.proxy_models.train.TrainConfig`
    with ``data`` and ``test_data`` set); each run replaces its ``seed`` with one of ``seeds`` and
    its ``num_threads`` with ``cpus_per_run``. Its device ``"auto"`` becomes the one the runs
    reserve: ``"cuda"`` with ``gpus_per_run`` > 0, else ``"cpu"``. ``pack``: runs trained
    together by one process on one device, each still its own run and record (a pack reserves
    ``cpus_per_run`` CPUs and its runs' ``gpus_per_run`` together, at most one GPU); 1: one run
    per process.
    """

    train: Any  # proxy_models.train.TrainConfig
    policies: tuple[str, ...] = ()
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    seeds: tuple[int, ...] = (0, 1, 2)
    out: str = os.path.join("runs", "compare")
    store: Any = None  # PolicyStore location (None: $AUTOAUG_STORE or ~/.autoaug/policies)
    address: str | None = None  # Ray cluster; None: embedded local Ray
    cpus_per_run: int = 1
    gpus_per_run: float = 0.0
    pack: int = 1  # runs trained together by one process (autoaug.proxy_models.pack)
    attach: bool = True  # attach the results to stored policies
    verbose: bool = False  # show the runs' own output (Ray worker logs)
    base: str | None = None  # --base: candidates with sub-policies train on it (candidates.Candidate.on_base)

    def __post_init__(self) -> None:
        if not isinstance(self.train, TrainConfig):
            raise CompareError(f"CompareConfig.train must be a TrainConfig, got {type(self.train).__name__}")
        if self.train.data is None:
            raise CompareError(
                "no training data: give --data (a Parquet file or folder, an ImageFolder root, cifar10:ROOT)"
            )
        if self.train.test_data is None:
            raise CompareError(
                f"no test data for {self.train.data}: give --test-data (no test split was found next to it)"
            )
        object.__setattr__(self, "policies", tuple(self.policies))
        object.__setattr__(self, "baselines", tuple(self.baselines))
        if len(self.seeds) > MAX_SEEDS:
            raise _too_many_seeds(len(self.seeds), len(self.policies) + len(self.baselines))
        seeds = tuple(self.seeds)
        if not seeds:
            raise CompareError("at least one seed is needed (--seeds N with N >= 1)")
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**31:
                raise CompareError(f"seed {s!r} is not an integer in [0, 2**31)")
        if len(set(seeds)) != len(seeds):
            raise CompareError(f"seeds must be distinct, got {list(seeds)}")
        object.__setattr__(self, "seeds", seeds)
        if self.address is not None:  # a malformed address: refused before the data are read
            parse_address(self.address)
        if isinstance(self.cpus_per_run, bool) or not isinstance(self.cpus_per_run, int) or self.cpus_per_run < 1:
            raise CompareError(f"cpus_per_run must be a positive integer, got {self.cpus_per_run!r}")
        if (
            not isinstance(self.gpus_per_run, (int, float))
            or isinstance(self.gpus_per_run, bool)
            or self.gpus_per_run < 0
        ):
            raise CompareError(f"gpus_per_run must be a number >= 0, got {self.gpus_per_run!r}")
        if self.gpus_per_run > 1 and self.gpus_per_run != int(self.gpus_per_run):
            raise CompareError(
                f"gpus_per_run must be a fraction <= 1 or a whole number of GPUs (what Ray schedules), "
                f"got {self.gpus_per_run!r}"
            )
        device = self.train.device
        if device == "auto":
            # The device the runs reserve: Ray (2.60 here; ray-project/ray#54868) no longer hides the
            # GPUs from a task that reserved none, so "auto" there would train on a GPU unreserved.
            device = "cuda" if self.gpus_per_run > 0 else "cpu"
            object.__setattr__(self, "train", dataclasses.replace(self.train, device=device))
        if device.startswith("cuda") and self.gpus_per_run == 0:
            raise CompareError(
                f"train.device is {device!r} but gpus_per_run is 0: a run that reserves no GPU may find one "
                "another run reserved; give --gpus-per-run (0.25 shares a GPU among 4 runs), or "
                "--set train.device=cpu (or auto)"
            )
        if device.startswith("cuda:") and int(device[5:]) >= max(1, math.ceil(self.gpus_per_run)):
            raise CompareError(
                f"train.device is {device!r} but each run reserves {self.gpus_per_run:g} GPU: Ray shows a run "
                "only the GPUs it reserved, numbered from 0; --set train.device=cuda"
            )
        if device == "cpu" and self.gpus_per_run > 0:
            raise CompareError(
                f"gpus_per_run is {self.gpus_per_run:g} but train.device is 'cpu': the reserved GPUs would sit "
                "idle; --set train.device=cuda (or auto), or --gpus-per-run 0"
            )
        if isinstance(self.pack, bool) or not isinstance(self.pack, int) or not 1 <= self.pack <= 256:
            raise CompareError(f"pack must be an integer from 1 (one run per process) to 256, got {self.pack!r}")
        if self.pack > 1 and self.train.float16_on_cuda():
            raise CompareError(
                f"pack {self.pack}: a pack trains in float32 or bfloat16, and the runs train in float16 on the GPU "
                "(its gradient scaler would skip every member's step when one overflows); "
                "--set train.amp_dtype=bfloat16, or --pack 1"
            )
        object.__setattr__(self, "out", os.fspath(self.out))
        if self.base is not None:
            try:
                check_name(self.base, "--base")
            except ValueError as exc:
                raise CompareError(str(exc)) from None

    def run_config(self, seed: int) -> Any:
        return dataclasses.replace(self.train, seed=seed, num_threads=self.cpus_per_run)


#: Keys of the mapping :func:`config_from_dict` accepts (a ``--config`` YAML file, ``--set``).
CONFIG_KEYS = (
    "policies",
    "baselines",
    "seeds",
    "first_seed",
    "preset",
    "data",
    "test_data",
    "out",
    "store",
    "address",
    "cpus_per_run",
    "gpus_per_run",
    "pack",
    "attach",
    "verbose",
    "base",
    "train",
)


def config_from_dict(data: Mapping[str, Any]) -> CompareConfig:
    """Build a :class:`CompareConfig` from a plain mapping (YAML file + command-line overrides).

    Keys: ``data`` (required), ``test_data`` (default: :func:`default_test_data`), ``preset``
    (training preset, default ``cpu``), ``train`` (a mapping of :class:`TrainConfig` overrides,
    e.g. ``{epochs: 4}``), ``policies`` (list of references), ``baselines`` (list, or a
    comma-separated string, ``""`` for none; default :data:`DEFAULT_BASELINES`), ``seeds`` (a
    count N, giving ``first_seed .. first_seed+N-1``, or a list), ``first_seed`` (default 0),
    ``out``, ``store``, ``address``, ``cpus_per_run``, ``gpus_per_run`` (default 1 when the
    training device is CUDA, else 0), ``pack`` (runs per process, default 1), ``attach``, ``verbose``, ``base`` (``none``, ``crop`` or
    ``standard``: the candidates with sub-policies train on it instead of their own base).
    """
    if not isinstance(data, Mapping):
        raise CompareError(f"compare configuration must be a mapping, got {type(data).__name__}")
    check_keys(
        data,
        CONFIG_KEYS,
        "compare setting(s)",
        template="unknown {what} {unknown}; expected {known}",
        error=CompareError,
    )
    source = _training_data(data.get("data"))
    train = _train_config(data, source, _test_data(data.get("test_data"), source))
    seeds = data.get("seeds", 3)
    first = data.get("first_seed", 0) or 0
    if isinstance(seeds, bool) or not isinstance(first, int) or isinstance(first, bool) or first < 0:
        raise CompareError(f"first_seed must be a non-negative integer, got {first!r}")
    policies = data.get("policies") or ()
    if isinstance(policies, str):
        policies = (policies,)
    baselines = parse_baselines(data.get("baselines"))
    seeds = _seed_list(seeds, first, len(policies) + len(baselines))
    gpus = data.get("gpus_per_run")
    if gpus is None:
        gpus = 1.0 if train.device.startswith("cuda") else 0.0
    kwargs: dict[str, Any] = dict(
        train=train,
        policies=tuple(str(p) for p in policies),
        baselines=baselines,
        seeds=seeds,
        store=data.get("store"),
        address=data.get("address") or None,
        cpus_per_run=data.get("cpus_per_run", 1),
        gpus_per_run=gpus,
        pack=data.get("pack", 1),
        attach=bool(data.get("attach", True)),
        verbose=bool(data.get("verbose", False)),
        base=data.get("base"),
    )
    if data.get("out"):
        kwargs["out"] = os.fspath(data["out"])
    return CompareConfig(**kwargs)


def _training_data(source: Any) -> str:
    """``data``: required, and a local path that exists (URIs and ``cifar10[:ROOT]`` as given)."""
    if not source:
        raise CompareError(
            "no training data: give --data (a Parquet file or folder, an ImageFolder root, cifar10:ROOT)"
        )
    source = os.fspath(source)
    is_local = not is_uri(source) and not (source == "cifar10" or source.startswith("cifar10:"))
    if is_local and not Path(source.removeprefix("file://")).expanduser().exists():
        raise CompareError(
            f"training data {source!r} does not exist (expected a Parquet file or folder, an ImageFolder root, "
            "cifar10:ROOT or a URI)"
        )
    return source


def _test_data(test_data: Any, source: str) -> Any:
    """``test_data`` as given, else the test split next to the training data (:func:`default_test_data`)."""
    if test_data not in (None, ""):
        return test_data
    found = default_test_data(source)
    if found is None:
        raise CompareError(f"no test split found for {source} (looked for test.parquet next to it); give --test-data")
    return found


def _train_config(data: Mapping[str, Any], source: str, test_data: Any) -> TrainConfig:
    """The runs' :class:`TrainConfig`: the preset (default ``cpu``) with the ``train`` overrides, on
    the training and test data; the settings a comparison owns (data, seed, threads) refused there."""
    overrides = data.get("train") or {}
    if not isinstance(overrides, Mapping):
        raise CompareError(f"'train' must be a mapping of training settings, got {overrides!r}")
    for key in ("data", "test_data", "seed", "num_threads"):
        if key in overrides:
            raise CompareError(
                f"train.{key} cannot be set for a comparison: "
                + {
                    "data": "use --data",
                    "test_data": "use --test-data",
                    "seed": "use --seeds",
                    "num_threads": "use --cpus-per-run",
                }[key]
            )
    preset = data.get("preset") or "cpu"
    try:
        return TrainConfig.from_preset(str(preset), data=source, test_data=os.fspath(test_data), **dict(overrides))
    except (TypeError, ValueError) as exc:
        raise CompareError(" ".join(str(exc).split())) from None


def _seed_list(seeds: Any, first: int, policies: int) -> tuple:
    """``seeds``: a count N (``first .. first + N - 1``, at most :data:`MAX_SEEDS`) or a list."""
    if isinstance(seeds, int):
        if seeds < 1:
            raise CompareError(f"--seeds must be >= 1, got {seeds}")
        if seeds > MAX_SEEDS:
            raise _too_many_seeds(seeds, policies)
        return tuple(range(first, first + seeds))
    if isinstance(seeds, (list, tuple)):
        return tuple(seeds)
    raise CompareError(f"seeds must be a count or a list of integers, got {seeds!r}")
