"""Compare augmentation policies: train the same model with each over several seeds.

::

    from autoaug.launch.compare import CompareConfig, run_compare
    from autoaug.proxy_models.train import TrainConfig

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

* ``runs/<run id>.json`` -- one per finished run, written atomically as soon as it finishes; a
  re-run with the same ``out`` reuses them (after checking that they were trained with the same
  configuration, policy and data) and trains only what is missing;
* ``runs.csv`` -- one row per run (seed, test/validation accuracy, training time, node);
* ``results.md``, ``results.csv``, ``results.parquet`` -- one row per policy: number of seeds,
  mean, sample standard deviation and 95% confidence interval of the test accuracy (Student t),
  mean training time;
* ``comparison.png`` -- test accuracy per policy (mean, 95% CI, every seed) and mean validation
  accuracy per epoch;
* ``compare.json`` -- the settings of the comparison; ``evaluations.json`` -- which stored
  policies got the results attached (:meth:`autoaug.policies.store.PolicyStore.attach_evaluation`).
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import re
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from autoaug.core.errors import UserInputError

__all__ = [
    "DEFAULT_BASELINES",
    "Candidate",
    "CompareConfig",
    "CompareError",
    "Comparison",
    "OutputDir",
    "PolicySummary",
    "RunFailedError",
    "config_from_dict",
    "default_test_data",
    "mean_ci",
    "parse_baselines",
    "resolve_candidates",
    "run_compare",
    "student_t_ppf",
    "summarize",
]

#: The baselines a found policy is compared with unless told otherwise.
DEFAULT_BASELINES: tuple[str, ...] = (
    "none",
    "standard",
    "randaugment:n=2,m=9",
    "trivialaugment",
    "autoaugment-cifar10",
)

#: Training-config fields that may differ between a stored run and the comparison reusing it:
#: they do not change what is computed (where the data lives, how many threads run it).
_REUSABLE_CHANGES = frozenset({"data", "test_data", "num_threads", "device"})
_RUN_FORMAT = 1


class CompareError(UserInputError):
    """A comparison cannot run as configured (bad policy reference, stale results...)."""


class RunFailedError(CompareError):
    """A training run raised; the runs that finished before are saved (re-running resumes)."""


# ----------------------------------------------------------------------------------------------
# Statistics (scipy is not a dependency)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _student_t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t distribution with ``df`` degrees of freedom (``0 < q < 1``).

    Computed by bisection on the CDF (regularized incomplete beta function); accurate to about
    1e-10, e.g. ``student_t_ppf(0.975, 2) == 4.302652...``.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"student_t_ppf: q must be in (0, 1), got {q!r}")
    if not df > 0:
        raise ValueError(f"student_t_ppf: df must be > 0, got {df!r}")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -student_t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while _student_t_cdf(hi, df) < q:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _student_t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """``(mean, sample std, ci_low, ci_high)``; a two-sided Student t interval of the mean.

    With one value the standard deviation and the interval are NaN; with none everything is NaN.
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return (math.nan,) * 4
    mean = math.fsum(xs) / n
    if n == 1:
        return mean, math.nan, math.nan, math.nan
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = student_t_ppf(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half


# ----------------------------------------------------------------------------------------------
# What is compared


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One policy of the comparison."""

    label: str  # shown in tables and plots: "standard", "mine@3", "found.json"
    ref: str  # as the user gave it
    policy: Any  # policies.Policy
    kind: str  # "policy" (given with --policy) or "baseline"
    store_ref: str | None = None  # "name@version" when it came from the policy store

    @property
    def policy_hash(self) -> str:
        return self.policy.content_hash


def parse_baselines(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """Split a comma-separated baseline list; preset parameters stay attached to their preset.

    ``"none,standard,randaugment:n=2,m=9,trivialaugment"`` gives ``("none", "standard",
    "randaugment:n=2,m=9", "trivialaugment")``: a piece with ``=`` but no ``:`` continues the
    previous preset's parameters. ``""`` gives no baselines; ``None`` the defaults.
    """
    if text is None:
        return DEFAULT_BASELINES
    if not isinstance(text, str):
        return tuple(str(t).strip() for t in text if str(t).strip())
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if "=" in piece and ":" not in piece and out and ":" in out[-1]:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return tuple(out)


def _open_store(store: Any) -> Any:
    from autoaug.policies.store import PolicyStore

    if store is not None and not isinstance(store, (str, os.PathLike)):
        return store  # already a PolicyStore (or compatible)
    try:
        return PolicyStore(store)
    except (TypeError, ValueError) as exc:
        raise CompareError(str(exc)) from None


def resolve_candidates(
    policies: Sequence[str], baselines: Sequence[str], store: Any = None
) -> list[Candidate]:
    """Resolve ``--policy`` references (store refs, JSON files, presets) and baseline presets.

    A ``--policy`` reference is, in this order: ``preset:NAME``; an existing policy JSON file;
    a name stored in the policy store (``name``, ``name@3``, ``name@latest``, hash prefix); a bare
    preset name. Baselines must be presets. Raises :class:`CompareError` naming the reference.
    """
    from autoaug.policies import presets
    from autoaug.policies.policy import Policy

    candidates: list[Candidate] = []
    opened: list[Any] = []

    def get_store() -> Any:
        if not opened:
            opened.append(_open_store(store))
        return opened[0]

    for ref in policies:
        ref = str(ref).strip()
        if not ref:
            raise CompareError("empty --policy reference")
        if ref.startswith(presets.PREFIX):
            candidates.append(Candidate(ref[len(presets.PREFIX):], ref, _preset(ref), "policy"))
            continue
        path = Path(ref).expanduser()
        if path.is_file() or ref.lower().endswith(".json"):
            if not path.is_file():
                raise CompareError(f"policy file {ref!r} does not exist")
            try:
                policy = Policy.from_json(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise CompareError(f"policy file {ref!r} is not a valid policy JSON: {exc}") from None
            candidates.append(Candidate(path.name, ref, policy, "policy"))
            continue
        from autoaug.policies.store import StoreError

        try:
            record = get_store().get(ref)
        except StoreError as exc:
            if presets.is_preset(ref):
                candidates.append(Candidate(ref, ref, _preset(ref), "policy"))
                continue
            raise CompareError(f"--policy {ref!r}: {exc}") from None
        candidates.append(Candidate(record.ref, ref, record.policy, "policy", store_ref=record.ref))
    for ref in baselines:
        ref = str(ref).strip()
        if not presets.is_preset(ref):
            raise CompareError(
                f"baseline {ref!r} is not a preset policy; known presets: {', '.join(presets.names())} "
                "(give other policies with --policy)"
            )
        label = ref[len(presets.PREFIX):] if ref.startswith(presets.PREFIX) else ref
        candidates.append(Candidate(label, ref, _preset(ref), "baseline"))
    if not candidates:
        raise CompareError("nothing to compare: give --policy REF and/or baselines")
    seen_labels: dict[str, str] = {}
    seen_hashes: dict[str, str] = {}
    for c in candidates:
        if c.label in seen_labels:
            raise CompareError(f"policy {c.label!r} is given twice ({seen_labels[c.label]!r} and {c.ref!r})")
        if c.policy_hash in seen_hashes:
            raise CompareError(
                f"{c.ref!r} and {seen_hashes[c.policy_hash]!r} are the same policy (content hash "
                f"{c.policy_hash[:12]}); compare each policy once"
            )
        seen_labels[c.label] = c.ref
        seen_hashes[c.policy_hash] = c.ref
    return candidates


def _preset(ref: str) -> Any:
    from autoaug.policies import presets

    try:
        return presets.resolve(ref)
    except ValueError as exc:
        raise CompareError(f"policy {ref!r}: {exc}") from None


def default_test_data(data: str) -> str | None:
    """The test split that goes with the training data ``data``, or None if there is none.

    * a folder holding ``test.parquet``: the folder (the trainer opens its ``test`` split);
    * ``.../train.parquet`` with a ``test.parquet`` next to it (local or any pyarrow URI);
    * ``cifar10:ROOT`` / ``cifar10``: the same (torchvision's test split).
    """
    text = os.fspath(data)
    if text == "cifar10" or text.startswith("cifar10:"):
        return text
    if "://" in text and not text.startswith("file://"):
        import pyarrow.fs as pafs

        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except Exception:
            return None
        scheme = text.split("://", 1)[0]
        candidates = []
        if path.endswith("train.parquet"):
            candidates.append(path[: -len("train.parquet")] + "test.parquet")
        else:
            candidates.append(path.rstrip("/") + "/test.parquet")
        for cand in candidates:
            try:
                if fs.get_file_info(cand).type == pafs.FileType.File:
                    return f"{scheme}://{cand}"
            except Exception:
                return None
        return None
    path = Path(text.removeprefix("file://")).expanduser()
    if path.is_dir():
        return str(path) if (path / "test.parquet").is_file() else None
    if path.name == "train.parquet" and (path.parent / "test.parquet").is_file():
        return str(path.parent / "test.parquet")
    return None


# ----------------------------------------------------------------------------------------------
# Configuration


@dataclasses.dataclass(frozen=True)
class CompareConfig:
    """Everything a comparison depends on.

    ``train`` is the shared training configuration (a :class:`autoaug.proxy_models.train.TrainConfig`
    with ``data`` and ``test_data`` set); each run replaces its ``seed`` with one of ``seeds`` and
    its ``num_threads`` with ``cpus_per_run``.
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
    attach: bool = True  # attach the results to stored policies
    verbose: bool = False  # show the runs' own output (Ray worker logs)

    def __post_init__(self) -> None:
        from autoaug.proxy_models.train import TrainConfig

        if not isinstance(self.train, TrainConfig):
            raise CompareError(f"CompareConfig.train must be a TrainConfig, got {type(self.train).__name__}")
        if self.train.data is None:
            raise CompareError("no training data: give --data (a Parquet file or folder, an ImageFolder root, cifar10:ROOT)")
        if self.train.test_data is None:
            raise CompareError(
                f"no test data for {self.train.data}: give --test-data (no test split was found next to it)"
            )
        object.__setattr__(self, "policies", tuple(self.policies))
        object.__setattr__(self, "baselines", tuple(self.baselines))
        seeds = tuple(self.seeds)
        if not seeds:
            raise CompareError("at least one seed is needed (--seeds N with N >= 1)")
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**31:
                raise CompareError(f"seed {s!r} is not an integer in [0, 2**31)")
        if len(set(seeds)) != len(seeds):
            raise CompareError(f"seeds must be distinct, got {list(seeds)}")
        object.__setattr__(self, "seeds", seeds)
        if isinstance(self.cpus_per_run, bool) or not isinstance(self.cpus_per_run, int) or self.cpus_per_run < 1:
            raise CompareError(f"cpus_per_run must be a positive integer, got {self.cpus_per_run!r}")
        if not isinstance(self.gpus_per_run, (int, float)) or isinstance(self.gpus_per_run, bool) or self.gpus_per_run < 0:
            raise CompareError(f"gpus_per_run must be a number >= 0, got {self.gpus_per_run!r}")
        object.__setattr__(self, "out", os.fspath(self.out))

    def run_config(self, seed: int) -> Any:
        return dataclasses.replace(self.train, seed=seed, num_threads=self.cpus_per_run)


#: Keys of the mapping :func:`config_from_dict` accepts (a ``--config`` YAML file, ``--set``).
CONFIG_KEYS = (
    "policies", "baselines", "seeds", "first_seed", "preset", "data", "test_data", "out", "store",
    "address", "cpus_per_run", "gpus_per_run", "attach", "verbose", "train",
)  # fmt: skip


def config_from_dict(data: Mapping[str, Any]) -> CompareConfig:
    """Build a :class:`CompareConfig` from a plain mapping (YAML file + command-line overrides).

    Keys: ``data`` (required), ``test_data`` (default: :func:`default_test_data`), ``preset``
    (training preset, default ``cpu``), ``train`` (a mapping of :class:`TrainConfig` overrides,
    e.g. ``{epochs: 4}``), ``policies`` (list of references), ``baselines`` (list, or a
    comma-separated string, ``""`` for none; default :data:`DEFAULT_BASELINES`), ``seeds`` (a
    count N, giving ``first_seed .. first_seed+N-1``, or a list), ``first_seed`` (default 0),
    ``out``, ``store``, ``address``, ``cpus_per_run``, ``gpus_per_run`` (default 1 when the
    training device is CUDA, else 0), ``attach``, ``verbose``.
    """
    from autoaug.proxy_models.train import TrainConfig

    if not isinstance(data, Mapping):
        raise CompareError(f"compare configuration must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise CompareError(f"unknown compare setting(s) {', '.join(map(repr, unknown))}; expected {', '.join(CONFIG_KEYS)}")
    source = data.get("data")
    if not source:
        raise CompareError("no training data: give --data (a Parquet file or folder, an ImageFolder root, cifar10:ROOT)")
    source = os.fspath(source)
    is_local = "://" not in source and not (source == "cifar10" or source.startswith("cifar10:"))
    if is_local and not Path(source).expanduser().exists():
        raise CompareError(
            f"training data {source!r} does not exist (expected a Parquet file or folder, an ImageFolder root, "
            "cifar10:ROOT or a URI)"
        )
    test_data = data.get("test_data")
    if test_data in (None, ""):
        test_data = default_test_data(source)
        if test_data is None:
            raise CompareError(
                f"no test split found for {source} (looked for test.parquet next to it); give --test-data"
            )
    overrides = data.get("train") or {}
    if not isinstance(overrides, Mapping):
        raise CompareError(f"'train' must be a mapping of training settings, got {overrides!r}")
    for key in ("data", "test_data", "seed", "num_threads"):
        if key in overrides:
            raise CompareError(
                f"train.{key} cannot be set for a comparison: "
                + {"data": "use --data", "test_data": "use --test-data", "seed": "use --seeds",
                   "num_threads": "use --cpus-per-run"}[key]
            )
    preset = data.get("preset") or "cpu"
    try:
        train = TrainConfig.from_preset(str(preset), data=source, test_data=os.fspath(test_data), **dict(overrides))
    except (TypeError, ValueError) as exc:
        raise CompareError(" ".join(str(exc).split())) from None
    seeds = data.get("seeds", 3)
    first = data.get("first_seed", 0) or 0
    if isinstance(seeds, bool) or not isinstance(first, int) or isinstance(first, bool) or first < 0:
        raise CompareError(f"first_seed must be a non-negative integer, got {first!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise CompareError(f"--seeds must be >= 1, got {seeds}")
        seeds = tuple(range(first, first + seeds))
    elif isinstance(seeds, (list, tuple)):
        seeds = tuple(seeds)
    else:
        raise CompareError(f"seeds must be a count or a list of integers, got {seeds!r}")
    policies = data.get("policies") or ()
    if isinstance(policies, str):
        policies = (policies,)
    gpus = data.get("gpus_per_run")
    if gpus is None:
        gpus = 1.0 if train.device.startswith("cuda") else 0.0
    kwargs: dict[str, Any] = dict(
        train=train,
        policies=tuple(str(p) for p in policies),
        baselines=parse_baselines(data.get("baselines")),
        seeds=seeds,
        store=data.get("store"),
        address=data.get("address") or None,
        cpus_per_run=data.get("cpus_per_run", 1),
        gpus_per_run=gpus,
        attach=bool(data.get("attach", True)),
        verbose=bool(data.get("verbose", False)),
    )
    if data.get("out"):
        kwargs["out"] = os.fspath(data["out"])
    return CompareConfig(**kwargs)


# ----------------------------------------------------------------------------------------------
# Runs


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "policy"


def run_id(candidate: Candidate, seed: int) -> str:
    """File-name-safe id of one run: ``<label>-<hash prefix>-seed<seed>``."""
    return f"{_slug(candidate.label)}-{candidate.policy_hash[:8]}-seed{seed}"


def _train_one(train_config: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    """Body of one run (a Ray task): train, evaluate on the test split, return the record."""
    import ray

    from autoaug.policies.policy import Policy
    from autoaug.proxy_models.train import TrainConfig, train

    config = TrainConfig.from_dict(train_config)
    result = train(config, Policy.from_dict(policy))
    try:
        node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # pragma: no cover - always inside Ray here
        node_id = None
    return {
        "test_accuracy": result.test_accuracy,
        "test_loss": result.test_loss,
        "val_accuracy": result.val_accuracy,
        "train_time_s": result.train_time_s,
        "history": [_jsonable(row) for row in result.history],
        "dataset_fingerprint": result.dataset_fingerprint,
        "split_fingerprint": result.split_fingerprint,
        "node_id": node_id,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if k == "checkpoint_dir":
            continue
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


def _filesystem_from_uri(uri: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(uri)


class OutputDir:
    """The comparison's output folder: a local path, or a URI of any filesystem pyarrow reaches
    (``s3://bucket/compare``, ``gs://...``, ``file:///shared/compare``), so the driver of a Ray Job
    can write where you read.

    Local files are written to a temporary name, synced and renamed (atomic); object stores
    publish a whole object at once, so they are written in place.
    """

    def __init__(self, location: str | os.PathLike) -> None:
        import pyarrow.fs as pafs

        text = os.fspath(location)
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text):
            try:
                fs, root = _filesystem_from_uri(text)
            except Exception as exc:  # ArrowInvalid, OSError, ... from pyarrow
                raise CompareError(f"cannot use --out {text!r}: {exc}") from None
            self.uri = text.rstrip("/")
        else:
            fs, root = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(text))
            self.uri = root
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.local = isinstance(fs, pafs.LocalFileSystem)

    def path(self, rel: str = "") -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def location(self, rel: str = "") -> str:
        """Where ``rel`` is, for messages: a local path or a URI."""
        return f"{self.uri}/{rel}" if rel else self.uri

    def makedirs(self, rel: str = "") -> None:
        self.fs.create_dir(self.path(rel), recursive=True)

    def write(self, rel: str, data: bytes) -> None:
        if self.local:
            from autoaug.proxy_models.train import atomic_write_bytes

            atomic_write_bytes(Path(self.path(rel)), data)
            return
        parent = self.path(rel).rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        with self.fs.open_output_stream(self.path(rel)) as sink:
            sink.write(data)

    def read(self, rel: str) -> bytes | None:
        """The file's bytes, or None if it does not exist."""
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self.path(rel)).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(self.path(rel)) as source:
            return source.read()


def _record(candidate: Candidate, seed: int, config: Any, outcome: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "format": _RUN_FORMAT,
        "run_id": run_id(candidate, seed),
        "policy": candidate.label,
        "kind": candidate.kind,
        "ref": candidate.ref,
        "store_ref": candidate.store_ref,
        "policy_hash": candidate.policy_hash,
        "policy_json": candidate.policy.to_dict(),
        "seed": seed,
        "train_config": config.to_dict(),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        **dict(outcome),
    }


def _load_run(
    data: bytes | None, path: str, candidate: Candidate, seed: int, config: Any, dataset_fp: str
) -> dict[str, Any] | None:
    """The stored record (``data``, read from ``path``) of a finished run if it matches this
    comparison; None when there is none; raises :class:`CompareError` if it is stale."""
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise CompareError(f"{path} is not a readable run record ({exc}); delete it to train that run again") from None
    if record.get("format") != _RUN_FORMAT or record.get("test_accuracy") is None:
        raise CompareError(f"{path} is not a finished run record of this version; delete it to train that run again")
    problems = []
    if record.get("policy_hash") != candidate.policy_hash:
        problems.append(f"policy hash {str(record.get('policy_hash'))[:12]} vs {candidate.policy_hash[:12]}")
    saved = record.get("train_config", {})
    current = config.to_dict()
    for key, value in current.items():
        if key not in _REUSABLE_CHANGES and saved.get(key) != value:
            problems.append(f"{key}: {saved.get(key)!r} vs {value!r}")
    if record.get("dataset_fingerprint") != dataset_fp:
        problems.append("the training data differ (dataset fingerprint)")
    if problems:
        raise CompareError(
            f"{path} holds a run of another comparison ({'; '.join(problems)}); use another --out, "
            "or delete that folder's runs/ to train again"
        )
    return record


# ----------------------------------------------------------------------------------------------
# Summaries


@dataclasses.dataclass(frozen=True)
class PolicySummary:
    """One row of the results table."""

    policy: str
    kind: str
    ref: str
    store_ref: str | None
    policy_hash: str
    n: int
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    mean_train_time_s: float
    seeds: tuple[int, ...]
    test_accuracies: tuple[float, ...]

    @property
    def ci95_half_width(self) -> float:
        return (self.ci95_high - self.ci95_low) / 2.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["seeds"], d["test_accuracies"] = list(self.seeds), list(self.test_accuracies)
        d["ci95_half_width"] = self.ci95_half_width
        return d


def summarize(candidates: Sequence[Candidate], runs: Sequence[Mapping[str, Any]]) -> list[PolicySummary]:
    """Per-candidate statistics of the test accuracy over the runs, in candidate order."""
    out = []
    for c in candidates:
        mine = sorted((r for r in runs if r["policy_hash"] == c.policy_hash), key=lambda r: r["seed"])
        accs = [float(r["test_accuracy"]) for r in mine]
        mean, std, lo, hi = mean_ci(accs)
        times = [float(r["train_time_s"]) for r in mine]
        out.append(
            PolicySummary(
                policy=c.label,
                kind=c.kind,
                ref=c.ref,
                store_ref=c.store_ref,
                policy_hash=c.policy_hash,
                n=len(mine),
                mean=mean,
                std=std,
                ci95_low=lo,
                ci95_high=hi,
                mean_train_time_s=math.fsum(times) / len(times) if times else math.nan,
                seeds=tuple(int(r["seed"]) for r in mine),
                test_accuracies=tuple(accs),
            )
        )
    return out


def _pct(x: float, digits: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}"


@dataclasses.dataclass
class Comparison:
    """The outcome of :func:`run_compare`."""

    config: CompareConfig
    candidates: list[Candidate]
    runs: list[dict[str, Any]]  # one record per run, candidate order then seed
    summaries: list[PolicySummary]
    dataset_fingerprint: str
    trained: int = 0  # runs trained by this call (the others were reused)
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    attached: list[str] = dataclasses.field(default_factory=list)

    def rows(self) -> list[list[str]]:
        best = max((s.mean for s in self.summaries if math.isfinite(s.mean)), default=math.nan)
        rows = []
        for s in self.summaries:
            mark = " *" if math.isfinite(s.mean) and s.mean == best else ""
            rows.append([
                s.policy + mark,
                s.kind,
                str(s.n),
                _pct(s.mean),
                _pct(s.std),
                "-" if not math.isfinite(s.ci95_low) else f"[{_pct(s.ci95_low)}, {_pct(s.ci95_high)}]",
                "-" if not math.isfinite(s.mean_train_time_s) else f"{s.mean_train_time_s:.1f}",
            ])
        return rows

    HEADER = ["policy", "kind", "n", "test acc % (mean)", "std", "95% CI", "train time s (mean)"]

    def table(self) -> str:
        """The results as a plain-text table (``*`` marks the best mean)."""
        rows = self.rows()
        widths = [max(len(r[i]) for r in [self.HEADER, *rows]) for i in range(len(self.HEADER))]
        numeric = {2, 3, 4, 6}

        def fmt(row: list[str]) -> str:
            return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

        lines = [fmt(self.HEADER), fmt(["-" * w for w in widths])]
        lines += [fmt(r) for r in rows]
        return "\n".join(lines)

    def markdown(self) -> str:
        t = self.config.train
        lines = [
            "# Policy comparison",
            "",
            f"Test accuracy of `{t.model}` trained for {t.epochs} epochs on `{t.data}` "
            f"(train_size={t.train_size}, val_size={t.val_size}, split_seed={t.split_seed}, "
            f"batch_size={t.batch_size}, lr={t.lr}), evaluated on `{t.test_data}`; "
            f"seeds {', '.join(map(str, self.config.seeds))}. Mean, sample standard deviation and "
            "two-sided 95% confidence interval of the mean (Student t, n-1 degrees of freedom), in %; "
            "`*` marks the best mean. Training time per run includes validation and the final test pass.",
            "",
            "| " + " | ".join(self.HEADER) + " |",
            "|" + "|".join(["---", "---", "---:", "---:", "---:", "---:", "---:"]) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows()]
        lines += ["", f"Dataset fingerprint `{self.dataset_fingerprint[:16]}`; one row per run in `runs.csv`.", ""]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Outputs


_RUN_COLUMNS = [
    "run_id", "policy", "kind", "ref", "store_ref", "policy_hash", "seed", "test_accuracy", "test_loss",
    "val_accuracy", "train_time_s", "epochs", "model", "node_id", "hostname", "finished_at",
]
_RESULT_COLUMNS = [
    "policy", "kind", "ref", "store_ref", "policy_hash", "n", "mean", "std", "ci95_low", "ci95_high",
    "ci95_half_width", "mean_train_time_s", "seeds", "test_accuracies",
]


def _run_row(r: Mapping[str, Any]) -> dict[str, Any]:
    cfg = r.get("train_config", {})
    row = {k: r.get(k) for k in _RUN_COLUMNS}
    row["epochs"], row["model"] = cfg.get("epochs"), cfg.get("model")
    return row


def _csv_bytes(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        out = {}
        for k in columns:
            v = row.get(k)
            if isinstance(v, (list, tuple)):
                v = " ".join(str(x) for x in v)
            elif isinstance(v, float) and not math.isfinite(v):
                v = ""
            out[k] = "" if v is None else v
        writer.writerow(out)
    return buf.getvalue().encode("utf-8")


def _parquet_bytes(summaries: Sequence[PolicySummary]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    table = pa.table(
        {
            "policy": pa.array([s.policy for s in summaries], pa.string()),
            "kind": pa.array([s.kind for s in summaries], pa.string()),
            "ref": pa.array([s.ref for s in summaries], pa.string()),
            "store_ref": pa.array([s.store_ref for s in summaries], pa.string()),
            "policy_hash": pa.array([s.policy_hash for s in summaries], pa.string()),
            "n": pa.array([s.n for s in summaries], pa.int32()),
            "mean": pa.array([num(s.mean) for s in summaries], pa.float64()),
            "std": pa.array([num(s.std) for s in summaries], pa.float64()),
            "ci95_low": pa.array([num(s.ci95_low) for s in summaries], pa.float64()),
            "ci95_high": pa.array([num(s.ci95_high) for s in summaries], pa.float64()),
            "ci95_half_width": pa.array([num(s.ci95_half_width) for s in summaries], pa.float64()),
            "mean_train_time_s": pa.array([num(s.mean_train_time_s) for s in summaries], pa.float64()),
            "seeds": pa.array([list(s.seeds) for s in summaries], pa.list_(pa.int64())),
            "test_accuracies": pa.array([list(s.test_accuracies) for s in summaries], pa.list_(pa.float64())),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def plot(comparison: Comparison) -> bytes:
    """``comparison.png`` (PNG bytes): test accuracy per policy (mean, 95% CI, seeds) and
    validation accuracy per epoch (mean over seeds)."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
    from matplotlib.ticker import MaxNLocator

    summaries = comparison.summaries
    fig = Figure(figsize=(13, 5))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    xs = list(range(len(summaries)))
    colors = [matplotlib.colormaps["tab10"](i % 10) for i in xs]
    for x, s, c in zip(xs, summaries, colors):
        if s.n == 0:
            continue
        seeds_x = [x + 0.12 + 0.06 * ((k % 3) - 1) for k in range(len(s.test_accuracies))]
        ax1.scatter(seeds_x, [100 * a for a in s.test_accuracies], color=c, s=14, alpha=0.6, zorder=2)
        err = 100 * s.ci95_half_width if math.isfinite(s.ci95_half_width) else None
        ax1.errorbar([x], [100 * s.mean], yerr=None if err is None else [[err], [err]], fmt="o",
                     color=c, markersize=8, capsize=6, elinewidth=1.6, zorder=3)
    ax1.set_xticks(xs)
    ax1.set_xticklabels([s.policy for s in summaries], rotation=30, ha="right")
    ax1.set_xlim(-0.6, len(summaries) - 0.4)
    shown = [100 * a for s in summaries for a in s.test_accuracies]
    shown += [100 * v for s in summaries for v in (s.ci95_low, s.ci95_high) if math.isfinite(v)]
    if shown:
        lo, hi = min(shown), max(shown)
        pad = max(0.5, 0.08 * (hi - lo))
        ax1.set_ylim(max(0.0, lo - pad), min(100.0, hi + pad))
    ax1.set_ylabel("test accuracy (%)")
    ax1.set_title("Test accuracy: mean and 95% CI (small dots: seeds)")
    ax1.grid(axis="y", alpha=0.3)

    for s, c in zip(summaries, colors):
        per_epoch: dict[int, list[float]] = {}
        for r in comparison.runs:
            if r["policy_hash"] != s.policy_hash:
                continue
            for row in r.get("history", []):
                if row.get("val_accuracy") is not None:
                    per_epoch.setdefault(int(row["epoch"]), []).append(float(row["val_accuracy"]))
        if per_epoch:
            epochs = sorted(per_epoch)
            ax2.plot(epochs, [100 * sum(per_epoch[e]) / len(per_epoch[e]) for e in epochs],
                     marker="o", markersize=3, color=c, label=s.policy)
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("validation accuracy (%)")
    ax2.set_title("Validation accuracy per epoch (mean over seeds)")
    ax2.grid(alpha=0.3)
    if ax2.lines:
        ax2.legend(fontsize=8)
    t = comparison.config.train
    fig.suptitle(f"{t.model}, {t.epochs} epochs, train_size={t.train_size}, seeds={len(comparison.config.seeds)}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def write_outputs(comparison: Comparison) -> dict[str, str]:
    """Write runs.csv, results.{md,csv,parquet} and comparison.png into ``config.out``; returns
    their locations (also kept in ``comparison.files``)."""
    out = OutputDir(comparison.config.out)
    contents = {
        "runs_csv": ("runs.csv", _csv_bytes([_run_row(r) for r in comparison.runs], _RUN_COLUMNS)),
        "results_md": ("results.md", comparison.markdown().encode("utf-8")),
        "results_csv": ("results.csv", _csv_bytes([s.to_dict() for s in comparison.summaries], _RESULT_COLUMNS)),
        "results_parquet": ("results.parquet", _parquet_bytes(comparison.summaries)),
        "plot": ("comparison.png", plot(comparison)),
    }
    files = {}
    for key, (rel, data) in contents.items():
        out.write(rel, data)
        files[key] = out.location(rel)
    comparison.files = files
    return files


def _evaluation(comparison: Comparison, summary: PolicySummary) -> dict[str, Any]:
    cfg = comparison.config
    train = {k: v for k, v in cfg.train.to_dict().items() if k not in ("seed", "num_threads", "device")}
    ranked = sorted((s for s in comparison.summaries if math.isfinite(s.mean)), key=lambda s: -s.mean)
    ranks = {s.policy_hash: i for i, s in enumerate(ranked, 1)}
    return {
        "kind": "autoaug compare",
        "metric": "test_accuracy",
        "n": summary.n,
        "mean": summary.mean,
        "std": summary.std if math.isfinite(summary.std) else None,
        "ci95": [summary.ci95_low, summary.ci95_high] if math.isfinite(summary.ci95_low) else None,
        "seeds": list(summary.seeds),
        "test_accuracy": list(summary.test_accuracies),
        "mean_train_time_s": summary.mean_train_time_s,
        "rank": ranks.get(summary.policy_hash),
        "compared_with": {
            s.policy: {"mean": s.mean, "std": s.std if math.isfinite(s.std) else None, "n": s.n}
            for s in comparison.summaries
            if s.policy_hash != summary.policy_hash
        },
        "train_config": train,
        "dataset_fingerprint": comparison.dataset_fingerprint,
        "out": OutputDir(cfg.out).uri,
    }


def attach_evaluations(comparison: Comparison, store: Any = None) -> list[str]:
    """Attach the results to every stored policy of the comparison (once per identical result).

    ``evaluations.json`` in the output folder remembers what was attached, so re-running a
    finished comparison does not attach the same evaluation twice.
    """
    stored = [s for s in comparison.summaries if s.store_ref]
    if not stored:
        return []
    store = _open_store(comparison.config.store if store is None else store)
    out = OutputDir(comparison.config.out)
    try:
        ledger = json.loads((out.read("evaluations.json") or b"{}").decode("utf-8"))
    except ValueError:
        ledger = {}
    attached = []
    for summary in stored:
        evaluation = _evaluation(comparison, summary)
        digest = hashlib.sha256(json.dumps(evaluation, sort_keys=True, default=str).encode()).hexdigest()
        key = f"{getattr(store, 'uri', '')}|{summary.store_ref}"
        if ledger.get(key) == digest:
            continue
        store.attach_evaluation(summary.store_ref, evaluation)
        ledger[key] = digest
        attached.append(summary.store_ref)
        out.write("evaluations.json", json.dumps(ledger, indent=1, sort_keys=True).encode("utf-8"))
    comparison.attached = attached
    return attached


# ----------------------------------------------------------------------------------------------
# Running


def _dataset_fingerprint(config: CompareConfig) -> str:
    from autoaug.proxy_models.data import open_dataset

    t = config.train
    try:
        ds = open_dataset(t.data, split="train")
        fp = ds.fingerprint()
        test = open_dataset(t.test_data, split="test")
    except (ValueError, OSError) as exc:  # DatasetError is a ValueError
        raise CompareError(str(exc)) from None
    if tuple(test.classes) != tuple(ds.classes):
        raise CompareError(
            f"test data {t.test_data} has classes {list(test.classes)[:10]}, but the training data "
            f"{t.data} has {list(ds.classes)[:10]}"
        )
    return fp


def _describe_run(r: Mapping[str, Any]) -> str:
    where = f", node {r['node_id'][:8]}" if r.get("node_id") else ""
    val = r.get("val_accuracy")
    val_txt = f", val {_pct(val, 1)}%" if val is not None else ""
    return (
        f"{r['policy']} seed {r['seed']}: test {_pct(r['test_accuracy'], 2)}%{val_txt} "
        f"({r['train_time_s']:.0f} s{where})"
    )


def run_compare(config: CompareConfig, *, progress: Callable[[str], Any] | None = None) -> Comparison:
    """Train every (policy, seed) run not finished yet, then summarise, write and attach.

    ``progress(line)`` receives one line per finished (or reused) run, ``[k/total] ...``, and a
    few status lines. Raises :class:`CompareError` for bad input or a failed run (the runs that
    finished stay saved, so re-running resumes).
    """
    say = progress or (lambda line: None)
    candidates = resolve_candidates(config.policies, config.baselines, config.store)
    dataset_fp = _dataset_fingerprint(config)
    out = OutputDir(config.out)
    try:
        out.makedirs("runs")
        out.write("compare.json", json.dumps(_config_dict(config, candidates), indent=2).encode("utf-8"))
    except OSError as exc:
        raise CompareError(f"cannot write to --out {out.uri}: {exc}") from None

    jobs = [(c, seed) for c in candidates for seed in config.seeds]
    total = len(jobs)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    todo: list[tuple[Candidate, int]] = []
    for c, seed in jobs:
        rel = f"runs/{run_id(c, seed)}.json"
        record = _load_run(out.read(rel), out.location(rel), c, seed, config.run_config(seed), dataset_fp)
        if record is None:
            todo.append((c, seed))
        else:
            done[(c.policy_hash, seed)] = record
    say(
        f"compare: {len(candidates)} policies x {len(config.seeds)} seeds = {total} runs"
        + (f" ({len(done)} finished earlier, reused from {out.location('runs')})" if done else "")
    )
    for i, record in enumerate(done.values(), 1):
        say(f"[{i}/{total}] reused  {_describe_run(record)}")

    trained = 0
    if todo:
        trained = _run_all(config, todo, done, out, total, say)

    runs = [done[(c.policy_hash, seed)] for c, seed in jobs]
    comparison = Comparison(
        config=config, candidates=candidates, runs=runs, summaries=summarize(candidates, runs),
        dataset_fingerprint=dataset_fp, trained=trained,
    )
    write_outputs(comparison)
    if config.attach:
        attach_evaluations(comparison)
    return comparison


def _config_dict(config: CompareConfig, candidates: Sequence[Candidate]) -> dict[str, Any]:
    return {
        "policies": list(config.policies),
        "baselines": list(config.baselines),
        "candidates": [
            {"label": c.label, "ref": c.ref, "kind": c.kind, "store_ref": c.store_ref, "policy_hash": c.policy_hash}
            for c in candidates
        ],
        "seeds": list(config.seeds),
        "train_config": config.train.to_dict(),
        "cpus_per_run": config.cpus_per_run,
        "gpus_per_run": config.gpus_per_run,
        "address": config.address,
    }


def _run_all(
    config: CompareConfig,
    todo: Sequence[tuple[Candidate, int]],
    done: dict[tuple[str, int], dict[str, Any]],
    out: OutputDir,
    total: int,
    say: Callable[[str], Any],
) -> int:
    import logging

    import ray

    from autoaug.core import ray_session as cluster

    init_kwargs: dict[str, Any] = {"log_to_driver": config.verbose}
    if not config.verbose:
        init_kwargs["logging_level"] = logging.WARNING
    with cluster.ray_session(config.address, **init_kwargs) as info:
        say(f"compare: {len(todo)} runs to train on {info.describe()}; {config.cpus_per_run} CPU(s) per run")
        # A task asking for more than any single node has would wait forever: refuse it here.
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        most_cpus = max((float(r.get("CPU", 0)) for r in nodes), default=0.0)
        most_gpus = max((float(r.get("GPU", 0)) for r in nodes), default=0.0)
        if most_cpus < config.cpus_per_run:
            raise CompareError(
                f"each run needs {config.cpus_per_run} CPU(s) but the largest node of {info.describe()} has "
                f"{most_cpus:g}; lower --cpus-per-run"
            )
        if config.gpus_per_run > most_gpus:
            raise CompareError(
                f"each run needs {config.gpus_per_run:g} GPU(s) but the largest node of {info.describe()} has "
                f"{most_gpus:g}; use --gpus-per-run 0 with a CPU preset (--preset cpu) or run on GPU machines"
            )
        task = ray.remote(_train_one)
        pending: dict[Any, tuple[Candidate, int, Any]] = {}
        for c, seed in todo:
            run_cfg = config.run_config(seed)
            ref = task.options(
                num_cpus=config.cpus_per_run,
                num_gpus=config.gpus_per_run,
                max_retries=2,  # node or worker died; an exception in training is not retried
                retry_exceptions=False,
                name=f"autoaug-compare:{run_id(c, seed)}",
            ).remote(run_cfg.to_dict(), c.policy.to_dict())
            pending[ref] = (c, seed, run_cfg)
        trained = 0
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    c, seed, run_cfg = pending.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as exc:
                        cause = getattr(exc, "cause", None) or exc
                        raise RunFailedError(
                            f"run {c.label} seed {seed} failed: {type(cause).__name__}: {cause}".splitlines()[0]
                            + f" ({len(done)} finished runs are saved in {out.location('runs')}; re-run to resume)"
                        ) from None
                    record = _record(c, seed, run_cfg, outcome)
                    out.write(f"runs/{record['run_id']}.json", json.dumps(record, indent=1).encode("utf-8"))
                    done[(c.policy_hash, seed)] = record
                    trained += 1
                    say(f"[{len(done)}/{total}] trained {_describe_run(record)}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
    return trained
