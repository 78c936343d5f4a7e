"""The training method (AutoAugment, Cubuk et al. 2019): one proxy training per candidate.

``SearchConfig.method == "train"``, settings :class:`TrainMethodConfig` (``SearchConfig.method_config``).
One Ray Tune experiment (:mod:`autoaug.search.tune.experiment`) named like the search, in its run
directory: ``num_trials`` trials proposed by Optuna (the warm start's candidates first), each
training the proxy model (``SearchConfig.train``) with its candidate policy
(:func:`autoaug.search.methods.train.trial.run_trial`) and reporting the search score after every epoch; ASHA
stops the weak ones at its rungs, at each only while it is measured to rank (calibration's
full-length runs first, then the trials: :class:`autoaug.search.decide.rungs.RungGate`). The candidates it returns for re-scoring
(:func:`final_candidates`): the best ``top_n`` trials' sub-policies assembled, the best trial
alone, the warm start extended by what the search found, and every trial ASHA let run the full
budget (``survivors``). In the ``randaugment`` and ``trivialaugment`` space families a candidate is
one point of the family and unions of points are none: the final policy is the best trial's
(assembly rule ``best``) and it is the one candidate the method returns.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from autoaug.core.values import is_int, is_number
from autoaug.policies import Policy
from autoaug.policies.policy import MAX_SUB_POLICIES
from autoaug.search.decide.assemble import assemble_policy, assembly_rule, rank_trials, union_policy
from autoaug.search.decide.calibrate import CALIBRATION_FILE
from autoaug.search.decide.calibration_choices import incumbent_margin
from autoaug.search.decide.rescore import Candidate
from autoaug.search.decide.rungs import calibration_scores, rung_epochs
from autoaug.search.decide.rungs import from_study as rung_record
from autoaug.search.decide.warm_start import warm_start_policies
from autoaug.search.methods.base import (
    Method,
    MethodResult,
    MethodSettings,
    PreparedSearch,
    check_validation_left_to_the_method,
)
from autoaug.search.methods.train.reporter import TrainReporter
from autoaug.search.run_dir import RunDir
from autoaug.search.score import asha_milestones, report_epochs, score_epochs
from autoaug.search.tune.study import SAMPLERS, redact

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["TrainMethodConfig", "METHOD", "final_candidates"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainMethodConfig(MethodSettings):
    """The training method's own settings (a training search's ``method_config``). In a configuration
    file and with ``--set`` they are top-level keys (``num_trials: 32``).

    Args:
        num_trials: trials (candidate policies) to run.
        early_stopping: stop weak trials with ASHA on the search score per epoch.
        grace_period / reduction_factor: ASHA's first rung (epochs) and its reduction factor.
        top_n: best trials whose sub-policies make the assembled policy.
        report_every: a trial reports to Tune (with its checkpoint) every ``report_every`` epochs,
            at each of ASHA's rungs and at its end (:func:`trial_report_epochs`); 1: every epoch.
            Fewer reports are less for the search's driver to take in (it takes in about 60 a
            second on 2 cores: benchmarks/results/report-throughput), for fast trials (packs on a
            GPU); a trial restarted after a failure retrains the epochs since its last report.
    """

    WHAT: ClassVar[str] = "training-method"
    FIELD: ClassVar[str] = "train_method"
    TOP_LEVEL: ClassVar[bool] = True
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        # 4 trials of the trainer's smoke preset: a plumbing check in about a minute on 2 CPU cores.
        "smoke": {"num_trials": 4, "grace_period": 1, "reduction_factor": 2},
        # 28 trials; ASHA ranks them at epochs 20 and 60 and keeps a third at each rung. Chosen by
        # benchmarks/results/search-quality-cpu28-grace20-eval-cpu; docs/results.md, "How the presets were chosen".
        "cpu": {"num_trials": 28, "grace_period": 20, "reduction_factor": 3, "top_n": 5},
        # One GPU-hour (the shared `gpu` preset): 200 trials, ASHA cuts only at epoch 60 and keeps a third.
        # Chosen by benchmarks/results/gpu and score-noise-cifar10; docs/results.md, "How the presets were chosen".
        # Reports every 10 epochs: a GPU's trials (packs most) report faster than a driver takes in
        # WRN-40-2's checkpoints (benchmarks/results/report-throughput).
        "gpu": {"num_trials": 200, "grace_period": 60, "reduction_factor": 3, "top_n": 5, "report_every": 10},
        # AutoAugment's proxy task: ASHA cuts the weak candidates at epochs 15 and 45.
        "paper": {"num_trials": 200, "grace_period": 15, "reduction_factor": 3},
    }

    num_trials: int = 16
    early_stopping: bool = True
    grace_period: int = 1
    reduction_factor: float = 3.0
    top_n: int = 5
    report_every: int = 1

    def __post_init__(self) -> None:
        for name in ("num_trials", "grace_period", "top_n", "report_every"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise self.invalid(name, "an integer >= 1")
        if not isinstance(self.early_stopping, bool):
            raise self.invalid("early_stopping", "true or false")
        if not is_number(self.reduction_factor) or self.reduction_factor <= 1:
            raise self.invalid("reduction_factor", "a number > 1")
        object.__setattr__(self, "reduction_factor", float(self.reduction_factor))


def trial_train_config(config: SearchConfig) -> Any:
    """The training configuration of every trial: the search's, validating only the epochs its
    score is read from -- the ``score_window`` epochs up to each of ASHA's rungs and up to the
    last (:func:`~autoaug.search.score.score_epochs`). Validation changes nothing in training, so
    ASHA and the final ranking see the scores of a trial validated every epoch; it is 18-33% of
    a proxy epoch (benchmarks/results/trial-throughput), spent on no decision elsewhere."""
    t = config.train
    return dataclasses.replace(t, eval_epochs=score_epochs(t.epochs, config.score_window, _milestones(config)))


def trial_report_epochs(config: SearchConfig) -> tuple[int, ...] | None:
    """The epochs at which every trial reports (:func:`~autoaug.search.score.report_epochs`: every
    ``report_every``, ASHA's rungs, the last); None when it reports every epoch."""
    s = config.method_settings(TrainMethodConfig)
    if s.report_every == 1:
        return None
    return report_epochs(config.train.epochs, s.report_every, _milestones(config))


def _milestones(config: SearchConfig) -> tuple[int, ...]:
    """ASHA's rungs of ``config``'s trials (none without early stopping)."""
    s = config.method_settings(TrainMethodConfig)
    return asha_milestones(s.grace_period, s.reduction_factor, config.train.epochs) if s.early_stopping else ()


class TrainMethod(Method):
    name = "train"
    default = True  # what a search runs when it names no method
    help = "one proxy training per candidate (AutoAugment)"
    settings = TrainMethodConfig
    unit = "trials"
    packs = True
    pack_trials = "pack"
    reporter_class = TrainReporter
    options = (
        TrainMethodConfig.option(
            "--num-trials", "num_trials", "number of candidate policies to train", group="what", type=int, metavar="N"
        ),
        TrainMethodConfig.option(
            "--top-n",
            "top_n",
            "best trials concatenated into the final policy (default 5)",
            group="what",
            type=int,
            metavar="N",
        ),
        TrainMethodConfig.option(
            "--no-early-stopping",
            "early_stopping",
            "run every trial for all epochs (no ASHA)",
            group="how",
            dest="early_stopping",
            action="store_const",
            const=False,
        ),
        TrainMethodConfig.option(
            "--grace-period",
            "grace_period",
            "ASHA: epochs before a trial can be stopped",
            group="how",
            type=int,
            metavar="EPOCHS",
        ),
        TrainMethodConfig.option(
            "--reduction-factor", "reduction_factor", "ASHA reduction factor", group="how", type=float, metavar="ETA"
        ),
        TrainMethodConfig.option(
            "--report-every",
            "report_every",
            "a trial reports (and checkpoints) every N epochs, at ASHA's rungs and at its end (default 1)",
            group="how",
            type=int,
            metavar="N",
        ),
    )

    def rungs(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """ASHA's milestones of a recorded configuration (none without early stopping) and its last
        epoch; ``()`` for a configuration that does not record its schedule."""
        epochs = (config.get("train") or {}).get("epochs")
        if not epochs or "grace_period" not in config:
            return ()
        s = TrainMethodConfig.from_value(TrainMethodConfig.take(dict(config)))
        return rung_epochs(s.grace_period, s.reduction_factor, int(epochs), s.early_stopping)

    def check(self, config: SearchConfig) -> None:
        s, t = config.method_settings(TrainMethodConfig), config.train
        if t.val_size == 0:
            raise ValueError(
                "train.val_size is 0: the search scores candidates on the validation split; "
                "give a validation size (None = every image not used for training)"
            )
        check_validation_left_to_the_method(
            t, "the search chooses the epochs its trials validate (those its score is read from, trial_train_config)"
        )
        k = config.space.num_sub_policies
        if assembly_rule(config.space.family) == "concatenate" and s.top_n * k > MAX_SUB_POLICIES:
            raise ValueError(
                f"top_n {s.top_n} x space.num_sub_policies {k:,} = {s.top_n * k:,} sub-policies in the assembled "
                f"policy, more than a policy may hold ({MAX_SUB_POLICIES:,}); lower --top-n or --sub-policies"
            )
        if s.early_stopping and s.grace_period > t.epochs:
            raise ValueError(
                f"grace_period {s.grace_period} exceeds train.epochs {t.epochs}: ASHA "
                "could never stop a trial; lower the grace period or disable early stopping"
            )

    def num_trials(self, config: SearchConfig) -> int:
        return config.method_settings(TrainMethodConfig).num_trials

    def max_candidates(self, config: SearchConfig) -> int:
        # assembled, best trial, warm start + found, survivors (final_candidates); one point
        # (the best trial's) in the randaugment and trivialaugment families
        if assembly_rule(config.space.family) == "best":
            return 2 + bool(config.warm_start)  # the best point, the next best, the warm start
        return 2 + bool(config.warm_start) + config.method_settings(TrainMethodConfig).early_stopping

    def candidates_to_train(self, config: SearchConfig, *, warm_start_measured: bool = False) -> int:
        # In the randaugment and trivialaugment families the warm start's candidate is its published
        # point: when calibration measured it (the transfer), it competes as the transfer, untrained.
        if warm_start_measured and config.warm_start and assembly_rule(config.space.family) == "best":
            return self.max_candidates(config) - 1
        return self.max_candidates(config)

    def warm_start_capacity(self, config: SearchConfig) -> tuple[int, str]:
        return config.method_settings(TrainMethodConfig).num_trials, "trials; raise --num-trials"

    def can_resume(self, run: RunDir) -> bool:
        from autoaug.search.tune.experiment import can_restore

        return can_restore(run.uri)

    def run(self, search: PreparedSearch) -> MethodResult:
        """The experiment built, or restored from the run directory, and run, its trials read back
        (:func:`autoaug.search.methods.train.runner.run_trials`); then what the method returns
        (:func:`_method_result`)."""
        # Ray Tune, Optuna and the trainer: imported when the search runs (`autoaug --help` reads this module)
        from autoaug.search.methods.train import runner

        config, s = search.config, search.config.method_settings(TrainMethodConfig)
        study, trials, problems, margin, packs = runner.run_trials(
            search,
            s,
            trial_train_config(config).to_dict(),
            trial_report_epochs(config),
            _rung_calibration(search) if s.early_stopping else (),
            lambda: _sampler_margin(search),
        )
        for problem in problems:
            logger.warning("Optuna study %s: %s", config.name, problem)
        return _method_result(search, s, study, trials, problems, margin, packs)


def _method_result(
    search: PreparedSearch,
    s: TrainMethodConfig,
    study: Any,
    trials: list,
    problems: list[str],
    margin: float | None,
    packs: dict[str, float] | None = None,
) -> MethodResult:
    """What the method returns: the best trials assembled (:func:`assemble_policy`), the candidates
    re-scoring chooses from (:func:`final_candidates`), whether ASHA's rungs ranked the trials
    (:func:`autoaug.search.decide.rungs.from_study`, said in the summary) and the study's record."""
    config = search.config
    assembled = assemble_policy(
        trials,
        name=config.name,
        top_n=s.top_n,
        num_magnitude_bins=config.space.num_magnitude_bins,
        base=config.space.base,
        ranges=config.space.ranges,
        rule=assembly_rule(config.space.family),
    )
    at = rung_epochs(s.grace_period, s.reduction_factor, config.epochs)
    rungs = rung_record(study, at) if s.early_stopping else None
    return MethodResult(
        trials=trials,
        assembled=assembled,
        candidates=final_candidates(config, trials, assembled),
        # packs: what the pack servers of this run of the driver did (a resumed search: since it resumed)
        provenance={**({"rungs": rungs} if rungs else {}), **({"packs": packs} if packs else {})} or None,
        optuna={
            "storage": redact(search.study_url),
            "study_name": config.name,
            "num_trials": len(study.trials),
            "consistent_with_tune": not problems,
            "problems": problems,
            **({"sampler_margin": margin} if margin is not None else {}),
        },
    )


def _rung_calibration(search: PreparedSearch) -> list[dict[int, float]]:
    """Calibration's full-length runs of the published policies on the search's base, each its
    score by epoch: how well ASHA's rungs rank before any trial (a rung cuts only while measured to
    rank: :class:`autoaug.search.decide.rungs.RungGate`); none without a calibration."""
    run = search.run
    if not run.exists(CALIBRATION_FILE):
        return []
    return calibration_scores(run.read_json(CALIBRATION_FILE), search.config.space.base)


def _sampler_margin(search: PreparedSearch) -> float | None:
    """For a sampler that moves from an incumbent (``local``): the noise the calibration measured,
    by which a trial must beat the incumbent to replace it (said in one line); None: no
    calibration (the best finished trial is the incumbent), or another sampler."""
    config, run = search.config, search.run
    if not SAMPLERS[config.sampler].takes_margin:
        return None
    record = run.read_json(CALIBRATION_FILE).get("record") if run.exists(CALIBRATION_FILE) else None
    measured = incumbent_margin(record)
    if measured is None:
        search.display.log(
            f"sampler {config.sampler}: no noise measured (no calibration): the best finished trial is the incumbent"
        )
        return None
    margin, source = measured
    search.display.log(
        f"sampler {config.sampler}: a trial replaces the incumbent when it beats it by more than "
        f"{margin * 100:.2f} points (twice the standard error of two runs' difference; {source})"
    )
    return margin


def final_candidates(config: SearchConfig, trials: list, assembled: Any) -> list[Candidate]:
    """What re-scoring chooses from: the assembled policy; the best single trial; with a warm
    start, the warm-start policies extended by the selected trials the sampler proposed (those
    that are not warm-start candidates) -- the published policy plus what the search found; with
    early stopping, ``survivors``: every trial ASHA let run the full budget, assembled (more
    sub-policies than the top ``top_n`` when more trials survived: the re-scores measured that
    a policy of more vetted sub-policies can generalise better, docs/search.md). Both unions take
    the best trials whose sub-policies fit in one policy (``MAX_SUB_POLICIES``): a search of many
    thousand trials still stores a policy.
    Candidates identical to an earlier one are left out. In the ``randaugment`` and
    ``trivialaugment`` families (assembly rule ``best``) the assembled policy is the best trial's,
    and the unions are no points of the family: the candidates are that point, the next best
    trial's (``runner_up``) and the warm start's (``warm_start``: the published point searched
    around), each once."""
    best = assembled.selected[0]
    single = _named(config, best.policy)
    out = [Candidate("assembled", assembled.policy, tuple(t.trial_id for t in assembled.selected), None)]
    out.append(Candidate("best_trial", single, (best.trial_id,), best.score))
    if assembly_rule(config.space.family) == "best":
        # The assembled policy is the best trial's point; its score is the maximum of noisy ones,
        # so the next best point and the warm start (the published point searched around) are
        # re-scored beside it with fresh seeds.
        out = [out[0]]
        if config.warm_start:  # before the runner-up: what the search has to beat, if time is short
            for p in warm_start_policies(config.warm_start, config.space, store=config.store):
                out.append(Candidate("warm_start", _named(config, p), (), None))
        runner_up = next(
            (
                t
                for t in rank_trials(trials)[1:]
                if t.policy is not None and t.policy.sub_policies != best.policy.sub_policies
            ),
            None,
        )
        if runner_up is not None:
            out.append(Candidate("runner_up", _named(config, runner_up.policy), (runner_up.trial_id,), runner_up.score))
        return _unique(out)
    if config.warm_start:
        # Warm-start candidates as the trials decode them (to_params -> to_policy is the identity
        # on the space's grid, so these compare equal to the warm-start trials' policies).
        warm = [
            config.space.to_policy(config.space.to_params(p), name=p.name)
            for p in warm_start_policies(config.warm_start, config.space, store=config.store)
        ]
        warm_subs = {p.sub_policies for p in warm}
        found = [t for t in assembled.selected if t.policy.sub_policies not in warm_subs]
        # the best found trials whose sub-policies fit beside the warm start's in one policy
        try:
            held = len(union_policy(config.name, warm).sub_policies) if warm else 0
        except ValueError:  # the warm-start policies alone hold more than one policy may
            held = MAX_SUB_POLICIES
        found = found[: max(0, (MAX_SUB_POLICIES - held) // config.space.num_sub_policies)]
        if found:
            extended = union_policy(config.name, [*warm, *(t.policy for t in found)])
            out.append(Candidate("warm_start+found", extended, tuple(t.trial_id for t in found), None))
    survivors = [t for t in trials if t.succeeded and t.epochs >= config.epochs]
    # at most the best survivors whose sub-policies a policy may hold
    fit = min(len(survivors), MAX_SUB_POLICIES // config.space.num_sub_policies)
    if config.method_settings(TrainMethodConfig).early_stopping and fit > len(assembled.selected):
        union = assemble_policy(
            survivors,
            name=config.name,
            top_n=fit,
            num_magnitude_bins=config.space.num_magnitude_bins,
            base=config.space.base,
            ranges=config.space.ranges,
        )
        out.append(Candidate("survivors", union.policy, tuple(t.trial_id for t in union.selected), None))
    return _unique(out)


def _named(config: SearchConfig, policy: Policy) -> Policy:
    return Policy(config.name, policy.num_magnitude_bins, policy.sub_policies, base=policy.base, ranges=policy.ranges)


def _unique(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates without those identical to an earlier one."""
    unique: dict[str, Candidate] = {}
    for c in candidates:
        unique.setdefault(c.policy.content_hash, c)
    return list(unique.values())


METHOD = TrainMethod()
