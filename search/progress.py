"""The live status of a search: one line per finished trial, and trial errors as one line."""
from __future__ import annotations

import os
import sys
from typing import Any, Container

from ray import tune

from autoaug.search.config import METRIC

__all__ = ["ProgressCallback", "trial_error", "format_exception"]


class ProgressCallback(tune.Callback):
    """Prints one line per finished trial: score, epochs, time and the best score so far.

    ``stopped``: the trials the study guard stopped in this driver session
    (:class:`autoaug.search.reconcile.StoppedTrials`); Tune's numbers for them are stale.
    """

    def __init__(self, num_trials: int, epochs: int, stream: str = "stdout", stopped: Container[str] = ()):
        self.num_trials = num_trials
        self.epochs = epochs
        self.stream = stream
        self.stopped = stopped

    def _print(self, text: str) -> None:
        out = sys.stdout if self.stream == "stdout" else sys.stderr
        print(text, file=out, flush=True)

    def _report(self, trials: list, trial: Any, failed: bool) -> None:
        finished = {t.trial_id for t in trials if t.status in ("TERMINATED", "ERROR")} | {trial.trial_id}
        best = None
        for t in trials:
            if t.trial_id in self.stopped:
                continue  # Tune's numbers for it are stale; the study holds its result
            if t.status == "TERMINATED" or (t is trial and not failed):
                score = t.last_result.get(METRIC)
                if score is not None and (best is None or score > best[0]):
                    best = (score, t.trial_id)
        head = f"[{len(finished):>{len(str(self.num_trials))}}/{self.num_trials}] trial {trial.trial_id}"
        if failed:
            what = f"FAILED: {trial_error(trial)}"
        else:
            result = trial.last_result
            epochs = result.get("epoch", result.get("training_iteration", 0))
            stopped = " (stopped early)" if epochs < self.epochs else ""
            score = result.get(METRIC)
            if trial.trial_id in self.stopped:
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
        self._print(f"trial {trial.trial_id} raised ({trial_error(trial)}); retrying from its last checkpoint")


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
        return format_exception(exc)
    try:
        err = trial.get_error()
    except Exception:
        err = None
    if err is not None:
        return _one_line(str(err)) or type(err).__name__
    return "unknown error (see the trial's error.txt)"
