"""The Ray Tune pieces of the PBA method (:mod:`autoaug.search.methods.pba.method`): the scheduler and the
callback recording the population's exploit/explore events.

Their own module because they subclass Ray classes (importing Ray), and Tune pickles both with the
experiment state: a restored search finds them here by name.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining

from autoaug.core import failpoints
from autoaug.search.methods.pba.trial import EVENTS_KEY
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC
from autoaug.search.tune.progress import say
from autoaug.search.tune.schedulers import BudgetStop
from autoaug.search.tune.session import current_session

if TYPE_CHECKING:
    from autoaug.core.progress import Progress

__all__ = ["EpochPBT", "EventLog", "EVENTS_FILE", "describe_event"]

#: Every exploit/explore event of the population, as the driver received them (run directory).
EVENTS_FILE = "pba_events.json"


class EpochPBT(BudgetStop, PopulationBasedTraining):
    """PBT that leaves a member's last epoch alone: exploiting there would copy a finished member
    into one with nothing left to train (and start a stage at 100% of training).

    With a time budget (:class:`~autoaug.search.tune.schedulers.BudgetStop`) a running member ends at its
    next perturbation boundary, whose report carries its checkpoint: the schedule that checkpoint
    holds is the one its score was measured under. Paused members (paused at a boundary) end at once.

    When the population is larger than the slots, the next member to train is the one furthest
    behind (Tune's rule) and, among those equally far, the one that has waited longest. Tune breaks
    that tie by the members' order; an exploit hands the clone its donor's epoch, so two members
    that kept losing to the paused ones took the slots back at every boundary and cloned the same
    checkpoints again, without end, while the paused members never trained (seen in the smoke
    population: 4 members on 2 slots, one epoch per perturbation).

    With ``rotate=False`` (a population trained in packs: every member's process runs at once, and
    only waits on its pack server, which takes turns itself) no member is paused at its boundary
    so that another may train -- PBT's own rule pauses one whenever another is paused or pending,
    as a member restarting after an exploit always is for a moment, and each pause restarts a
    member's process for nothing.

    Through Ray's public interface only: it keeps its own copies of its constructor's settings and
    its own record of how far each member has trained (:meth:`on_trial_result`), as PBT counts it:
    the time of its last report at a perturbation boundary, or, after an exploit, its donor's, whose
    checkpoint it restarts from (the checkpoint result PBT hands the member)."""

    def __init__(
        self,
        *,
        last_epoch: int,
        time_attr: str = "epoch",
        perturbation_interval: float = 1,
        burn_in_period: float = 0.0,
        synch: bool = False,
        rotate: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            time_attr=time_attr,
            perturbation_interval=perturbation_interval,
            burn_in_period=burn_in_period,
            synch=synch,
            **kwargs,
        )
        self.last_epoch = last_epoch
        # Its own copies of the settings it reads (Ray keeps its in private attributes).
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.burn_in_period = burn_in_period
        self.synch = synch
        self.rotate = rotate
        self._reports = 0
        self._last_report: dict[str, int] = {}  # trial id -> the order of its last result
        self._trained: dict[str, float] = {}  # trial id -> how far it has trained, as PBT counts it

    def __setstate__(self, state: dict) -> None:
        # A scheduler pickled before the report order was kept: its members in Tune's order.
        self.__dict__.update({"_reports": 0, "_last_report": {}, "_trained": {}, "rotate": True, **state})

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        if self.synch:
            return super().choose_trial_to_run(tune_controller)
        waiting = [t for t in tune_controller.get_trials() if t.status in (Trial.PENDING, Trial.PAUSED)]
        if not waiting:
            return None
        order, trained = self._last_report, self._trained
        return min(waiting, key=lambda t: (trained.get(t.trial_id, 0), order.get(t.trial_id, -1)))

    def _budget_can_stop(self, result: dict) -> bool:
        return int(result.get("epoch") or 0) % self.perturbation_interval == 0

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        self._reports += 1
        self._last_report[trial.trial_id] = self._reports
        if int(result.get("epoch") or 0) >= self.last_epoch:
            return self.CONTINUE
        config = trial.config
        decision = super().on_trial_result(tune_controller, trial, result)
        self._count_training(trial, result, exploited=trial.config is not config)
        if decision == self.PAUSE and not self.rotate and trial.status != Trial.PAUSED:
            return self.CONTINUE  # (not exploited: it trains on; the others are not waiting for its slot)
        return decision

    def _count_training(self, trial: Any, result: dict, *, exploited: bool) -> None:
        """How far ``trial`` has trained after this result, as PBT counts it: the time of a report
        at a perturbation boundary (one at least ``perturbation_interval`` after the last, past the
        burn-in: where PBT ranks it); an exploit (PBT gave the member a new configuration) moves it
        to its donor's, the time of the checkpoint result it restarts from."""
        time = result.get(self.time_attr)
        if result.get(METRIC) is None or time is None or time < self.burn_in_period:
            return
        if time - self._trained.get(trial.trial_id, 0) >= self.perturbation_interval:
            self._trained[trial.trial_id] = time
        restart = trial.latest_checkpoint_result if exploited else None
        if restart is not None and (restart.metrics or {}).get(self.time_attr) is not None:
            self._trained[trial.trial_id] = restart.metrics[self.time_attr]


class EventLog(tune.Callback):
    """Writes each event a member reports (:data:`autoaug.search.methods.pba.trial.EVENTS_KEY`: the first
    report after it cloned another) to ``EVENTS_FILE`` in the run directory as it arrives, and says
    it in one line (the progress display's log, or stdout): the only sign of the population's
    evolution before its members finish, when stdout is not a terminal. A member's own lineage
    survives in its checkpoints only until it clones another; this log keeps every branch. A
    restarted driver appends to what the file holds (an event seen twice is kept once).

    ``display``: the :class:`autoaug.core.progress.Progress` (this driver's, never pickled with
    Tune's experiment state; a restored one prints on the current driver session's,
    :func:`autoaug.search.tune.session.current_session`); None prints plain lines on stdout."""

    def __init__(self, storage: str, name: str, display: Progress | None = None) -> None:
        self.storage, self.name, self._display = storage, name, display

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_display": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_display": None, **state})

    @property
    def display(self) -> Progress | None:
        session = current_session() if self._display is None else None
        return self._display if session is None else session.display

    def _run(self) -> RunDir:
        return RunDir(self.storage, self.name)

    def on_trial_save(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        failpoints.hit("pba.after_member_checkpoint")  # Tune recorded a member's checkpoint (docs/failpoints.md)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        cell = result.get(EVENTS_KEY)
        if not cell:
            return
        run = self._run()
        events = run.read_json(EVENTS_FILE) if run.exists(EVENTS_FILE) else []
        keys = {_key(e) for e in events}
        new = [e for e in json.loads(cell) if _key(e) not in keys]
        run.write_json(EVENTS_FILE, events + new)
        scores = {t.trial_id: (t.last_result or {}).get(METRIC) for t in trials}
        for event in new:
            say(describe_event(event, scores.get(event["cloned"])), self.display)


def describe_event(event: dict, cloned_score: float | None = None) -> str:
    """One line for an exploit/explore event: who cloned whom at which epoch, and what explore did."""
    changes = event.get("changes") or {}
    resampled = sum(1 for c in changes.values() if c[2] == "resample")
    score = f" ({METRIC} {cloned_score:.4f})" if isinstance(cloned_score, (int, float)) else ""
    what = (
        f"{len(changes)} value(s) changed: {resampled} resampled, {len(changes) - resampled} shifted"
        if changes
        else "no value changed"
    )
    return (
        f"epoch {event['epoch']}: member {event['member']} continues from {event['cloned']}{score}, "
        f"weights and policy; explore: {what}"
    )


def _key(event: dict) -> tuple:
    return event["epoch"], event["member"], event["cloned"], event["policy_hash"]
