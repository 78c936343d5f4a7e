"""Ray Tune's writes in a search's run directory on a full, over-quota or read-only filesystem.

Tune writes trial results and checkpoints, and snapshots its experiment state, in the run
directory while a search runs; none of those writes goes through :mod:`autoaug.core.location`,
so a filesystem that fills up mid-search would otherwise show as Ray tracebacks, trials retried
and failed one after the other, and a saved state cut short that ``--resume`` cannot read.
This module keeps that to one line and a search that resumes once the space is freed:

* :class:`StorageGuard` (a Tune callback) ends the experiment at the first trial that such a
  filesystem made fail: retrying it, or starting the next trial, would meet the same full disk.
  The trial is left to retry on resume (Tune had already scheduled its retry), and
  :func:`storage_failure` turns what ``tuner.fit()`` raises into the one-line
  :class:`~autoaug.core.errors.StorageError` (naming the run directory, or the folder that is
  full, and how to resume), also for the driver's own writes (the Optuna study's SQLite file).
* :class:`SearchFiles` (a Tune callback) keeps a restored experiment from writing stale copies
  over the search's own files: when Tune restores, it copies every ``*.json`` and ``*.pkl`` at
  the top of the run directory into its driver staging folder, and each later snapshot uploads
  that folder back over the run directory -- so what a resumed driver wrote into ``budget.json``
  or PBA's event log was replaced by their content at restore time. On the first step after a
  restore it removes from the staging folder every file that is not Tune's own.
* :class:`StateCopy` (a Tune callback) keeps the last *complete* copy of Tune's saved experiment
  state (``experiment_state-*.json``, ``search_gen_state-*.json``, ``searcher-state-*.pkl``) in
  ``<run>/.tune-state-copy/``: Tune copies its snapshot into the run directory in place, so a
  full disk can leave it truncated. :func:`repair_state` (before every restore) puts the copy
  back when the saved state cannot be read; a state that is damaged with no copy is one line.

Only local run directories are copied and repaired: the object stores pyarrow reaches (S3, GCS)
write an object whole or not at all.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import re
import shutil
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ray import tune

from autoaug.core.errors import SearchError, StorageError
from autoaug.core.location import Location, atomic_write_local, is_uri, resume_with, storage_error
from autoaug.search.tune import progress
from autoaug.search.tune.session import ray_session_dir

__all__ = [
    "COPY_DIR",
    "SearchFiles",
    "StateCopy",
    "StorageGuard",
    "repair_state",
    "storage_failure",
    "tuner_state_error",
]

#: Where :class:`StateCopy` keeps the last complete copy of Tune's saved state, in the run directory.
COPY_DIR = ".tune-state-copy"
_STATE = re.compile(r"^(experiment_state|search_gen_state|searcher-state)-(.+)\.(json|pkl)$")
#: Less than this free on a filesystem counts as full when telling which folder a trial could not write.
_NEARLY_FULL = 1 << 20


class _TrialStorageFailure(Exception):
    """Raised by :class:`StorageGuard` out of ``tuner.fit()``: a trial met a full or read-only filesystem."""

    def __init__(self, trial_id: str, error: str) -> None:
        super().__init__(f"trial {trial_id}: {error}")
        self.trial_id = trial_id
        self.error = error


class StorageGuard(tune.Callback):
    """Ends the experiment (raising out of ``tuner.fit()``) at the first trial whose error is a
    full, over-quota, read-only or denied filesystem (``ENOSPC``, ``EDQUOT``, ``EROFS``,
    ``EACCES``, ``EPERM``): every other trial writes to the same place."""

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._check(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._check(trial)

    @staticmethod
    def _check(trial: Any) -> None:
        error = progress.trial_error(trial)
        if storage_error(OSError(error), "") is not None:
            raise _TrialStorageFailure(trial.trial_id, error)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and contexts, and the exceptions a ``TuneError`` carries in its args."""
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is seen for seen in out):
            continue
        out.append(e)
        todo += [e.__cause__, e.__context__]
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
    return out


def _full_folder(where: str) -> str:
    """The run directory, or Ray's temporary folder when that is the full one (a trial's scratch
    checkpoints are written there before they are copied to the run directory)."""
    if is_uri(where):
        return where
    session = ray_session_dir()
    for path in [where, *([session] if session else [])]:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        if st.f_bavail * st.f_frsize < _NEARLY_FULL:
            return path
    return where


