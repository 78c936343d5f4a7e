"""Tune's writes on a full or read-only filesystem: one line, and a saved state cut short is put
back from its last complete copy (the real full disk is in tests/launch/test_search_cmd.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import sqlite3
from collections.abc import Iterator

import pytest

from autoaug.core.errors import SearchError, StorageAccessError, StorageError
from autoaug.search.tune import tune_storage
from autoaug.search.tune.tune_storage import (
    COPY_DIR,
    SearchFiles,
    StateCopy,
    StorageGuard,
    repair_state,
    storage_failure,
)

SESSION = "2026-11-24_10-00-00"
NAMES = (f"experiment_state-{SESSION}.json", f"search_gen_state-{SESSION}.json", f"searcher-state-{SESSION}.pkl")


def _save_state(run, trials: int) -> None:
    """Tune's three state files as Tune writes them: JSON, and two pickles (one named .json)."""
    (run / NAMES[0]).write_text(json.dumps({"trial_data": [[f"t{i}", {}] for i in range(trials)]}))
    (run / NAMES[1]).write_bytes(pickle.dumps({"counter": trials}))
    (run / NAMES[2]).write_bytes(pickle.dumps({"searcher": list(range(trials))}))


def test_the_copy_keeps_the_last_state_that_reads_back_whole(tmp_path):
    _save_state(tmp_path, 2)
    copy = StateCopy(str(tmp_path), every_s=0)
    assert copy.keep()
    assert sorted(p.name for p in (tmp_path / COPY_DIR).iterdir()) == sorted(NAMES)
    assert not copy.keep()  # unchanged: not copied again

    # A snapshot cut short by a full disk (or caught mid-write) is not copied: the previous copy stays.
    whole = (tmp_path / NAMES[0]).read_bytes()
    (tmp_path / NAMES[0]).write_bytes(json.dumps({"trial_data": [["t0", {}]] * 3}).encode()[:20])
    assert not copy.keep()
    assert (tmp_path / COPY_DIR / NAMES[0]).read_bytes() == whole

    _save_state(tmp_path, 3)
    assert copy.keep()
    assert json.loads((tmp_path / COPY_DIR / NAMES[0]).read_text())["trial_data"][2][0] == "t2"


def test_a_copy_that_cannot_be_written_leaves_the_previous_one(tmp_path, monkeypatch):
    _save_state(tmp_path, 1)
    copy = StateCopy(str(tmp_path), every_s=0)
    assert copy.keep()
    before = (tmp_path / COPY_DIR / NAMES[0]).read_bytes()

    def full(path, data):
        raise StorageError(f"cannot write {path}: no space left on the filesystem (ENOSPC)")

    monkeypatch.setattr(tune_storage, "atomic_write_local", full)
    _save_state(tmp_path, 4)
    assert not copy.keep()  # no exception: the guard reports the full disk
    assert (tmp_path / COPY_DIR / NAMES[0]).read_bytes() == before


def test_a_whole_state_is_left_alone(tmp_path):
    _save_state(tmp_path, 2)
    assert repair_state(str(tmp_path)) is None
    assert repair_state(str(tmp_path / "nothing-here")) is None


