"""A Tune experiment's trials read back as one :class:`~autoaug.search.decide.assemble.TrialRecord`
each, with the Optuna study's word where it knows more than Tune's last snapshot."""

from __future__ import annotations

import math
import sys
from collections.abc import Container
from typing import Any

import optuna
from ray.tune import ExperimentAnalysis

from autoaug.search.decide.assemble import SUCCESS_STATUSES, TrialRecord
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC, MODE
from autoaug.search.space import SearchSpace
from autoaug.search.tune.epochs import result_epoch
from autoaug.search.tune.progress import trial_error
from autoaug.search.tune.study import final_step, study_trials_by_tune_id

__all__ = ["trial_records"]


def trial_records(
    run: RunDir, study: optuna.Study, *, space: SearchSpace, name: str, epochs: int, budget_stopped: Container[str] = ()
) -> list[TrialRecord]:
    """One :class:`TrialRecord` per trial of the Tune experiment in ``run``, in creation order:
    its parameters decoded in ``space``, whatever its family (policies named ``{name}-{trial id}``), ``completed``
    when it reported ``epochs`` results, ``budget_stopped`` when the search's time budget ended it
    earlier (``budget_stopped``: those trials' ids; scored on what it reported, if anything).

    Tune's final experiment state gives status, last metrics and errors. For a trial that the
    Optuna study recorded as finished while Tune's snapshot was older (the driver died in
    between, and the study guard did not run it again), the study's value and step are the
    result.
    """
    analysis = ExperimentAnalysis(run.uri, default_metric=METRIC, default_mode=MODE)
    latest = study_trials_by_tune_id(study)
    names = set(space.param_names())
    epochs_needed = epochs
    records = []
    trials = sorted(analysis.trials, key=lambda t: (_creation_index(t), t.trial_id))
    for index, trial in enumerate(trials):
        params = {k: v for k, v in (trial.config or {}).items() if k in names}
        try:
            policy = space.to_policy(params, name=f"{name}-{trial.trial_id}")
        except ValueError:
            policy = None
        last = trial.last_result or {}
        epochs = int(last.get("epoch") or 0)
        score = last.get(METRIC)
        error = note = None
        if trial.status == "ERROR":
            status = "failed"
            error = trial_error(trial)
        elif trial.status == "TERMINATED":
            status = "completed" if epochs >= epochs_needed else _stopped(trial.trial_id, budget_stopped)
        elif trial.status == "RUNNING":
            status = "running"
        else:
            status = "pending"
        frozen = latest.get(trial.trial_id)
        if frozen is not None and frozen.state.is_finished() and status in SUCCESS_STATUSES:
            # The study records a trial's first end, Tune's snapshot can be older (driver killed
            # in between): the study's result is the trial's result.
            step = final_step(frozen)
            if frozen.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) and (
                result_epoch(last) != step
                or score is None
                or not math.isclose(float(score), frozen.value, rel_tol=1e-9)
            ):
                score, epochs = frozen.value, step
                status = "completed" if step >= epochs_needed else _stopped(trial.trial_id, budget_stopped)
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


def _stopped(trial_id: str, budget_stopped: Container[str]) -> str:
    """The status of a trial that ended before its last epoch without an error."""
    return "budget_stopped" if trial_id in budget_stopped else "early_stopped"


def _creation_index(trial: Any) -> int:
    # Tune's experiment tag starts with the trial counter: "3_sp0_op0_mag=9,...".
    head = str(getattr(trial, "experiment_tag", "") or "").split("_", 1)[0]
    return int(head) if head.isdigit() else sys.maxsize
