"""The run directory ``{storage}/{name}`` of a search -- a local folder or a URI -- and the state
a search keeps there.

It holds Ray Tune's experiment state and trial checkpoints (written by Tune), and the files
below, written atomically through :class:`autoaug.core.location.Location`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from autoaug.core.errors import RunExistsError, RunFileError
from autoaug.core.location import Location
from autoaug.core.metrics import metrics_json

#: The Optuna study attribute naming the search a study belongs to (``{"name", "run_dir", "space"}``,
#: written by :mod:`autoaug.search.tune.experiment` when it opens the study): how a search tells
#: its own study from another search's of the same name in a shared database
#: (:func:`autoaug.search.tune.study.check_studies`), and how the ``local`` sampler knows the
#: search's space (:mod:`autoaug.search.tune.local_sampler`).
SEARCH_ATTR = "autoaug_search"

__all__ = [
    "utc_now",
    "RunDir",
    "RunState",
    "SEARCH_ATTR",
    "CONFIG_FILE",
    "RESULT_FILE",
    "STUDY_FILE",
    "RUNS_ENV_VAR",
    "default_runs_root",
    "default_search_name",
    "autoaug_version",
]

#: The search's configuration, data description, Optuna storage and driver sessions (:class:`RunState`).
CONFIG_FILE = "search_config.json"
#: Written when the search finished: the policy, where it was stored, its provenance.
RESULT_FILE = "result.json"
#: The default Optuna storage (SQLite) of a local run directory.
STUDY_FILE = "optuna.db"
#: The root of run directories when ``--storage`` is not given.
RUNS_ENV_VAR = "AUTOAUG_RUNS"


def utc_now() -> str:
    """Now, in UTC, as the run directory's files write a time (``2026-01-31T12:00:00Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_runs_root() -> str:
    """``$AUTOAUG_RUNS`` if set, else ``~/.autoaug/runs`` (expanded)."""
    return os.environ.get(RUNS_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".autoaug", "runs")


def default_search_name() -> str:
    return datetime.now().strftime("search-%Y%m%d-%H%M%S")


def autoaug_version() -> str:
    """This installation's version of autoaug (``0+unknown`` from a source tree not installed),
    recorded with each driver session in ``search_config.json``."""
    try:
        return metadata.version("autoaug")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class RunDir:
    """``{storage}/{name}``: a local folder or a URI (``file://`` is local)."""

    def __init__(self, storage: str, name: str):
        self.storage = storage
        self.name = name
        self.location = Location.parse(storage, what="run storage") / name
        self.uri = self.location.uri
        self.path = self.location.path
        self.local_path: str | None = self.location.local_path

    @property
    def fs(self) -> Any:
        return self.location.fs

    def __repr__(self) -> str:
        return f"RunDir({self.uri!r})"

    def exists(self, filename: str | None = None) -> bool:
        return self.location.exists(filename)

    def read_json(self, filename: str) -> Any:
        """The JSON file ``filename`` of the run directory; one that is not JSON (cut short, edited,
        corrupted) is a :class:`RunFileError` naming it and what to do."""
        try:
            return self.location.read_json(filename)
        except UnicodeDecodeError as exc:
            raise self.damaged(filename, f"not UTF-8 text: byte {exc.start}") from None
        except json.JSONDecodeError as exc:
            raise self.damaged(filename, f"not JSON: {exc}") from None

    def damaged(self, filename: str, reason: str) -> RunFileError:
        """The one line of a run directory's file that cannot be read: which file, why, what to do."""
        return RunFileError(
            f"{self.uri}/{filename} is damaged ({reason}); the search cannot go on from it: restore the file "
            f"from a copy, or start the search again with `autoaug search --name {self.name} --overwrite ...`"
        )

    def another_version(self, filename: str, what: str) -> RunFileError:
        """The one line of a file written by a version of autoaug that this one cannot read (``what``:
        the module or class it names that this version does not have), naming the version that
        started the search as ``search_config.json`` records it (:attr:`RunState.made_by`)."""
        try:
            made_by = RunState.from_dict(self.read_json(CONFIG_FILE)).made_by if self.exists(CONFIG_FILE) else None
        except RunFileError:
            made_by = None
        this = autoaug_version()
        start_again = f"or start it again with `autoaug search --name {self.name} --overwrite ...`"
        if made_by is None:
            return RunFileError(
                f"{self.uri}/{filename} was written by another version of autoaug or of Ray (this is autoaug {this}; "
                f"its {CONFIG_FILE} does not record which started the search): it names {what}, which this one does "
                f"not have; finish the search with the version that started it, {start_again}"
            )
        if made_by == this:
            return RunFileError(
                f"{self.uri}/{filename} was written by another build of autoaug {this} (a checkout edited since the "
                f"search started, or another Ray): it names {what}, which this one does not have; finish the search "
                f"with the build that started it, {start_again}"
            )
        return RunFileError(
            f"{self.uri}/{filename} was written by autoaug {made_by} (this is {this}): it names {what}, which this "
            f"version does not have; finish the search with autoaug {made_by} (`pip install autoaug=={made_by}`), "
            f"{start_again}"
        )

    def write_json(self, filename: str, obj: Any) -> None:
        self.location.write_text(metrics_json(obj), filename)

    def delete(self) -> None:
        self.location.delete()

    @contextlib.contextmanager
    def driver_lock(self) -> Iterator[None]:
        """Hold the run for one driver (``autoaug search`` starting, overwriting or resuming it):
        a second driver of the same name and storage is refused with :class:`RunExistsError` before
        it checks, deletes or trains anything, so two searches started at once cannot write one run
        directory (and one Optuna study) together.

        The lock is ``fcntl.flock`` on ``{storage}/.{name}.driver.lock`` (outside the run directory,
        which ``--overwrite`` deletes): the kernel releases it when the driver exits however it
        ends, so a killed search never leaves a stale lock. The file keeps the holder's host, pid
        and start time for the message. Run directories behind a URI (object stores have no lock)
        are not locked."""
        if self.local_path is None:
            yield
            return
        folder = os.path.dirname(self.local_path)
        os.makedirs(folder, exist_ok=True)
        lock = open(os.path.join(folder, f".{self.name}.driver.lock"), "a+", encoding="utf-8")
        try:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                try:
                    holder = json.loads(lock.read())
                    who = f" (pid {holder['pid']} on {holder['host']}, started {holder['started_at']})"
                except (ValueError, KeyError, TypeError):
                    who = ""
                raise RunExistsError(
                    f"a search named {self.name!r} is running in {self.storage}{who}; wait for it to finish "
                    "(then resume or inspect it), or choose another --name"
                ) from None
            lock.seek(0)
            lock.truncate()
            lock.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started_at": utc_now()}))
            lock.flush()
            yield
        finally:
            lock.close()  # releases the lock


