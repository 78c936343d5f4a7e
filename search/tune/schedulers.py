"""The search's Tune schedulers: ASHA or FIFO with the mixins that keep them to the search's
rules -- through the public interfaces of Ray Tune and Optuna only.

* :class:`StudyGuard`: after a restore, a trial the Optuna study already finished is not trained
  again (and a snapshot is written when a trial ends, so that the snapshot knows it);
* :class:`BudgetStop`: the search's time budget (:class:`autoaug.search.budget.Budget`) ends
  running trials at their next report and stops the ones not started, through Tune's canonical
  paths, so that the study stays consistent (the searcher,
  :class:`autoaug.search.tune.searcher.StudySearcher`, proposes nothing more);
* :class:`RankedRungs`: ASHA's rungs cut only while measured to rank
  (:class:`autoaug.search.decide.rungs.RungGate`).

:func:`make_scheduler` builds the one a search's experiment runs. What belongs to one driver
session (its display, its budget) is read from :func:`autoaug.search.tune.session.current_session`,
never pickled. The classes' old home, :mod:`autoaug.search.tune.searcher`, still names them, so
that a ``tuner.pkl`` saved before they moved here restores.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from autoaug.search.decide.rungs import MIN_PAIRS, RANKS_ABOVE, RUNG_GATE_ATTR, RungGate, gate_line
from autoaug.search.score import METRIC, asha_milestones
from autoaug.search.tune.epochs import EPOCHS_THIS_REPORT, result_epoch
from autoaug.search.tune.session import StoppedTrials, current_session
from autoaug.search.tune.study import make_storage, study_trials_by_tune_id

if TYPE_CHECKING:
    from autoaug.search.budget import Budget

__all__ = [
    "StudyGuard",
    "BudgetStop",
    "RankedRungs",
    "GuardedASHAScheduler",
    "GuardedFIFOScheduler",
    "make_scheduler",
]

logger = logging.getLogger(__name__)


class StudyGuard:
    """Mixin for Tune schedulers: after a restore, trials the Optuna study already finished are
    stopped before they run again.

    Tune snapshots its experiment state a little after the study is told that a trial finished;
    a driver killed in between leaves Tune believing the trial is still running. On the first
    scheduling decision of a driver session, every pending trial whose Optuna trial is finished
    is stopped through ``tune_controller.stop_trial`` (the canonical path, which also informs
    the searcher and the concurrency limiter) and added to :class:`StoppedTrials`; the study's
    value and step are its result. A trial that Tune marked ERROR and that is resumed on purpose
    (``resume_errored``) runs again.

    So that the snapshot always knows a finished trial, the guard also writes one (and waits
    for it) when a trial ends, before the study is told and the progress line is printed.
    """

    def _setup_guard(
        self, study_url: str, study_name: str, max_failures: int, stopped: StoppedTrials | None = None
    ) -> None:
        self._guard_study_url = study_url
        self._guard_study_name = study_name
        self._guard_max_failures = max_failures
        self._guard_stopped = stopped if stopped is not None else StoppedTrials()

    @property
    def stopped_trials(self) -> StoppedTrials:
        return self._guard_stopped

    def __getstate__(self) -> dict:
        parent = getattr(super(), "__getstate__", None)  # BudgetStop's, in the guarded schedulers
        state = dict((parent() if parent is not None else None) or self.__dict__)
        state.pop("_guard_done", None)
        return state

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        super().on_trial_complete(tune_controller, trial, result)
        # Tune calls the scheduler before it tells the searcher (the Optuna study) and the
        # callbacks (the progress line "trial ... finished"). Its periodic snapshot can be older
        # than a short trial, and its copy to the run directory is asynchronous: a driver killed
        # right after the line would leave a finished trial that the restored experiment never
        # knew, so it would be lost and another trial run instead. A snapshot written now, and
        # waited for, holds the trial (still RUNNING); once the study has its end, the guard
        # does not run it again. One small JSON write per finished trial.
        checkpoint = getattr(tune_controller, "checkpoint", None)
        if checkpoint is not None:
            try:
                checkpoint(force=True, wait=True)
            except Exception as exc:  # the search goes on; only a kill -9 now would lose the trial
                logger.warning("could not save the experiment state after trial %s: %s", trial.trial_id, exc)

    def choose_trial_to_run(self, tune_controller: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_guard_done", False):
            self._guard_done = True
            self._stop_trials_finished_in_study(tune_controller)
        return super().choose_trial_to_run(tune_controller, *args, **kwargs)

    def _stop_trials_finished_in_study(self, tune_controller: Any) -> None:
        pending = [t for t in tune_controller.get_trials() if t.status in ("PENDING", "PAUSED")]
        if not pending:
            return
        try:
            study = optuna.load_study(study_name=self._guard_study_name, storage=make_storage(self._guard_study_url))
        except Exception as exc:  # the search itself will fail with a clearer error
            logger.warning("cannot read the Optuna study to reconcile restored trials: %s", exc)
            return
        finished = study_trials_by_tune_id(study)
        for trial in pending:
            frozen = finished.get(trial.trial_id)
            if frozen is None or not frozen.state.is_finished():
                continue
            resumed_on_purpose = (
                frozen.state == optuna.trial.TrialState.FAIL and trial.num_failures > self._guard_max_failures
            )
            if resumed_on_purpose:
                continue
            logger.info(
                "trial %s finished (%s) before the driver stopped; not running it again",
                trial.trial_id,
                frozen.state.name,
            )
            self._guard_stopped.add(trial.trial_id)
            try:
                tune_controller.stop_trial(trial)
            except Exception as exc:  # then it runs again; the records still take the study's result
                logger.warning("could not stop restored trial %s: %s", trial.trial_id, exc)


class BudgetStop:
    """Mixin for Tune schedulers: the search's time budget (:class:`autoaug.search.budget.Budget`).

    While the budget lasts, nothing changes. Once it says trials must end (the time left is what
    re-scoring and storing need, and some trial has a score):

    * a running trial ends at its next report (a scheduler ``STOP``, as ASHA stops a trial: Tune
      tells the searcher its last result and calls the callbacks), unless that report is its last
      anyway; :meth:`_budget_can_stop` can restrict where (PBA: at checkpoints only);
    * on the next scheduling decision the search algorithm is marked finished (no new trial) and
      every pending or paused trial is stopped through ``tune_controller.stop_trial``;
    * every trial it stopped is recorded in the budget (the trial records say ``budget_stopped``).

    The budget is the one :meth:`set_budget` gave, else the current driver session's
    (:func:`current_session`).
    """

    _budget: Budget | None = None
    _budget_name: str = ""
    _budget_max_steps: int | None = None

    def set_budget(self, budget: Budget | None, experiment: str, max_steps: int | None) -> None:
        self._budget, self._budget_name, self._budget_max_steps = budget, experiment, max_steps

    def _session_budget(self) -> tuple[Budget | None, str, int | None]:
        """(budget, experiment, max_steps): :meth:`set_budget`'s, else the driver session's."""
        if self._budget is not None:
            return self._budget, self._budget_name, self._budget_max_steps
        session = current_session()
        if session is None:
            return None, "", None
        return session.budget, session.experiment, session.max_steps

    def __getstate__(self) -> dict:
        parent = getattr(super(), "__getstate__", None)
        state = dict((parent() if parent is not None else None) or self.__dict__)
        state.pop("_budget", None)  # one driver session's
        return state

    def _budget_can_stop(self, result: dict) -> bool:
        """Whether a trial may be stopped at this report (default: at any)."""
        return True

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        budget, name, max_steps = self._session_budget()
        if budget is not None:
            if result.get(METRIC) is not None:
                budget.has_result = True
            step, covered = result_epoch(result), int(result.get(EPOCHS_THIS_REPORT) or 1)
            budget.observe_epoch(result.get("time_this_iter_s"), first=step == covered, epochs=covered)
            last = max_steps is not None and step >= max_steps
            if not last and budget.stop_now() and self._budget_can_stop(result):
                budget.stop(name, trial.trial_id)
                return TrialScheduler.STOP
        if result.get(METRIC) is None:  # before the trial's first validation: nothing to rank by
            return TrialScheduler.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if METRIC in result and result[METRIC] is None:  # ended (by the budget) before its first validation:
            result = {k: v for k, v in result.items() if k != METRIC}  # nothing to rank it by (ASHA: float * None)
        super().on_trial_complete(tune_controller, trial, result)

    def choose_trial_to_run(self, tune_controller: Any, *args: Any, **kwargs: Any) -> Any:
        budget, name, _ = self._session_budget()
        if budget is not None:
            trials = tune_controller.get_trials()
            if not budget.has_result and any((t.last_result or {}).get(METRIC) is not None for t in trials):
                budget.has_result = True  # e.g. trials of an earlier driver session
            if budget.stop_now():
                search_alg = tune_controller.search_alg
                if not search_alg.is_finished():
                    search_alg.set_finished()  # what Tune's own stop_all does
                    budget.end("trials")
                for trial in [t for t in trials if t.status in ("PENDING", "PAUSED")]:
                    budget.stop(name, trial.trial_id)
                    tune_controller.stop_trial(trial)
                return None
        return super().choose_trial_to_run(tune_controller, *args, **kwargs)


class RankedRungs:
    """Mixin for the ASHA scheduler (after :class:`BudgetStop` in the order of classes, so that it
    sees ASHA's decisions only): a rung cuts only while it is measured to rank
    (:class:`autoaug.search.decide.rungs.RungGate`). Each trial's score at a rung and at its end
    goes to the gate; a ``STOP`` ASHA returns at a rung that does not cut becomes ``CONTINUE``
    (ASHA has recorded the trial's score at the rung all the same: its cutoff there is over every
    trial). Each change of a rung's decision is one progress line (the driver session's display)
    and, with the trials the rungs let go on, is kept in the Optuna study
    (:data:`~autoaug.search.decide.rungs.RUNG_GATE_ATTR`), where the search's record reads it.
    Tune does not save a scheduler's state between snapshots: on a driver session's first
    decision the gate takes the trials' scores from the study (:meth:`RungGate.restore`)."""

    _rung_gate: RungGate | None = None

    def _setup_rungs(self, gate: RungGate | None) -> None:
        self._rung_gate = gate

    @property
    def rung_gate(self) -> RungGate | None:
        return self._rung_gate

    def __getstate__(self) -> dict:
        parent = getattr(super(), "__getstate__", None)
        state = dict((parent() if parent is not None else None) or self.__dict__)
        for key in ("_rungs_ready", "_rungs_study"):  # one driver session's
            state.pop(key, None)
        return state

    def _rungs_session(self) -> None:
        """On this driver session's first decision: the gate's measurement from the study (a
        restored search: its trials' scores, what the earlier sessions decided), or what
        calibration decided before any trial (a new one), said."""
        gate = self._rung_gate
        if gate is None or getattr(self, "_rungs_ready", False):
            return
        self._rungs_ready = True
        study = self._rungs_open_study()
        record = None if study is None else study.user_attrs.get(RUNG_GATE_ATTR)
        scores = {}
        for tid, frozen in ({} if study is None else study_trials_by_tune_id(study)).items():
            values = {int(k): float(v) for k, v in frozen.intermediate_values.items() if v is not None}
            if values:
                scores[tid] = values
        if record is not None or scores:
            self._rungs_changed(gate.restore(record, scores), save=True)
            return
        for rung, m in gate.calibration.items():  # a new search: what calibration's runs measured
            if not m["n"]:
                continue
            state = gate.state[rung]
            if state["source"] is None:
                self._rungs_say(
                    f"early stopping: calibration's {m['n']} full-length run(s) with a score at epoch {rung} are too "
                    f"few to judge the rung there ({MIN_PAIRS} needed): it cuts as ASHA does until the trials measure it"
                )
            elif state["cuts"]:
                self._rungs_say(
                    f"early stopping: the rung at epoch {rung} cuts: calibration's {m['n']} full-length runs rank their "
                    f"final score by their epoch-{rung} score at rho {m['rho']:+.2f} [{m['low']:+.2f}, "
                    f"{m['high']:+.2f}], above {RANKS_ABOVE:g} at 95%"
                )
        self._rungs_changed(list(gate.events), save=True)

    def _rungs_open_study(self) -> optuna.Study | None:
        study = getattr(self, "_rungs_study", None)
        if study is None:
            try:
                study = optuna.load_study(
                    study_name=self._guard_study_name, storage=make_storage(self._guard_study_url)
                )
            except Exception as exc:  # the search itself will fail with a clearer error
                logger.warning("cannot open the Optuna study to keep the rungs' decisions: %s", exc)
                return None
            self._rungs_study = study
        return study

    def _rungs_say(self, text: str) -> None:
        session = current_session()
        display = None if session is None else session.display
        if display is not None:
            display.log(text)
        else:
            print(text, flush=True)

    def _rungs_changed(self, changed: list[dict], save: bool = False) -> None:
        for event in changed:
            self._rungs_say(gate_line(event))
        if (changed or save) and self._rung_gate is not None:
            study = self._rungs_open_study()
            if study is not None:
                try:
                    study.set_user_attr(RUNG_GATE_ATTR, self._rung_gate.to_dict())
                except Exception as exc:  # the decisions stand; the record misses them
                    logger.warning("could not record the rungs' decisions in the Optuna study: %s", exc)

    def choose_trial_to_run(self, tune_controller: Any, *args: Any, **kwargs: Any) -> Any:
        self._rungs_session()
        return super().choose_trial_to_run(tune_controller, *args, **kwargs)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        action = super().on_trial_result(tune_controller, trial, result)
        gate = self._rung_gate
        if gate is None:
            return action
        self._rungs_session()
        step, score = result_epoch(result), result.get(METRIC)
        changed, save = [], False
        if score is not None and result.get("val_accuracy", 0) is not None:  # a score measured at this epoch
            changed = gate.observe(trial.trial_id, step, float(score))
            save = gate.measures_at(step)  # a rung's measurement moved: the record follows it
        if action == TrialScheduler.STOP and step < gate.last:
            rung = gate.rung_of(step)
            if rung is not None and not gate.cuts(rung):
                gate.let_go(rung)
                action, save = TrialScheduler.CONTINUE, True
        self._rungs_changed(changed, save=save)
        return action

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        gate = self._rung_gate
        if gate is not None and result.get(METRIC) is not None and result.get("val_accuracy", 0) is not None:
            self._rungs_session()
            step = result_epoch(result)
            self._rungs_changed(gate.observe(trial.trial_id, step, float(result[METRIC])), save=gate.measures_at(step))
        super().on_trial_complete(tune_controller, trial, result)


