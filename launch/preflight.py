"""The preflight of ``autoaug train``, ``search`` and ``compare``: every check that can fail on the
user's input, run in the driver before Ray starts and before anything is created.

* :func:`absolute_source` / :func:`absolute_location`: every path made absolute (URIs kept) before
  it is shipped to workers, which run in another working directory;
* :func:`check_writable`: a store, run-directory root or output folder proven writable by creating
  and removing a probe in it (or, when it does not exist yet, in its nearest existing parent, so
  nothing is left behind): a read-only filesystem, a path that is a file, a URI that refuses writes
  is one line naming the flag and the path;
* :func:`check_data`: the dataset (and test set) opened, labels checked (:func:`open_dataset`),
  the config sized to the data (:func:`autoaug.proxy_models.train_config.resolve_config`: a split per
  class made a total, an automatic image size the data's own), the reduced split computed, and
  every image decoded once. The rows the trainer loads are decoded
  the way its loader decodes them, so an in-process trainer (``autoaug train``) finds them in the
  decode cache (:meth:`ImageDataset.images`) instead of decoding them again. Before decoding, the
  memory a run will need (:func:`autoaug.proxy_models.memory.check_memory`: per run, times the
  runs or trials at once, :func:`runs_at_once`; in packs, the pack servers and the trials'
  processes waiting on them, :func:`search_processes`) is compared with what the machine has: one line
  naming the image size, the estimate and what is available, before anything is allocated.

Every failure is a :class:`~autoaug.core.errors.UserInputError` or
:class:`~autoaug.core.errors.DataError` (exit status 2, one line).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from autoaug.core.errors import DataError, UserInputError
from autoaug.core.location import Location, is_uri
from autoaug.policies.store import default_store_uri
from autoaug.proxy_models.data import DatasetError, open_dataset
from autoaug.proxy_models.memory import check_memory
from autoaug.proxy_models.pipeline import MEMORY_DECODE_LIMIT_BYTES
from autoaug.proxy_models.splits import config_groups, config_split
from autoaug.proxy_models.train_config import eval_batch_size, resolve_config
from autoaug.search.run_dir import RunDir
from autoaug.search.tune.study import check_studies

__all__ = [
    "DataCheck",
    "absolute_source",
    "absolute_location",
    "absolute_train_config",
    "check_data",
    "check_writable",
    "check_study_storage",
    "runs_at_once",
    "search_processes",
]

#: Name prefix of the probe files :func:`check_writable` creates and removes.
PROBE_PREFIX = ".autoaug-probe-"
_MAX_SHOWN = 300


def _show(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


# ----------------------------------------------------------------------------------------------
# Paths


def absolute_source(text: str | os.PathLike | None) -> str | None:
    """A dataset source with its local path made absolute: ``cifar10:ROOT`` keeps its prefix (and
    ``cifar10`` its default root), URIs are kept, ``file://`` and plain paths become absolute."""
    if text is None:
        return None
    text = os.fspath(text)
    if text == "cifar10" or is_uri(text) or not text.strip():
        return text
    if text.startswith("cifar10:"):
        return "cifar10:" + Location.parse(text.partition(":")[2], what="cifar10 root").uri
    return Location.parse(text, what="dataset").uri


def absolute_location(text: str | os.PathLike | None, *, what: str) -> str | None:
    """A folder or file location with a local path made absolute (URIs kept as given)."""
    if text is None:
        return None
    return Location.parse(text, what=what).uri


def absolute_train_config(config: Any) -> Any:
    """``config`` (a :class:`autoaug.proxy_models.train.TrainConfig`) with ``data`` and
    ``test_data`` absolute."""
    return dataclasses.replace(config, data=absolute_source(config.data), test_data=absolute_source(config.test_data))


# ----------------------------------------------------------------------------------------------
# Writable locations


def check_writable(text: str | os.PathLike, *, what: str) -> Location:
    """Prove that files can be created in ``text`` (a local folder or a URI), leaving nothing behind.

    A local folder that does not exist yet is checked at its nearest existing parent (it will be
    created there); a component that is a file, a folder that cannot be written (permissions, a
    read-only filesystem) or a URI that refuses writes raises :class:`UserInputError` naming
    ``what`` and the path. Returns the parsed location.
    """
    location = Location.parse(text, what=what)
    if location.local:
        _check_local(location.path, what)
    else:
        _check_remote(location, what)
    return location


