"""Run a policy search with Ray Tune + Optuna, resume it, and turn it into a stored policy.

::

    from autoaug.search.config import SearchConfig
    from autoaug.search.tuner import run_search, resume_search

    config = SearchConfig.from_preset("cpu", name="cifar10-r8", data="train.parquet")
    outcome = run_search(config)                     # embedded local Ray, or address="ray://..."
    print(outcome.policy.table(), outcome.reference)  # e.g. cifar10-r8@1
    outcome = resume_search("cifar10-r8")            # after the driver was killed or interrupted

How the pieces fit (``ray.tune.Tuner``):

* **Search algorithm**: ``OptunaSearch`` over :meth:`SearchSpace.distributions` (TPE by default:
  multivariate, constant liar, seeded), wrapped in ``ConcurrencyLimiter``. The Optuna study lives
  in an Optuna storage -- ``optuna.db`` (SQLite) in the run directory unless ``optuna_storage``
  names another -- so ``optuna.load_study(study_name=NAME, storage=URL)`` can inspect it. Each
  Optuna trial carries the user attribute ``tune_trial_id``.
* **Scheduler**: ``ASHAScheduler`` on ``val_accuracy`` with ``time_attr="training_iteration"``
  (one iteration = one epoch), or FIFO when early stopping is off.
* **Trials**: :func:`autoaug.search.trial.run_trial` under ``tune.with_resources`` (CPUs, fractional
  GPUs) and ``tune.with_parameters`` (the shared training configuration: common random
  numbers); ``reuse_actors`` keeps trial processes alive between trials. Each epoch is reported
  with ``ray.tune.report(metrics, checkpoint=...)``; ``FailureConfig(max_failures)`` retries a
  trial that raises from its last checkpoint before marking it failed.
* **Run directory** ``{storage}/{name}`` (Tune's ``storage_path``/``name``, a local folder or a
  URI) holds Tune's experiment state, trial checkpoints, ``search_config.json``, the SQLite
  study and, at the end, ``result.json``. :func:`resume_search` restores it with
  ``tune.Tuner.restore``.

Consistency between Tune and Optuna across a driver crash
--------------------------------------------------------
Tune snapshots its experiment state (trials + searcher) periodically and after trial
checkpoints; Optuna writes to its storage immediately. After ``kill -9`` the study can therefore
be slightly *ahead* of the snapshot. On restore the two are reconciled, the study being the record
of which trials ended:

* :class:`StudyGuard` (mixed into the ASHA/FIFO scheduler) stops, before they start, the restored
  trials whose Optuna trial is finished, so a finished trial is never trained again; their result
  is the study's (:func:`_records`);
* :class:`StudySearch` does not tell the study twice, hands an Optuna trial asked for a Tune
  trial that the snapshot never recorded (an *orphan*) to the next new Tune trial -- no proposal
  is lost and nothing is left RUNNING -- and marks an orphan whose parameters were not all
  written FAIL with the user attribute ``autoaug_orphaned``; a failed trial retried with
  ``resume_errored`` that succeeds becomes a new Optuna trial linked by ``autoaug_retry_of``.

:func:`check_study` verifies the result: one finished Optuna trial per finished Tune trial, same
parameters, same score, nothing left running.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import optuna
import pyarrow.fs as pafs
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from autoaug.search.assemble import (
    AssembledPolicy,
    TrialRecord,
    assemble_policy,
    build_provenance,
    utc_now,
)
from autoaug.search.config import METRIC, MODE, SearchConfig
from autoaug.search.space import SearchSpace
from autoaug.search.trial import run_trial

__all__ = [
    "run_search",
    "resume_search",
    "SearchOutcome",
    "SearchError",
    "SearchFailedError",
    "SearchInterruptedError",
    "RunExistsError",
    "StudySearch",
    "StudyGuard",
    "GuardedASHAScheduler",
    "GuardedFIFOScheduler",
    "study_trials_by_tune_id",
    "RunDir",
    "make_sampler",
    "open_study",
    "check_study",
    "describe_data",
    "study_url",
    "TUNE_TRIAL_ATTR",
    "ORPHAN_ATTR",
]

logger = logging.getLogger(__name__)

#: Optuna user attribute holding the Ray Tune trial id of each Optuna trial.
TUNE_TRIAL_ATTR = "tune_trial_id"
#: Optuna user attribute of trials asked by a driver that died before Tune recorded them.
ORPHAN_ATTR = "autoaug_orphaned"
#: Optuna user attribute: the ``training_iteration`` (epoch) of the trial's final result.
FINAL_STEP_ATTR = "training_iteration"
#: Optuna user attribute (the failed attempt's number) of a retried failure's new trial.
RETRY_ATTR = "autoaug_retry_of"

CONFIG_FILE = "search_config.json"
RESULT_FILE = "result.json"
STUDY_FILE = "optuna.db"
_TRIAL_DIR_PREFIX = "trial_"


# ----------------------------------------------------------------------------------------------
# Errors and the outcome


class SearchError(RuntimeError):
    """A search could not produce a policy."""


class SearchFailedError(SearchError):
    """Every trial failed; the message shows the first error."""


class SearchInterruptedError(SearchError):
    """The search stopped before all trials finished (Ctrl-C, or the cluster went away)."""


class RunExistsError(SearchError, ValueError):
    """A run directory with this name already exists."""


@dataclass(frozen=True)
class SearchOutcome:
    """What a finished search produced."""

    policy: Any  # policies.Policy
    score: float
    best_trial: TrialRecord
    trials: tuple[TrialRecord, ...]
    assembled: AssembledPolicy
    store_uri: str
    version: int
    run_dir: str
    provenance: Mapping[str, Any]
    study_problems: tuple[str, ...] = ()

    @property
    def reference(self) -> str:
        """``name@version`` in the policy store."""
        return f"{self.policy.name}@{self.version}"

    def summary(self) -> str:
        counts = self.provenance["counts"]
        lines = [
            self.policy.table(),
            "",
            f"best trial {self.best_trial.trial_id}: {METRIC} {self.score:.4f} "
            f"({self.best_trial.epochs} epoch{'' if self.best_trial.epochs == 1 else 's'})",
            f"trials: {counts['completed']} completed, {counts['early_stopped']} stopped early, "
            f"{counts['failed']} failed; final policy = best {len(self.assembled.selected)} "
            f"trials, {len(self.policy.sub_policies)} sub-policies "
            f"({self.assembled.duplicates_removed} duplicates removed)",
            f"stored as {self.reference} in {self.store_uri}",
            f"run directory: {self.run_dir}",
        ]
        if self.study_problems:
            lines.append(f"WARNING: Optuna study inconsistent with Tune: {'; '.join(self.study_problems)}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# The run directory


class RunDir:
    """``{storage}/{name}``: a local folder or a URI, read and written through ``pyarrow.fs``."""

    def __init__(self, storage: str, name: str):
        self.storage = storage
        self.name = name
        if "://" in storage and not storage.startswith("file://"):
            self.fs, root = pafs.FileSystem.from_uri(storage)
            self.path = f"{root.rstrip('/')}/{name}"
            self.uri = f"{storage.rstrip('/')}/{name}"
            self.local_path: str | None = None
        else:
            root = os.path.abspath(os.path.expanduser(storage.removeprefix("file://")))
            self.fs = pafs.LocalFileSystem()
            self.path = self.uri = self.local_path = os.path.join(root, name)

    def __repr__(self) -> str:
        return f"RunDir({self.uri!r})"

    def _file(self, filename: str) -> str:
        return f"{self.path}/{filename}"

    def exists(self, filename: str | None = None) -> bool:
        path = self.path if filename is None else self._file(filename)
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def read_json(self, filename: str) -> Any:
        with self.fs.open_input_stream(self._file(filename)) as f:
            return json.loads(f.read().decode("utf-8"))

    def write_json(self, filename: str, obj: Any) -> None:
        self.fs.create_dir(self.path, recursive=True)
        data = json.dumps(obj, indent=2, sort_keys=False, default=_json_default).encode("utf-8")
        tmp = self._file(f".{filename}.tmp-{os.getpid()}")
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fs.move(tmp, self._file(filename))

    def delete(self) -> None:
        if self.exists():
            self.fs.delete_dir(self.path)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


# ----------------------------------------------------------------------------------------------
# Optuna


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler called ``name`` (see :data:`autoaug.search.config.SAMPLERS`), seeded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            # multivariate: models the joint distribution of the 30 parameters; constant_liar:
            # concurrent trials do not all get the same proposal.
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, scramble=True)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; expected one of tpe, random, qmc, cmaes, gp")


def _make_storage(url: str) -> optuna.storages.BaseStorage:
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        # Several writers (the driver, a user inspecting the study) may hold the file.
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    try:
        return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as exc:  # sqlalchemy / driver errors: show them as one line
        raise ValueError(f"cannot open Optuna storage {_redact(url)}: {type(exc).__name__}: {exc}") from None


def _redact(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def open_study(name: str, storage: str | None = None, *, runs_root: str | None = None) -> optuna.Study:
    """Load the Optuna study of search ``name`` (read it while the search runs, or after).

    ``storage``: the Optuna storage URL; default: ``optuna.db`` in the run directory
    ``{runs_root}/{name}``.
    """
    from autoaug.search.config import default_runs_root

    if storage is None:
        run = RunDir(runs_root or default_runs_root(), name)
        if run.local_path is None:
            raise ValueError("the run directory is remote: pass the Optuna storage URL explicitly")
        storage = "sqlite:///" + os.path.join(run.local_path, STUDY_FILE)
    return optuna.load_study(study_name=name, storage=storage)


class StudySearch(OptunaSearch):
    """``OptunaSearch`` that tags each Optuna trial with its Tune trial id and reconciles the
    study with Tune's restored state after a driver crash (see the module documentation)."""

    def suggest(self, trial_id: str) -> dict | None:
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
        super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self._finished_in_study():
            ot_trial = self._ot_trials.get(trial_id)
            step = (result or {}).get("training_iteration")
            if ot_trial is not None and step is not None and trial_id not in self._completed_trials:
                # The final result goes to tell(), not report(): keep its step with the trial.
                ot_trial.set_user_attr(FINAL_STEP_ATTR, int(step))
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
        elif told.state == optuna.trial.TrialState.COMPLETE and value is not None and (
            told.value is None or not math.isclose(told.value, value, rel_tol=1e-9)
        ):
            logger.warning(
                "trial %s finished again after the restore with %s=%s; the study keeps %s",
                trial_id, self.metric, value, told.value,
            )  # fmt: skip

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
                len(self._orphans), len(self._already_told),
            )  # fmt: skip

    def set_sampler_spec(self, name: str, seed: int) -> None:
        """Remember how the sampler was made (:func:`make_sampler`), to reseed it on restore."""
        self._sampler_spec = (name, seed)

    def _reseed_sampler(self, num_trials: int) -> None:
        # The sampler's random state comes back from the snapshot, which may predate proposals
        # already made (the orphans): replaying it would propose the same policies again. A fresh
        # sampler seeded from (seed, trials in the study) proposes new ones, reproducibly.
        spec = getattr(self, "_sampler_spec", None)
        if spec is None:
            self._ot_study.sampler.reseed_rng()
            return
        name, seed = spec
        sampler = make_sampler(name, (seed + 1_000_003 * num_trials) % 2**32)
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