class GuardedASHAScheduler(StudyGuard, BudgetStop, RankedRungs, ASHAScheduler):
    """``ASHAScheduler`` with :class:`StudyGuard`, :class:`BudgetStop` and (given a gate:
    :func:`make_scheduler`) :class:`RankedRungs`."""


class GuardedFIFOScheduler(StudyGuard, BudgetStop, FIFOScheduler):
    """``FIFOScheduler`` with :class:`StudyGuard` and :class:`BudgetStop`."""


def make_scheduler(
    asha: tuple[int, float] | None,
    max_t: int,
    study_url: str,
    study_name: str,
    max_failures: int,
    stopped: StoppedTrials,
    calibration: Sequence[Mapping[int, float]] = (),
) -> StudyGuard:
    """ASHA (``asha``: grace period and reduction factor) or FIFO (``asha`` None), with
    :class:`StudyGuard` on the study ``study_name`` and :class:`BudgetStop` (the driver session's
    budget); ASHA's rungs cut only while measured to rank (:class:`RankedRungs`), first by
    ``calibration``'s full-length runs (each its scores by epoch:
    :func:`autoaug.search.decide.rungs.calibration_scores`)."""
    if asha is not None:
        grace_period, reduction_factor = asha
        scheduler: StudyGuard = GuardedASHAScheduler(
            time_attr="epoch",
            max_t=max_t,
            grace_period=grace_period,
            reduction_factor=reduction_factor,
        )
        milestones = asha_milestones(int(grace_period), float(reduction_factor), int(max_t))
        scheduler._setup_rungs(RungGate(milestones, max_t, calibration))
    else:
        scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(study_url, study_name, max_failures, stopped)
    return scheduler
