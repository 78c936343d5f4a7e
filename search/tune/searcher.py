"""The search's Tune searcher on its Optuna study, and what keeps the two consistent across a driver
crash -- through the public interfaces of Ray Tune and Optuna only.

:class:`StudySearcher` is a Tune ``Searcher`` (``suggest``, ``on_trial_result``,
``on_trial_complete``, ``save``, ``restore``) that owns an Optuna study through Optuna's ask-and-tell
interface: ``study.ask`` proposes a trial's parameters, ``Trial.report`` records each reported epoch's score,
``study.tell`` its end, and every Optuna trial carries the user attribute
:data:`~autoaug.search.tune.study.TUNE_TRIAL_ATTR` (its Tune trial id). The study is the record of what
happened; Tune's saved state (its snapshot, with this searcher's: the Tune trials it proposed) says
which Tune trials exist.

Tune snapshots its experiment state periodically, after trial checkpoints and (through
:class:`~autoaug.search.tune.schedulers.StudyGuard`) when a trial ends; Optuna writes to its storage at once. After ``kill -9`` of
the driver the study can therefore be *ahead* of the snapshot. On restore:

* a Tune trial whose Optuna trial is finished is not trained again:
  :class:`~autoaug.search.tune.schedulers.StudyGuard` (mixed
  into the ASHA/FIFO scheduler) stops it before it starts, and the searcher does not tell the study
  twice; its result is the study's (:func:`autoaug.search.records.trial_records`);
* an Optuna trial the dead driver left RUNNING is never left so. Optuna hands a live trial (one
  that can take reports) only to the process that asked for it, so the searcher re-asks it:
  ``study.enqueue_trial`` with its parameters and the user attribute
  :data:`~autoaug.search.tune.study.REPLACES_ATTR` (its number), then ``study.tell`` it ``FAIL``. A Tune
  trial that Tune resumes from its checkpoint continues in the new Optuna trial (its earlier
  epochs' scores copied into it, its Tune trial id set); a proposal asked for a Tune trial that the
  snapshot never recorded -- or asked and not yet tagged -- goes to the next new Tune trial, so no
  proposal is lost;
* a failed trial retried with ``resume_errored`` that succeeds becomes a new Optuna trial linked by
  :data:`~autoaug.search.tune.study.RETRY_ATTR` (a finished Optuna trial cannot change);
* the sampler is seeded again from (seed, trials in the study): the proposals after the restore are
  new ones, and reproducible.

The time budget of the search (:class:`autoaug.search.budget.Budget`) is applied here too, through
Tune's canonical paths so that Optuna stays consistent:
:class:`~autoaug.search.tune.schedulers.BudgetStop` (mixed into the schedulers) ends running trials
at their next report with ``STOP`` (the searcher is told their last result: ``PRUNED``, as an ASHA
stop), stops trials that have not started through ``tune_controller.stop_trial`` and marks the
search algorithm finished; :class:`StudySearcher` proposes nothing once the budget is over. Tune's own ``time_budget_s`` is not used: its
``stop_all`` marks live trials ``TERMINATED`` without telling the searcher (their Optuna trials
would stay RUNNING) and it keeps no time across a driver restart.

What belongs to one driver session -- its progress display, its time budget -- is never pickled
with Tune's state (``tuner.pkl`` and the snapshots): the searcher reads it from the current
:class:`~autoaug.search.tune.session.DriverSession` (:mod:`autoaug.search.tune.session`).

The schedulers and the driver session's parts lived in this module before they got modules of
their own (:mod:`autoaug.search.tune.schedulers`, :mod:`autoaug.search.tune.session`); it still
names them, so that a ``tuner.pkl`` (or a snapshot) saved then, which refers to its classes by
this module, restores.
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna
from ray.tune.search import Searcher

from autoaug.core import failpoints
from autoaug.core.errors import SearchError
from autoaug.search.tune.epochs import result_epoch

# Their old home: a tuner.pkl saved before they moved refers to them here (see the docstring).
from autoaug.search.tune.schedulers import (  # noqa: F401
    BudgetStop,
    GuardedASHAScheduler,
    GuardedFIFOScheduler,
    RankedRungs,
    StudyGuard,
    make_scheduler,
)
from autoaug.search.tune.session import (  # noqa: F401
    DriverSession,
    StoppedTrials,
    attach_session,
    current_session,
    ray_client,
    ray_session_dir,
    running,
)
from autoaug.search.tune.study import (
    FINAL_STEP_ATTR,
    ORPHAN_ATTR,
    REPLACES_ATTR,
    RETRY_ATTR,
    TUNE_TRIAL_ATTR,
    WARM_START_ATTR,
    make_sampler,
    make_storage,
    study_trials_by_tune_id,
)

if TYPE_CHECKING:
    from autoaug.search.budget import Budget

__all__ = ["StudySearcher"]

logger = logging.getLogger(__name__)

_FAIL = optuna.trial.TrialState.FAIL
_RUNNING = optuna.trial.TrialState.RUNNING
_WAITING = optuna.trial.TrialState.WAITING
#: The format of :meth:`StudySearcher.save`'s file (a pickled dict).
_SAVE_FORMAT = 1


# ----------------------------------------------------------------------------------------------
# The searcher


class StudySearcher(Searcher):
    """A Tune searcher that proposes trials from the Optuna study ``study_name`` in the storage at
    ``storage_url``, over the Optuna distributions ``space``, with the sampler ``sampler``
    (:func:`~autoaug.search.tune.study.make_sampler`: name, ``seed``, ``startup_trials``,
    ``sampler_margin``). A trial that
    ends before ``max_steps`` results without an error was stopped by the scheduler (ASHA, the time
    budget) and is recorded ``PRUNED``. See the module documentation for a restore."""

    def __init__(
        self,
        space: Mapping[str, optuna.distributions.BaseDistribution],
        *,
        metric: str,
        mode: str,
        study_name: str,
        storage_url: str,
        sampler: str = "tpe",
        seed: int = 0,
        startup_trials: int | None = None,
        max_steps: int | None = None,
        sampler_margin: float | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.space = dict(space)
        self.study_name = study_name
        self.storage_url = storage_url
        self.sampler_spec = (sampler, int(seed), startup_trials)
        #: How far a trial must beat the incumbent to replace it (a ``local`` sampler's margin).
        self.sampler_margin = sampler_margin
        self.max_steps = max_steps
        self._reset()
        self._study: optuna.Study | None = self._open_study(self._sampler(int(seed)))

    # -- state ------------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._study = None
        self._budget: Budget | None = None  # set_budget's; else the current driver session's
        self._known: set[str] = set()  # Tune trials proposed (saved: Tune's snapshot holds them)
        self._live: dict[str, optuna.Trial] = {}  # Tune trial id -> its running Optuna trial
        self._reported: dict[str, set[int]] = {}  # Tune trial id -> steps reported to it
        self._queue: list[optuna.Trial] = []  # proposals asked, for the next new Tune trials
        self._done: set[str] = set()  # Tune trials whose end this session told the study
        self._told: set[str] = set()  # Tune trials whose end the study had before the restore

    #: What one driver session holds (restore() rebuilds it from the study): never pickled.
    _SESSION_STATE = ("_study", "_budget", "_known", "_live", "_reported", "_queue", "_done", "_told")

    def __getstate__(self) -> dict:
        # Pickled into tuner.pkl: the settings (Tune's Searcher's own included).
        return {k: v for k, v in self.__dict__.items() if k not in self._SESSION_STATE}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"sampler_margin": None, **state})  # (saved before the margin existed: none)
        self._reset()

    def _sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        name, _, startup_trials = self.sampler_spec
        return make_sampler(name, seed, startup_trials, margin=self.sampler_margin)

    @property
    def study(self) -> optuna.Study:
        """The Optuna study the searcher asks and tells."""
        if self._study is None:
            self._study = self._open_study(self._sampler(self.sampler_spec[1]))
        return self._study

    def _open_study(self, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        return optuna.create_study(
            study_name=self.study_name,
            storage=make_storage(self.storage_url),
            sampler=sampler,
            pruner=optuna.pruners.NopPruner(),
            direction="maximize" if self.mode == "max" else "minimize",
            load_if_exists=True,
        )

    def set_budget(self, budget: Budget | None) -> None:
        """The search's time budget (default: the current driver session's): once it says trials
        must end, no new trial is proposed (``Searcher.FINISHED``)."""
        self._budget = budget

    def _current_budget(self) -> Budget | None:
        if self._budget is not None:
            return self._budget
        session = current_session()
        return None if session is None else session.budget

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return False  # the space, metric and mode are the searcher's own

    # -- Tune's calls ------------------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict | str | None:
        budget = self._current_budget()
        if budget is not None and budget.stop_now():
            budget.end("trials")
            self._drop_queue("the time budget ended the trials before a Tune trial took it")
            return Searcher.FINISHED
        trial = self._live.get(trial_id)
        if trial is None:
            trial = self._queue.pop(0) if self._queue else self.study.ask(fixed_distributions=self.space)
            trial.set_user_attr(TUNE_TRIAL_ATTR, trial_id)
            self._live[trial_id] = trial
            self._reported.setdefault(trial_id, set())
            self._known.add(trial_id)
        return dict(trial.params)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._told or trial_id in self._done:
            return  # the study already holds this trial's end
        value = result.get(self.metric)
        if value is None or ("val_accuracy" in result and result["val_accuracy"] is None):
            # An epoch the trial did not validate (trial_train_config): no score yet, or the last
            # window's, already in the study at the epoch it was measured.
            return
        trial = self._live.get(trial_id)
        step = result_epoch(result)  # (the study's steps are epochs: a trial may report every few)
        if trial is None or not step or step in self._reported[trial_id]:
            return
        trial.report(float(value), step)
        self._reported[trial_id].add(step)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._tell(trial_id, result or {}, error)
        budget = self._current_budget()
        if budget is not None:
            budget.save_at_event()  # the time spent up to this trial's end, with it (not only at heartbeats)
        if not error:  # Tune's saved state holds the trial (StudyGuard.on_trial_complete), the study its end
            failpoints.hit("search.after_trial_saved")

    def _tell(self, trial_id: str, result: dict, error: bool) -> None:
        if trial_id in self._told:  # told before the driver stopped, after Tune's last snapshot
            self._told.discard(trial_id)
            self._done.add(trial_id)
            self._ended_again(trial_id, result, error)
            return
        if trial_id in self._done:
            logger.warning("trial %s ended again; the study keeps its first end", trial_id)
            return
        trial = self._live.pop(trial_id, None)
        if trial is None:
            logger.warning("trial %s ended, but this searcher never proposed it; the study is not told", trial_id)
            return
        self._done.add(trial_id)
        reported = self._reported.pop(trial_id, set())
        step, value = (result_epoch(result) or None), result.get(self.metric)
        state, values = optuna.trial.TrialState.COMPLETE, value
        if step is not None:
            # Tune hands the last result to on_trial_complete only (not on_trial_result): report it
            # too, so the study holds every epoch's score, the last included.
            trial.set_user_attr(FINAL_STEP_ATTR, int(step))
            if value is not None and not error and int(step) not in reported:
                trial.report(float(value), int(step))
            if not error and value is not None and self.max_steps is not None and int(step) < self.max_steps:
                # Stopped early by the scheduler: PRUNED (Optuna keeps the last intermediate value
                # as the trial's value; TPE ranks pruned trials below complete ones by the step they
                # reached, then by that value).
                state, values = optuna.trial.TrialState.PRUNED, None
        if value is None:
            state = _FAIL if error else optuna.trial.TrialState.PRUNED
        try:
            self.study.tell(trial, values, state=state)
        except Exception as exc:  # e.g. a NaN score
            logger.warning("could not record trial %s as %s (%s); recording it FAIL", trial_id, state.name, exc)
            try:
                self.study.tell(trial, state=_FAIL, skip_if_finished=True)
            except Exception as again:  # pragma: no cover - the storage itself failed
                logger.warning("could not record trial %s: %s", trial_id, again)

    def _ended_again(self, trial_id: str, result: dict, error: bool) -> None:
        """A trial whose end the study already had ended again after the restore."""
        told = study_trials_by_tune_id(self.study).get(trial_id)
        value = result.get(self.metric)
        if told is None:
            return
        if told.state == _FAIL and value is not None and not error:
            # A failed trial retried with --resume-errored succeeded: record the success as a new
            # Optuna trial (a finished one cannot change), linked to the failed attempt.
            self.study.add_trial(
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

    def _drop_queue(self, why: str) -> None:
        """Proposals asked at a restore that no Tune trial will take: marked orphaned, FAIL."""
        while self._queue:
            trial = self._queue.pop(0)
            trial.set_user_attr(ORPHAN_ATTR, why)
            self.study.tell(trial, state=_FAIL, skip_if_finished=True)

    # -- Tune's snapshot ---------------------------------------------------------------------------
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"format": _SAVE_FORMAT, "trials": sorted(self._known)}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            saved = pickle.load(f)
        if not isinstance(saved, dict) or saved.get("format") != _SAVE_FORMAT:
            raise SearchError(
                f"{checkpoint_path} is not a snapshot of autoaug's StudySearcher (format {_SAVE_FORMAT}): a search "
                "started by another version of autoaug cannot be resumed by this one; start it again with --overwrite"
            )
        budget = self._budget  # set_budget's, before Tune restores the state
        self._reset()
        self._budget = budget
        self._known = set(saved["trials"])
        # The sampler's random state is the study's start's: replaying it would propose the same
        # policies as before the crash. A fresh sampler seeded from (seed, trials in the study)
        # proposes new ones, reproducibly.
        seed = self.sampler_spec[1]
        num_trials = len(optuna.load_study(study_name=self.study_name, storage=make_storage(self.storage_url)).trials)
        self._study = self._open_study(self._sampler((seed + 1_000_003 * num_trials) % 2**32))
        self._reconcile()

    def _reconcile(self) -> None:
        study = self.study
        trials = study.get_trials(deepcopy=False)
        latest = study_trials_by_tune_id(study)
        replaced = {t.user_attrs[REPLACES_ATTR] for t in trials if REPLACES_ATTR in t.user_attrs}
        self._told = {tid for tid in self._known if tid in latest and latest[tid].state.is_finished()}
        # Tune trials Tune resumes whose Optuna trial the dead driver left RUNNING (or whose new one
        # it enqueued before it died): they continue in a new Optuna trial.
        resumed = {tid for tid in self._known if tid in latest and latest[tid].state in (_RUNNING, _WAITING)}
        values = {t.number: dict(t.intermediate_values) for t in trials}
        renewed = 0
        for ft in trials:
            if ft.state != _RUNNING:
                continue
            if ft.number not in replaced:
                tid = ft.user_attrs.get(TUNE_TRIAL_ATTR)
                attrs: dict[str, Any] = {REPLACES_ATTR: ft.number}
                if WARM_START_ATTR in ft.user_attrs:  # (where the local sampler starts)
                    attrs[WARM_START_ATTR] = ft.user_attrs[WARM_START_ATTR]
                if tid in resumed and latest[tid].number == ft.number:
                    attrs[TUNE_TRIAL_ATTR] = tid
                params = {k: v for k, v in ft.params.items() if k in self.space}
                study.enqueue_trial(params, user_attrs=attrs)
                renewed += 1
            study.tell(ft.number, state=_FAIL, skip_if_finished=True)
        # Ask the new trials back (Optuna gives the oldest waiting trial first: a warm-start point
        # not yet proposed may come before them, and goes to the next new Tune trial).
        waiting = len(study.get_trials(deepcopy=False, states=(_WAITING,)))
        while resumed - set(self._live) and waiting > 0:
            waiting -= 1
            trial = study.ask(fixed_distributions=self.space)
            tid = trial.user_attrs.get(TUNE_TRIAL_ATTR)
            if tid in resumed and tid not in self._live:
                self._live[tid] = trial
                self._reported[tid] = set()
                for step, value in sorted(values.get(trial.user_attrs.get(REPLACES_ATTR), {}).items()):
                    trial.report(value, step)  # the epochs before the crash
                    self._reported[tid].add(step)
            else:
                self._queue.append(trial)
        if renewed or self._told:
            logger.info(
                "restored study: %d Optuna trial(s) left running asked again (%d continuing a Tune trial), "
                "%d trial(s) already told",
                renewed,
                len(resumed),
                len(self._told),
            )
