"""The time budget of a search: ``SearchConfig.time_budget_s``, ``autoaug search --time-budget 30m``.

The budget is the search's wall time, every method alike: from the moment a driver session
starts the search (after the command's preflight) to the stored policy -- calibration runs, the
method's trials, re-scoring and storing -- summed over driver sessions. Time while no driver ran
(between a kill and ``--resume``) is not counted. The spent time of the running session is saved
in the run directory (:data:`BUDGET_FILE`) every :data:`HEARTBEAT_S` seconds (so a driver killed
with ``kill -9`` loses at most that much from the count) and when the session ends; a resumed
search continues with what is left.

How it ends a search (:class:`Budget` is the one clock every part asks):

* **Trials.** Once the time left is what re-scoring and storing need (:meth:`Budget.reserve_s`:
  the re-scoring runs still to come, in waves of as many runs as the cluster runs at once, then
  the race's reserved rounds, each a wave of runs for the leader and its nearest challengers
  (two runs on one slot), each run as long as a measured proxy run -- calibration runs, earlier
  re-scoring runs, else the trials' own epochs, start-up counted once -- plus
  :data:`STORE_RESERVE_S`) and what the running trials take
  to end (:meth:`Budget.handover_s`), no new trial is proposed and every running trial
  ends at its next report, scored on what it reported so far, like a trial ASHA stopped early
  (status ``budget_stopped``, ``PRUNED`` in the Optuna study); trials not started are not run.
  The budget never leaves a search without a result: until some trial has reported a score it
  does not stop trials. (:class:`autoaug.search.tune.schedulers.BudgetStop` and
  :class:`~autoaug.search.tune.searcher.StudySearcher` apply it inside Ray Tune.)
* **Re-scoring** (:func:`autoaug.search.driver._rescore`) re-scores the candidates whose runs fit
  in the time left (the first ones, in the method's order), and stops waiting for runs when the
  time left is what storing needs; fewer than two candidates re-scored means re-scoring decides
  nothing and the method's first candidate is stored. The re-scoring race's rounds up to
  ``RACE_RESERVED_SEEDS`` runs per contender are part of what the trials leave time for, a wave
  each; a round with more contenders than a wave runs them all where the time left fits, else
  the leader and its nearest challengers; a round beyond them, or one the time left does not
  fit even for the leader and one challenger, is not run (the summary says so when contenders
  were still within the noise of each other).
* **Calibration** (the bases and published policies measured before the trials) and the density
  method's fold models are not cut: nothing can be scored without them. Their time counts. When
  calibration ends with the time for trials gone and the published policy that transferred best
  measured, no trial runs (it would be stopped at its first report, with no time to re-score
  what it found): that policy is stored as calibration measured it (stage ``calibration``;
  :func:`autoaug.search.driver._no_time_for_trials`).
* **Storing** is never cut.

What happened is in :data:`BUDGET_FILE` and in the stored policy's provenance (``budget``), and
the search's summary says it: ``the time budget (30m) ended the search after 12 of 28 trials``.

This module imports neither Ray nor Optuna: the configuration parses durations with it.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from autoaug.core import failpoints
from autoaug.search.run_dir import utc_now

__all__ = [
    "BUDGET_FILE",
    "HEARTBEAT_S",
    "STORE_RESERVE_S",
    "RUN_OVERHEAD_S",
    "DURATION_HELP",
    "parse_duration",
    "format_duration",
    "Budget",
    "measured_run_s",
    "describe_budget",
]

#: The budget's record in the run directory: every driver session's spent time, what ended.
BUDGET_FILE = "budget.json"
#: Seconds between two saves of the running session's spent time (local run directories; a run
#: directory behind a URI is written every :data:`REMOTE_HEARTBEAT_S`).
HEARTBEAT_S = 5.0
REMOTE_HEARTBEAT_S = 30.0
#: What storing needs after re-scoring: the trial records, the Optuna study check, the provenance,
#: the store's write and ``result.json`` (a second or two on a local disk; kept generous).
STORE_RESERVE_S = 15.0
#: A proxy run's time beyond its training epochs: a Ray task or trial process starting, the data
#: opened, the DALI pipeline built (about 3-4 s measured on 2 cores, docs/search.md; kept generous).
RUN_OVERHEAD_S = 10.0
#: What a duration looks like (messages and ``--help``).
#: The stages of a search outside its method where the budget can end it (:meth:`Budget.end`):
#: calibration before the method, re-scoring after it.
DRIVER_STAGES = ("calibration", "rescore")
DURATION_HELP = "a duration such as 30m, 1h30m, 90s or 45 (seconds)"

_DURATION = re.compile(r"(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?")


def parse_duration(value: Any) -> float:
    """Seconds in ``value``: a number of seconds (``45``, ``2.5``) or text: ``30m``, ``1h30m``,
    ``90s``, ``1.5h``, ``45``. Raises ``ValueError`` for anything else, and for zero or less."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        match = _DURATION.fullmatch(text)
        if text and match and any(match.group(k) for k in "hms"):
            seconds = sum(float(match.group(k) or 0) * f for k, f in (("h", 3600), ("m", 60), ("s", 1)))
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected {DURATION_HELP}, above zero; got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``1800`` -> ``30m``, ``5400`` -> ``1h30m``, ``90`` -> ``1m30s``, ``2.5`` -> ``2.5s``."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    total = int(round(max(seconds, 0.0)))
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return out or "0s"


