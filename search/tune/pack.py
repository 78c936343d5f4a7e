"""Packs in a search: the trials of an experiment trained K at a time by pack servers
(:mod:`autoaug.proxy_models.pack`), while each stays one Tune trial and one Optuna trial.

Each candidate remains what it was -- a Ray Tune trial with its own Optuna trial, its reports
after every epoch, its checkpoints and its fate under ASHA -- but its process does not train: it
asks a **pack server** (a Ray actor holding the device: the CPUs one trial reserved before, and
its trials' share of a GPU, :func:`server_gpus`) to train its epochs up to its next report, and
reports what comes back. A server trains, in rounds, every member whose trial has asked, stacked
in one model (:class:`~autoaug.proxy_models.pack.Pack`): epoch after epoch until each has
reached the epoch it asked for (a trial that reports every epoch asks for one; every ``k``, for
``k``).

* **Joining and leaving.** A trial's first request adds its member (fresh, or from the checkpoint
  Tune restored it with: a request that carries a checkpoint always starts its member from it,
  also where the server holds the member at that epoch -- a PBA member that exploited another
  restarts from the other's checkpoint with its own new policy). A round trains at most a pack,
  the members with the fewest epochs trained first, and waits for them (up to a window a few
  times the longest gap a trial took to come back): those asking and those the server holds, the
  ones asking first at equal epochs. So a population larger than its packs takes turns and moves
  in step -- a member whose trial is slow to come back (a PBA member restarted after an exploit)
  is waited for, not passed by a pack's worth of others further on. When Tune ends a trial
  (ASHA stopped it, the budget ended it, it finished), the driver tells the servers
  (:class:`PackDepartures`, a Tune callback) and no round waits for it; a member that just does not
  come back (its process died, and Tune has not yet said so) is waited for a window by each round
  it is due in, trains no more, and is dropped after two rounds. The next candidate's trial joins the next round, in its slot.
* **What it cost.** :meth:`PackServer.stats`: rounds, member-epochs, the time rounds trained and
  the time they waited (for trials to come back, and for members that never did); the driver says
  it in one line when the servers stop.
* **Checkpoints.** A round's checkpoint of a member is the trainer's own file's content: the
  server serialises it in memory (once a round), the trial writes it and hands it to Tune with
  its report as it would its solo run's.
* **Failures.** A member whose run fails (a configuration the pack refuses, a diverged loss) fails
  its trial alone. A server that dies (killed, out of memory) is restarted by Ray; each of its
  trials resends its last checkpoint when asked, so every member resumes where its trial last
  reported: nothing reported is trained twice, nothing is lost but the round in flight.

:class:`PackServers` starts the servers of a search for the time of one Tune experiment and
stops them after; :func:`train_trial` is what a trial calls to train: in a pack when the
search has servers, else :func:`autoaug.proxy_models.train.train` in its own process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune
from ray.exceptions import GetTimeoutError, RayActorError

from autoaug.core.location import atomic_write_local
from autoaug.proxy_models.pack import Pack
from autoaug.proxy_models.pack_sizing import AUTO_SIZES, choose_pack, pack_gpus
from autoaug.proxy_models.train import CHECKPOINT_NAME, load_checkpoint, train
from autoaug.proxy_models.train_config import TrainConfig
from autoaug.search.tune.epochs import with_trial_threads

__all__ = [
    "PACK_WINDOW_S",
    "PackDepartures",
    "PackServer",
    "PackServers",
    "describe_stats",
    "pack_layout",
    "pack_plan",
    "packed",
    "resolve_pack",
    "round_members",
    "server_cpus",
    "server_gpus",
    "train_trial",
]

#: How long a round waits, at least, for the members of the last round to come back.
PACK_WINDOW_S = 0.5
#: ... and at most (a trial that has not come back by then was stopped, or is stuck).
PACK_WINDOW_MAX_S = 15.0
#: How long the first round waits for the pack to fill while its trials start.
PACK_START_WINDOW_S = 20.0
#: What a trial trained by a pack server reserves (its process only waits and reports).
TRIAL_CPUS = 0.01
#: Rounds a member may miss before the server drops its state.
PACK_DROP_AFTER_ROUNDS = 2


def pack_plan(
    pack: int, concurrency: int | None, cpus: float, gpus: float, available: Mapping[str, float]
) -> tuple[int, int]:
    """(servers, trials at once) for packs of ``pack``: as many servers as ``concurrency`` trials
    fill (at least one pack), or with no concurrency limit as many as the cluster's ``available``
    resources hold, and never more than they hold (a server that cannot start would hold up the
    trials sent to it): each server with its trials' processes takes ``cpus`` CPUs
    (:func:`server_cpus`) and :func:`server_gpus` GPUs (``gpus``: a trial's share)."""
    fits = []
    if cpus > 0:
        fits.append(available.get("CPU", 0.0) / _with_trials(server_cpus(pack, cpus), pack))
    if gpus > 0:
        fits.append(available.get("GPU", 0.0) / server_gpus(pack, gpus))
    held = max(1, int(min(fits) + 1e-9)) if fits else None
    servers = max(1, math.ceil(concurrency / pack)) if concurrency is not None else (held or 1)
    if held is not None:
        servers = min(servers, held)
    return servers, servers * pack


def pack_layout(
    pack: int,
    trials: int,
    concurrency: int | None,
    cpus: float,
    gpus: float,
    available: Mapping[str, float],
    *,
    all_at_once: bool = False,
) -> tuple[int, int]:
    """(servers, trials each server holds) of ``trials`` trials in packs of ``pack``
    (:func:`pack_plan`'s servers): a pack's worth each, or with ``all_at_once`` (every trial runs
    from its start to its end at once: a population) an even share of all of them, at least a pack."""
    servers, _ = pack_plan(pack, concurrency, cpus, gpus, available)
    return servers, (max(pack, math.ceil(trials / servers)) if all_at_once else pack)


def server_cpus(pack: int, cpus_per_trial: float) -> float:
    """The CPUs a pack server of ``pack`` trials reserves: ``cpus_per_trial`` less what its trials'
    processes reserve (:data:`TRIAL_CPUS` each), so that a server and its trials take
    ``cpus_per_trial`` together (the server at least :data:`TRIAL_CPUS`)."""
    return max(TRIAL_CPUS, round(cpus_per_trial - pack * TRIAL_CPUS, 4))


def _with_trials(server: float, pack: int) -> float:
    """The CPUs of a pack server reserving ``server`` together with its ``pack`` trials' processes."""
    return round(server + pack * TRIAL_CPUS, 4)


def server_gpus(pack: int, gpus_per_trial: float) -> float:
    """The GPUs a pack server of ``pack`` trials reserves: its trials' share (``gpus_per_trial``
    each), at most one GPU (a pack trains on one device); 0 without GPUs (:func:`pack_gpus`)."""
    return pack_gpus(pack, gpus_per_trial)


@dataclasses.dataclass
class _Request:
    key: str
    config: Mapping[str, Any]
    policy: Any
    epochs_done: int
    until: int
    state: bytes | None
    reply: dict[str, Any] | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)


