"""What the training method runs when its search runs (:meth:`TrainMethod.run`): its Ray Tune
experiment (:mod:`autoaug.search.tune.experiment`) built -- the warm start's candidates its first
proposals, its trials trained K at a time when asked (:mod:`autoaug.search.tune.pack`) -- or
restored from the run directory, run, and its trials read back from Tune and the Optuna study.

A module of its own so that :mod:`.method`, which ``autoaug --help`` imports for the method's
settings and flags, imports none of Ray Tune, Optuna and the trainer: :meth:`TrainMethod.run`
imports this module when the search runs, and hands it what it needs of :mod:`.method` (which
this module does not import).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from autoaug.search.decide.assemble import TrialRecord
from autoaug.search.decide.warm_start import warm_start_points
from autoaug.search.methods.base import PreparedSearch, all_failed, interrupted
from autoaug.search.methods.train import trial
from autoaug.search.tune.experiment import Experiment, run_experiment
from autoaug.search.tune.pack import packed
from autoaug.search.tune.results import trial_records
from autoaug.search.tune.study import check_study, make_storage

if TYPE_CHECKING:
    from autoaug.search.methods.train.method import TrainMethodConfig

__all__ = ["run_trials"]


def run_trials(
    search: PreparedSearch,
    s: TrainMethodConfig,
    train_config: dict[str, Any],
    report_at: Sequence[int] | None,
    rung_calibration: Sequence[Mapping[int, float]],
    sampler_margin: Callable[[], float | None],
) -> tuple[Any, list[TrialRecord], list[str], float | None, dict[str, float] | None]:
    """Run (or continue) the experiment of ``search`` (settings ``s``; every trial trains with
    ``train_config`` and reports at the epochs ``report_at``, None: every epoch;
    ``rung_calibration``: the calibration's runs by epoch, for ASHA's rung gate;
    ``sampler_margin()``: the margin of a sampler that moves from an incumbent, asked once the
    pack servers are planned): ``(study, trials, problems, margin, packs)`` -- the Optuna study, the
    trials read back and checked (:func:`_finished_trials`), the problems between the two, the
    margin, and what the pack servers did (:meth:`~autoaug.search.tune.pack.PackServer.stats`
    summed; None without packs)."""
    config, run = search.config, search.run
    exp = Experiment(
        name=config.name,
        storage=config.storage,
        study_url=search.study_url,
        num_trials=s.num_trials,
        max_steps=config.epochs,
        seed=config.seed,
        trainable=search.trainable or trial.run_trial,
        parameters={
            "train_config": train_config,
            "space": config.space.to_dict(),
            "policy_prefix": config.name,
            "score_window": config.score_window,
            **({"report_at": tuple(report_at)} if report_at is not None else {}),
        },
        asha=(s.grace_period, s.reduction_factor) if s.early_stopping else None,
        rung_calibration=rung_calibration,
        run_dir=run.uri,
    )
    exp, pack_servers = packed(config, exp, search.display.log)  # trials trained K at a time (config.pack)
    margin = sampler_margin()  # (a restored searcher has it already: the same, from calibration.json)

    def fresh(exp: Experiment) -> Experiment:
        # The first proposals are the known sub-policies (a fresh study only).
        points = warm_start_points(config.warm_start, config.space, store=config.store) if config.warm_start else ()
        return dataclasses.replace(exp, warm_start=tuple(points), sampler_margin=margin)

    with pack_servers:
        run_experiment(search, exp, fresh)

    study, trials, problems = _finished_trials(search, s)
    return study, trials, problems, margin, getattr(pack_servers, "stats", None)


def _finished_trials(search: PreparedSearch, s: TrainMethodConfig) -> tuple[Any, list, list[str]]:
    """The Optuna study and the trials as Tune and the study left them
    (:func:`~autoaug.search.tune.results.trial_records`), checked: every trial finished (or the time
    budget ended the search with none left running) and one at least succeeded; and the problems
    between the study and Tune's trials."""
    config = search.config
    study = optuna.load_study(study_name=config.name, storage=make_storage(search.study_url))
    trials = trial_records(
        search.run,
        study,
        space=config.space,
        name=config.name,
        epochs=config.epochs,
        budget_stopped=search.budget_stopped(config.name),
    )
    finished = [t for t in trials if t.finished]
    if len(finished) < s.num_trials and not (search.budget_ended() and len(finished) == len(trials)):
        raise interrupted(config, f"with {len(finished)} of {s.num_trials} trials finished")
    if not any(t.succeeded for t in trials):
        raise all_failed(trials, config.name)
    problems = check_study(study, trials, config.space, budget_ended=search.budget_ended())
    return study, trials, problems