def measured_run_s(runs: Mapping[str, Any] | None, epochs: int | None = None) -> float | None:
    """One proxy run's wall time estimated from saved runs (calibration or re-scoring:
    ``{key: {"train_time_s": ..., "wall_s": ..., "epochs": ...}}``): the mean over them of the
    training time (its epochs, validation included) plus the start-up, counted once per run -- what
    the run's wall time from its task's start measured beyond its epochs (``wall_s``: the data
    opened, the DALI pipeline built, the imports), at least :data:`RUN_OVERHEAD_S` (a Ray task
    starting is not in it; runs saved before ``wall_s`` existed: that floor). With ``epochs``, the
    time of a run of that many epochs: each run's training time per epoch times ``epochs``, its
    start-up once (calibration runs may be shorter than the trials'). None when none recorded a
    time."""
    times = []
    for r in (runs or {}).values():
        if not isinstance(r, Mapping) or not r.get("train_time_s"):
            continue
        scale = epochs / r["epochs"] if epochs and r.get("epochs") else 1.0
        train = float(r["train_time_s"])
        start_up = float(r["wall_s"]) - train if isinstance(r.get("wall_s"), (int, float)) else 0.0
        times.append(train * scale + max(RUN_OVERHEAD_S, start_up))
    return sum(times) / len(times) if times else None


