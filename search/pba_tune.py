"""The Ray Tune pieces of the PBA method (:mod:`autoaug.search.pba`): the scheduler and the
callback recording the population's exploit/explore events.

Their own module because they subclass Ray classes (importing Ray), and Tune pickles both with the
experiment state: a restored search finds them here by name.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ray import tune
from ray.tune.schedulers import PopulationBasedTraining

from autoaug.core import failpoints
from autoaug.search.pba_trial import EVENTS_KEY
from autoaug.search.progress import say
from autoaug.search.reconcile import BudgetStop
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC

if TYPE_CHECKING:
    from autoaug.core.progress import Progress

__all__ = ["EpochPBT", "EventLog", "EVENTS_FILE", "describe_event"]

#: Every exploit/explore event of the population, as the driver received them (run directory).
EVENTS_FILE = "pba_events.json"


class EpochPBT(BudgetStop, PopulationBasedTraining):
    """PBT that leaves a member's last epoch alone: exploiting there would copy a finished member
    into one with nothing left to train (and start a stage at 100% of training).

    With a time budget (:class:`~autoaug.search.reconcile.BudgetStop`) a running member ends at its
    next perturbation boundary, whose report carries its checkpoint: the schedule that checkpoint
    holds is the one its score was measured under. Paused members (paused at a boundary) end at once."""

    def __init__(self, *, last_epoch: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.last_epoch = last_epoch

    def _budget_can_stop(self, result: dict) -> bool:
        return int(result.get("epoch") or 0) % self._perturbation_interval == 0

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if int(result.get("epoch") or 0) >= self.last_epoch:
            return self.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)


class EventLog(tune.Callback):
    """Writes each event a member reports (:data:`autoaug.search.pba_trial.EVENTS_KEY`: the first
    report after it cloned another) to ``EVENTS_FILE`` in the run directory as it arrives, and says
    it in one line (the progress display's log, or stdout): the only sign of the population's
    evolution before its members finish, when stdout is not a terminal. A member's own lineage
    survives in its checkpoints only until it clones another; this log keeps every branch. A
    restarted driver appends to what the file holds (an event seen twice is kept once).

    ``display``: the :class:`autoaug.core.progress.Progress` (this driver's, never pickled with
    Tune's experiment state; :func:`autoaug.search.reconcile.attach_display` gives a restored one
    the new driver's); None prints plain lines on stdout."""

    takes_display = True  # reconcile.attach_display gives a restored one this driver's display

    def __init__(self, storage: str, name: str, display: "Progress | None" = None) -> None:
        self.storage, self.name, self.display = storage, name, display

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "display": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"display": None, **state})  # pickled before it had one

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
