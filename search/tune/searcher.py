"""The search's Tune searcher on its Optuna study, and what keeps the two consistent across a driver
crash -- through the public interfaces of Ray Tune and Optuna only.

:class:`StudySearcher` is a Tune ``Searcher`` (``suggest``, ``on_trial_result``,
``on_trial_complete``, ``save``, ``restore``) that owns an Optuna study through Optuna's ask-and-tell
interface: ``study.ask`` proposes a trial's parameters, ``Trial.report`` records each epoch's score,
``study.tell`` its end, and every Optuna trial carries the user attribute
:data:`~autoaug.search.tune.study.TUNE_TRIAL_ATTR` (its Tune trial id). The study is the record of what
happened; Tune's saved state (its snapshot, with this searcher's: the Tune trials it proposed) says
which Tune trials exist.

Tune snapshots its experiment state periodically, after trial checkpoints and (through
:class:`StudyGuard`) when a trial ends; Optuna writes to its storage at once. After ``kill -9`` of
the driver the study can therefore be *ahead* of the snapshot. On restore:

* a Tune trial whose Optuna trial is finished is not trained again: :class:`StudyGuard` (mixed
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
Tune's canonical paths so that Optuna stays consistent: :class:`BudgetStop` (mixed into the
schedulers) ends running trials at their next report with ``STOP`` (the searcher is told their last
result: ``PRUNED``, as an ASHA stop), stops trials that have not started through
``tune_controller.stop_trial`` and marks the search algorithm finished; :class:`StudySearcher`
proposes nothing once the budget is over. Tune's own ``time_budget_s`` is not used: its
``stop_all`` marks live trials ``TERMINATED`` without telling the searcher (their Optuna trials
would stay RUNNING) and it keeps no time across a driver restart.

What belongs to one driver session -- its progress display, its time budget -- is never pickled
with Tune's state (``tuner.pkl`` and the snapshots): the scheduler, the searcher and the callbacks
read it from the :class:`DriverSession` that :func:`attach_session` gives a tuner and that
:func:`running` makes current while ``tuner.fit()`` runs, so a tuner restored by
``Tuner.restore`` gets this driver's without reaching into it.

(Over 600 lines: the searcher, the scheduler mixins and the driver session are one protocol -- what
a restore relies on -- read together.)
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
import ray
import ray.util.client
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from autoaug.core import failpoints
from autoaug.core.errors import AutoaugWarning, SearchError
from autoaug.search.decide.rungs import MIN_PAIRS, RANKS_ABOVE, RUNG_GATE_ATTR, RungGate, gate_line
from autoaug.search.score import METRIC, asha_milestones
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
    "StudySearcher",
    "StudyGuard",
    "BudgetStop",
    "RankedRungs",
    "GuardedASHAScheduler",
    "GuardedFIFOScheduler",
    "make_scheduler",
]

logger = logging.getLogger(__name__)

_FAIL = optuna.trial.TrialState.FAIL
_RUNNING = optuna.trial.TrialState.RUNNING
_WAITING = optuna.trial.TrialState.WAITING
#: The format of :meth:`StudySearcher.save`'s file (a pickled dict).
_SAVE_FORMAT = 1


# ----------------------------------------------------------------------------------------------
# One driver session's parts of an experiment


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
        step = result.get("training_iteration")
        if trial is None or step is None or int(step) in self._reported[trial_id]:
            return
        trial.report(float(value), int(step))
        self._reported[trial_id].add(int(step))

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
        step, value = result.get("training_iteration"), result.get(self.metric)
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


# ----------------------------------------------------------------------------------------------
# The schedulers


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
            step = int(result.get("training_iteration") or 0)
            budget.observe_epoch(result.get("time_this_iter_s"), first=step == 1)
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
        step, score = int(result.get("training_iteration") or 0), result.get(METRIC)
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
            step = int(result.get("training_iteration") or 0)
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
            time_attr="training_iteration",
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