@dataclasses.dataclass(frozen=True)
class RunState:
    """What ``search_config.json`` holds: the configuration (as its dict), the data it runs on
    (dataset and split fingerprints), where its Optuna study lives, when it started and every
    driver session (start, then one per resume), and the version of autoaug that started it (and
    each session's: ``autoaug``). The JSON form is the file's, unchanged since the first version
    but for those (added: a file without them reads as before)."""

    config: Mapping[str, Any]
    data: Mapping[str, Any]
    study_url: str
    study_name: str
    started_at: str | None
    started_ts: float | None
    sessions: tuple[Mapping[str, Any], ...] = ()
    #: The version of autoaug that started the search (and wrote Tune's ``tuner.pkl``); None for a
    #: search started before it was recorded. Each session records its own too.
    made_by: str | None = None

    @classmethod
    def new(
        cls, config: Mapping[str, Any], data: Mapping[str, Any], study_url: str, *, address: str | None, started: float
    ) -> RunState:
        return cls(
            config=config,
            data=data,
            study_url=study_url,
            study_name=config["name"],
            started_at=utc_now(),
            started_ts=started,
            sessions=({"started_at": utc_now(), "kind": "start", "address": address, "autoaug": autoaug_version()},),
            made_by=autoaug_version(),
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunState:
        if not isinstance(d, Mapping) or not isinstance(d.get("config"), Mapping):
            got = type(d).__name__ if not isinstance(d, Mapping) else "no 'config' mapping"
            raise RunFileError(
                f"{CONFIG_FILE} holds no search's state (expected an object with the search's 'config', got "
                f"{got}); restore the file from a copy, or start the search again with --overwrite"
            )
        optuna = d.get("optuna") or {}
        return cls(
            config=d["config"],
            data=d.get("data") or {},
            study_url=optuna.get("storage"),
            study_name=optuna.get("study_name") or d["config"]["name"],
            started_at=d.get("started_at"),
            started_ts=d.get("started_ts"),
            sessions=tuple(d.get("sessions") or ()),
            made_by=d.get("autoaug") if isinstance(d.get("autoaug"), str) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "data": dict(self.data),
            "optuna": {"storage": self.study_url, "study_name": self.study_name},
            "started_at": self.started_at,
            "started_ts": self.started_ts,
            "sessions": [dict(s) for s in self.sessions],
            **({"autoaug": self.made_by} if self.made_by is not None else {}),
        }

    def resumed(self, address: str | None) -> RunState:
        """This state with one more driver session, a resume."""
        session = {"started_at": utc_now(), "kind": "resume", "address": address, "autoaug": autoaug_version()}
        return dataclasses.replace(self, sessions=(*self.sessions, session))

    @property
    def session_label(self) -> str:
        """``"start 1"``, ``"resume 2"``...: the kind and number of the current driver session."""
        kind = (self.sessions[-1] if self.sessions else {}).get("kind", "start")
        return f"{kind} {len(self.sessions)}"

    def timing(self, session_started: float, **extra: Any) -> dict[str, Any]:
        """The provenance's ``time`` record of a search ending now."""
        now = time.time()
        return {
            "started_at": self.started_at,
            "finished_at": utc_now(),
            "elapsed_s": now - float(self.started_ts if self.started_ts is not None else session_started),
            "last_session_s": now - session_started,
            "sessions": [dict(s) for s in self.sessions],
            **extra,
        }