class Budget:
    """A search's time budget, as one driver session sees it.

    Built by :meth:`open` from the run directory (earlier sessions' spent time); shared by the
    parts of the search that end it (the Tune scheduler and searcher, re-scoring) and by the
    progress lines. It belongs to this driver session: the Tune objects holding it drop it when
    pickled, and read it from the current driver session (:func:`autoaug.search.tune.session.current_session`).
    """

    def __init__(
        self,
        total_s: float,
        *,
        sessions: list[dict] | None = None,
        started: float | None = None,
        session: str = "start 1",
        record: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        say: Callable[[str], Any] | None = None,
    ) -> None:
        record = dict(record or {})
        self.total_s = float(total_s)
        self._clock = clock
        self._started = clock() if started is None else float(started)
        self._sessions = [dict(s) for s in (sessions if sessions is not None else record.get("sessions", []))]
        self.spent_before_s = math.fsum(float(s.get("spent_s") or 0.0) for s in self._sessions)
        self._sessions.append(
            {
                "session": session,
                "started_at": utc_now(),
                "remaining_at_start_s": self.total_s - self.spent_before_s,
                "spent_s": 0.0,
            }
        )
        #: Some trial has reported a score (the budget stops trials only then).
        self.has_result = bool(record.get("has_result", False))
        #: ``{"stage", "spent_s", "at", ...}`` once the budget ended (cut) part of the search.
        self.ended: dict[str, Any] | None = record.get("ended")
        self._stopped: dict[str, list[str]] = {k: list(v) for k, v in (record.get("stopped_trials") or {}).items()}
        self.rescore: dict[str, Any] | None = record.get("rescore")
        self._expired = self.ended is not None  # an earlier session's decision stands
        # Re-scoring to come (set by plan_rescore), and the trials' epochs as measured so far.
        self._runs, self._slots, self._run_s, self._epochs = 0, 1, None, 0
        self._race_waves = 0
        #: The re-scoring race as the budget planned and saw it: ``reserved_rounds`` (the rounds the
        #: trials gave way to), ``contenders`` (the candidates each was kept for: the leader and its
        #: nearest challengers), ``rounds`` (how many ran) and how it ``ended`` (:meth:`race_ran`).
        self.race: dict[str, Any] | None = dict(record["race"]) if record.get("race") else None
        # later epochs, and trials' first reports (their start-up in them) apart
        self._epoch_sum, self._epoch_count = 0.0, 0  # later reports: their seconds, and the epochs they cover
        self._report_sum, self._report_count = 0.0, 0  # ... their seconds, and how many
        self._first_sum, self._first_count, self._first_epochs = 0.0, 0, 0  # first reports: the same
        self._lock = threading.RLock()
        self._run: Any = None
        #: Where the line saying that the budget ends the trials goes (the search's display).
        self.say = say

    # ------------------------------------------------------------------ construction, saving
    @classmethod
    def open(
        cls,
        run: Any,
        total_s: float,
        *,
        session: str,
        started: float | None = None,
        clock: Callable[[], float] = time.time,
        say: Callable[[str], Any] | None = None,
    ) -> Budget:
        """The budget of ``run`` (a :class:`~autoaug.search.run_dir.RunDir`) for a new driver
        session that started at ``started`` (``time.time()``), continuing the sessions recorded
        in :data:`BUDGET_FILE`; written back at once."""
        record = run.read_json(BUDGET_FILE) if run.exists(BUDGET_FILE) else {}
        budget = cls(total_s, record=record, session=session, started=started, clock=clock, say=say)
        budget._run = run
        budget.save()
        return budget

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state["_run"] = state["say"] = None  # the lock, where it writes and says belong to one driver session
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def to_dict(self) -> dict[str, Any]:
        """What :data:`BUDGET_FILE` holds (and, with the time left, the provenance's ``budget``)."""
        with self._lock:
            sessions = [dict(s) for s in self._sessions]
            sessions[-1]["spent_s"] = self._clock() - self._started
            spent = self.spent_before_s + sessions[-1]["spent_s"]
            return {
                "time_budget_s": self.total_s,
                "spent_s": spent,
                "remaining_s": self.total_s - spent,
                "sessions": sessions,
                "has_result": self.has_result,
                "ended": None if self.ended is None else dict(self.ended),
                "stopped_trials": {k: list(v) for k, v in self._stopped.items()},
                "reserve_s": self.reserve_s(),
                "rescore": None if self.rescore is None else dict(self.rescore),
                "race": None if self.race is None else dict(self.race),
            }

    def save(self) -> None:
        """Write :data:`BUDGET_FILE` (this session's spent time so far) to the run directory."""
        if self._run is None:
            return
        with self._lock:
            self._run.write_json(BUDGET_FILE, self.to_dict())
        failpoints.hit("budget.after_save")

    def save_at_event(self) -> None:
        """Save at an event of the search (a trial's end) as well as at the heartbeats, where a
        write is cheap: a local run directory (behind a URI, a density search's thousands of
        trial ends would each cost a remote write; the heartbeat covers them)."""
        if self._run is not None and getattr(self._run, "local_path", None) is not None:
            self.save()

    @contextlib.contextmanager
    def running(self) -> Iterator[Budget]:
        """For the time of the block, save the spent time every :data:`HEARTBEAT_S` seconds (a
        daemon thread of the driver), and once more at the end however the block ends."""
        remote = self._run is not None and getattr(self._run, "local_path", None) is None
        period = REMOTE_HEARTBEAT_S if remote else HEARTBEAT_S
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(period):
                try:
                    self.save()
                except Exception:  # noqa: BLE001 - a missed beat only undercounts; the search goes on
                    pass

        thread = threading.Thread(target=beat, name="autoaug-budget", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=period + 5)
            self.save()

    # ------------------------------------------------------------------ the clock
    def spent_s(self) -> float:
        return self.spent_before_s + (self._clock() - self._started)

    def remaining_s(self) -> float:
        return self.total_s - self.spent_s()

    @property
    def remaining_at_start_s(self) -> float:
        """What this driver session started with: the budget less earlier sessions' time."""
        return self.total_s - self.spent_before_s

    def plan_rescore(
        self,
        runs: int,
        slots: int,
        run_s: float | None,
        epochs: int,
        race_waves: int = 0,
        *,
        race_rounds: int = 0,
        contenders: int = 0,
    ) -> None:
        """What to keep for re-scoring while trials run: ``runs`` proxy runs, ``slots`` at once,
        each ``run_s`` seconds (None: estimated from the trials' epochs of ``epochs`` epochs per run),
        then ``race_waves`` waves of runs one after the other (the re-scoring race's ``race_rounds``
        rounds, each a run for ``contenders`` candidates, the leader and its nearest challengers:
        recorded for the summary)."""
        with self._lock:
            self._runs, self._slots, self._run_s, self._epochs = int(runs), max(1, int(slots)), run_s, int(epochs)
            self._race_waves = max(0, int(race_waves)) if runs else 0
            if self._race_waves and race_rounds:
                self.race = {
                    **(self.race or {}),
                    "reserved_rounds": int(race_rounds),
                    "contenders": int(contenders),
                    "reserved_waves": self._race_waves,
                }
            elif self.race is not None:
                self.race = {
                    k: v for k, v in self.race.items() if k not in ("reserved_rounds", "contenders", "reserved_waves")
                } or None

    def race_ran(self, record: Mapping[str, Any]) -> None:
        """What the re-scoring race did (its record, :func:`autoaug.search.decide.rescore.race`):
        how many rounds ran and how it ended, beside the rounds kept for it."""
        with self._lock:
            self.race = {**(self.race or {}), "rounds": len(record.get("rounds") or []), "ended": record.get("ended")}
        self.save()

    def observe_epoch(self, seconds: Any, *, first: bool = False, epochs: int = 1) -> None:
        """A trial's report of ``epochs`` epochs (those since its previous report) took ``seconds``
        (a Tune result's ``time_this_iter_s``); ``first``: the trial's first report, whose time
        holds the trial's start-up too (its process, the data, the DALI pipeline, a GPU's warm-up):
        kept apart, so that start-up counts once per run, not once per epoch (such first reports of
        12 s among 1-s epochs made a GPU run's estimate 1.5x too long)."""
        epochs = max(1, int(epochs))
        if (
            isinstance(seconds, (int, float))
            and not isinstance(seconds, bool)
            and math.isfinite(seconds)
            and seconds > 0
        ):
            with self._lock:
                if first:
                    self._first_sum += float(seconds)
                    self._first_count += 1
                    self._first_epochs += epochs
                else:
                    self._epoch_sum += float(seconds)
                    self._epoch_count += epochs
                    self._report_sum += float(seconds)
                    self._report_count += 1

    def run_s(self) -> float | None:
        """One proxy run's expected wall time: measured (calibration, re-scoring), else from the
        trials' epochs -- their mean epoch after the first times the run's epochs, plus the start-up
        their first reports measured beyond an epoch, at least :data:`RUN_OVERHEAD_S` (before a
        later epoch is measured, the first reports stand for every epoch); None when nothing was
        measured yet."""
        if self._run_s is not None:
            return self._run_s
        if not self._epochs:
            return None
        if self._epoch_count:
            epoch = self._epoch_sum / self._epoch_count
            start_up = (self._first_sum - self._first_epochs * epoch) / self._first_count if self._first_count else 0.0
            return epoch * self._epochs + max(RUN_OVERHEAD_S, start_up)
        if self._first_count:
            return self._first_sum / self._first_epochs * self._epochs + RUN_OVERHEAD_S
        return None

    def reserve_s(self, run_s: float | None = None) -> float:
        """The time re-scoring and storing need (:data:`STORE_RESERVE_S` when re-scoring is not
        planned or its runs cannot be estimated yet); ``run_s``: with proxy runs of that many
        seconds instead of :meth:`run_s` (calibration's forecast, from its own runs)."""
        run_s = self.run_s() if run_s is None else run_s
        if not self._runs or run_s is None:
            return STORE_RESERVE_S
        return STORE_RESERVE_S + (math.ceil(self._runs / self._slots) + self._race_waves) * run_s

    def handover_s(self) -> float:
        """What the trials take, once told to end, before re-scoring can start: a running trial ends
        at its next report -- up to its first report's time (its start-up and its epochs) or a
        later report's, as measured so far -- and then the hand-over (Tune's teardown, the trial records, the
        candidates assembled: :data:`RUN_OVERHEAD_S`, generous); 0 before any trial epoch is
        measured or with no re-scoring planned."""
        if not self._runs or not (self._report_count or self._first_count):
            return 0.0
        report = self._report_sum / self._report_count if self._report_count else 0.0
        first = self._first_sum / self._first_count if self._first_count else 0.0
        return max(report, first) + RUN_OVERHEAD_S

    def expired(self) -> bool:
        """The time left for trials is gone: what is left is what re-scoring and storing need, and
        what the running trials take to end (:meth:`handover_s`), so that re-scoring has all of
        its reserve. Once true it stays true for the session (estimates change; decisions do not)."""
        if not self._expired and self.remaining_s() <= self.reserve_s() + self.handover_s():
            self._expired = True
        return self._expired

    def stop_now(self) -> bool:
        """Trials must end now: the time for trials is gone and some trial has a score."""
        return self.has_result and self.expired()

    # ------------------------------------------------------------------ what the budget did
    def end(self, stage: str, **info: Any) -> None:
        """Record that the budget ended (cut) the search at ``stage``: one of :data:`DRIVER_STAGES`,
        or what the method was scoring in its own word (``trials``: Tune's searcher says it) --
        then, the first time, a line says that nothing new starts. The first call counts."""
        first = False
        with self._lock:
            if self.ended is None:
                first = True
                self.ended = {
                    "stage": stage,
                    "spent_s": self.spent_s(),
                    "at": utc_now(),
                    "reserve_s": self.reserve_s(),
                    **info,
                }
        self.save()
        if first and stage not in DRIVER_STAGES and self.say is not None:
            left = max(self.remaining_s(), 0.0)
            self.say(
                f"time budget: {format_duration(left)} left of {format_duration(self.total_s)}, what re-scoring "
                f"and storing need (about {format_duration(self.reserve_s())}): nothing new starts, running "
                "trials end at their next report"
            )

    def stop(self, experiment: str, trial_id: str) -> None:
        """Record that the budget stopped trial ``trial_id`` of the Tune experiment ``experiment``."""
        with self._lock:
            ids = self._stopped.setdefault(experiment, [])
            if trial_id not in ids:
                ids.append(trial_id)
        self.end("trials")

    def stopped(self, experiment: str) -> frozenset[str]:
        """The trials of ``experiment`` the budget stopped (in any session)."""
        return frozenset(self._stopped.get(experiment, ()))

    def record(self) -> dict[str, Any]:
        """The provenance's ``budget``."""
        return self.to_dict()

    def describe_start(self) -> str:
        """The line a session prints when it starts."""
        if not self.spent_before_s:
            return (
                f"time budget: {format_duration(self.total_s)} for the whole search (calibration, trials, "
                "re-scoring, storing)"
            )
        left = self.remaining_at_start_s
        return (
            f"time budget: {format_duration(max(left, 0.0))} left of {format_duration(self.total_s)} "
            f"({format_duration(self.spent_before_s)} spent in earlier driver sessions)"
        )