def storage_failure(exc: BaseException, where: str, hint: str = "") -> StorageError | None:
    """The one-line :class:`StorageError` for what ``tuner.fit()`` raised when a full / read-only
    filesystem is behind it (a trial stopped by :class:`StorageGuard`, a write of Tune's, the
    Optuna study's SQLite file); None for any other error. ``where``: the run directory."""
    for e in _chain(exc):
        if isinstance(e, StorageError):
            return resume_with(e, hint) if hint else e
        if isinstance(e, _TrialStorageFailure):
            folder = _full_folder(where)
            what = "search run directory" if folder == where else "Ray's temporary folder"
            return storage_error(OSError(e.error), folder, what=what, then=hint or None)
        if isinstance(e, OSError):
            found = storage_error(
                e, os.fspath(e.filename) if getattr(e, "filename", None) else where, then=hint or None
            )
            if found is not None:
                return found
        if isinstance(e, sqlite3.OperationalError):
            text = str(e).lower()
            code = errno.ENOSPC if "disk is full" in text else errno.EROFS if "readonly" in text else None
            if code is not None:
                return storage_error(OSError(code, str(e)), where, what="the Optuna study in", then=hint or None)
    return None


# ----------------------------------------------------------------------------------------------
# The saved state's last complete copy


def _state_files(run: Path) -> dict[str, list[Path]]:
    """Tune's state files in ``run`` by session (the suffix of their names)."""
    sessions: dict[str, list[Path]] = {}
    try:
        names = sorted(os.listdir(run))
    except OSError:
        return {}
    for name in names:
        m = _STATE.match(name)
        if m:
            sessions.setdefault(m.group(2), []).append(run / name)
    return sessions


def _read_whole(path: Path) -> tuple[bytes, str | None]:
    """``path``'s bytes, and why they cannot be read back as Tune's state (None: they can)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return b"", f"unreadable ({exc.strerror or exc})"
    if not data:
        return data, "empty"
    try:
        if path.name.startswith("experiment_state-"):  # JSON; the other two are pickles (whatever their suffix)
            json.loads(data)
        else:
            pickle.loads(data)
    except Exception as exc:  # a truncated pickle can raise nearly anything
        return data, f"cut short or damaged ({type(exc).__name__}) at {len(data):,} bytes"
    return data, None


def _damage(path: Path) -> str | None:
    """Why ``path`` cannot be read back (None: it can)."""
    return _read_whole(path)[1]


def _newest_session(run: Path) -> tuple[str, list[Path]] | None:
    """The session whose ``experiment_state`` Tune restores from (the newest by name), with its files."""
    sessions = {
        s: files for s, files in _state_files(run).items() if any(f.name.startswith("experiment_state-") for f in files)
    }
    if not sessions:
        return None
    session = max(sessions)
    return session, sessions[session]


#: Tune's own files at the top of an experiment directory: its snapshot, the search algorithm's and
#: the callbacks' state (each named with the session's timestamp), and the pickled tuner.
_TUNE_FILE = re.compile(r"^(tuner|trainable)\.pkl$|^[a-z_-]+-\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d[^/]*\.(json|pkl)$")


class SearchFiles(tune.Callback):
    """Removes the search's own files from the driver staging folder of a restored experiment, on
    its first step: Tune copied them there from the run directory when it restored (with every
    ``*.json`` and ``*.pkl`` at its top), and would upload them back over the run directory at
    each snapshot, replacing what this driver wrote into them since (PBA's event log,
    ``budget.json``). Tune's own files (:data:`_TUNE_FILE`) stay."""

    def __init__(self) -> None:
        self._checked = False

    def __getstate__(self) -> dict:  # pickled into tuner.pkl: the next driver checks afresh
        return {"_checked": False}

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._checked or not trials:
            return
        self._checked = True
        staging = getattr(trials[0], "local_experiment_path", None)  # (Tune's Trial: its driver staging folder)
        if staging:
            drop_search_files(staging)


def drop_search_files(staging: str) -> None:
    """Remove from Tune's driver staging folder ``staging`` the files at its top that are not
    Tune's own."""
    try:
        entries = list(os.scandir(staging))
    except OSError:
        return
    for entry in entries:
        if entry.is_file() and not _TUNE_FILE.match(entry.name):
            try:
                os.unlink(entry.path)
            except OSError:
                pass  # (already gone, or not ours to remove: Tune uploads it as before)


