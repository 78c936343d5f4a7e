"""One driver session's parts of a search's Tune experiments: what is never pickled with Tune's
state (``tuner.pkl`` and the snapshots).

A driver session -- one ``autoaug search`` process, or a ``--resume`` of it -- gives each tuner it
runs a :class:`DriverSession` (its progress display, its time budget) with
:func:`attach_session`; :func:`running` makes it current while ``tuner.fit()`` runs, and the
scheduler (:mod:`autoaug.search.tune.schedulers`), the searcher
(:mod:`autoaug.search.tune.searcher`) and the progress callbacks read it with
:func:`current_session`, so that a tuner restored by ``Tuner.restore`` gets this driver's without
reaching into it. :class:`StoppedTrials` is the trials the study guard stopped in this session.
"""

from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
import ray.util.client

from autoaug.core.errors import AutoaugWarning

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.budget import Budget

__all__ = [
    "DriverSession",
    "attach_session",
    "running",
    "current_session",
    "ray_client",
    "ray_session_dir",
    "StoppedTrials",
]


@dataclass(frozen=True)
class DriverSession:
    """What one driver session gives the Tune experiment it runs, never pickled with Tune's state:
    the experiment's name, the progress ``display`` (None: plain lines), the search's time
    ``budget`` (None: none) and the steps of a full trial (``max_steps``: a trial's last report is
    never stopped by the budget)."""

    experiment: str
    display: Progress | None = None
    budget: Budget | None = None
    max_steps: int | None = None


_SESSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CURRENT: list[DriverSession] = []


def ray_client() -> bool:
    """Whether this process reaches Ray through Ray Client (``ray://``): Tune then runs the
    experiment on the cluster, out of this driver's reach."""
    try:
        return bool(ray.util.client.ray.is_connected())
    except Exception:
        return False


def attach_session(tuner: Any, session: DriverSession) -> None:
    """Give ``tuner`` (new, or restored by ``Tuner.restore``) this driver's ``session``, made
    current while :func:`running` runs it. Through Ray Client the Tune loop runs on the cluster,
    where neither reaches: a time budget then only counts (said in one warning)."""
    _SESSIONS[tuner] = session
    if session.budget is not None and ray_client():
        warnings.warn(
            f"Ray Client (--address ray://...) runs the Tune experiment {session.experiment} on the cluster, "
            "where the time budget cannot stop its trials (it still counts, and re-scoring keeps to it); run "
            "the search on the cluster (autoaug launch) for the budget to end trials",
            AutoaugWarning,
            stacklevel=2,
        )


@contextlib.contextmanager
def running(tuner: Any) -> Iterator[DriverSession | None]:
    """While the block runs ``tuner.fit()``, the session :func:`attach_session` gave ``tuner`` is
    :func:`current_session`."""
    session = _SESSIONS.get(tuner)
    if session is None:
        yield None
        return
    _CURRENT.append(session)
    try:
        yield session
    finally:
        _CURRENT.remove(session)


def current_session() -> DriverSession | None:
    """The driver session of the experiment running in this process (None: none, or Ray Client)."""
    return _CURRENT[-1] if _CURRENT else None


def ray_session_dir() -> str | None:
    """Ray's session folder on this node (where Ray keeps a session's temporary files), if Ray is
    running here: ``ray.get_runtime_context()``'s temporary folder and session name (None with a
    Ray that has neither)."""
    try:
        if not ray.is_initialized():
            return None
        context = ray.get_runtime_context()
        return os.path.join(context.get_temp_dir(), context.get_session_name())
    except Exception:
        return None


class StoppedTrials:
    """The trials :class:`StudyGuard` stopped in this driver session (their result is the
    study's); shared by the scheduler and the progress printer of one search."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def add(self, trial_id: str) -> None:
        self._ids.add(trial_id)

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __getstate__(self) -> dict:
        return {"_ids": set()}  # a new driver session starts with none stopped