def describe_budget(record: Mapping[str, Any] | None) -> list[str]:
    """Lines a person reads about a search's budget (the summary, from the provenance's
    ``budget``): whether it ended the search, after how many of the planned trials, and what it
    left of re-scoring."""
    if not record:
        return []
    total = format_duration(float(record["time_budget_s"]))
    spent = format_duration(float(record.get("spent_s") or 0.0))
    ended = record.get("ended")
    trials = record.get("trials") or {}
    lines = []
    if ended and ended.get("stage") == "calibration":
        lines.append(f"the time budget ({total}) ended the search with calibration: {ended.get('note', '')}")
    elif ended and ended.get("stage") != "rescore" and trials:
        unit = trials.get("unit", "trials")
        # (``not_started``: stopped with no score, whether it had started or not)
        stopped, unstarted = int(trials.get("stopped") or 0), int(trials.get("not_started") or 0)
        detail = "".join(
            [
                f"; {stopped} stopped by it, scored on what they had reported" if stopped else "",
                f"; {unstarted} stopped by it before a first score" if unstarted else "",
            ]
        )
        lines.append(
            f"the time budget ({total}) ended the search after {trials.get('scored')} of "
            f"{trials.get('planned')} {unit}{detail} ({spent} spent)"
        )
    elif ended:
        stage = "re-scoring" if ended.get("stage") == "rescore" else ended.get("stage")
        lines.append(f"the time budget ({total}) ended the search during {stage} ({spent} spent)")
    else:
        lines.append(f"time budget: {total}, {spent} spent; it did not end the search")
    rescore = record.get("rescore")
    if rescore and rescore.get("note"):
        lines.append(f"re-scoring under the time budget: {rescore['note']}")
    race = record.get("race") or {}
    if race.get("reserved_rounds"):
        kept = race["reserved_rounds"]
        ran = race.get("rounds")
        how = {
            "decided": "one candidate led beyond the noise",
            "max_seeds": "every contender had its most runs",
            "budget": "the next round did not fit in the time left",
        }.get(race.get("ended"), "")
        lines.append(
            f"re-scoring race under the time budget: {kept} round{'s' if kept != 1 else ''} kept from the trials "
            f"(a run for the leader and its {_nearest(race.get('contenders'))}, {race.get('reserved_waves')} "
            f"wave{'s' if race.get('reserved_waves') != 1 else ''} of runs), "
            + ("the race did not run" if ran is None else f"{ran} ran" + (f" ({how})" if how else ""))
        )
    return lines


def _nearest(contenders: Any) -> str:
    """``nearest challenger`` / ``2 nearest challengers`` of a race round kept for ``contenders``
    candidates, the leader among them."""
    n = int(contenders or 2) - 1
    return "nearest challenger" if n == 1 else f"{n} nearest challengers"