def _check_local(path: str, what: str) -> None:
    probe_dir = path
    while not os.path.lexists(probe_dir):
        parent = os.path.dirname(probe_dir)
        if parent == probe_dir:
            break
        probe_dir = parent
    if not os.path.isdir(probe_dir):
        if probe_dir == path:
            raise UserInputError(f"{what} {_show(path)} is a file, not a folder")
        raise UserInputError(f"{what} {_show(path)} cannot be created: {_show(probe_dir)} is a file, not a folder")
    probe = os.path.join(probe_dir, f"{PROBE_PREFIX}{uuid.uuid4().hex}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if probe_dir == path:
            raise UserInputError(f"{what} {_show(path)} is not writable: {reason}") from None
        raise UserInputError(
            f"{what} {_show(path)} cannot be created: {_show(probe_dir)} is not writable ({reason})"
        ) from None
    try:
        with open(os.path.join(probe, "probe"), "wb") as f:
            f.write(b"autoaug")
    except OSError as exc:
        raise UserInputError(f"{what} {_show(path)} is not writable: {exc.strerror or type(exc).__name__}") from None
    finally:
        try:
            os.unlink(os.path.join(probe, "probe"))
        except OSError:
            pass
        os.rmdir(probe)


def _check_remote(location: Location, what: str) -> None:
    try:
        fs = location.fs
        info = fs.get_file_info(location.path)
        if info.type == pafs.FileType.File:
            raise UserInputError(f"{what} {_show(location.uri)} is a file, not a folder")
        probe = location.child(f"{PROBE_PREFIX}{uuid.uuid4().hex}")
        with fs.open_output_stream(probe.path) as f:
            f.write(b"autoaug")
        fs.delete_file(probe.path)
    except UserInputError:
        raise
    except Exception as exc:  # pyarrow: OSError (access denied, no bucket), ArrowInvalid...
        raise UserInputError(f"{what} {_show(location.uri)} is not writable: {_show(exc)}") from None


# ----------------------------------------------------------------------------------------------
# Data


@dataclasses.dataclass(frozen=True)
class DataCheck:
    """What :func:`check_data` found: the dataset, the config sized to it, its split, the test
    set, and the decode time."""

    dataset: Any  # proxy_models.data.ImageDataset
    split: Any  # proxy_models.splits.Split
    test: Any  # ImageDataset or None
    decoded: int
    seconds: float
    config: Any = None  # the TrainConfig resolved against the dataset

    def describe(self) -> str:
        test = f", test {len(self.test):,} images" if self.test is not None else ""
        size = f", {self.config.image_size}x{self.config.image_size}" if self.config is not None else ""
        grouped = ""
        group_by = self.config.group_by if self.config is not None else None
        if group_by is not None:
            groups = int(self.dataset.groups(group_by).max()) + 1
            grouped = f", grouped by {group_by}: {groups:,} groups, none on both sides"
        return (
            f"data: {self.dataset.source}: {len(self.dataset):,} images, {self.dataset.num_classes} classes "
            f"(split: train {len(self.split.train):,}, val {len(self.split.val):,}{size}{grouped}){test}; "
            f"{self.decoded:,} images decoded in {self.seconds:.1f} s"
        )


def check_data(
    config: Any,
    *,
    runs: int = 1,
    unit: str = "run",
    here: bool = True,
    members: int = 1,
    waiting: int = 0,
    fix: str | None = None,
) -> DataCheck:
    """Open ``config.data`` (and ``config.test_data``) of a
    :class:`autoaug.proxy_models.train.TrainConfig`, check labels and classes, size the config to
    the data (``DataCheck.config``), compute the reduced split, check that the runs fit in memory
    (:func:`autoaug.proxy_models.memory.check_memory`: ``runs`` at once, each a ``unit``, in this
    process when ``here``, else in worker processes while this one holds the decoded data; pack
    servers: ``runs`` of them, each holding ``members`` runs, ``waiting`` trials' processes waiting
    on them, :func:`search_processes`), and decode every image once at the resolved image size.

    Raises :class:`DataError` (a dataset problem, naming the file/row; images of several sizes
    when the size is automatic) or :class:`UserInputError` (a split the data cannot give).
    """
    started = time.perf_counter()
    if config.data is None:
        raise UserInputError("no training data: give --data (or data: in the --config file)")
    ds = open_dataset(config.data, split="train")
    config = resolve_config(config, ds)
    config_groups(ds, config)  # a group key the data lack: the message names the file itself
    try:
        split = config_split(ds, config)  # grouped by config.group_by, as the trainer's
    except DatasetError as exc:  # says what the split asked for, not which data (the class check names it)
        raise (exc if str(exc).startswith(f"{ds.source}: ") else DatasetError(f"{ds.source}: {exc}")) from None
    test = None
    if config.test_data is not None:
        test = open_dataset(config.test_data, split="test")
        if tuple(test.classes) != tuple(ds.classes):
            raise DataError(
                _show(
                    f"test data {test.source} has classes {list(test.classes)[:10]}, but the training data "
                    f"{ds.source} has {list(ds.classes)[:10]}"
                )
            )
    _check_memory(config, ds, split, test, runs=runs, unit=unit, here=here, members=members, waiting=waiting, fix=fix)
    size = config.image_size
    decoded = _decode(ds, split.train, size) + _decode(ds, split.val, size)
    used = np.zeros(len(ds), dtype=bool)
    used[split.train] = True
    used[split.val] = True
    decoded += _decode(ds, np.flatnonzero(~used), size, cache=False)
    if test is not None:
        decoded += _decode(test, np.arange(len(test), dtype=np.int64), size)
    return DataCheck(ds, split, test, decoded, time.perf_counter() - started, config)


def _check_memory(
    config: Any, ds: Any, split: Any, test: Any, *, runs: int, unit: str, here: bool, **packs: Any
) -> None:
    check_memory(
        config,
        num_classes=ds.num_classes,
        train_images=len(split.train),
        val_images=len(split.val),
        test_images=len(test) if test is not None else 0,
        eval_batch_size=eval_batch_size(config),
        runs=runs,
        unit=unit,
        here=here,
        flags=True,
        **packs,
    )


def runs_at_once(cpus_per_run: float, limit: int | None = None, address: str | None = None) -> int:
    """How many runs of ``cpus_per_run`` CPUs Ray starts at once on this machine: its CPUs divided
    by ``cpus_per_run`` (at least 1), at most ``limit``; 0 with a cluster ``address`` (the runs
    use the cluster's memory, not this machine's)."""
    if address:
        return 0
    slots = max(1, int((os.cpu_count() or 1) // cpus_per_run))
    return min(slots, limit) if limit else slots


def search_processes(config: Any, address: str | None = None) -> dict[str, Any]:
    """What a search (a :class:`autoaug.search.config.SearchConfig`) runs at once on this machine,
    as :func:`check_data` counts it: its trials one per process (``runs``, :func:`runs_at_once`);
    or, with a pack size above 1 and a method whose trials pack servers train
    (:attr:`autoaug.search.methods.base.Method.pack_trials`), the servers on this machine's CPUs
    (``runs``, :func:`autoaug.search.tune.pack.pack_layout`), the trials each holds (``members``)
    and the trials' processes waiting on them (``waiting``: a pack's worth per server, or a whole
    population), with what to change when they do not fit (``fix``). With GPUs reserved, as many
    servers as this machine's GPUs hold (as :func:`~autoaug.search.tune.pack.pack_plan` plans them). ``--pack auto`` is counted as
    one trial per process (it is measured later, on the trials' device)."""
    method, k = config.search_method, config.pack
    if address or not isinstance(k, int) or k == 1 or method.pack_trials is None:
        return {"runs": runs_at_once(config.cpus_per_trial, config.concurrency, address)}
    from autoaug.search.tune.pack import pack_layout

    trials = method.num_trials(config)
    population = method.pack_trials == "population"
    available = {"CPU": float(os.cpu_count() or 1)}
    if config.gpus_per_trial > 0:  # a server takes its trials' share of a GPU, at most one
        import torch

        available["GPU"] = float(torch.cuda.device_count())
    servers, members = pack_layout(
        k, trials, config.concurrency, config.cpus_per_trial, config.gpus_per_trial, available, all_at_once=population
    )
    if population:
        fix = "a smaller population (every member's trial runs at once in packs), or --pack 1"
    else:
        fix = "fewer trials at once (--concurrency) or a smaller --pack"
    return {"runs": servers, "members": members, "waiting": min(trials, servers * members), "fix": fix}


def _decode(ds: Any, indices: Any, size: int | None, *, cache: bool = True) -> int:
    """Decode ``indices`` of ``ds`` (raising :class:`DatasetError` for the first bad row). Sets the
    trainer's loader decodes in memory are decoded through :meth:`ImageDataset.images` (cached per
    process); the others image by image, without keeping them."""
    n = len(indices)
    if n == 0:
        return 0
    first = ds.image(int(indices[0]), size)
    if cache and first.nbytes * n <= MEMORY_DECODE_LIMIT_BYTES:
        ds.images(indices, size)  # what DaliLoader(decode="auto") does for such a set
        return n
    for i in indices[1:]:
        ds.image(int(i), size)
    if cache:  # the loader feeds these to DALI's decoder: its structural checks too
        ds.validate_encoded(indices)
    return n


# ----------------------------------------------------------------------------------------------
# The three commands


def for_train(config: Any, out: str | os.PathLike) -> Any:
    """``autoaug train``: the config with absolute data paths, sized to its data (resolved), its
    data checked and decoded (the trainer then finds the decoded split in the cache), ``out``
    proven writable."""
    config = absolute_train_config(config)
    check_writable(out, what="--out")
    return check_data(config).config


def for_search(config: Any, *, say: Any = None, address: str | None = None, overwrite: bool = False) -> Any:
    """``autoaug search``: the :class:`autoaug.search.config.SearchConfig` with every path absolute
    (data, test data, run storage, store), the run storage and the store proven writable, then the
    data checked and every image decoded once. Its ``train`` comes back sized to the data
    (resolved: the trials' split as a total, the image size a number), which is what the search
    then records and gives its trials. The memory check counts a trial times the trials Ray runs
    at once here (:func:`runs_at_once`: the concurrency, at most the CPUs over ``cpus_per_trial``;
    none with a cluster ``address``), or in packs the pack servers and their trials' processes
    (:func:`search_processes`). An Optuna database (``optuna_storage``) is connected before
    the data are decoded: one that is down, refuses the login or holds a study of this search's
    names from another search is one line (``overwrite``: this search's own studies may be there)."""
    config = config.replace(
        train=absolute_train_config(config.train),
        storage=absolute_location(config.storage, what="--storage"),
        store=absolute_location(config.store or default_store_uri(), what="--store"),
    )
    check_writable(config.storage, what="--storage")
    check_writable(config.store, what="--store")
    if config.optuna_storage:
        check_study_storage(config, overwrite=overwrite)
    checked = check_data(config.train, unit="trial", here=False, **search_processes(config, address))
    config = config.replace(train=checked.config)
    # Re-scoring runs when the method can return two candidates or more (the published policy that
    # transferred best competes too when the warm start is measured).
    rescored = config.search_method.max_candidates(config) + (config.warm_start == "auto") >= 2
    if config.rescore and rescored and config.rescore_val_size is not None:
        try:  # the re-scoring runs come after every trial: fail now, not hours later
            config_split(checked.dataset, config.train, val_size=config.rescore_val_size)
        except DatasetError as exc:
            raise UserInputError(
                f"rescore_val_size {config.rescore_val_size} does not fit {checked.dataset.source}: {exc}"
            ) from None
    if say is not None:
        say("  " + checked.describe())
    return config


def check_study_storage(config: Any, *, overwrite: bool = False) -> None:
    """The search's Optuna database reached and its study names free
    (:func:`autoaug.search.tune.study.check_studies`). A run directory that exists already is the
    driver's to refuse (or, with ``overwrite``, to replace with its studies)."""
    run = RunDir(config.storage, config.name)
    own_ok = overwrite or run.exists()
    check_studies(config.optuna_storage, config.search_method.study_names(config), run.uri, own_ok=own_ok)


def for_resume(storage: str, store: str | None) -> tuple[str, str | None]:
    """``autoaug search --resume``: ``(storage, store)`` absolute, both proven writable (the data
    were checked when the search started)."""
    storage = absolute_location(storage, what="--storage")
    check_writable(storage, what="--storage")
    if store is not None:
        store = absolute_location(store, what="--store")
        check_writable(store, what="--store")
    return storage, store


def for_compare(config: Any) -> Any:
    """``autoaug compare``: the :class:`autoaug.launch.compare.CompareConfig` with every path
    absolute, the policies resolved, ``--out`` proven writable, the store too when results will be
    attached to stored policies, and the data and test data checked and decoded. ``train`` is
    left as requested: :func:`autoaug.launch.compare.run_compare` sizes it to the data and records
    both. The memory check counts a run times the runs Ray starts at once here
    (:func:`runs_at_once`), or with ``pack`` above 1 the packs it starts at once, each holding its
    share of the runs."""
    # The compare package (Ray, scipy, matplotlib), for compare only: train and search import this module.
    from autoaug.launch.compare.candidates import resolve_candidates

    changes: dict[str, Any] = {
        "train": absolute_train_config(config.train),
        "out": absolute_location(config.out, what="--out"),
    }
    if isinstance(config.store, (str, os.PathLike)):
        changes["store"] = absolute_location(config.store, what="--store")
    config = dataclasses.replace(config, **changes)
    candidates = resolve_candidates(config.policies, config.baselines, config.store, config.base)
    check_writable(config.out, what="--out")
    if config.attach and any(c.store_ref for c in candidates):
        check_writable(config.store or default_store_uri(), what="--store")
    runs = len(candidates) * len(config.seeds)
    at_once = runs_at_once(config.cpus_per_run, runs, config.address)
    if config.pack > 1 and at_once:  # packs of up to --pack runs, no fewer than run at once (plan_packs)
        from autoaug.proxy_models.pack import even_packs

        members = len(even_packs(runs, config.pack, at_once)[0])  # (the first is the largest)
        if members > 1:
            check_data(config.train, runs=at_once, here=False, members=members, fix="a smaller --pack")
            return config
    check_data(config.train, runs=at_once, here=False)
    return config
