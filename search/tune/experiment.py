"""The one place a Ray Tune experiment of a search is built, restored and run: what every method
shares.

An :class:`Experiment` names everything that differs between the methods' experiments (the
training method runs one, the density method one per fold and round, PBA one population): its
Tune name and storage, its Optuna study, how many trials of how many steps, the scheduler (ASHA,
FIFO, or the method's own), the parameter space (Optuna's proposals, or the method's own), the
checkpoints kept, the sampler's seed, the warm-start proposals, the trial function with its
parameters and the method's own callbacks. The rest comes from the search's configuration, the
same for every experiment of a search: the space, the sampler, the concurrency, the trials'
resources, retries, actor reuse and MLflow logging.

* **Search algorithm**: :class:`autoaug.search.tune.searcher.StudySearcher` (a Tune ``Searcher`` on
  Optuna's ask-and-tell) over :meth:`SearchSpace.distributions`, wrapped in ``ConcurrencyLimiter``;
  the study lives in the Optuna storage ``study_url``, each Optuna trial carrying the user
  attribute ``tune_trial_id``. Warm-start proposals are enqueued in a new study. A method that
  proposes its own trials gives Tune's parameter space instead (``param_space``: PBA's
  population): no study, no concurrency limit.
* **Scheduler**: ASHA on :data:`~autoaug.search.score.METRIC` with
  ``time_attr="epoch"`` (the epoch a result reports: a trial may report every few), its rungs cutting only while measured to rank
  (:class:`~autoaug.search.tune.schedulers.RankedRungs`, first by ``rung_calibration``), or FIFO;
  both guarded (:class:`~autoaug.search.tune.schedulers.StudyGuard`); or the method's own
  (``scheduler``: PBA's PBT).
* **Trials**: the trial function under ``tune.with_parameters`` (shared values travel once
  through Ray's object store) and ``tune.with_resources``; ``FailureConfig(max_failures)``
  retries a trial that raises from its last checkpoint.
* **This driver session** (:class:`autoaug.search.tune.session.DriverSession`): the progress display
  and the time budget are never pickled with Tune's state; a new or restored tuner gets this
  driver's (:func:`~autoaug.search.tune.session.attach_session`), current while :func:`fit` runs it.
* **Progress**: :class:`autoaug.search.tune.progress.ProgressCallback` feeds the search's display.
* **A full or read-only filesystem** (:mod:`autoaug.search.tune.tune_storage`): the first trial it
  makes fail ends the experiment (the search turns that into one ``StorageError`` line); Tune's saved
  state keeps a complete copy that :func:`restore_tuner` puts back if a full disk cut it short.
* **Time budget** (:class:`autoaug.search.budget.Budget`, optional): the scheduler and the
  searcher end the experiment when the search's budget says so
  (:class:`~autoaug.search.tune.schedulers.BudgetStop`).

:func:`tune_output` sets, for the time of a search only, the environment variables that keep
Ray Tune's own console output out of the way of the progress display.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from ray import tune
from ray.tune.search import ConcurrencyLimiter

from autoaug.core.errors import AutoaugError
from autoaug.search.decide.warm_start import WARM_START_ATTR
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC, MODE
from autoaug.search.tune.loggers import experiment_loggers
from autoaug.search.tune.progress import ProgressCallback, TuneTrialLines
from autoaug.search.tune.schedulers import make_scheduler
from autoaug.search.tune.searcher import StudySearcher
from autoaug.search.tune.session import DriverSession, StoppedTrials, attach_session, running
from autoaug.search.tune.study import SEARCH_ATTR, label_study
from autoaug.search.tune.tune_storage import SearchFiles, StateCopy, StorageGuard, repair_state, tuner_state_error

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.budget import Budget
    from autoaug.search.config import SearchConfig
    from autoaug.search.methods.base import PreparedSearch

__all__ = [
    "Experiment",
    "run_experiment",
    "build_tuner",
    "restore_tuner",
    "can_restore",
    "fit",
    "tune_output",
    "TRIAL_DIR_PREFIX",
]

#: Trial folders (and Tune's trial names) are ``trial_<id>``.
TRIAL_DIR_PREFIX = "trial_"


@dataclass(frozen=True)
class Experiment:
    """What one Tune experiment of a search is (the search's configuration supplies the rest)."""

    name: str  # the Tune experiment under ``storage`` and the Optuna study in ``study_url``
    storage: str  # Tune's storage_path: a folder or URI
    study_url: str | None  # None: no study (``param_space``)
    num_trials: int
    max_steps: int  # results a trial reports (epochs)
    seed: int  # the sampler's
    trainable: Any  # a Tune function or class trainable
    parameters: Mapping[str, Any]  # tune.with_parameters keywords of the trainable
    asha: tuple[int, float] | None = None  # (grace period, reduction factor); None: FIFO
    #: Calibration's full-length runs, each its search score by epoch: how well ASHA's rungs rank
    #: before any trial (:func:`autoaug.search.decide.rungs.calibration_scores`; a rung cuts only
    #: while measured to rank, :class:`~autoaug.search.tune.schedulers.RankedRungs`).
    rung_calibration: Sequence[Mapping[int, float]] = ()
    warm_start: Sequence[Mapping[str, Any]] = ()  # parameter dicts proposed first (a new study)
    run_dir: str | None = None  # recorded in the study's attributes
    #: Tune's parameter space of a method that proposes its own trials (one sample of it); None:
    #: Optuna proposes ``num_trials`` trials in the search's space.
    param_space: Mapping[str, Any] | None = None
    #: The method's own Tune scheduler; None: ASHA (``asha``) or FIFO, guarded by the study.
    scheduler: Any = None
    #: Checkpoints kept per trial (None: every one).
    keep_checkpoints: int | None = 2
    #: The method's own Tune callbacks (after the progress lines, before the state copy).
    callbacks: Sequence[Any] = ()
    #: What proposes the trials, in the MLflow tags; None: the search's Optuna sampler.
    proposer: str | None = None
    #: How far a trial must beat the incumbent to replace it, for a sampler that moves from one
    #: (``local``); None: the best finished trial is the incumbent.
    sampler_margin: float | None = None
    #: Ray resources of one trial, and trials at once, when they are not the search's
    #: (``cpus_per_trial`` / ``gpus_per_trial``, ``concurrency``): trials trained by pack servers
    #: (:mod:`autoaug.search.tune.pack`) reserve next to nothing, and run a pack per server.
    trial_resources: Mapping[str, float] | None = None
    max_concurrent: int | None = None

    @property
    def uri(self) -> str:
        return RunDir(self.storage, self.name).uri


def _trial_name(trial: Any) -> str:
    return f"{TRIAL_DIR_PREFIX}{trial.trial_id}"


def _trainable(config: SearchConfig, exp: Experiment) -> Any:
    fn = tune.with_parameters(exp.trainable, **dict(exp.parameters))
    resources = exp.trial_resources or {"cpu": config.cpus_per_trial, "gpu": config.gpus_per_trial}
    return tune.with_resources(fn, dict(resources))


def _study_search(config: SearchConfig, exp: Experiment) -> Any:
    """The Optuna search algorithm of ``exp``: its study, the warm start enqueued in a new one,
    behind the search's concurrency limit."""
    searcher = StudySearcher(
        config.space.distributions(),
        metric=METRIC,
        mode=MODE,
        study_name=exp.name,
        storage_url=exp.study_url,
        sampler=config.sampler,
        seed=exp.seed,
        startup_trials=config.startup_trials,
        max_steps=exp.max_steps,
        sampler_margin=exp.sampler_margin,
    )
    for i, params in enumerate(exp.warm_start):  # a fresh study only: a restored one has its enqueued trials
        searcher.study.enqueue_trial(dict(params), user_attrs={WARM_START_ATTR: i}, skip_if_exists=True)
    searcher.study.set_user_attr(  # whose study it is, in a database other searches share too
        SEARCH_ATTR, {"name": exp.name, "run_dir": exp.run_dir or exp.uri, "space": config.space.to_dict()}
    )
    label_study(searcher.study, config.space, METRIC)  # the objective's name, the parameters' meaning
    limit = exp.max_concurrent or config.concurrency
    return ConcurrencyLimiter(searcher, max_concurrent=limit) if limit else searcher


def run_experiment(
    search: PreparedSearch,
    exp: Experiment,
    fresh: Callable[[Experiment], Experiment] | None = None,
    run_dir: RunDir | None = None,
) -> tune.Tuner:
    """What every method's search does with a Tune experiment, run to its end (:func:`fit`) and
    returned (``get_results``): restored where an earlier driver session of ``search`` left Tune's
    saved state in ``run_dir`` (default: the search's run directory; :func:`restore_tuner`: its
    finished trials kept, the others continued from their checkpoints, failed ones retried with
    ``resume_errored``), otherwise built new as ``fresh(exp)`` (what a new experiment adds: the
    warm start's first proposals; ``fresh`` may clear what a session that saved nothing left).
    Both get this session's display and time budget."""
    run = run_dir or search.run
    if can_restore(run.uri):
        tuner = restore_tuner(
            search.config, exp, search.display, resume_errored=search.resume_errored, budget=search.budget
        )
    else:
        tuner = build_tuner(search.config, fresh(exp) if fresh else exp, search.display, search.budget)
    fit(tuner)
    return tuner


def build_tuner(config: SearchConfig, exp: Experiment, display: Progress, budget: Budget | None = None) -> tune.Tuner:
    """A new ``tune.Tuner`` for ``exp`` with ``config``'s shared settings, ended early by
    ``budget`` (None: no budget)."""
    search_alg = _study_search(config, exp) if exp.param_space is None else None
    scheduler, stopped = exp.scheduler, None
    if scheduler is None:
        # One object, shared by the scheduler (which fills it) and the progress lines (which read it).
        stopped = StoppedTrials()
        scheduler = make_scheduler(
            exp.asha, exp.max_steps, exp.study_url, exp.name, config.max_failures, stopped, exp.rung_calibration
        )
    callbacks: list[Any] = [
        StorageGuard(),
        ProgressCallback(exp.num_trials, exp.max_steps, stopped=stopped or (), display=display),
        TuneTrialLines(metric=METRIC),
        *exp.callbacks,
        StateCopy(exp.uri),
        SearchFiles(),
    ]
    callbacks += experiment_loggers(config.mlflow_uri, exp.name, exp.proposer or config.sampler)
    tuner = tune.Tuner(
        _trainable(config, exp),
        param_space=None if exp.param_space is None else dict(exp.param_space),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode=MODE,
            search_alg=search_alg,
            scheduler=scheduler,
            num_samples=exp.num_trials if exp.param_space is None else 1,
            reuse_actors=config.reuse_actors,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_name,
        ),
        run_config=tune.RunConfig(
            name=exp.name,
            storage_path=exp.storage,
            callbacks=callbacks,
            verbose=1 if config.verbose >= 2 else 0,
            failure_config=tune.FailureConfig(max_failures=config.max_failures, fail_fast=False),
            # Two by default: Tune's experiment snapshot can lag one report behind, and a restored
            # trial needs the checkpoint that snapshot names.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=exp.keep_checkpoints),
        ),
    )
    # The scheduler, the searcher and the progress lines get the budget here, as a restored tuner's do.
    attach_session(tuner, DriverSession(exp.name, display, budget, exp.max_steps))  # (with Ray Client: a warning)
    return tuner


