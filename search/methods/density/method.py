"""Density matching (Fast AutoAugment, Lim et al., NeurIPS 2019): score candidates without training.

``SearchConfig.method == "density"``, settings :class:`DensityConfig` (``SearchConfig.method_config``).
Instead of training the proxy model once per candidate,

1. **Fold models.** The reduced training split is cut into ``K`` stratified folds
   (:func:`autoaug.proxy_models.splits.stratified_folds`). Fold model ``k`` is the proxy model
   (``SearchConfig.train``) trained with the search's base alone (``space.base``, chosen by
   measurement with ``base: auto``: :mod:`autoaug.search.decide.calibrate`) on the other ``K-1``
   folds. The ``K`` trainings are Ray tasks (the trials' resources, any node of a cluster); each
   one's weights and held-out scores are written to the run directory (``folds/fold{k}.pt``,
   ``folds/fold{k}.json``) as soon as it finishes, and a resumed search never trains them again.
2. **Scoring trials.** For each fold, ``T`` rounds of ``B`` Ray Tune trials proposed by Optuna
   (an :class:`~autoaug.search.tune.experiment.Experiment` over the same
   :class:`~autoaug.search.space.SearchSpace` and sampler table as the training method; one study
   per round, ``NAME.f{k}-r{t}``, in the run's Optuna storage). A trial (:class:`~autoaug.search.methods.density.trial.DensityTrial`)
   applies its candidate policy to the held-out fold with the DALI pipeline -- each image draws
   its own sub-policy, no base crop/flip -- and evaluates the fold model on it: accuracy and mean
   cross-entropy. The pipeline's policy step takes the policy's tables as inputs
   (:class:`autoaug.policies.dali_apply.PolicyInputs`), and a trial process that Tune reuses keeps
   its :class:`~autoaug.search.methods.density.fold_models.FoldScorer`: it builds its pipeline and loads its fold model once, and every later
   trial only feeds new tables. The search metric (:data:`~autoaug.search.score.METRIC`, what
   Optuna maximises) is the objective, ``DensityConfig.objective``: the accuracy, or minus the loss.
3. **Selection.** The ``N`` best candidates of every round are kept; their sub-policies, merged
   (duplicates removed), are the final policy, stored with the provenance of every search plus
   ``method`` (folds, rounds, every fold model's plain held-out scores, each round's kept trials)
   -- every candidate's score is in ``trials``.

Each round is its own Tune experiment in ``{run}/stages/NAME.f{k}-r{t}`` with Tune's own resume;
finished rounds are recorded in ``density.json`` and never run again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autoaug.policies.policy import MAX_SUB_POLICIES
from autoaug.search.decide.assemble import TrialRecord, assemble_policy
from autoaug.search.decide.rescore import Candidate
from autoaug.search.methods.base import (
    Method,
    MethodResult,
    PreparedSearch,
    all_failed,
    check_space_family,
    interrupted,
)
from autoaug.search.methods.density.reporter import DensityReporter
from autoaug.search.methods.density.settings import DENSITY_OBJECTIVES, DensityConfig
from autoaug.search.run_dir import RunDir
from autoaug.search.tune.study import redact

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = [
    "DENSITY_FILE",
    "STAGES_DIR",
    "DENSITY_OBJECTIVES",
    "DensityConfig",
    "METHOD",
    "stage_name",
]

#: Finished rounds (their trials and kept candidates) and the fold models' summaries.
DENSITY_FILE = "density.json"
#: Tune experiments of the rounds.
STAGES_DIR = "stages"


def stage_name(name: str, fold: int, round_: int) -> str:
    """The Tune experiment and Optuna study of round ``round_`` of fold ``fold``."""
    return f"{name}.f{fold}-r{round_}"


# ----------------------------------------------------------------------------------------------
# The method
class DensityMethod(Method):
    name = "density"
    space_families = ("aa",)  # the fold models' DALI inputs are aa-shaped
    help = "score candidates with K fold models trained once (Fast AutoAugment's density matching)"
    settings = DensityConfig
    unit = "candidates"
    #: Its fold models train K at a time (``--pack``: :func:`~.fold_models.train_fold_models`); its
    #: candidates are scored, not trained.
    packs = True
    reporter_class = DensityReporter
    presets = {
        # Density matching on a CPU: the proxy-cpu recipe's fold models (settings: DensityConfig.PRESETS).
        "density-cpu": {
            "train": {"preset": "proxy-cpu"},
            "concurrency": 2,
            "cpus_per_trial": 1,
            "gpus_per_trial": 0,
            "base": "auto",
        },
    }
    options = (
        DensityConfig.option(
            "--folds", "folds", "density: stratified folds / fold models (default 5)", type=int, metavar="K"
        ),
        DensityConfig.option(
            "--rounds", "rounds", "density: search rounds per fold (default 2)", type=int, metavar="T"
        ),
        DensityConfig.option(
            "--trials-per-round",
            "trials_per_round",
            "density: candidates scored per round (default 200)",
            type=int,
            metavar="B",
        ),
        DensityConfig.option(
            "--top-per-round",
            "top_per_round",
            "density: best candidates of each round merged into the final policy (default 10)",
            type=int,
            metavar="N",
        ),
        DensityConfig.option(
            "--objective",
            "objective",
            "density: maximise the fold model's accuracy or minus its loss on the augmented fold",
            choices=list(DENSITY_OBJECTIVES),
        ),
    )

    def study_names(self, config: SearchConfig) -> Sequence[str]:
        d = config.method_settings(DensityConfig)
        return tuple(stage_name(config.name, k, r) for k in range(d.folds) for r in range(d.rounds))

    def check(self, config: SearchConfig) -> None:
        check_space_family(
            config, self.name, self.space_families
        )  # the fold models' DALI inputs are aa-shaped (fold_models)
        d, t = config.method_settings(DensityConfig), config.train
        if t.train_size:
            smallest_train = t.train_size - -(-t.train_size // d.folds)
            if t.train_size < d.folds:
                raise ValueError(
                    f"density.folds is {d.folds} but train.train_size is {t.train_size}: each fold needs at least one image"
                )
            if smallest_train < t.batch_size:
                raise ValueError(
                    f"density.folds {d.folds} of train.train_size {t.train_size} leave {smallest_train} images to train "
                    f"a fold model, fewer than one batch of {t.batch_size}; lower train.batch_size or the number of folds"
                )
        kept = d.folds * d.rounds * d.top_per_round * config.space.num_sub_policies
        if kept > MAX_SUB_POLICIES:
            raise ValueError(
                f"density.folds={d.folds} x rounds={d.rounds} x top_per_round={d.top_per_round} x "
                f"space.num_sub_policies={config.space.num_sub_policies:,} = {kept:,} sub-policies in the merged policy, "
                f"more than a policy may hold ({MAX_SUB_POLICIES:,}); lower one of them"
            )
        if len(stage_name(config.name, d.folds - 1, d.rounds - 1)) > 128:
            raise ValueError(
                f"search name {config.name!r} is too long for the density method's round names; "
                "use at most 110 characters"
            )

    def num_trials(self, config: SearchConfig) -> int:
        return config.method_settings(DensityConfig).num_trials

    def max_candidates(self, config: SearchConfig) -> int:
        return 1  # the merged policy

    def warm_start_capacity(self, config: SearchConfig) -> tuple[int, str]:
        return config.method_settings(
            DensityConfig
        ).trials_per_round, "trials per round; raise density.trials_per_round"

    def can_resume(self, run: RunDir) -> bool:
        return True  # fold models, finished rounds and each round's Tune state are picked up as found

    def run(self, search: PreparedSearch) -> MethodResult:
        # torch, DALI, Ray Tune and Optuna: imported when the search runs (`autoaug --help` reads this module)
        from autoaug.search.methods.density import fold_models, runner

        config, run, d = search.config, search.run, search.config.method_settings(DensityConfig)
        t0 = time.time()
        folds = fold_models.train_fold_models(config, run, session=search.state.session_label, log=search.display.log)
        fold_wall = time.time() - t0
        _, splits = fold_models.fold_splits(config.train, d.folds, d.fold_seed)
        done = run.read_json(DENSITY_FILE) if run.exists(DENSITY_FILE) else {"stages": {}}
        done["folds"] = [{k: v for k, v in f.items() if k != "weights"} for f in folds]
        done.setdefault("fold_training_wall_s", {})[str(len(search.state.sessions))] = fold_wall
        run.write_json(DENSITY_FILE, done)
        for k in range(d.folds):
            fold = None
            for round_ in range(d.rounds):
                stage = stage_name(config.name, k, round_)
                if stage in done["stages"]:
                    continue
                stage_run = RunDir((run.location / STAGES_DIR).uri, stage)
                started = stage_run.exists()
                if search.budget is not None and search.budget.stop_now() and not started:
                    search.budget.end("rounds")  # the rounds not started are not run
                    break
                fold = fold or _fold_parameters(config, folds[k], k, splits[k].val)
                done["stages"][stage] = runner.run_round(search, k, round_, fold, stage, stage_run)
                run.write_json(DENSITY_FILE, done)

        order = [stage_name(config.name, k, r) for k in range(d.folds) for r in range(d.rounds)]
        stages = [done["stages"][stage] for stage in order if stage in done["stages"]]
        if len(stages) < len(order) and not search.budget_ended():
            raise interrupted(config, f"with {len(stages)} of {len(order)} rounds done")
        trials = [TrialRecord.from_dict(t) for s in stages for t in s["trials"]]
        trials = [dataclasses.replace(t, index=i) for i, t in enumerate(trials)]
        by_id = {t.trial_id: t for t in trials}
        kept = [by_id[i] for s in stages for i in s["top"]]
        if not kept:
            raise all_failed(trials, config.name, "candidates")
        assembled = assemble_policy(
            kept,
            name=config.name,
            top_n=len(kept),
            num_magnitude_bins=config.space.num_magnitude_bins,
            base=config.space.base,
            ranges=config.space.ranges,
        )
        problems = [f"{s['stage']}: {p}" for s in stages for p in s["problems"]]
        return MethodResult(
            trials=trials,
            assembled=assembled,
            candidates=[Candidate("assembled", assembled.policy, tuple(t.trial_id for t in kept), None)],
            optuna={
                "storage": redact(search.study_url),
                "study_name": [s["stage"] for s in stages],
                "num_trials": len(trials),
                "consistent_with_tune": not problems,
                "problems": problems,
            },
            timing={
                "fold_training_s": sum(float(f.get("train_time_s") or 0.0) for f in done["folds"]),
                "fold_training_wall_s": done.get("fold_training_wall_s", {}),
                "rounds_wall_s": sum(float(s.get("wall_time_s") or 0.0) for s in stages),
            },
            provenance={
                "name": "density",
                "objective": d.objective,
                "metric_is": "fold accuracy" if d.objective == "accuracy" else "minus the fold loss",
                "folds": d.folds,
                "rounds": d.rounds,
                "trials_per_round": d.trials_per_round,
                "top_per_round": d.top_per_round,
                "fold_seed": d.fold_seed,
                "fold_models": done["folds"],
                "rounds_kept": [
                    {"stage": s["stage"], "fold": s["fold"], "round": s["round"], "kept": s["top"]} for s in stages
                ],
            },
        )


def _fold_parameters(config: SearchConfig, fold: dict, k: int, heldout: Any) -> dict:
    return {
        "key": hashlib.sha256(fold["weights"]).hexdigest()[:16] + f"-{k}",
        "index": k,
        "weights": fold["weights"],
        "heldout": [int(i) for i in heldout],
        "objective": config.method_settings(DensityConfig).objective,
        "seed": config.train.seed,
    }


METHOD = DensityMethod()