def _final_step(frozen: optuna.trial.FrozenTrial) -> int:
    """Last ``training_iteration`` (epoch) the study recorded for a trial (0 if none)."""
    step = frozen.user_attrs.get(FINAL_STEP_ATTR)
    return int(step) if step is not None else max(frozen.intermediate_values, default=0)


def study_trials_by_tune_id(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """``{tune_trial_id: the latest Optuna trial for it}`` (a retried failure has two)."""
    out: dict[str, optuna.trial.FrozenTrial] = {}
    for ft in study.get_trials(deepcopy=False):
        tid = ft.user_attrs.get(TUNE_TRIAL_ATTR)
        if tid is not None and (tid not in out or ft.number > out[tid].number):
            out[tid] = ft
    return out


#: Trials StudyGuard stopped in this driver process (the progress line says so).
_GUARD_STOPPED: set[str] = set()


class StudyGuard:
    """Mixin for Tune schedulers: after a restore, trials the Optuna study already finished are
    stopped before they run again.

    Tune snapshots its experiment state a little after the study is told that a trial finished;
    a driver killed in between leaves Tune believing the trial is still running. On the first
    scheduling decision of a driver session, every pending trial whose Optuna trial is finished
    is stopped through ``tune_controller.stop_trial`` (the canonical path, which also informs
    the searcher and the concurrency limiter); the study's value and step are its result (see
    :func:`_records`). A trial that Tune marked ERROR and that is resumed on purpose
    (``resume_errored``) runs again.
    """

    def _setup_guard(self, study_url: str, study_name: str, max_failures: int) -> None:
        self._guard_study_url = study_url
        self._guard_study_name = study_name
        self._guard_max_failures = max_failures

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_guard_done", None)
        return state

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
            study = optuna.load_study(
                study_name=self._guard_study_name, storage=_make_storage(self._guard_study_url)
            )
        except Exception as exc:  # the search itself will fail with a clearer error
            logger.warning("cannot read the Optuna study to reconcile restored trials: %s", exc)
            return
        finished = study_trials_by_tune_id(study)
        for trial in pending:
            frozen = finished.get(trial.trial_id)
            if frozen is None or not frozen.state.is_finished():
                continue
            resumed_on_purpose = (
                frozen.state == optuna.trial.TrialState.FAIL
                and trial.num_failures > self._guard_max_failures
            )
            if resumed_on_purpose:
                continue
            logger.info(
                "trial %s finished (%s) before the driver stopped; not running it again",
                trial.trial_id, frozen.state.name,
            )  # fmt: skip
            _GUARD_STOPPED.add(trial.trial_id)
            try:
                tune_controller.stop_trial(trial)
            except Exception as exc:  # then it runs again; _records still takes the study's result
                logger.warning("could not stop restored trial %s: %s", trial.trial_id, exc)


class GuardedASHAScheduler(StudyGuard, ASHAScheduler):
    """``ASHAScheduler`` with :class:`StudyGuard`."""


class GuardedFIFOScheduler(StudyGuard, FIFOScheduler):
    """``FIFOScheduler`` with :class:`StudyGuard`."""


def _make_scheduler(config: SearchConfig, study_url: str) -> Any:
    if config.early_stopping:
        scheduler = GuardedASHAScheduler(
            time_attr="training_iteration",
            max_t=config.epochs,
            grace_period=config.grace_period,
            reduction_factor=config.reduction_factor,
        )
    else:
        scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(study_url, config.name, config.max_failures)
    return scheduler


def check_study(study: optuna.Study, trials: Sequence[TrialRecord], space: SearchSpace) -> list[str]:
    """Problems between the Optuna study and Tune's trials (empty list: consistent).

    Consistent means: every finished Tune trial has an Optuna trial (matched through
    ``tune_trial_id``; for a failure retried with ``resume_errored``, the latest one) with the same
    parameters; a scored trial is COMPLETE with the same value, a failed one FAIL; no Optuna trial
    is left RUNNING/WAITING; every other Optuna trial is an orphan marked ``autoaug_orphaned`` or a
    failed attempt followed by a retry.
    """
    problems: list[str] = []
    latest = study_trials_by_tune_id(study)
    for ft in study.get_trials(deepcopy=False):
        tid = ft.user_attrs.get(TUNE_TRIAL_ATTR)
        if ft.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING):
            problems.append(f"Optuna trial {ft.number} is still {ft.state.name}")
        if tid is None:
            if not ft.user_attrs.get(ORPHAN_ATTR):
                problems.append(f"Optuna trial {ft.number} belongs to no Tune trial")
            continue
        last = latest[tid]
        if last.number != ft.number and not (
            ft.state == optuna.trial.TrialState.FAIL and last.user_attrs.get(RETRY_ATTR) == ft.number
        ):
            problems.append(f"Tune trial {tid} has two Optuna trials ({ft.number}, {last.number})")
    known = set()
    for rec in trials:
        known.add(rec.trial_id)
        ft = latest.get(rec.trial_id)
        if ft is None:
            if rec.finished:
                problems.append(f"Tune trial {rec.trial_id} has no Optuna trial")
            continue
        try:
            same = space.to_policy(ft.params).content_hash == (rec.policy and rec.policy.content_hash)
        except ValueError:
            same = False
        if not same:
            problems.append(f"Tune trial {rec.trial_id} and Optuna trial {ft.number} have different parameters")
        if rec.succeeded:
            if ft.state != optuna.trial.TrialState.COMPLETE:
                problems.append(f"Tune trial {rec.trial_id} finished but Optuna trial {ft.number} is {ft.state.name}")
            elif not math.isclose(ft.value, rec.score, rel_tol=1e-9, abs_tol=1e-12):
                problems.append(
                    f"Tune trial {rec.trial_id} scored {rec.score} but Optuna trial {ft.number} holds {ft.value}"
                )
        elif rec.status == "failed" and ft.state != optuna.trial.TrialState.FAIL:
            problems.append(f"Tune trial {rec.trial_id} failed but Optuna trial {ft.number} is {ft.state.name}")
    for tid, ft in latest.items():
        if tid not in known:
            problems.append(f"Optuna trial {ft.number} names Tune trial {tid}, which does not exist")
    return problems