def restore_tuner(
    config: SearchConfig,
    exp: Experiment,
    display: Progress,
    *,
    resume_errored: bool = False,
    budget: Budget | None = None,
) -> tune.Tuner:
    """``exp`` restored from its saved state (unfinished trials continue from their latest
    checkpoints): the saved state repaired first if a full disk cut it short
    (:func:`~autoaug.search.tune.tune_storage.repair_state`), this driver's ``display`` and this
    session's time ``budget`` attached (:func:`~autoaug.search.tune.session.attach_session`). The
    callbacks, the scheduler and the searcher are the ones ``Tuner.restore`` unpickles from the
    experiment's ``tuner.pkl``: a search started by another version of autoaug may not resume."""
    uri = exp.uri
    repaired = repair_state(uri)
    if repaired is not None:
        display.log(repaired)
    try:
        tuner = tune.Tuner.restore(
            uri, trainable=_trainable(config, exp), resume_unfinished=True, resume_errored=resume_errored
        )
    except AutoaugError:
        raise
    except Exception as exc:  # tuner.pkl cut short, corrupted or from another version: one line naming it
        unreadable = tuner_state_error(RunDir(config.storage, config.name), uri)
        if unreadable is None:
            raise
        raise unreadable from exc
    attach_session(tuner, DriverSession(exp.name, display, budget, exp.max_steps))
    return tuner