class StateCopy(tune.Callback):
    """Keeps, in ``<run>/.tune-state-copy/``, the last copy of Tune's saved experiment state whose
    every file reads back whole (checked at most every ``every_s`` seconds, and when the
    experiment ends). A write the filesystem refuses leaves the previous copy as it was."""

    def __init__(self, run_dir: str, every_s: float = 5.0) -> None:
        self.run_dir = run_dir
        self.every_s = every_s
        self._last = 0.0
        self._copied: tuple = ()

    def __getstate__(self) -> dict:  # pickled into tuner.pkl: the next driver starts afresh
        return {"run_dir": self.run_dir, "every_s": self.every_s, "_last": 0.0, "_copied": ()}

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.keep()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.keep()

    def keep(self) -> bool:
        """Copy the newest saved state if it changed and reads back whole; True if copied."""
        if is_uri(self.run_dir):
            return False
        run = Path(self.run_dir)
        newest = _newest_session(run)
        if newest is None:
            return False
        _, files = newest
        try:
            signature = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files)
        except OSError:
            return False
        if signature == self._copied:
            return False
        read = {f.name: _read_whole(f) for f in files}  # read once: what is checked is what is copied
        if any(why for _, why in read.values()):
            return False  # caught mid-write or cut short: the previous copy stays
        try:
            for name, (data, _) in read.items():
                atomic_write_local(run / COPY_DIR / name, data)
            for old in (run / COPY_DIR).iterdir():  # an older session's files
                if old.name not in {f.name for f in files} and _STATE.match(old.name):
                    old.unlink()
        except (OSError, StorageError):
            return False
        self._copied = signature
        return True


def repair_state(run_dir: str) -> str | None:
    """Before Tune restores the experiment in ``run_dir``: if its saved state does not read back
    whole (a full disk cut a snapshot short), put back the last complete copy
    (:class:`StateCopy`) and return the line that says so; None when the state is whole. Raises
    :class:`SearchError` when it is damaged and no complete copy was kept."""
    if is_uri(run_dir):
        return None
    run = Path(run_dir)
    newest = _newest_session(run)
    if newest is None:
        return None
    session, files = newest
    damaged = {f.name: why for f in files if (why := _damage(f))}
    if not damaged:
        return None
    copies = [p for p in (run / COPY_DIR).glob("*") if _STATE.match(p.name)] if (run / COPY_DIR).is_dir() else []
    complete = bool(copies) and not any(_damage(p) for p in copies)
    name, why = next(iter(damaged.items()))
    if not complete:
        raise SearchError(
            f"cannot resume the search in {run_dir}: Ray Tune's saved state {name} is {why} (a full disk "
            f"while it was written?) and no complete copy of it was kept; start the search again with --overwrite"
        )
    copied_at = max(p.stat().st_mtime for p in copies)
    for f in files:  # the damaged session's files go: Tune must restore from the copy's session
        f.unlink()
    for p in copies:
        shutil.copyfile(p, run / p.name)
    when = datetime.fromtimestamp(copied_at).strftime("%H:%M:%S")
    return (
        f"Ray Tune's saved state {name} was {why} (a full disk?); resuming from its last complete copy "
        f"(saved at {when}); what the search did after it is done again"
    )


# ----------------------------------------------------------------------------------------------
# The pickled tuner

#: Tune's pickled tuner (its configuration: the searcher, the scheduler, the callbacks), at the top
#: of an experiment directory; ``Tuner.restore`` reads it first.
TUNER_FILE = "tuner.pkl"


def tuner_state_error(run: Any, experiment_uri: str) -> SearchError | None:
    """Why ``Tuner.restore`` could not read the experiment at ``experiment_uri`` (a folder of the
    search's run directory ``run``, a :class:`~autoaug.search.run_dir.RunDir`), when it is its
    ``tuner.pkl``: cut short or corrupted (:meth:`RunDir.damaged`), or written by another version,
    naming a module or class this one does not have (:meth:`RunDir.another_version`). None when
    the file unpickles here (the failure was something else)."""
    where = Location.parse(experiment_uri, what="experiment")
    name = TUNER_FILE
    prefix = run.uri.rstrip("/") + "/"
    if where.uri.startswith(prefix):
        name = f"{where.uri[len(prefix) :]}/{TUNER_FILE}"
    try:
        data = where.read_bytes(TUNER_FILE)
    except (OSError, StorageError):
        return None
    missing: list[str] = []

    class _Probe(pickle.Unpickler):
        def find_class(self, module: str, qualname: str) -> Any:
            try:
                return super().find_class(module, qualname)
            except ImportError:
                missing.append(f"the module {module}")
                raise
            except AttributeError:
                missing.append(f"{module}.{qualname}")
                raise

    try:
        _Probe(io.BytesIO(data)).load()
    except Exception as exc:  # a damaged pickle can raise nearly anything
        if missing:
            return run.another_version(name, missing[0])
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return run.damaged(name, f"not a pickle Ray Tune can read: {type(exc).__name__}{': ' + first if first else ''}")
    return None
