"""The live status of a search: a progress display (trials done / running / stopped early /
failed, the best score so far, an ETA, one bar per running trial) and one line per finished trial;
trial errors as one line.

The display is an :class:`autoaug.core.progress.Progress` owned by the command (rich bars on a
terminal, plain lines otherwise, nothing with ``-q``); the Tune callback only feeds it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Container
from typing import TYPE_CHECKING, Any

from ray import cloudpickle, tune
from ray.tune.progress_reporter import TrialProgressCallback

from autoaug.search.score import METRIC
from autoaug.search.tune.epochs import result_epoch
from autoaug.search.tune.session import current_session

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.budget import Budget

__all__ = ["ProgressCallback", "TuneTrialLines", "say", "trial_error", "format_exception"]

_OVERALL = "search"


def say(text: str, display: Progress | None = None, stream: str = "stdout") -> None:
    """One line of a search's output: on the progress display's log (above its bars), or plainly
    on ``stream`` when there is no display."""
    if display is not None:
        display.log(text)
        return
    print(text, file=sys.stdout if stream == "stdout" else sys.stderr, flush=True)


class ProgressCallback(tune.Callback):
    """Feeds the search's progress display from Ray Tune's events.

    The overall bar counts epochs: ``num_trials * epochs`` in all, a trial stopped early (ASHA)
    or failed counting as all its epochs, so its ETA follows the work really left. Its status
    reads ``done/total trials (k stopped early, f failed), r running | best SCORE (trial)``. Each
    running trial has a bar of its epochs with its latest score. A finished trial also gets one
    line (``[k/N] trial ID val_accuracy ... | best ...``), the only output when stdout is not a
    terminal.

    ``stopped``: the trials the study guard stopped in this driver session
    (:class:`autoaug.search.tune.session.StoppedTrials`); Tune's numbers for them are stale.
    ``display``: the :class:`autoaug.core.progress.Progress`; None prints plain lines on
    ``stream``. ``budget``: the search's time budget (:class:`autoaug.search.budget.Budget`), whose
    stopped trials of the Tune experiment ``experiment`` are said so. Neither is pickled with
    Tune's experiment state: where not given, they are the current driver session's
    (:func:`autoaug.search.tune.session.current_session`), which a restored search attaches.
    """

    def __init__(
        self,
        num_trials: int,
        epochs: int,
        stream: str = "stdout",
        stopped: Container[str] = (),
        display: Progress | None = None,
        budget: Budget | None = None,
        experiment: str = "",
    ):
        self.num_trials = num_trials
        self.epochs = epochs
        self.stream = stream
        self.stopped = stopped
        self._display = display
        self._budget = budget
        self._experiment = experiment
        self._done: dict[str, str] = {}  # trial id -> "completed" / "stopped" / "failed"
        self._epochs: dict[str, int] = {}  # running trial id -> epochs reported
        self._best: tuple[float, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_display"] = None  # a live terminal display is this driver's, never pickled
        state["_budget"] = None  # so is the budget
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_display": None, "_budget": None, "_experiment": "", **state})

    @staticmethod
    def _session() -> Any:
        return current_session()

    @property
    def display(self) -> Progress | None:
        session = self._session() if self._display is None else None
        return self._display if session is None else session.display

    @display.setter
    def display(self, display: Progress | None) -> None:
        self._display = display

    @property
    def budget(self) -> Budget | None:
        session = self._session() if self._budget is None else None
        return self._budget if session is None else session.budget

    @property
    def experiment(self) -> str:
        session = self._session() if not self._experiment else None
        return self._experiment if session is None else session.experiment

    def _by_budget(self, trial_id: str) -> bool:
        budget = self.budget
        return budget is not None and trial_id in budget.stopped(self.experiment)

    # -- output ----------------------------------------------------------------------------------

    def _print(self, text: str) -> None:
        say(text, self.display, self.stream)

    def _status(self) -> str:
        done = len(self._done)
        stopped = sum(v == "stopped" for v in self._done.values())
        failed = sum(v == "failed" for v in self._done.values())
        budget = sum(v == "budget" for v in self._done.values())
        extra = ", ".join(
            x
            for x in (
                f"{stopped} stopped early" if stopped else "",
                f"{budget} stopped by the time budget" if budget else "",
                f"{failed} failed" if failed else "",
            )
            if x
        )
        text = f"{done}/{self.num_trials} trials{f' ({extra})' if extra else ''}, {len(self._epochs)} running"
        if self._best is not None:
            text += f" | best {self._best[0]:.4f} ({self._best[1]})"
        return text

    def _refresh(self) -> None:
        if self.display is None or not self.display.live:
            return
        if not self.display.has(_OVERALL):
            self.display.add(_OVERALL, "search", total=self.num_trials * self.epochs, unit="epochs")
        work = len(self._done) * self.epochs + sum(self._epochs.values())
        self.display.update(_OVERALL, completed=min(work, self.num_trials * self.epochs), status=self._status())

    # -- Tune events -----------------------------------------------------------------------------

    def setup(self, **info: Any) -> None:
        self._refresh()

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._epochs[trial.trial_id] = result_epoch(trial.last_result or {})
        if self.display is not None:
            self.display.add(
                f"trial:{trial.trial_id}",
                f"  trial {trial.trial_id}",
                total=self.epochs,
                unit="epochs",
                completed=self._epochs[trial.trial_id],
                status="starting",
            )
        self._refresh()

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        epoch = result_epoch(result)
        self._epochs[trial.trial_id] = epoch
        score = result.get(METRIC)
        if self.display is not None:
            status = f"{METRIC} {score:.4f}" if isinstance(score, (int, float)) else ""
            self.display.update(f"trial:{trial.trial_id}", completed=epoch, status=status)
        self._refresh()

    def _best_of(self, trials: list, trial: Any, failed: bool) -> tuple[float, str] | None:
        best = None
        for t in trials:
            if t.trial_id in self.stopped:
                continue  # Tune's numbers for it are stale; the study holds its result
            if t.status == "TERMINATED" or (t is trial and not failed):
                score = (t.last_result or {}).get(METRIC)
                if score is not None and (best is None or score > best[0]):
                    best = (score, t.trial_id)
        return best

    def _report(self, trials: list, trial: Any, failed: bool) -> None:
        finished = {t.trial_id for t in trials if t.status in ("TERMINATED", "ERROR")} | {trial.trial_id}
        self._best = self._best_of(trials, trial, failed)
        head = f"[{len(finished):>{len(str(self.num_trials))}}/{self.num_trials}] trial {trial.trial_id}"
        result = trial.last_result or {}
        epochs = result_epoch(result)
        if failed:
            what = f"FAILED: {trial_error(trial)}"
            kind = "failed"
        else:
            early = epochs < self.epochs
            kind = "stopped" if early else "completed"
            score = result.get(METRIC)
            if trial.trial_id in self.stopped:
                what = "had finished before the driver stopped (its result is in the Optuna study)"
            elif early and self._by_budget(trial.trial_id):
                kind = "budget"
                what = (
                    "not run: the time budget ran out before it started"
                    if score is None
                    else f"{METRIC} {score:.4f} after {epochs}/{self.epochs} epochs (stopped by the time budget), "
                    f"{result.get('time_total_s', 0.0):.0f} s"
                )
            elif score is None:
                what = f"ended after {epochs}/{self.epochs} epochs without a score"
            else:
                what = (
                    f"{METRIC} {score:.4f} after {epochs}/{self.epochs} epochs{' (stopped early)' if early else ''}, "
                    f"{result.get('time_total_s', 0.0):.0f} s"
                )
        for t in trials:  # trials that ended before this driver session (a resumed search)
            if t.status in ("TERMINATED", "ERROR") and t.trial_id not in self._done and t is not trial:
                self._done[t.trial_id] = "failed" if t.status == "ERROR" else "completed"
        self._done[trial.trial_id] = kind
        self._epochs.pop(trial.trial_id, None)
        if self.display is not None:
            self.display.remove(f"trial:{trial.trial_id}")
        tail = "" if self._best is None else f" | best {self._best[0]:.4f} ({self._best[1]})"
        self._print(f"{head} {what}{tail}")
        self._refresh()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._report(trials, trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._report(trials, trial, failed=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._epochs.pop(trial.trial_id, None)
        if self.display is not None:
            self.display.remove(f"trial:{trial.trial_id}")
        self._print(f"trial {trial.trial_id} raised ({trial_error(trial)}); retrying from its last checkpoint")

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self.display is not None:
            for t in trials:
                self.display.remove(f"trial:{t.trial_id}")
            self.display.remove(_OVERALL)


class TuneTrialLines(TrialProgressCallback):
    """Ray Tune's own per-trial output (Tune adds one unless a search gives it; it prints only with
    ``-v``), without the line ``Trial X completed. Last result:`` it prints at every verbosity for
    a trial that ended without reporting anything -- one the time budget stopped before it started,
    which the search's own progress line already reports. Such a trial's ``last_result`` is empty,
    or, where its process had started, only what Tune fills in by itself (its id, date, process):
    no ``training_iteration``, which Tune adds to every result a trial reports."""

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if "training_iteration" in (trial.last_result or {}):
            super().on_trial_complete(iteration, trials, trial, **info)


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


def format_exception(exc: BaseException) -> str:
    """``Type: message`` of the innermost cause (Ray wraps trial exceptions in RayTaskError)."""
    root = _root_cause(exc)
    message = str(root).strip()
    if type(root).__name__ in ("RayTaskError", "TuneError") or "Traceback" in message:
        return _one_line(message) or type(root).__name__
    message = " ".join(message.split())
    return f"{type(root).__name__}: {message}" if message else type(root).__name__


def trial_error(trial: Any) -> str:
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
        return format_exception(exc)
    try:
        err = trial.get_error()
    except Exception:
        err = None
    if err is not None:
        return _one_line(str(err)) or type(err).__name__
    return "unknown error (see the trial's error.txt)"
