"""What the density method runs when its search runs (:meth:`DensityMethod.run`), after its fold
models (:mod:`.fold_models`): each round's Ray Tune experiment, its candidates scored on a fold
model's held-out fold (:class:`~autoaug.search.methods.density.trial.DensityTrial`), built or
restored from the run directory, run, and read back.

A module of its own so that :mod:`.method`, which ``autoaug --help`` imports for the method's
settings and flags, imports neither Ray Tune nor Optuna: :meth:`DensityMethod.run` imports this
module when the search runs, and names each round's experiment and its folder (this module does
not import :mod:`.method`).
"""

from __future__ import annotations

import dataclasses
import time

import optuna
from ray.tune import ExperimentAnalysis

from autoaug.search.decide.assemble import TrialRecord, rank_trials
from autoaug.search.decide.warm_start import warm_start_points
from autoaug.search.methods.base import PreparedSearch, interrupted
from autoaug.search.methods.density.settings import DensityConfig
from autoaug.search.methods.density.trial import DensityTrial
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC
from autoaug.search.tune.experiment import Experiment, run_experiment
from autoaug.search.tune.results import trial_records
from autoaug.search.tune.study import check_study, delete_study, make_storage

__all__ = ["run_round"]


def run_round(search: PreparedSearch, k: int, round_: int, fold: dict, stage: str, stage_run: RunDir) -> dict:
    """Run (or continue) round ``round_`` of fold ``k`` (``fold``: its parameters), the Tune
    experiment ``stage`` in the run directory ``stage_run``; returns its record for ``density.json``."""
    config, d = search.config, search.config.method_settings(DensityConfig)
    exp = Experiment(
        name=stage,
        storage=stage_run.storage,
        study_url=search.study_url,
        num_trials=d.trials_per_round,
        max_steps=1,
        seed=(config.seed + 7919 * (k * d.rounds + round_)) % 2**32,
        trainable=search.trainable or DensityTrial,
        parameters={
            "train_config": dataclasses.replace(config.train, epochs=1, warmup_epochs=0.0).to_dict(),
            "space": config.space.to_dict(),
            "policy_prefix": stage,
            "fold": fold,
        },
        run_dir=stage_run.uri,
    )
    search.display.log(
        f"fold {k + 1}/{d.folds}, round {round_ + 1}/{d.rounds}: scoring {d.trials_per_round} "
        f"candidates on {len(fold['heldout'])} held-out images"
    )

    def fresh(exp: Experiment) -> Experiment:
        if stage_run.exists():  # a round that stopped before Tune saved anything
            stage_run.delete()
        delete_study(stage, search.study_url)
        points = warm_start_points(config.warm_start, config.space, store=config.store) if round_ == 0 else []
        return dataclasses.replace(exp, warm_start=tuple(points))

    t0 = time.time()
    run_experiment(search, exp, fresh, run_dir=stage_run)
    study = optuna.load_study(study_name=stage, storage=make_storage(search.study_url))
    records = trial_records(
        stage_run, study, space=config.space, name=stage, epochs=1, budget_stopped=search.budget_stopped(stage)
    )
    finished = sum(r.finished for r in records)
    cut = search.budget_ended() and finished == len(records)  # the budget ended the round early
    if finished < d.trials_per_round and not cut:
        raise interrupted(
            config, f"in round {round_ + 1} of fold {k + 1} with {finished} of {d.trials_per_round} candidates scored"
        )
    problems = check_study(study, records, config.space, budget_ended=cut)
    records = _with_fold_scores(records, stage_run, stage)
    top = rank_trials(records)[: d.top_per_round]
    best = f"best {METRIC} {top[0].score:.4f}" if top else "no candidate scored"
    search.display.log(
        f"fold {k + 1}/{d.folds}, round {round_ + 1}/{d.rounds} done in {time.time() - t0:.0f} s: {best}"
    )
    return {
        "fold": k,
        "round": round_,
        "stage": stage,
        "trials": [r.to_dict() for r in records],
        "top": [r.trial_id for r in top],
        "problems": problems,
        "wall_time_s": time.time() - t0,
        **({"ended_by_budget": True} if finished < d.trials_per_round else {}),
    }


def _with_fold_scores(records: list[TrialRecord], stage_run: RunDir, stage: str) -> list[TrialRecord]:
    """The round's records with ids ``STAGE/ID`` and each trial's plain accuracy and loss in its note."""
    extras = {t.trial_id: (t.last_result or {}) for t in ExperimentAnalysis(stage_run.uri).trials}
    out = []
    for r in records:
        last = extras.get(r.trial_id, {})
        note = r.note
        if last.get("fold_accuracy") is not None:
            scores = f"accuracy {last['fold_accuracy']:.6f}, loss {last['fold_loss']:.6f}"
            note = scores if note is None else f"{scores}; {note}"
        out.append(dataclasses.replace(r, trial_id=f"{stage}/{r.trial_id}", note=note))
    return out
