"""Keeping the Optuna study and Ray Tune's restored state consistent across a driver crash.

This is the only module that touches private attributes of Ray Tune's ``OptunaSearch``
(``_ot_study``, ``_ot_trials``, ``_completed_trials``, ``_space``, ``_sampler``) and of Optuna
(``Study._storage``, ``Study._study_id``, ``FrozenTrial._trial_id``). They were written against
the versions in :data:`WRITTEN_AGAINST`; ``pyproject.toml`` pins those as upper bounds, and
``tests/search/test_reconcile.py`` fails with a clear message on any other installed version
(:func:`check_versions`), so an upgrade is a deliberate act: read the new ``OptunaSearch``,
adjust this module, widen the range.

Tune snapshots its experiment state (trials + searcher) periodically, after trial checkpoints
and (through :class:`StudyGuard`) when a trial ends; Optuna writes to its storage immediately.
After ``kill -9`` the study can therefore be slightly *ahead* of the snapshot. On restore the two
are reconciled, the study being the record of which trials ended:

* :class:`StudyGuard` (mixed into the ASHA/FIFO scheduler) stops, before they start, the restored
  trials whose Optuna trial is finished, so a finished trial is never trained again; their result
  is the study's (:func:`autoaug.search.records.trial_records`);
* :class:`StudySearch` does not tell the study twice, hands an Optuna trial asked for a Tune
  trial that the snapshot never recorded (an *orphan*) to the next new Tune trial -- no proposal
  is lost and nothing is left RUNNING -- and marks an orphan whose parameters were not all
  written FAIL with the user attribute ``autoaug_orphaned``; a failed trial retried with
  ``resume_errored`` that succeeds becomes a new Optuna trial linked by ``autoaug_retry_of``.

The search's time budget (:class:`autoaug.search.budget.Budget`) is applied here too, through
Tune's canonical paths so that Optuna stays consistent: :class:`BudgetStop` (mixed into the
schedulers) ends running trials at their next report with ``STOP`` (the searcher is told their
last result: ``PRUNED``, as an ASHA stop), stops trials that have not started through
``tune_controller.stop_trial`` and marks the search algorithm finished; :class:`StudySearch`
proposes nothing once the budget is over. Tune's own ``time_budget_s`` is not used: its
``stop_all`` marks live trials ``TERMINATED`` without telling the searcher (their Optuna trials
would stay RUNNING) and it keeps no time across a driver restart. A budget belongs to one driver
session: the objects holding it drop it when pickled, and :func:`attach_budget` gives a restored
experiment this session's.
"""

from __future__ import annotations

import logging
import math
from importlib import metadata
from typing import TYPE_CHECKING, Any

import optuna
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from autoaug.core import failpoints
from autoaug.core.errors import SearchError
from autoaug.search.score import METRIC
from autoaug.search.tune.study import (
    FINAL_STEP_ATTR,
    ORPHAN_ATTR,
    RETRY_ATTR,
    TUNE_TRIAL_ATTR,
    make_sampler,
    make_storage,
    study_trials_by_tune_id,
)

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.budget import Budget

__all__ = [
    "WRITTEN_AGAINST",
    "check_versions",
    "attach_callbacks",
    "ray_session_dir",
    "StoppedTrials",
    "StudySearch",
    "StudyGuard",
    "BudgetStop",
    "GuardedASHAScheduler",
    "GuardedFIFOScheduler",
    "make_scheduler",
    "attach_display",
    "attach_budget",
]

logger = logging.getLogger(__name__)

