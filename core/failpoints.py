"""Failpoints: named points in the code where a test makes the process die, raise, fill the disk
or stall, at an exact moment, instead of racing it from outside.

The way storage engines and consensus systems test crashes. A point is one line in the product
code, ``failpoints.hit("store.after_version_write")``; it does nothing unless a test armed it
through the environment variable :data:`ENV_VAR`, read once when this module is imported (the
process start). No flag of ``autoaug`` reaches it. Unarmed, a hit is one global ``None`` check.
Importing never raises: a malformed spec is refused by ``autoaug`` at its start
(:func:`check_environment`, one line, exit 2), and in any other process by the first hit.

The variable holds ``;``-separated entries ``NAME[:N]=ACTION[(ARG)]``::

    AUTOAUG_FAILPOINTS="store.after_version_write=kill;search.after_trial_saved:3=kill"

* ``NAME``: one of :data:`POINTS`;
* ``N``: the hit of this process on which the point fires (default 1, the first); it fires once;
* ``ACTION``: ``kill`` (SIGKILL to its own process), ``raise`` (raises ``ARG``, the name of a
  built-in exception class, default :class:`FailpointError`), ``enospc`` (raises
  ``OSError(ENOSPC)``, as a full disk does), ``stall`` (a rendezvous on the named pipe ``ARG``,
  made with ``mkfifo``: the process writes ``PID NAME`` into it, which the test reads -- the
  event "it is at the point" -- then blocks until the test opens the pipe to write and closes it;
  each step waits on the other side's opening, nothing polls. Without ``ARG``, it blocks until
  the process is killed; a path that exists and is not a named pipe is refused with the spec).

Anything else (an unknown name or action, a count below 1, an unclosed ``(``, ``raise`` of what
is not an exception class) is refused naming the entry and what was expected
(:class:`~autoaug.core.errors.UserInputError`).

A point fires in whichever process hits it: the search's driver, or a Ray worker (a trial, a
re-scoring or calibration run) -- :func:`runtime_env_vars` is what :mod:`autoaug.core.ray_session`
ships to the workers, so an armed spec reaches them on a cluster too. With :data:`FIRED_ENV_VAR`
naming a folder, a point fires at most once across every process (the first to reach it creates
``<folder>/<NAME>``, which holds its pid); that is how a test kills one trial among many, and
how it tells afterwards that the point was reached. With :data:`ONLY_ENV_VAR` set to ``VAR=VALUE``,
only a process whose environment has ``VAR`` equal to ``VALUE`` is armed: a spec shipped with one
search's Ray job reaches only those of its workers that run on the node whose processes carry a
test's marker (the node-loss tests of ``tests/launch/test_cluster_ray.py``), and no process of
another job, whatever the order of the tests.

``docs/failpoints.md`` lists the points, where each is, and the crash tests that arm them.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import re
import signal
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from autoaug.core.errors import UserInputError

__all__ = [
    "ENV_VAR",
    "FIRED_ENV_VAR",
    "ONLY_ENV_VAR",
    "POINTS",
    "ACTIONS",
    "Failpoint",
    "FailpointError",
    "parse",
    "check_environment",
    "hit",
    "armed",
    "runtime_env_vars",
]

#: The variable a test arms points with (read once, at import).
ENV_VAR = "AUTOAUG_FAILPOINTS"
#: A folder: each point fires at most once across the processes sharing it (a marker file per point).
FIRED_ENV_VAR = "AUTOAUG_FAILPOINTS_FIRED"
#: ``VAR=VALUE``: the points are armed only in a process whose environment has ``VAR`` equal to ``VALUE``.
ONLY_ENV_VAR = "AUTOAUG_FAILPOINTS_ONLY"

#: Every point, where it is and what it interrupts (docs/failpoints.md says more).
POINTS: Mapping[str, str] = {
    "search.after_trial_saved": "driver: a trial ended, Tune's experiment state holding it was written and the Optuna "
    "study was told (search.tune.schedulers.StudyGuard / StudySearcher)",
    "pba.after_member_checkpoint": "driver: a PBA member's checkpoint was recorded by Tune "
    "(search.methods.pba.scheduler.EventLog.on_trial_save)",
    "store.after_version_write": "PolicyStore.save: the version's Parquet file written under its temporary name, "
    "before its index entry and its publication (policies.store)",
    "calibrate.after_run_saved": "driver: a calibration run saved in calibration.json (search.decide.calibrate)",
    "rescore.after_run_saved": "driver: a re-scoring run saved in rescore.json (search.decide.rescore)",
    "train.mid_epoch": "any process training a proxy model (a trial's Ray worker): after a training step "
    "(proxy_models.learner.Learner.train_epoch)",
    "train.later_epoch": "any process training a proxy model: a run starts its second or a later epoch (its "
    "first epoch trained and, in a search, reported with its checkpoint), whatever the process trained before "
    "(proxy_models.train._Run.begin_epoch)",
    "budget.after_save": "driver: budget.json written with the session's spent time (search.budget.Budget.save)",
    "pack.mid_epoch": "a process training a pack of proxy models (a search's pack server, a calibration or "
    "re-scoring task of a pack's runs): after a step of "
    "the stacked members (proxy_models.pack.PackLearner.train_epoch)",
}
ACTIONS = ("kill", "raise", "enospc", "stall")

_ENTRY = re.compile(r"^(?P<name>[a-z_.]+)(?::(?P<count>-?\d+))?=(?P<action>[a-z]+)(?:\((?P<arg>[^()]*)\))?$")
_SYNTAX = "expected NAME[:N]=ACTION[(ARG)]"


class FailpointError(RuntimeError):
    """What ``raise`` raises when it names no exception."""


@dataclass(frozen=True)
class Failpoint:
    """One armed point: on hit ``count`` of this process, do ``action`` (with ``arg``)."""

    name: str
    action: str
    count: int = 1
    arg: str | None = None


def parse(text: str | None) -> dict[str, Failpoint]:
    """The points armed by ``text`` (:data:`ENV_VAR`'s syntax); :class:`UserInputError` (a
    ``ValueError``) naming a bad entry and what was expected."""
    points: dict[str, Failpoint] = {}
    for entry in (text or "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        m = _ENTRY.match(entry)
        if m is None:
            if entry.count("(") > entry.count(")"):
                raise UserInputError(f"{ENV_VAR}: bad entry {entry!r}: unclosed '('; {_SYNTAX}")
            raise UserInputError(f"{ENV_VAR}: bad entry {entry!r}: {_SYNTAX}")
        points[m.group("name")] = _point(m)
    return points


def _point(m: re.Match) -> Failpoint:
    name, action, arg = m.group("name"), m.group("action"), m.group("arg") or None
    if name not in POINTS:
        raise UserInputError(f"{ENV_VAR}: unknown failpoint {name!r}: expected one of {', '.join(POINTS)}")
    if action not in ACTIONS:
        raise UserInputError(f"{ENV_VAR}: unknown action {action!r} of {name}: expected one of {', '.join(ACTIONS)}")
    count = int(m.group("count") or 1)
    if count < 1:
        raise UserInputError(f"{ENV_VAR}: the hit of {name} must be 1 or more, got {count}")
    if action == "raise" and arg is not None:
        cls = getattr(builtins, arg, None)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise UserInputError(
                f"{ENV_VAR}: {name}=raise({arg}): not a built-in exception; expected the name of one "
                "(e.g. KeyboardInterrupt), or raise alone (FailpointError)"
            )
    if action == "stall" and arg is not None and os.path.lexists(arg) and not _is_pipe(arg):
        raise UserInputError(
            f"{ENV_VAR}: {name}=stall({arg}): not a named pipe; expected one made with mkfifo "
            "(the rendezvous with the test), or stall alone (until killed)"
        )
    return Failpoint(name, action, count, arg)


def _is_pipe(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def check_environment() -> None:
    """Refuse a malformed :data:`ENV_VAR` or :data:`ONLY_ENV_VAR` now (:class:`UserInputError`, one
    line): what ``autoaug`` does at its start, before any work. (Importing this module never raises;
    a process that did not check meets the error at its first hit.)"""
    parse(os.environ.get(ENV_VAR))
    _only(os.environ.get(ONLY_ENV_VAR))


def _only(text: str | None) -> tuple[str, str] | None:
    """:data:`ONLY_ENV_VAR`'s ``(VAR, VALUE)``; None when unset; one line when malformed."""
    if not text:
        return None
    var, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
        raise UserInputError(f"{ONLY_ENV_VAR}: bad value {text!r}: expected VAR=VALUE (an environment variable's name)")
    return var, value