def can_restore(uri: str) -> bool:
    """Whether Tune saved enough state at ``uri`` to restore the experiment."""
    return tune.Tuner.can_restore(uri)


def fit(tuner: tune.Tuner) -> None:
    """Run the experiment until its trials are done (or the driver is interrupted). What a full or
    read-only filesystem makes it raise becomes one line in :func:`autoaug.search.driver._search`."""
    with warnings.catch_warnings(), running(tuner), signal_handlers_kept():  # this session's display and budget
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tuner.fit()


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """SIGINT's and SIGUSR1's handlers put back after the block. Tune's ``fit`` replaces them with its
    graceful stop and leaves it there when the experiment ends: a Ctrl-C (or SIGTERM, which
    ``autoaug`` handles as one: :mod:`autoaug.core.interrupt`) while the search re-scores or stores
    only set the finished experiment's flag, and the search went on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, getattr(signal, "SIGUSR1", None)) if sig}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


#: Ray's loggers of Tune's copies to the run directory: a failed copy (a full disk) is logged with
#: its traceback; :func:`tune_output` keeps it to one line (the search ends with its own).
_SYNC_LOGGERS = ("ray.train._internal.syncer", "ray.tune.execution.experiment_state")


class _OneLine(logging.Filter):
    """A log record's message and exception on one line: the first line of the message and the
    last line of any traceback in it or attached to it."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        lines = [line for line in text.splitlines() if line.strip()]
        if exc is None and len(lines) <= 1:
            return True
        tail = f"{type(exc).__name__}: {exc}" if exc is not None else lines[-1].strip() if len(lines) > 1 else ""
        record.msg = " ".join(part for part in (lines[0].rstrip() if lines else "", tail) if part).replace("\n", " ")
        record.args, record.exc_info, record.exc_text, record.stack_info = (), None, None, None
        return True