#: ``{distribution: (oldest, newest) "MAJOR.MINOR"}`` this module was written and tested against.
WRITTEN_AGAINST: dict[str, tuple[str, str]] = {
    "ray": ("2.40", "2.60"),
    "optuna": ("4.0", "5.0"),
}


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def check_versions(installed: dict[str, str] | None = None) -> None:
    """Raise :class:`SearchError` if Ray or Optuna is outside :data:`WRITTEN_AGAINST`.

    ``installed``: ``{distribution: version}`` to check instead of the installed ones.
    """
    problems = []
    for dist, (oldest, newest) in WRITTEN_AGAINST.items():
        version = (installed or {}).get(dist) or metadata.version(dist)
        if not _major_minor(oldest) <= _major_minor(version) <= _major_minor(newest):
            problems.append(f"{dist} {version} (known: {oldest} to {newest}.x)")
    if problems:
        raise SearchError(
            "autoaug.search.tune.reconcile uses private attributes of Ray Tune's OptunaSearch and of Optuna and "
            f"was written against other versions: {'; '.join(problems)}. Check StudySearch/StudyGuard against "
            "the new versions, then widen WRITTEN_AGAINST and the upper bounds in pyproject.toml"
        )


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


class StudySearch(OptunaSearch):
    """``OptunaSearch`` that tags each Optuna trial with its Tune trial id and reconciles the
    study with Tune's restored state after a driver crash (see the module documentation)."""

    @property
    def study(self) -> optuna.Study:
        """The Optuna study the searcher asks and tells."""
        return self._ot_study

    def set_budget(self, budget: Budget | None) -> None:
        """The search's time budget (:class:`autoaug.search.budget.Budget`): once it says trials
        must end, no new trial is proposed (``Searcher.FINISHED``)."""
        self._budget = budget

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_budget", None)  # one driver session's (attach_budget gives a restored search its own)
        return state

    def save(self, checkpoint_path: str) -> None:
        # OptunaSearch.save pickles ``__dict__`` itself, and restore() updates ``__dict__`` with it:
        # without the budget, the one this session attached survives the restore.
        budget = self.__dict__.pop("_budget", None)
        try:
            super().save(checkpoint_path)
        finally:
            if budget is not None:
                self._budget = budget

    def suggest(self, trial_id: str) -> dict | None:
        budget = getattr(self, "_budget", None)
        if budget is not None and budget.stop_now():
            budget.end("trials")
            return Searcher.FINISHED
        if trial_id not in self._ot_trials:
            adopted = self._adopt_orphan()
            if adopted is not None:
                self._ot_trials[trial_id] = adopted
        config = super().suggest(trial_id)
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None and ot_trial.user_attrs.get(TUNE_TRIAL_ATTR) != trial_id:
            ot_trial.set_user_attr(TUNE_TRIAL_ATTR, trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._finished_in_study():
            return  # the study already holds this trial's final state
        if result.get(self.metric) is None or ("val_accuracy" in result and result["val_accuracy"] is None):
            # An epoch the trial did not validate (trial_train_config): no score yet, or the last
            # window's, already in the study at the epoch it was measured.
            return
        super().on_trial_result(trial_id, result)

    def set_max_steps(self, max_steps: int) -> None:
        """Epochs of a full trial: a trial that ends earlier without an error was stopped by the
        scheduler (ASHA) and is recorded ``PRUNED``, not ``COMPLETE``."""
        self._max_steps = int(max_steps)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._tell_complete(trial_id, result, error)
        budget = getattr(self, "_budget", None)
        if budget is not None:
            budget.save_at_event()  # the time spent up to this trial's end, with it (not only at heartbeats)
        if not error:  # Tune's saved state holds the trial (StudyGuard.on_trial_complete), the study its end
            failpoints.hit("search.after_trial_saved")

    def _tell_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        if trial_id not in self._finished_in_study():
            ot_trial = self._ot_trials.get(trial_id)
            step = (result or {}).get("training_iteration")
            value = (result or {}).get(self.metric)
            if ot_trial is not None and step is not None and trial_id not in self._completed_trials:
                # Tune hands the last result to on_trial_complete only (not on_trial_result):
                # report it too, so the study holds every epoch's score, the last included.
                ot_trial.set_user_attr(FINAL_STEP_ATTR, int(step))
                reported = self._ot_study._storage.get_trial(ot_trial._trial_id).intermediate_values
                if value is not None and not error and int(step) not in reported:
                    ot_trial.report(float(value), int(step))
                max_steps = getattr(self, "_max_steps", None)
                if not error and value is not None and max_steps is not None and int(step) < max_steps:
                    # Stopped early by the scheduler: PRUNED (Optuna keeps the last intermediate
                    # value as the trial's value; TPE ranks pruned trials below complete ones
                    # by the step they reached, then by that value).
                    try:
                        self._ot_study.tell(ot_trial, state=optuna.trial.TrialState.PRUNED)
                    except Exception as exc:  # pragma: no cover - e.g. a NaN score
                        logger.warning("could not record trial %s as pruned: %s", trial_id, exc)
                    self._completed_trials.add(trial_id)
                    return
            super().on_trial_complete(trial_id, result=result, error=error)
            return
        # Told before the driver stopped, after Tune's last snapshot (see StudyGuard).
        self._completed_trials.add(trial_id)
        self._already_told.discard(trial_id)
        told = self._ot_study._storage.get_trial(self._ot_trials[trial_id]._trial_id)
        value = (result or {}).get(self.metric)
        if told.state == optuna.trial.TrialState.FAIL and value is not None and not error:
            # A failed trial retried with --resume-errored succeeded: record the success as a new
            # Optuna trial (a finished one cannot change), linked to the failed attempt.
            self._ot_study.add_trial(
                optuna.trial.create_trial(
                    params=told.params,
                    distributions=told.distributions,
                    value=value,
                    intermediate_values={},
                    user_attrs={TUNE_TRIAL_ATTR: trial_id, RETRY_ATTR: told.number},
                )
            )
        elif (
            told.state == optuna.trial.TrialState.COMPLETE
            and value is not None
            and (told.value is None or not math.isclose(told.value, value, rel_tol=1e-9))
        ):
            logger.warning(
                "trial %s finished again after the restore with %s=%s; the study keeps %s",
                trial_id,
                self.metric,
                value,
                told.value,
            )

    # -- restore-time reconciliation -----------------------------------------------------------
    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        storage = self._ot_study._storage
        study_id = self._ot_study._study_id
        known = {t._trial_id for t in self._ot_trials.values()}
        # Trials the study finished but Tune may run (again): ends told after Tune's snapshot,
        # and failures that ``resume_errored`` retries.
        self._already_told = set()
        for tid, t in self._ot_trials.items():
            state = storage.get_trial(t._trial_id).state
            if tid not in self._completed_trials and state.is_finished():
                self._already_told.add(tid)
            elif tid in self._completed_trials and state == optuna.trial.TrialState.FAIL:
                self._already_told.add(tid)
                self._completed_trials.discard(tid)
        orphans = []
        for frozen in storage.get_all_trials(study_id, deepcopy=False):
            if frozen._trial_id in known or frozen.state.is_finished():
                continue
            if set(frozen.params) == set(self._space) and frozen.state == optuna.trial.TrialState.RUNNING:
                orphans.append(frozen._trial_id)
            else:
                storage.set_trial_user_attr(frozen._trial_id, ORPHAN_ATTR, True)
                storage.set_trial_state_values(frozen._trial_id, optuna.trial.TrialState.FAIL)
        self._orphans = sorted(orphans)
        self._reseed_sampler(len(storage.get_all_trials(study_id, deepcopy=False)))
        if self._orphans or self._already_told:
            logger.info(
                "restored study: %d orphaned Optuna trial(s) to re-use, %d trial(s) already told",
                len(self._orphans),
                len(self._already_told),
            )

    def set_sampler_spec(self, name: str, seed: int, startup_trials: int | None = None) -> None:
        """Remember how the sampler was made (:func:`make_sampler`), to reseed it on restore."""
        self._sampler_spec = (name, seed, startup_trials)

    def _reseed_sampler(self, num_trials: int) -> None:
        # The sampler's random state comes back from the snapshot, which may predate proposals
        # already made (the orphans): replaying it would propose the same policies again. A fresh
        # sampler seeded from (seed, trials in the study) proposes new ones, reproducibly.
        spec = getattr(self, "_sampler_spec", None)
        if spec is None:
            self._ot_study.sampler.reseed_rng()
            return
        name, seed, *rest = spec  # (name, seed) in searches snapshotted before startup_trials existed
        sampler = make_sampler(name, (seed + 1_000_003 * num_trials) % 2**32, rest[0] if rest else None)
        self._sampler = sampler
        self._ot_study.sampler = sampler

    def _finished_in_study(self) -> set:
        return getattr(self, "_already_told", set())

    def _adopt_orphan(self) -> optuna.Trial | None:
        orphans = getattr(self, "_orphans", [])
        while orphans:
            trial_id = orphans.pop(0)
            frozen = self._ot_study._storage.get_trial(trial_id)
            if frozen.state == optuna.trial.TrialState.RUNNING:
                return optuna.Trial(self._ot_study, trial_id)
        return None


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
    """

    _budget: Budget | None = None
    _budget_name: str = ""
    _budget_max_steps: int | None = None

    def set_budget(self, budget: Budget | None, experiment: str, max_steps: int | None) -> None:
        self._budget, self._budget_name, self._budget_max_steps = budget, experiment, max_steps

    def __getstate__(self) -> dict:
        parent = getattr(super(), "__getstate__", None)
        state = dict((parent() if parent is not None else None) or self.__dict__)
        state.pop("_budget", None)  # one driver session's (attach_budget gives a restored search its own)
        return state

    def _budget_can_stop(self, result: dict) -> bool:
        """Whether a trial may be stopped at this report (default: at any)."""
        return True

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        budget = self._budget
        if budget is not None:
            if result.get(METRIC) is not None:
                budget.has_result = True
            budget.observe_epoch(result.get("time_this_iter_s"))
            step = int(result.get("training_iteration") or 0)
            last = self._budget_max_steps is not None and step >= self._budget_max_steps
            if not last and budget.stop_now() and self._budget_can_stop(result):
                budget.stop(self._budget_name, trial.trial_id)
                return TrialScheduler.STOP
        if result.get(METRIC) is None:  # before the trial's first validation: nothing to rank by
            return TrialScheduler.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if METRIC in result and result[METRIC] is None:  # ended (by the budget) before its first validation:
            result = {k: v for k, v in result.items() if k != METRIC}  # nothing to rank it by (ASHA: float * None)
        super().on_trial_complete(tune_controller, trial, result)

    def choose_trial_to_run(self, tune_controller: Any, *args: Any, **kwargs: Any) -> Any:
        budget = self._budget
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
                    budget.stop(self._budget_name, trial.trial_id)
                    tune_controller.stop_trial(trial)
                return None
        return super().choose_trial_to_run(tune_controller, *args, **kwargs)


class GuardedASHAScheduler(StudyGuard, BudgetStop, ASHAScheduler):
    """``ASHAScheduler`` with :class:`StudyGuard` and :class:`BudgetStop`."""


class GuardedFIFOScheduler(StudyGuard, BudgetStop, FIFOScheduler):
    """``FIFOScheduler`` with :class:`StudyGuard` and :class:`BudgetStop`."""


def make_scheduler(
    asha: tuple[int, float] | None,
    max_t: int,
    study_url: str,
    study_name: str,
    max_failures: int,
    stopped: StoppedTrials,
) -> StudyGuard:
    """ASHA (``asha``: grace period and reduction factor) or FIFO (``asha`` None), with
    :class:`StudyGuard` on the study ``study_name`` and :class:`BudgetStop`, without a budget until
    :func:`attach_budget` gives it one."""
    if asha is not None:
        grace_period, reduction_factor = asha
        scheduler: StudyGuard = GuardedASHAScheduler(
            time_attr="training_iteration",
            max_t=max_t,
            grace_period=grace_period,
            reduction_factor=reduction_factor,
        )
    else:
        scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(study_url, study_name, max_failures, stopped)
    return scheduler


def attach_display(tuner: Any, display: Progress, num_trials: int, epochs: int) -> None:
    """Give a restored ``tune.Tuner`` this driver's progress display.

    ``Tuner.restore`` brings back the run configuration -- its callbacks included -- from the
    pickled ``tuner.pkl``, where :class:`autoaug.search.tune.progress.ProgressCallback` and the
    callbacks that print through it (``takes_display``: PBA's event log) were stored without their
    display (a terminal display belongs to one driver). Uses the private ``Tuner._local_tuner``
    (its ``get_run_config()``); a tuner without one (Ray Client) keeps the callbacks as restored,
    which print plain lines.
    """
    from autoaug.search.tune.progress import ProgressCallback

    local = getattr(tuner, "_local_tuner", None)
    if local is None:
        return
    run_config = local.get_run_config()
    callbacks = list(run_config.callbacks or [])
    found = [cb for cb in callbacks if isinstance(cb, ProgressCallback)]
    for cb in callbacks:  # the progress lines, and the callbacks that print through it (PBA's EventLog)
        if isinstance(cb, ProgressCallback) or getattr(cb, "takes_display", False):
            cb.display = display
    if not found:  # the original driver ran without one
        callbacks.append(ProgressCallback(num_trials, epochs, display=display))
        run_config.callbacks = callbacks


def attach_budget(tuner: Any, budget: Budget | None, experiment: str, max_steps: int | None) -> None:
    """Give a ``tune.Tuner`` this driver session's time budget (None: none): its scheduler
    (:class:`BudgetStop`), its searcher (:class:`StudySearch`) and its progress lines.

    ``Tuner.restore`` brings them back from ``tuner.pkl``, pickled without a budget (a new tuner
    has them already; the call then only warns when they run where the budget cannot reach). Uses the
    private ``Tuner._local_tuner`` and its ``_tune_config``; a tuner without one (Ray Client)
    runs without the budget's stops (the budget still counts its time and re-scoring keeps to it).
    """
    from autoaug.search.tune.progress import ProgressCallback

    local = getattr(tuner, "_local_tuner", None)
    if local is None:
        if budget is not None:
            import warnings

            from autoaug.core.errors import AutoaugWarning

            warnings.warn(
                f"Ray Client (--address ray://...) runs the Tune experiment {experiment} on the cluster, where "
                "the time budget cannot stop its trials (it still counts, and re-scoring keeps to it); run "
                "the search on the cluster (autoaug launch) for the budget to end trials",
                AutoaugWarning,
                stacklevel=2,
            )
        return
    tune_config = getattr(local, "_tune_config", None)
    scheduler = getattr(tune_config, "scheduler", None)
    if isinstance(scheduler, BudgetStop):
        scheduler.set_budget(budget, experiment, max_steps)
    searcher = getattr(tune_config, "search_alg", None)
    while searcher is not None and not isinstance(searcher, StudySearch):
        searcher = getattr(searcher, "searcher", None)
    if searcher is not None:
        searcher.set_budget(budget)
    for cb in local.get_run_config().callbacks or []:
        if isinstance(cb, ProgressCallback):
            cb.budget = budget
            cb.experiment = experiment


def attach_callbacks(tuner: Any, first: Any = (), last: Any = ()) -> None:
    """Give a restored ``tune.Tuner`` this driver's callbacks of the types of ``first`` (put
    before the others: they act first) and ``last`` (after), replacing any of those types it
    restored from ``tuner.pkl`` (a tuner saved before they existed gets them too). Uses the
    private ``Tuner._local_tuner`` as :func:`attach_display`; Ray Client keeps what it restored."""
    local = getattr(tuner, "_local_tuner", None)
    if local is None:
        return
    run_config = local.get_run_config()
    types = tuple(type(cb) for cb in (*first, *last))
    kept = [cb for cb in run_config.callbacks or [] if not isinstance(cb, types)]
    run_config.callbacks = [*first, *kept, *last]


def ray_session_dir() -> str | None:
    """Ray's session folder on this node (where trials write scratch checkpoints), if Ray is
    running here (the private ``global_worker.node``)."""
    try:
        import ray

        return ray._private.worker.global_worker.node.get_session_dir_path()
    except Exception:
        return None