def _from_environment() -> dict[str, Failpoint] | UserInputError | None:
    try:
        points = parse(os.environ.get(ENV_VAR)) or None
        only = _only(os.environ.get(ONLY_ENV_VAR))
    except UserInputError as exc:
        return exc
    if points is not None and only is not None and os.environ.get(only[0]) != only[1]:
        return None  # not a process the points are for: unarmed
    return points


#: The armed points (None: none, the one check of an unarmed hit), or the error of a malformed spec.
_ARMED: dict[str, Failpoint] | UserInputError | None = _from_environment()
_HITS: dict[str, int] = {}
_LOCK = threading.Lock()


def hit(name: str) -> None:
    """The point ``name`` is reached: nothing, unless it is armed (then its action, on its hit)."""
    if _ARMED is None:
        return
    if isinstance(_ARMED, UserInputError):
        raise UserInputError(str(_ARMED))
    point = _ARMED.get(name)
    if point is None:
        return
    with _LOCK:
        _HITS[name] = n = _HITS.get(name, 0) + 1
    if n != point.count or not _first_to_fire(name):
        return
    _fire(point)


def _first_to_fire(name: str) -> bool:
    folder = os.environ.get(FIRED_ENV_VAR)
    if not folder:
        return True
    os.makedirs(folder, exist_ok=True)
    try:
        fd = os.open(os.path.join(folder, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False  # another process fired it
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def _fire(point: Failpoint) -> None:
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait()  # (the signal is delivered before this returns)
    if point.action == "enospc":
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (failpoint {point.name})")
    if point.action == "raise":
        cls = getattr(builtins, point.arg) if point.arg else FailpointError
        raise cls(f"failpoint {point.name}")
    if point.action == "stall":
        if point.arg is None:
            threading.Event().wait()
        _stall(point.name, point.arg)


def _stall(name: str, gate: str) -> None:
    """Say on the named pipe ``gate`` that this process is at the point, then wait there until the
    test releases it (opens the pipe to write, then closes it)."""
    if not _is_pipe(gate):
        raise FailpointError(f"failpoint {name}: stall({gate}): expected a named pipe (mkfifo) there")
    with open(gate, "w") as out:  # opens once the test opens the pipe to read
        out.write(f"{os.getpid()} {name}\n")
    with open(gate) as release:  # opens once the test opens the pipe to write; read to its close
        release.read()


@contextlib.contextmanager
def armed(text: str) -> Iterator[None]:
    """For a test in this process: the points of ``text`` armed for the block (counts start afresh),
    as :data:`ENV_VAR` would at start."""
    global _ARMED
    saved = _ARMED, dict(_HITS)
    _ARMED = parse(text) or None
    _HITS.clear()
    try:
        yield
    finally:
        _ARMED = saved[0]
        _HITS.clear()
        _HITS.update(saved[1])


def runtime_env_vars() -> dict[str, str]:
    """The variables a Ray ``runtime_env`` must carry for the armed points to reach the workers
    (empty when nothing is armed)."""
    if not os.environ.get(ENV_VAR):
        return {}
    return {k: os.environ[k] for k in (ENV_VAR, FIRED_ENV_VAR, ONLY_ENV_VAR) if os.environ.get(k)}