#: Ray's logger of a trial's checkpoint handling: see :class:`_GoneCheckpoint`.
_CONTROLLER_LOGGER = "ray.tune.execution.tune_controller"


class _GoneCheckpoint(logging.Filter):
    """Drops Tune's "Error handling checkpoint" record (an ERROR with its traceback) when all that
    failed is deleting a checkpoint that is no longer there. Tune keeps a trial's last
    ``keep_checkpoints``; a driver stopped after a trial's newer checkpoints replaced older ones,
    but before Tune's next snapshot, leaves a snapshot naming checkpoints already deleted, and on
    ``--resume`` Tune's retention tries to delete them again (``FileNotFoundError`` in Ray 2.60's
    ``_delete_fs_path``). The new checkpoint is registered before that deletion: nothing is lost,
    and the user was shown a traceback for every trial in flight at the stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, FileNotFoundError) or "Error handling checkpoint" not in str(record.msg):
            return True
        frame = exc.__traceback__
        while frame is not None:
            if frame.tb_frame.f_code.co_name == "_delete_fs_path":
                return False
            frame = frame.tb_next
        return True


@contextlib.contextmanager
def tune_output(verbose: int) -> Iterator[None]:
    """For the time of the block (a search, its Ray session included), Ray Tune's own output as
    ``verbose`` asks; the environment is restored afterwards."""
    settings = {
        # Tune snapshots the experiment state after trial checkpoints on purpose (a restored run
        # resumes close to where the driver stopped): its "snapshotting triggered multiple times"
        # warning is expected noise.
        "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    }
    if verbose < 2:
        # Tune's console output (its configuration box, "View detailed results here", the
        # TensorBoard hint) only with -v: the legacy output engine at verbose=0 prints nothing;
        # the progress display says what matters. Each failure is one progress line (full
        # tracebacks only when verbose).
        settings["RAY_AIR_NEW_OUTPUT"] = "0"
        settings["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "0"
        # A trial actor's failure that Tune ended the experiment on (a full disk) is not fetched
        # again: Ray would print it as an "unhandled error" traceback on the way out.
        settings["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
    one_line, gone = _OneLine(), _GoneCheckpoint()
    logging.getLogger(_CONTROLLER_LOGGER).addFilter(gone)
    if verbose < 2:
        for name in _SYNC_LOGGERS:
            logging.getLogger(name).addFilter(one_line)
    saved = {k: os.environ.get(k) for k in settings}
    for key, value in settings.items():
        if key == "RAY_AIR_NEW_OUTPUT" or key not in os.environ:  # the user's own choice wins
            os.environ[key] = value
    try:
        yield
    finally:
        logging.getLogger(_CONTROLLER_LOGGER).removeFilter(gone)
        for name in _SYNC_LOGGERS:
            logging.getLogger(name).removeFilter(one_line)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