class PackServer:
    """A Ray actor (threaded: one thread per waiting trial, one training thread) training the
    members of one pack; see the module's documentation."""

    def __init__(self, train_config: Mapping[str, Any], capacity: int, limit: int | None = None) -> None:
        """``capacity``: the members the first round waits for; ``limit``: the most a round trains
        (the pack size; default ``capacity``)."""
        self.config = with_trial_threads(TrainConfig.from_dict(train_config))  # this actor's CPUs
        self.capacity = int(capacity)
        self.limit = max(self.capacity, int(limit or 0))
        self._lock = threading.Condition()
        self._pending: dict[str, _Request] = {}
        self._last_round: set[str] = set()
        self._held: set[str] = set()  # the members in the pack after the last round
        self._claimed: set[str] = set()  # trials given room (claim) that have not asked yet
        self._current: set[str] = set()  # the members of the round in flight
        self._absent: dict[str, int] = {}
        self._gap = 0.0  # the longest a trial took to come back after its result
        self._delivered: dict[str, float] = {}
        self._rounds = 0
        self._left: set[str] = set()  # members whose trials Tune ended (leave), not yet removed
        self._stats = dict.fromkeys(("member_epochs", "train_s", "wait_s", "short_rounds", "short_wait_s"), 0.0)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="autoaug-pack", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Stop the training thread after its round (a request waiting gets an error reply) and
        put back torch's process-wide settings its pack set (threads, deterministic algorithms):
        for a server in a process that goes on (an actor's process just ends)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout)

    def leave(self, key: str) -> None:
        """Trial ``key`` has ended (the driver says so when Tune ends it): no round waits for its
        member, which the next round drops -- a member held, or in the round in flight (a new one
        among them, not held before it). A trial whose request is waiting is still running: ignored."""
        with self._lock:
            self._claimed.discard(key)
            if key in self._pending:
                return
            if key in self._held or key in self._current:  # (the last round's members among the held)
                self._left.add(key)
                self._last_round.discard(key)
                self._lock.notify_all()

    def stats(self) -> dict[str, float]:
        """What the server did so far: ``rounds``, ``member_epochs`` (epochs trained, summed over
        members), ``train_s`` (the rounds' training, validation and checkpoints), ``wait_s`` (rounds
        waiting for their members to come back), ``short_rounds`` and ``short_wait_s`` (rounds that
        started without one of them, after waiting the whole window: a member that did not come
        back in time and that no one said had left)."""
        with self._lock:
            return {"rounds": self._rounds, **self._stats}

    # ---- what trials call ------------------------------------------------------------------
    def load(self, key: str | None = None) -> tuple[bool, int]:
        """(Whether this server holds trial ``key``'s member, the members it trains, waits for or
        has room kept for). A trial asks the server that holds its member (:func:`_server`: a
        restarted trial -- after a failure, a PBA exploit -- is started again there from the
        checkpoint it sends, and no round elsewhere waits for it), else one with room for it."""
        with self._lock:
            taken = self._taken()
            return key in taken | self._held, len(taken)

    def claim(self, key: str, turns: int = 1) -> bool:
        """Whether trial ``key`` may ask this server: it holds the member, or has fewer members
        than ``turns`` packs (then a place is kept for it until it asks). Trials starting at once
        each find a server with room, asked one after another: a server takes a pack before any
        takes more, and (``turns`` 2, 3, ...: a population larger than its packs) the servers'
        members stay as even as the packs they take turns in."""
        with self._lock:
            taken = self._taken()
            if key in taken | self._held:
                return True
            if len(taken) >= turns * self.limit:
                return False
            self._claimed.add(key)
            return True

    def _taken(self) -> set[str]:
        """(Under the lock) the members of the round in flight, of the last one, those asking for the
        next, and the trials a place is kept for."""
        return self._current | self._last_round | set(self._pending) | self._claimed

    def train(
        self,
        key: str,
        config: Mapping[str, Any],
        policy: Any,
        epochs_done: int,
        until: int | None = None,
        state: bytes | None = None,
    ) -> dict[str, Any]:
        """Train member ``key``'s epochs after ``epochs_done`` (the epochs its trial has reported)
        up to epoch ``until`` (default: the next one; at most its run's last) with its
        pack-mates; returns ``{"epochs", "checkpoint"}`` (each epoch's metrics, and the checkpoint
        file's bytes after the last), ``{"need_state": True}`` when the server does not hold the
        member at that epoch and no ``state`` came, or ``{"error": line}``."""
        done = int(epochs_done)
        request = _Request(key, config, policy, done, max(done + 1, int(until or 0)), state)
        with self._lock:
            if self._closed:
                return {"error": "the pack server was closed"}
            sent = self._delivered.pop(key, None)
            if sent is not None:
                self._gap = max(self._gap, time.monotonic() - sent)
            self._claimed.discard(key)
            stale = self._pending.pop(key, None)
            if stale is not None:  # asked by a process of the trial that Tune has since replaced
                self._reply(stale, {"error": "superseded by a later request of the same trial"})
            self._pending[key] = request
            self._lock.notify_all()
        request.done.wait()
        return request.reply or {"error": "the pack server gave no reply"}

    # ---- the training thread ---------------------------------------------------------------
    def _window(self) -> float:
        if self._rounds == 0:
            return PACK_START_WINDOW_S
        return min(PACK_WINDOW_MAX_S, max(PACK_WINDOW_S, 4 * self._gap))

    def _next_round(self, held: Mapping[str, int]) -> dict[str, _Request] | None:
        """The members of the next round (``held``: the epoch of each member the pack holds); None
        once the server is closed."""
        with self._lock:
            while not self._pending and not self._closed:
                self._lock.wait()
            start = time.monotonic()
            deadline = start + self._window()
            full = False
            while not self._closed:
                waiting = set(self._pending)
                if self._rounds:
                    full = set(self._due(held)) <= waiting
                else:
                    full = len(waiting) >= min(self.capacity, self.limit)
                left = deadline - time.monotonic()
                if full or left <= 0:
                    break
                self._lock.wait(left)
            batch = self._take()
            self._current = set(batch)
            if not self._closed:
                waited = time.monotonic() - start
                self._stats["wait_s"] += waited
                if self._rounds and not full:
                    self._stats["short_rounds"] += 1
                    self._stats["short_wait_s"] += waited
                return batch
        for request in [*batch.values(), *self._pending.values()]:
            self._reply(request, {"error": "the pack server was closed"})
        self._pending = {}
        return None

    def _due(self, held: Mapping[str, int]) -> list[str]:
        """(Under the lock) the members the next round waits for: :func:`round_members` over those
        asking and those the pack holds (whose trials Tune has not ended), the ones asking first at
        equal epochs -- so no member falls behind its pack-mates while a pack's worth of others,
        further on, are back first."""
        epochs = {k: r.epochs_done for k, r in self._pending.items()}
        for key, epoch in held.items():
            if key not in epochs and key not in self._left:
                epochs[key] = epoch
        return round_members(epochs, self.limit)

    def _take(self) -> dict[str, _Request]:
        """(Under the lock) the pending requests of the next round (:func:`round_members`); the
        others stay pending."""
        keys = round_members({k: r.epochs_done for k, r in self._pending.items()}, self.limit)
        return {k: self._pending.pop(k) for k in keys}

    def _loop(self) -> None:
        with Pack(self.config) as pack:
            while (batch := self._next_round({k: m.epoch for k, m in pack.members.items()})) is not None:
                self._serve(pack, batch)

    def _serve(self, pack: Any, batch: dict[str, _Request]) -> None:
        with self._lock:
            left, self._left = self._left - set(batch), set()
        for key in left & set(pack.members):
            pack.remove(key)
            self._absent.pop(key, None)
        started = time.monotonic()
        ready: dict[str, _Request] = {}
        for key, request in batch.items():
            try:
                if self._join(pack, request):
                    ready[key] = request
            except Exception as exc:  # this member's run cannot start: its trial fails, alone
                self._reply(request, {"error": _line(exc)})
                if key in pack.members:
                    pack.remove(key)
        epochs: dict[str, list[dict[str, Any]]] = {key: [] for key in ready}
        replies: list[tuple[_Request, dict[str, Any]]] = []
        trained = 0
        # epoch after epoch, the members that have not reached the epoch their trial asked for
        while True:
            members = pack.members
            active = [
                k for k, r in ready.items() if k in members and not members[k].done and members[k].epoch < r.until
            ]
            if not active:
                break
            results = pack.train_epoch(active, errors=True)
            for key in active:
                out = results.get(key)
                if isinstance(out, BaseException):
                    pack.remove(key)
                    replies.append((ready[key], {"error": _line(out)}))
                    continue
                trained += 1
                # pack_size: the members trained in this epoch (what a trial's epoch shared its device with)
                epochs[key].append({**out, "pack_size": len(active)})
        for key, request in ready.items():
            member = pack.members.get(key)
            if member is None:  # (failed: replied above)
                continue
            replies.append((request, {"epochs": epochs[key], "checkpoint": pack.checkpoint(key)}))
            if member.done:
                pack.remove(key)
        with self._lock:
            self._rounds += 1
            for key in list(pack.members):  # (a member whose request waits for the next round is not absent)
                here = key in ready or key in self._pending
                self._absent[key] = 0 if here else self._absent.get(key, 0) + 1
                if self._absent[key] >= PACK_DROP_AFTER_ROUNDS:
                    pack.remove(key)
                    self._absent.pop(key)
            self._last_round = {k for k in ready if k in pack.members}
            self._held, self._current = set(pack.members), set()
            self._stats["member_epochs"] += trained
            self._stats["train_s"] += time.monotonic() - started
        for request, reply in replies:  # (after the round's accounting: what a trial sees, stats() has counted)
            self._reply(request, reply)

    def _join(self, pack: Any, request: _Request) -> bool:
        """Whether ``request``'s member is in the pack at the epoch its trial reported (added, or
        re-added from the state its trial sent); else the trial is asked for its state. A sent state
        is always taken: the trial restarted from a checkpoint -- its own, or (a PBA exploit)
        another member's, at the same epoch as the member held here."""
        member = pack.members.get(request.key)
        if member is not None and member.epoch == request.epochs_done and request.state is None:
            return True
        if member is not None:
            pack.remove(request.key)  # trained past what its trial reported, or restarted from a checkpoint
        if request.epochs_done > 0 and request.state is None:
            self._reply(request, {"need_state": True})
            return False
        resume = None
        if request.state is not None:
            resume = torch.load(io.BytesIO(request.state), map_location="cpu", weights_only=True)
        config = dataclasses.replace(
            TrainConfig.from_dict(request.config),
            num_threads=self.config.num_threads,
            loader_threads=self.config.loader_threads,
        )
        pack.add(request.key, request.policy, config=config, resume_from=resume)
        return True

    def _reply(self, request: _Request, reply: dict[str, Any]) -> None:
        with self._lock:
            if "epochs" in reply:
                self._delivered[request.key] = time.monotonic()
            request.reply = reply
        request.done.set()


def round_members(waiting: Mapping[str, int], limit: int) -> list[str]:
    """The members of a round among ``waiting`` (each with the epochs it has trained, in the order
    they asked): at most ``limit``, the fewest epochs trained first, then the first to ask -- so a
    population larger than its pack takes turns, none falling behind the others."""
    return sorted(waiting, key=waiting.__getitem__)[:limit]  # (sorted is stable: the order they asked)


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class PackServers:
    """The pack servers of one Tune experiment (a context manager): ``servers`` Ray actors named
    ``autoaug-pack-<experiment>-<i>``, each reserving ``cpus`` CPUs and ``gpus`` GPUs, training
    rounds of up to ``pack`` of its ``members`` trials (default: a pack); stopped on exit."""

    def __init__(
        self,
        experiment: str,
        train_config: Mapping[str, Any],
        *,
        pack: int,
        servers: int,
        cpus: float,
        gpus: float,
        members: int | None = None,
        trials: int | None = None,
        log: Callable[[str], Any] | None = None,
    ) -> None:
        self.names = [f"autoaug-pack-{experiment}-{i}" for i in range(servers)]
        self.train_config, self.pack, self.cpus, self.gpus = dict(train_config), pack, cpus, gpus
        self.members = max(pack, members or pack)
        #: The members a server's first round waits for: a pack, or its share of fewer trials.
        self.fill = pack if trials is None else max(1, min(pack, math.ceil(trials / servers)))
        self.log = log
        #: The servers' :meth:`PackServer.stats` summed, read as they stop (None: not read).
        self.stats: dict[str, float] | None = None
        self._actors: list[Any] = []

    def __enter__(self) -> PackServers:
        actor = ray.remote(PackServer)
        for name in self.names:
            with contextlib.suppress(ValueError):  # (none)
                ray.kill(ray.get_actor(name))  # a server left by an earlier driver of this search
            self._actors.append(
                actor.options(
                    name=name,
                    num_cpus=self.cpus,
                    num_gpus=self.gpus,
                    max_concurrency=4 * self.members + 4,  # (a thread for each trial waiting, and to spare)
                    max_restarts=3,
                ).remote(self.train_config, self.fill, self.pack)
            )
        if self.log is not None:
            self.log(self.plan())
        return self

    def plan(self) -> str:
        """One line on the servers, their trials and what they reserve."""
        n = len(self.names)
        each = f"up to {self.pack} trials each"
        if self.members > self.pack:
            each = f"{self.members} trials each, trained {self.pack} at a time in step"
        return (
            f"pack servers: {n} of {each} ({n * self.members} trials at once), "
            f"{_with_trials(self.cpus, self.members):g} CPU + {self.gpus:g} GPU each with its trials"
        )

    def __exit__(self, *exc: object) -> None:
        each: list[dict[str, float]] = []
        if exc[0] is None:  # (an interrupted search stops its servers at once, and says nothing of them)
            with contextlib.suppress(RayActorError, GetTimeoutError):  # (a server gone: nothing to say)
                each = ray.get([a.stats.remote() for a in self._actors], timeout=30)
        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
        if each:
            self.stats = {k: sum(s[k] for s in each) for k in each[0]}
            if self.log is not None and self.stats["rounds"]:
                self.log(describe_stats(self.stats))


def describe_stats(stats: Mapping[str, float]) -> str:
    """One line on what a search's pack servers did (:meth:`PackServer.stats`, summed)."""
    rounds, epochs = int(stats["rounds"]), int(stats["member_epochs"])
    line = (
        f"pack servers: {rounds} rounds trained {epochs} trial-epochs ({epochs / max(rounds, 1):.1f} a round) "
        f"in {stats['train_s']:.0f} s; rounds waited {stats['wait_s']:.0f} s for trials to come back"
    )
    if stats["short_rounds"]:
        line += (
            f", {stats['short_wait_s']:.0f} s of it in {int(stats['short_rounds'])} rounds for members whose "
            "trials did not come back"
        )
    return line


class PackDepartures(tune.Callback):
    """Tells the pack servers ``names`` when Tune ends a trial (ASHA stopped it, the budget ended
    it, it finished, it failed), so that no round waits for its member (:meth:`PackServer.leave`)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._leave(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._leave(trial)  # (retried, its trial sends the checkpoint Tune restores it with)

    def _leave(self, trial: Any) -> None:
        for name in self.names:
            with contextlib.suppress(ValueError):  # (a server not running: nothing waits)
                ray.get_actor(name).leave.remote(trial.trial_id)


def _server(names: list[str], key: str) -> Any:
    """The pack server of ``names`` for trial ``key``: the one that holds its member, else the
    least loaded that has room for it in one pack (:meth:`PackServer.claim`), else in two, and so
    on (a population larger than its packs: its members take turns, as many on each server)."""
    handles = [ray.get_actor(n) for n in names]
    if len(handles) == 1:
        return handles[0]
    loads = ray.get([h.load.remote(key) for h in handles])
    order = sorted(range(len(handles)), key=lambda i: (not loads[i][0], loads[i][1]))
    for turns in itertools.count(1):  # (ends: a server takes any trial once its turns outnumber its members)
        for i in order:
            if ray.get(handles[i].claim.remote(key, turns)):
                return handles[i]


def train_trial(
    config: Any,
    policy: Any,
    *,
    servers: Sequence[str],
    key: str,
    report: Callable[[dict[str, Any]], Any],
    checkpoint_dir: str | os.PathLike,
    resume_from: str | os.PathLike | None = None,
    report_at: Sequence[int] | None = None,
) -> None:
    """A search trial's training run (a candidate's, a PBA member's): the epochs after
    ``resume_from``'s (a directory holding the trainer's checkpoint), each passed to ``report``
    with the metrics :func:`autoaug.proxy_models.train.train` reports once its checkpoint is in
    ``checkpoint_dir``. Without pack ``servers``, the trainer runs in the trial's own process on
    its CPUs. With them, a pack server trains it beside other trials; the checkpoint of the
    server's reply is written to ``checkpoint_dir``. The server is asked for the epochs up to the next of
    ``report_at`` at a time (None: one at a time). A member the server does not hold (it
    restarted) is sent the last checkpoint."""
    if not servers:  # torch + DALI on the trial's CPUs
        train(with_trial_threads(config), policy, report=report, checkpoint_dir=checkpoint_dir, resume_from=resume_from)
        return
    file = Path(checkpoint_dir) / CHECKPOINT_NAME
    state: bytes | None = None
    done = 0
    if resume_from is not None:
        source = Path(resume_from) / CHECKPOINT_NAME
        state = source.read_bytes()
        done = int(load_checkpoint(source)["epoch"])
    marks = sorted({int(e) for e in report_at}) if report_at is not None else None
    config_dict = config.to_dict()
    server = _server(servers, key)
    send: bytes | None = state  # the first request of a restored trial carries its state
    failures = 0
    while done < config.epochs:
        until = next((e for e in marks if e > done), config.epochs) if marks is not None else done + 1
        try:
            reply = ray.get(server.train.remote(key, config_dict, policy, done, until, send))
        except RayActorError:
            failures += 1
            if failures > 3:
                raise
            server, send = _server(servers, key), state  # (Ray restarts the server; its state is gone)
            continue
        if reply.get("need_state"):
            if state is None:
                raise RuntimeError(f"pack server lost trial {key}'s member and it has no checkpoint to resend")
            send = state
            continue
        if "error" in reply:
            raise RuntimeError(f"pack training: {reply['error']}")
        send = None
        state = reply["checkpoint"]
        atomic_write_local(file, state)
        for metrics in reply["epochs"]:
            done = int(metrics["epoch"])
            report({**metrics, "checkpoint_dir": str(checkpoint_dir)})


def _choose(train_config: Mapping[str, Any], member_share: float) -> tuple[int, list[dict[str, Any]]]:
    """(Ray task, on the resources of the largest pack server) :func:`~autoaug.proxy_models.pack_sizing.choose_pack`
    for the trials' configuration, each member's trial taking ``member_share`` of the device."""
    config = with_trial_threads(TrainConfig.from_dict(train_config))
    return choose_pack(config, train_size=config.train_size or 1000, member_share=member_share)


def pack_size(config: Any, train_config: Mapping[str, Any], log: Callable[[str], Any]) -> int:
    """``config.pack``, or for ``"auto"`` the size measured fastest on a pack server's resources
    (a Ray task), each pack within its trials' share of a GPU's memory (``gpus_per_trial`` each,
    :func:`server_gpus`), said in one line."""
    if config.pack != "auto":
        return int(config.pack)
    g = config.gpus_per_trial
    task = ray.remote(num_cpus=config.cpus_per_trial, num_gpus=server_gpus(max(AUTO_SIZES), g))(_choose)
    k, measured = ray.get(task.remote(dict(train_config), g))
    rates = ", ".join(
        f"{m['k']}: {m['error']}"
        if "error" in m
        else f"{m['k']}: {m['images_per_s']:,.0f}"
        + (f" ({m['processes']} at once)" if m.get("processes", 1) > 1 else "")
        for m in measured
    )
    within = (
        f", each pack within its trials' share of a GPU's memory and measured beside the others sharing it "
        f"({g:g} a trial)"
        if 0 < g < 1
        else ""
    )
    log(f"pack auto: {k} trial(s) per process, the fastest measured{within} (images/s by pack size: {rates})")
    return k


def resolve_pack(config: Any, log: Callable[[str], Any] = print) -> Any:
    """``config`` with ``pack: "auto"`` measured (:func:`pack_size`, on its trials' training
    configuration): the size of every pack of this driver session's search -- its trials', and
    its calibration and re-scoring runs' (:func:`autoaug.search.decide.proxy_runs.train_runs`),
    which come before and after them. Any other ``config`` is returned as it is."""
    if config.pack != "auto":
        return config
    return config.replace(pack=pack_size(config, config.train.to_dict(), log))


def packed(
    config: Any, exp: Any, log: Callable[[str], Any] = print, *, all_at_once: bool | None = None
) -> tuple[Any, Any]:
    """``exp`` (an :class:`~autoaug.search.tune.experiment.Experiment` whose trainable takes
    ``pack_servers``) made to train its trials in packs of ``config.pack`` (:func:`pack_size`),
    and the context manager that runs its pack servers around ``fit``; with a pack of 1, both
    unchanged (a context that does nothing).

    ``all_at_once`` (None: whether the search's method says ``pack_trials = "population"``,
    :attr:`autoaug.search.methods.base.Method.pack_trials`): every trial of ``exp`` runs from the
    start to its end (a PBA population, whose members PBT compares as they train): the servers
    reserve room for all of them, a round still trains at most a pack, and the members take turns
    in step (:class:`PackServer`). Otherwise a pack's worth of trials runs per server, the next
    starting as one ends (:func:`pack_layout`)."""
    if config.pack == 1:
        return exp, contextlib.nullcontext()
    k = pack_size(config, exp.parameters["train_config"], log)
    if k == 1:
        return exp, contextlib.nullcontext()
    if all_at_once is None:
        all_at_once = config.search_method.pack_trials == "population"
    servers, members = pack_layout(  # members: a server's trials
        k,
        exp.num_trials,
        config.concurrency,
        config.cpus_per_trial,
        config.gpus_per_trial,
        ray.cluster_resources(),
        all_at_once=all_at_once,
    )
    train_config = dict(exp.parameters["train_config"])
    if train_config.get("num_threads") is None:  # the server's threads: the CPUs of a server and its trials
        train_config["num_threads"] = max(1, int(config.cpus_per_trial))
    running = PackServers(
        exp.name,
        train_config,
        pack=k,
        servers=servers,
        members=members,
        trials=exp.num_trials,
        cpus=server_cpus(members, config.cpus_per_trial),
        gpus=server_gpus(k, config.gpus_per_trial),
        log=log,
    )
    exp = dataclasses.replace(
        exp,
        parameters={**exp.parameters, "pack_servers": tuple(running.names)},
        callbacks=(*exp.callbacks, PackDepartures(running.names)),
        trial_resources={"cpu": TRIAL_CPUS, "gpu": 0},
        max_concurrent=servers * members,
    )
    return exp, running