@pytest.mark.parametrize("damaged", [0, 1, 2])
def test_a_state_cut_short_is_put_back_from_its_copy(tmp_path, damaged):
    _save_state(tmp_path, 2)
    StateCopy(str(tmp_path), every_s=0).keep()
    _save_state(tmp_path, 3)
    data = (tmp_path / NAMES[damaged]).read_bytes()
    (tmp_path / NAMES[damaged]).write_bytes(data[: len(data) // 2])

    line = repair_state(str(tmp_path))
    assert line is not None and "\n" not in line
    assert f"Ray Tune's saved state {NAMES[damaged]} was cut short or damaged" in line
    assert "resuming from its last complete copy" in line
    # the copy's state, whole, is what Tune restores from
    assert json.loads((tmp_path / NAMES[0]).read_text())["trial_data"] == [["t0", {}], ["t1", {}]]
    assert pickle.loads((tmp_path / NAMES[2]).read_bytes()) == {"searcher": [0, 1]}
    assert repair_state(str(tmp_path)) is None


def test_the_copy_of_an_earlier_session_replaces_a_damaged_newer_one(tmp_path):
    _save_state(tmp_path, 2)
    StateCopy(str(tmp_path), every_s=0).keep()
    newer = "2026-11-24_11-00-00"  # a resumed driver's session: Tune restores the newest by name
    (tmp_path / f"experiment_state-{newer}.json").write_text('{"trial_data": [')
    assert repair_state(str(tmp_path)) is not None
    assert not (tmp_path / f"experiment_state-{newer}.json").exists()
    assert json.loads((tmp_path / NAMES[0]).read_text())["trial_data"][1][0] == "t1"


def test_a_damaged_state_without_a_copy_is_one_line(tmp_path):
    _save_state(tmp_path, 2)
    (tmp_path / NAMES[0]).write_text("")
    with pytest.raises(SearchError) as info:
        repair_state(str(tmp_path))
    message = str(info.value)
    assert "\n" not in message
    assert f"cannot resume the search in {tmp_path}: Ray Tune's saved state {NAMES[0]} is empty" in message
    assert message.endswith("start the search again with --overwrite")


class _Trial:
    trial_id = "abc123"


@pytest.mark.parametrize(
    "error, stops",
    [
        ("OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device", True),
        ("OSError: [Errno 122] Disk quota exceeded", True),
        ("OSError: [Errno 30] Read-only file system: '/runs/x/trial_1'", True),
        ("ValueError: loss is nan", False),
        ("OSError: [Errno 2] No such file or directory: 'x'", False),
    ],
)
def test_the_guard_ends_the_experiment_only_on_a_full_or_read_only_filesystem(monkeypatch, error, stops):
    import autoaug.search.tune.progress as progress

    monkeypatch.setattr(progress, "trial_error", lambda trial: error)
    guard = StorageGuard()
    if stops:
        with pytest.raises(Exception) as info:
            guard.on_trial_recover(1, [], _Trial())
        line = storage_failure(info.value, "/runs/x", "resume it with: autoaug search --resume x --storage /runs")
        assert isinstance(line, StorageError)
        assert str(line).startswith("cannot write search run directory /runs/x: ")
        assert "resume it with: autoaug search --resume x --storage /runs" in str(line)
        assert isinstance(line, StorageAccessError) == ("Read-only" in error)
    else:
        guard.on_trial_recover(1, [], _Trial())
        guard.on_trial_error(1, [], _Trial())


def test_what_fit_raises_becomes_one_line_when_a_filesystem_is_behind_it():
    hint = "resume it with: autoaug search --resume s --storage /runs"
    # The Optuna study's SQLite file, on the driver, several exceptions deep.
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as low:
            raise RuntimeError("An exception is raised during the commit.") from low
    except RuntimeError as exc:
        line = storage_failure(exc, "/runs/s", hint)
    assert str(line) == (
        "cannot write the Optuna study in /runs/s: no space left on the filesystem (ENOSPC); "
        "free space there (or write elsewhere), then " + hint
    )
    # A write of Tune's own, naming its file.
    full = OSError(28, "No space left on device", "/runs/s/tuner.pkl")
    assert str(storage_failure(full, "/runs/s", hint)).startswith("cannot write /runs/s/tuner.pkl: no space left")
    # Anything else passes unchanged.
    assert storage_failure(ValueError("bad"), "/runs/s", hint) is None
    assert storage_failure(OSError(2, "No such file or directory"), "/runs/s", hint) is None


def test_a_trial_that_is_full_in_ray_s_temporary_folder_names_it(monkeypatch, tmp_path):
    """The run directory has room; the trial's scratch folder (Ray's session folder) is full."""
    run, session = tmp_path / "run", tmp_path / "session"
    run.mkdir(), session.mkdir()
    monkeypatch.setattr(tune_storage, "ray_session_dir", lambda: str(session))

    class Stat:
        def __init__(self, free):
            self.f_bavail, self.f_frsize = free, 1

    monkeypatch.setattr(os, "statvfs", lambda p: Stat(0 if p == str(session) else 10**9))
    exc = tune_storage._TrialStorageFailure("t1", "OSError: [Errno 28] No space left on device")
    assert str(storage_failure(exc, str(run))).startswith(f"cannot write Ray's temporary folder {session}: ")


@contextlib.contextmanager
def _records_of(names: tuple[str, ...], level: int) -> Iterator[list[logging.LogRecord]]:
    """The records Ray's loggers ``names`` emit at ``level`` or above within the block (a handler
    and level of their own: whatever Ray did to these loggers), both put back afterwards."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    keep, loggers = Keep(level), [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(keep)
        logger.setLevel(level)
    try:
        yield records
    finally:
        for logger, old in zip(loggers, levels):
            logger.removeHandler(keep)
            logger.setLevel(old)


def test_tune_s_failed_copies_are_logged_on_one_line_while_a_search_runs():
    """Tune logs a failed copy of its state with the traceback (in the exception or the message)."""
    from autoaug.search.tune.experiment import tune_output

    names = ("ray.tune.execution.experiment_state", "ray.train._internal.syncer")
    with _records_of(names, logging.WARNING) as records:
        with tune_output(verbose=0):
            try:
                raise OSError(28, "No space left on device")
            except OSError:
                logging.getLogger(names[0]).error(
                    "Saving experiment state to storage at '/runs/x' failed with exception: ", exc_info=True
                )
            logging.getLogger(names[1]).warning(
                "Last sync command failed with the following error:\nTraceback (most recent call last):\n"
                '  File "x.py", line 1, in f\nOSError: [Errno 28] No space left on device\n'
            )
        with tune_output(verbose=2):  # -vv: Tune's own output, whole
            logging.getLogger(names[1]).warning("a\nTraceback (most recent call last):\nb")
    texts = [logging.Formatter().format(r) for r in records]
    assert len(texts) == 3, texts
    assert all("\n" not in t and "Traceback" not in t for t in texts[:2]), texts
    assert texts[0].endswith("failed with exception: OSError: [Errno 28] No space left on device")
    assert texts[1] == "Last sync command failed with the following error: OSError: [Errno 28] No space left on device"
    assert "Traceback" in texts[2]


def test_a_full_disk_anywhere_in_a_search_says_how_to_resume_it(tmp_path, monkeypatch):
    """Calibration, re-scoring and storing write through autoaug's own writers: their one line says
    to resume the search once space is freed (running the command again would find the name taken)."""
    from autoaug.core.location import storage_error
    from autoaug.search import driver
    from autoaug.search.config import SearchConfig
    from autoaug.search.run_dir import RunDir

    def full(*args, **kwargs):
        raise storage_error(OSError(28, "No space left on device"), str(tmp_path / "runs" / "s" / "rescore.json"))

    monkeypatch.setattr(driver, "_display", full)  # the first step of _search
    config = SearchConfig(name="s", train={"preset": "smoke"}, storage=str(tmp_path / "runs"))
    with pytest.raises(StorageError) as info:
        driver._search(
            config,
            RunDir(config.storage, "s"),
            None,
            session=None,
            address=None,
            trainable=None,
            display=None,
            started=0.0,
        )
    assert str(info.value) == (
        f"cannot write {tmp_path / 'runs' / 's' / 'rescore.json'}: no space left on the "
        "filesystem (ENOSPC); free space there (or write elsewhere), then resume it with: "
        f"autoaug search --resume s --storage {tmp_path / 'runs'}"
    )


class _StagedTrial:
    def __init__(self, staging):
        self.local_experiment_path = str(staging)  # Tune's Trial property


def test_a_restored_experiment_does_not_upload_stale_copies_of_the_search_files(tmp_path):
    """Tune restores by copying every *.json and *.pkl at the top of the run directory into its
    driver staging folder, then uploads that folder over the run directory at each snapshot: the
    search's own files there (PBA's event log, budget.json) must go, or what the resumed driver
    writes into them is replaced by their content at restore time. Tune's own files stay."""
    staging = tmp_path / "driver_artifacts"
    (staging / "trial_0").mkdir(parents=True)
    tune_files = [
        "experiment_state-2026-11-27_10-35-42.json",
        "search_gen_state-2026-11-27_10-35-42.json",
        "searcher-state-2026-11-27_10-35-42.pkl",
        "basic-variant-state-2026-11-27_10-35-42.json",
        "callback-states-2026-11-27_10-35-42.pkl",
        "tuner.pkl",
    ]
    ours = ["pba_events.json", "budget.json", "calibration.json", "search_config.json"]
    for name in tune_files + ours:
        (staging / name).write_text("{}")
    guard = pickle.loads(pickle.dumps(SearchFiles()))  # as tuner.pkl holds it
    guard.on_step_begin(0, [])  # no trial yet: nothing to tell the folder from
    assert sorted(p.name for p in staging.iterdir() if p.is_file()) == sorted(tune_files + ours)
    guard.on_step_begin(1, [_StagedTrial(staging)])
    assert sorted(p.name for p in staging.iterdir() if p.is_file()) == sorted(tune_files)
    assert (staging / "trial_0").is_dir()
    # Only on the first step: what this driver stages later is left alone.
    (staging / "budget.json").write_text("{}")
    guard.on_step_begin(2, [_StagedTrial(staging)])
    assert (staging / "budget.json").exists()


def test_a_resumed_trials_retention_deleting_a_checkpoint_already_gone_is_not_an_error(tmp_path):
    """On --resume, Tune's retention deletes the checkpoints its last snapshot named, some already
    deleted before the stop: Ray 2.60 logs "Error handling checkpoint" with a FileNotFoundError
    traceback for every trial in flight (the new checkpoint was registered; nothing is lost). The
    search drops that record, and only that one."""
    import pyarrow.fs
    from ray.train._internal.storage import _delete_fs_path  # where Tune's deletion fails

    from autoaug.search.tune.experiment import tune_output

    logger = logging.getLogger("ray.tune.execution.tune_controller")

    def handled(path: str) -> None:  # what Tune's controller does around the deletion
        try:
            _delete_fs_path(fs=pyarrow.fs.LocalFileSystem(), fs_path=path)
        except Exception:
            logger.exception("Trial %s: Error handling checkpoint %s", "trial_1", "TrainingResult(...)")

    gone = str(tmp_path / "trial_1" / "checkpoint_000006")
    with _records_of((logger.name,), logging.DEBUG) as records:
        with tune_output(verbose=0):
            handled(gone)  # dropped
            try:
                open(tmp_path / "missing.pkl")  # another FileNotFoundError: a real problem, kept
            except FileNotFoundError:
                logger.exception("Trial %s: Error handling checkpoint %s", "trial_2", "TrainingResult(...)")
        handled(gone)  # outside a search: Ray's record as it was
    messages = [r.getMessage() for r in records]
    assert messages == [
        "Trial trial_2: Error handling checkpoint TrainingResult(...)",
        "Trial trial_1: Error handling checkpoint TrainingResult(...)",
    ], messages
    assert all(isinstance(r.exc_info[1], FileNotFoundError) for r in records)