# ----------------------------------------------------------------------------------------------
# Live status


class ProgressCallback(tune.Callback):
    """Prints one line per finished trial: score, epochs, time and the best score so far."""

    def __init__(self, num_trials: int, epochs: int, stream: str = "stdout"):
        self.num_trials = num_trials
        self.epochs = epochs
        self.stream = stream

    def _print(self, text: str) -> None:
        out = sys.stdout if self.stream == "stdout" else sys.stderr
        print(text, file=out, flush=True)

    def _report(self, trials: list, trial: Any, failed: bool) -> None:
        finished = {t.trial_id for t in trials if t.status in ("TERMINATED", "ERROR")} | {trial.trial_id}
        best = None
        for t in trials:
            if t.trial_id in _GUARD_STOPPED:
                continue  # Tune's numbers for it are stale; the study holds its result
            if t.status == "TERMINATED" or (t is trial and not failed):
                score = t.last_result.get(METRIC)
                if score is not None and (best is None or score > best[0]):
                    best = (score, t.trial_id)
        head = f"[{len(finished):>{len(str(self.num_trials))}}/{self.num_trials}] trial {trial.trial_id}"
        if failed:
            what = f"FAILED: {_trial_error(trial)}"
        else:
            result = trial.last_result
            epochs = result.get("epoch", result.get("training_iteration", 0))
            stopped = " (stopped early)" if epochs < self.epochs else ""
            score = result.get(METRIC)
            if trial.trial_id in _GUARD_STOPPED:
                what = "had finished before the driver stopped (its result is in the Optuna study)"
            else:
                what = (
                    f"{METRIC} {score:.4f} after {epochs}/{self.epochs} epochs{stopped}, "
                    f"{result.get('time_total_s', 0.0):.0f} s"
                )
        tail = "" if best is None else f" | best {best[0]:.4f} ({best[1]})"
        self._print(f"{head} {what}{tail}")

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._report(trials, trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._report(trials, trial, failed=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._print(f"trial {trial.trial_id} raised ({_trial_error(trial)}); retrying from its last checkpoint")


def _root_cause(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            exc = cause
            continue
        if exc.__cause__ is not None:
            exc = exc.__cause__
            continue
        break
    return exc


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _format_exception(exc: BaseException) -> str:
    """``Type: message`` of the innermost cause (Ray wraps trial exceptions in RayTaskError)."""
    root = _root_cause(exc)
    message = str(root).strip()
    if type(root).__name__ in ("RayTaskError", "TuneError") or "Traceback" in message:
        return _one_line(message) or type(root).__name__
    message = " ".join(message.split())
    return f"{type(root).__name__}: {message}" if message else type(root).__name__


def _trial_error(trial: Any) -> str:
    """One line: the exception a trial raised (``ValueError: bad thing``)."""
    exc = None
    # While the experiment runs the error is in the driver's staging folder (``pickled_error_file``);
    # after it, in the run directory (``get_pickled_error``).
    try:
        local = trial.pickled_error_file  # needs Ray to be initialized
    except Exception:
        local = None
    if local and os.path.isfile(local):
        try:
            from ray import cloudpickle

            with open(local, "rb") as f:
                exc = cloudpickle.load(f)
        except Exception:
            exc = None
    if exc is None:
        try:
            exc = trial.get_pickled_error()
        except Exception:
            exc = None
    if exc is not None:
        return _format_exception(exc)
    try:
        err = trial.get_error()
    except Exception:
        err = None
    if err is not None:
        return _one_line(str(err)) or type(err).__name__
    return "unknown error (see the trial's error.txt)"


# ----------------------------------------------------------------------------------------------
# Data description (also validates the data before Ray starts)


def describe_data(train_config: Any) -> dict[str, Any]:
    """Dataset and split fingerprints of the trainer's reduced split, computed the way the
    trainer computes them. Raises ``ValueError`` (``DatasetError``) for unreadable data."""
    from autoaug.proxy_models.data import open_dataset, reduced_split

    ds = open_dataset(train_config.data, split="train")
    fingerprint = ds.fingerprint()
    split = reduced_split(
        ds.labels, train_size=train_config.train_size or None, val_size=train_config.val_size,
        seed=train_config.split_seed, dataset_fingerprint=fingerprint,
    )  # fmt: skip
    return {
        "dataset": {
            "source": str(train_config.data),
            "fingerprint": fingerprint,
            "num_images": len(ds),
            "classes": list(ds.classes),
        },
        "split": {
            "fingerprint": split.fingerprint,
            "seed": int(split.seed),
            "train_size": int(len(split.train)),
            "val_size": int(len(split.val)),
        },
    }


# ----------------------------------------------------------------------------------------------
# Ray


@contextmanager
def ray_session(address: str | None = None, *, verbose: int = 1) -> Iterator[None]:
    """Connect to the Ray cluster at ``address``, or start an embedded local Ray without the
    dashboard; shut it down afterwards (unless Ray was already initialized by the caller)."""
    import ray

    if ray.is_initialized():
        yield
        return
    kwargs: dict[str, Any] = {
        "log_to_driver": verbose >= 2,
        "logging_level": logging.INFO if verbose >= 2 else logging.WARNING,
    }
    if address is None:
        kwargs["include_dashboard"] = False
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = address or "a local Ray instance"
        raise SearchError(f"cannot connect to {where}: {type(exc).__name__}: {exc}") from None
    try:
        yield
    finally:
        ray.shutdown()


def _trainable(config: SearchConfig, trainable: Callable | None = None) -> Any:
    fn = trainable if trainable is not None else run_trial
    fn = tune.with_parameters(
        fn, train_config=config.train.to_dict(), space=config.space.to_dict(), policy_prefix=config.name
    )
    resources = {"cpu": config.cpus_per_trial, "gpu": config.gpus_per_trial}
    return tune.with_resources(fn, resources)


def _trial_dirname(trial: Any) -> str:
    return f"{_TRIAL_DIR_PREFIX}{trial.trial_id}"


def _trial_name(trial: Any) -> str:
    return f"{_TRIAL_DIR_PREFIX}{trial.trial_id}"


def _build_tuner(config: SearchConfig, run: RunDir, study_url: str, trainable: Callable | None) -> tune.Tuner:
    storage = _make_storage(study_url)
    searcher = StudySearch(
        space=config.space.distributions(),
        metric=METRIC,
        mode=MODE,
        sampler=make_sampler(config.sampler, config.seed),
        study_name=config.name,
        storage=storage,
    )
    searcher.set_sampler_spec(config.sampler, config.seed)
    study = searcher._ot_study
    study.set_user_attr("autoaug_search", {"name": config.name, "run_dir": run.uri, "space": config.space.to_dict()})
    search_alg = ConcurrencyLimiter(searcher, max_concurrent=config.concurrency) if config.concurrency else searcher
    scheduler = _make_scheduler(config, study_url)
    callbacks = [ProgressCallback(config.num_trials, config.epochs)] if config.verbose >= 1 else []
    return tune.Tuner(
        _trainable(config, trainable),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode=MODE,
            search_alg=search_alg,
            scheduler=scheduler,
            num_samples=config.num_trials,
            reuse_actors=config.reuse_actors,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_dirname,
        ),
        run_config=tune.RunConfig(
            name=config.name,
            storage_path=config.storage,
            callbacks=callbacks,
            verbose=1 if config.verbose >= 2 else 0,
            failure_config=tune.FailureConfig(max_failures=config.max_failures, fail_fast=False),
            # The latest two checkpoints: Tune's experiment snapshot can lag one report behind
            # (it is forced every num_to_keep checkpoints and every >= 10 s), and a restored
            # trial needs the checkpoint that snapshot names.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        ),
    )


# ----------------------------------------------------------------------------------------------
# Running and resuming


def _study_url(config: SearchConfig, run: RunDir) -> str:
    if config.optuna_storage:
        return config.optuna_storage
    if run.local_path is None:  # check_runnable() refuses this earlier
        raise ValueError("a remote run directory needs an explicit Optuna storage URL")
    return "sqlite:///" + os.path.join(run.local_path, STUDY_FILE)


def study_url(config: SearchConfig, *, redact: bool = True) -> str:
    """The Optuna storage URL of ``config``'s study (password hidden unless ``redact=False``)."""
    url = _study_url(config, RunDir(config.storage, config.name))
    return _redact(url) if redact else url


def run_search(
    config: SearchConfig,
    *,
    address: str | None = None,
    session: Callable[[], Any] | None = None,
    overwrite: bool = False,
    trainable: Callable | None = None,
) -> SearchOutcome:
    """Run the search ``config`` to completion and store the assembled policy.

    Args:
        config: the search.
        address: Ray cluster to connect to (``ray://host:10001``, ``auto``); None starts an
            embedded local Ray (no dashboard). Ignored when Ray is already initialized.
        session: a function returning a context manager that connects Ray for the search (used
            instead of the plain ``ray.init`` session, e.g. ``autoaug.launch.cluster.ray_session``); it
            is entered only after the configuration and the data were checked.
        overwrite: delete an existing run directory (and its study) of the same name first.
        trainable: replaces :func:`autoaug.search.trial.run_trial` (same signature), e.g. for another
            trainer.

    Raises:
        ValueError: bad configuration or data (before Ray starts).
        RunExistsError: the run directory exists and ``overwrite`` is false.
        SearchFailedError: every trial failed (the message shows the first error).
        SearchInterruptedError: interrupted before all trials finished (resume it).
    """
    started = time.time()
    config.check_runnable()
    run = RunDir(config.storage, config.name)
    _check_store(config)
    if run.exists():
        if not overwrite:
            state = "finished" if run.exists(RESULT_FILE) else "unfinished"
            hint = "" if state == "finished" else f"resume it with --resume {config.name}, or "
            raise RunExistsError(
                f"a search named {config.name!r} already exists in {config.storage} ({state}); "
                f"{hint}choose another --name, or pass --overwrite to start it again"
            )
        _delete_run(config, run)
    data = describe_data(config.train)
    study_url = _study_url(config, run)
    if config.optuna_storage:  # the default SQLite file lives in the (new) run directory
        _check_no_study(config.name, study_url)
    state = {
        "config": config.to_dict(),
        "data": data,
        "optuna": {"storage": study_url, "study_name": config.name},
        "started_at": utc_now(),
        "started_ts": started,
        "sessions": [{"started_at": utc_now(), "kind": "start", "address": address}],
    }
    run.write_json(CONFIG_FILE, state)
    _quiet_tune(config.verbose)
    with _session(session, address, config.verbose):
        tuner = _build_tuner(config, run, study_url, trainable)
        _fit(tuner, config)
    return _finish(config, run, state, session_started=started)


def resume_search(
    name: str,
    storage: str | None = None,
    *,
    address: str | None = None,
    store: str | None = None,
    resume_errored: bool = False,
    session: Callable[[], Any] | None = None,
    trainable: Callable | None = None,
) -> SearchOutcome:
    """Continue the search ``name`` in ``storage`` (default runs root) after its driver stopped.

    Unfinished trials continue from their latest checkpoints, the remaining trials are run, and
    the result is assembled and stored as in :func:`run_search`. A search that already finished
    is not run again: its stored outcome is returned. ``resume_errored`` also retries trials
    that had failed. ``store`` overrides the policy store of the original configuration;
    ``address``/``session`` as in :func:`run_search`.
    """
    from autoaug.search.config import default_runs_root

    started = time.time()
    run = RunDir(storage or default_runs_root(), name)
    if not run.exists(CONFIG_FILE):
        raise ValueError(
            f"no search named {name!r} in {run.storage} (no {CONFIG_FILE} in {run.uri}); "
            "check --name/--resume and --storage"
        )
    state = run.read_json(CONFIG_FILE)
    config = SearchConfig.from_dict(state["config"])
    if store is not None:
        config = config.replace(store=store)
    _check_store(config)
    if run.exists(RESULT_FILE):
        return _outcome_from_result(run.read_json(RESULT_FILE), config, run)
    if not tune.Tuner.can_restore(run.uri):
        raise SearchError(
            f"the search {name!r} stopped before Ray Tune saved any state in {run.uri}; nothing to "
            f"resume: start it again with --overwrite"
        )
    state.setdefault("sessions", []).append({"started_at": utc_now(), "kind": "resume", "address": address})
    run.write_json(CONFIG_FILE, state)
    _quiet_tune(config.verbose)
    with _session(session, address, config.verbose):
        tuner = tune.Tuner.restore(
            run.uri,
            trainable=_trainable(config, trainable),
            resume_unfinished=True,
            resume_errored=resume_errored,
        )
        _fit(tuner, config)
    return _finish(config, run, state, session_started=started)


def _session(session: Callable[[], Any] | None, address: str | None, verbose: int) -> Any:
    return session() if session is not None else ray_session(address, verbose=verbose)


def _quiet_tune(verbose: int) -> None:
    # CheckpointConfig(num_to_keep=1) makes Tune snapshot the experiment state after every trial
    # checkpoint (each epoch) on purpose -- it keeps a restored run close to where the driver
    # stopped -- so its "snapshotting triggered multiple times" warning is expected noise.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if verbose < 2:
        # The progress line already shows each failure in one line (and Tune names the trial's
        # error.txt); full tracebacks only when verbose.
        os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")


def _fit(tuner: tune.Tuner, config: SearchConfig) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tuner.fit()


def _check_store(config: SearchConfig) -> None:
    from autoaug.policies.store import PolicyStore, validate_name

    try:
        validate_name(config.name)
        PolicyStore(config.store)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


def _check_no_study(name: str, url: str) -> None:
    storage = _make_storage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    if name in names:
        raise RunExistsError(
            f"the Optuna storage {_redact(url)} already holds a study named {name!r}; choose another "
            "--name, or delete that study (optuna.delete_study) first"
        )


def _delete_run(config: SearchConfig, run: RunDir) -> None:
    if config.optuna_storage:
        storage = _make_storage(config.optuna_storage)
        try:
            optuna.delete_study(study_name=config.name, storage=storage)
        except KeyError:
            pass
    run.delete()


def _records(config: SearchConfig, run: RunDir, study: optuna.Study) -> list[TrialRecord]:
    """One :class:`TrialRecord` per Tune trial, in creation order.

    Tune's final experiment state gives status, last metrics and errors. For a trial that the
    Optuna study recorded as finished while Tune's snapshot was older (the driver died in
    between, and :class:`StudyGuard` did not run it again), the study's value and step are the
    result.
    """
    from ray.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis(run.uri, default_metric=METRIC, default_mode=MODE)
    latest = study_trials_by_tune_id(study)
    names = set(config.space.param_names())
    records = []
    trials = sorted(analysis.trials, key=lambda t: (_creation_index(t), t.trial_id))
    for index, trial in enumerate(trials):
        params = {k: v for k, v in (trial.config or {}).items() if k in names}
        try:
            policy = config.space.to_policy(params, name=f"{config.name}-{trial.trial_id}")
        except ValueError:
            policy = None
        last = trial.last_result or {}
        epochs = int(last.get("epoch") or 0)
        score = last.get(METRIC)
        error = note = None
        if trial.status == "ERROR":
            status = "failed"
            error = _trial_error(trial)
        elif trial.status == "TERMINATED":
            status = "completed" if epochs >= config.epochs else "early_stopped"
        elif trial.status == "RUNNING":
            status = "running"
        else:
            status = "pending"
        frozen = latest.get(trial.trial_id)
        if frozen is not None and frozen.state.is_finished() and status in ("completed", "early_stopped"):
            # The study records a trial's first end, Tune's snapshot can be older (driver killed
            # in between): the study's result is the trial's result.
            step = _final_step(frozen)
            if frozen.state == optuna.trial.TrialState.COMPLETE and (
                int(last.get("training_iteration") or 0) != step or score is None
                or not math.isclose(float(score), frozen.value, rel_tol=1e-9)
            ):  # fmt: skip
                score, epochs = frozen.value, step
                status = "completed" if step >= config.epochs else "early_stopped"
                note = "result from the Optuna study: the trial ended after Tune's last snapshot"
            elif frozen.state == optuna.trial.TrialState.FAIL:
                status, score = "failed", None
                error = "failed before the driver stopped (the error was recorded in the Optuna study only)"
        records.append(
            TrialRecord(
                trial_id=trial.trial_id,
                index=index,
                status=status,
                params=params,
                policy=policy,
                score=None if score is None else float(score),
                epochs=epochs,
                train_time_s=last.get("train_time_s"),
                error=error,
                optuna_number=None if frozen is None else frozen.number,
                num_failures=int(getattr(trial, "num_failures", 0) or 0),
                note=note,
            )
        )
    return records


def _creation_index(trial: Any) -> int:
    # Tune's experiment tag starts with the trial counter: "3_sp0_op0_mag=9,...".
    head = str(getattr(trial, "experiment_tag", "") or "").split("_", 1)[0]
    return int(head) if head.isdigit() else sys.maxsize


def _finish(config: SearchConfig, run: RunDir, state: dict, *, session_started: float) -> SearchOutcome:
    from autoaug.policies.store import PolicyStore

    study_url = state["optuna"]["storage"]
    study = optuna.load_study(study_name=config.name, storage=_make_storage(study_url))
    trials = _records(config, run, study)
    finished = [t for t in trials if t.finished]
    if len(finished) < config.num_trials:
        raise SearchInterruptedError(
            f"search {config.name!r} stopped with {len(finished)} of {config.num_trials} trials finished; "
            f"resume it with: autoaug search --resume {config.name} --storage {config.storage}"
        )
    if not any(t.succeeded for t in trials):
        failed = [t for t in trials if t.status == "failed"]
        first = failed[0] if failed else trials[0]
        raise SearchFailedError(
            f"all {len(trials)} trials of search {config.name!r} failed; first error "
            f"(trial {first.trial_id}): {first.error or 'no score reported'}"
        )
    problems = check_study(study, trials, config.space)
    for problem in problems:
        logger.warning("Optuna study %s: %s", config.name, problem)
    assembled = assemble_policy(
        trials,
        name=config.name,
        top_n=config.top_n,
        num_magnitude_bins=config.space.num_magnitude_bins,
        base=config.space.base,
        ranges=config.space.ranges,
    )
    now = time.time()
    timing = {
        "started_at": state.get("started_at"),
        "finished_at": utc_now(),
        "elapsed_s": now - float(state.get("started_ts", session_started)),
        "last_session_s": now - session_started,
        "sessions": state.get("sessions", []),
        "trial_train_time_s": sum(t.train_time_s or 0.0 for t in trials),
    }
    optuna_info = {
        "storage": _redact(study_url),
        "study_name": config.name,
        "num_trials": len(study.trials),
        "consistent_with_tune": not problems,
        "problems": problems,
    }
    provenance = build_provenance(
        search_config=config.to_dict(),
        data=state["data"],
        trials=trials,
        assembled=assembled,
        metric=METRIC,
        mode=MODE,
        run_dir=run.uri,
        optuna=optuna_info,
        timing=timing,
    )
    store = PolicyStore(config.store)
    version = store.save(assembled.policy, config.name, metadata=provenance)
    result = {
        "policy": assembled.policy.to_dict(),
        "policy_hash": assembled.policy.content_hash,
        "stored": {"name": config.name, "version": version, "ref": f"{config.name}@{version}", "store": store.uri},
        "provenance": provenance,
    }
    run.write_json(RESULT_FILE, result)
    return _outcome_from_result(result, config, run)


def _outcome_from_result(result: Mapping[str, Any], config: SearchConfig, run: RunDir) -> SearchOutcome:
    from autoaug.policies import Policy

    prov = result["provenance"]
    trials = []
    for t in prov["trials"]:
        policy = None if t["policy"] is None else Policy.from_dict(t["policy"])
        trials.append(
            TrialRecord(
                trial_id=t["trial_id"], index=t["index"], status=t["status"], params=t["params"],
                policy=policy, score=t["score"], epochs=t["epochs"], train_time_s=t["train_time_s"],
                error=t["error"], optuna_number=t["optuna_number"], num_failures=t["num_failures"],
                note=t.get("note"),
            )
        )  # fmt: skip
    by_id = {t.trial_id: t for t in trials}
    assembly = prov["assembly"]
    selected = tuple(by_id[i] for i in assembly["selected_trials"])
    policy = Policy.from_dict(result["policy"])
    assembled = AssembledPolicy(
        policy, selected, assembly["duplicates_removed"], tuple(assembly["sub_policy_sources"])
    )
    return SearchOutcome(
        policy=policy,
        score=selected[0].score,
        best_trial=selected[0],
        trials=tuple(trials),
        assembled=assembled,
        store_uri=result["stored"]["store"],
        version=result["stored"]["version"],
        run_dir=run.uri,
        provenance=prov,
        study_problems=tuple(prov["optuna"]["problems"]),
    )
