"""The toy method: Optuna proposes ``toy.trials`` policies, each trial scores its own (:mod:`.trial`),
the best two are assembled. Everything a method owns -- settings, flags, checks, what a person sees (its reporter) --
in one folder, built on the shared Tune plumbing (:mod:`autoaug.search.tune.experiment`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from autoaug.core.values import is_int
from autoaug.search.config import SearchConfig
from autoaug.search.decide.assemble import assemble_policy, assembly_rule
from autoaug.search.decide.rescore import Candidate
from autoaug.search.methods.base import (
    Method,
    MethodReporter,
    MethodResult,
    MethodSettings,
    PreparedSearch,
    all_failed,
    interrupted,
)
from autoaug.search.run_dir import RunDir


@dataclass(frozen=True)
class ToyConfig(MethodSettings):
    WHAT: ClassVar[str] = "toy"
    FIELD: ClassVar[str] = "toy"
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"trials": 4}}

    trials: int = 8

    def __post_init__(self) -> None:
        if not is_int(self.trials) or self.trials < 1:
            raise self.invalid("trials", "an integer >= 1")


class ToyReporter(MethodReporter):
    """What a person sees of a toy search: its summary line."""

    def summary(self, record: Mapping[str, Any]) -> list[str]:
        return [f"toy: {record.get('trials')} policies scored without training"]


class ToyMethod(Method):
    name = "toy"
    reporter_class = ToyReporter
    help = "each candidate scored from its policy alone, no training (a test of the method interface)"
    settings = ToyConfig
    unit = "trials"
    options = (ToyConfig.option("--toy-trials", "trials", "toy: candidates scored", type=int, metavar="N"),)

    def num_trials(self, config: SearchConfig) -> int:
        return config.method_settings(ToyConfig).trials

    def can_resume(self, run: RunDir) -> bool:
        from autoaug.search.tune.experiment import can_restore

        return can_restore(run.uri)

    def run(self, search: PreparedSearch) -> MethodResult:
        import optuna

        from autoaug.search.tune.experiment import Experiment, run_experiment
        from autoaug.search.tune.results import trial_records
        from autoaug.search.tune.study import check_study, make_storage, redact

        from .trial import score_trial

        config, run = search.config, search.run
        trials_wanted = config.method_settings(ToyConfig).trials
        exp = Experiment(
            name=config.name,
            storage=config.storage,
            study_url=search.study_url,
            num_trials=trials_wanted,
            max_steps=1,
            seed=config.seed,
            trainable=score_trial,
            parameters={"space": config.space.to_dict(), "policy_prefix": config.name},
            run_dir=run.uri,
        )
        run_experiment(search, exp)  # built, or restored from an earlier driver session's state, and run
        study = optuna.load_study(study_name=config.name, storage=make_storage(search.study_url))
        trials = trial_records(run, study, space=config.space, name=config.name, epochs=1)
        finished = sum(t.finished for t in trials)
        if finished < trials_wanted:
            raise interrupted(config, f"with {finished} of {trials_wanted} trials scored")
        if not any(t.succeeded for t in trials):
            raise all_failed(trials, config.name)
        problems = check_study(study, trials, config.space)
        assembled = assemble_policy(
            trials,
            name=config.name,
            top_n=2,
            num_magnitude_bins=config.space.num_magnitude_bins,
            base=config.space.base,
            ranges=config.space.ranges,
            rule=assembly_rule(config.space.family),
        )
        return MethodResult(
            trials=trials,
            assembled=assembled,
            candidates=[Candidate("assembled", assembled.policy, tuple(t.trial_id for t in assembled.selected), None)],
            optuna={
                "storage": redact(search.study_url),
                "study_name": config.name,
                "num_trials": len(study.trials),
                "consistent_with_tune": not problems,
                "problems": problems,
            },
            provenance={"trials": len(trials)},
        )


METHOD = ToyMethod()
