"""Population Based Augmentation (Ho et al., ICML 2019): a policy *schedule* learned while one small
population of proxy models trains.

``SearchConfig.method == "pba"``, settings :class:`PbaConfig` (``SearchConfig.method_config``). One Ray Tune
experiment named like the search, in its run directory, under Ray Tune's
``PopulationBasedTraining`` (asynchronous, ``time_attr="epoch"``):

1. **Population.** ``population`` members (:func:`autoaug.search.methods.pba.trial.run_pba_trial`), each
   the proxy training of ``SearchConfig.train`` (one split, model-init seed and data order for
   all: common random numbers) starting from its own policy of the search space -- drawn at random
   (``init: random``), or every probability and magnitude 0 as in PBA (``init: zero``: training
   starts unaugmented and the schedule adds augmentation as it pays), the warm start's candidates
   first. Each reports the search score after every epoch and checkpoints its model *and* its
   policy history every ``perturbation_interval`` epochs.
2. **Exploit.** At each member's perturbation boundary PBT ranks the population by the search
   score; a member of the bottom ``quantile`` restarts from the checkpoint of a member of the top
   ``quantile``: its weights, optimizer, data position and schedule so far.
3. **Explore.** Its policy is the strong member's, perturbed (:func:`explore_params`, PBA's rule):
   each parameter is resampled uniformly with ``resample_probability``, otherwise a probability or
   magnitude moves by 0 to ``max_shift`` steps up or down, clipped to the grid (an operation type
   is resampled or kept). It trains with that policy from this epoch on.
4. **Result.** The member with the best final search score; its policy history is the schedule
   (:class:`autoaug.policies.schedule.Schedule`: stages of ``(start as a fraction of training,
   policy)``), its last stage's policy the stored policy.

**Search space.** The project's (:class:`~autoaug.search.space.SearchSpace`: ``K`` sub-policies of
2 operations), not PBA's own formulation (every operation twice with a probability and a magnitude,
0-2 of them applied per image). A PBA-formulation policy is not a :class:`~autoaug.policies.Policy`
-- its application rule differs -- so it would need its own application path in DALI and
torchvision, in the store, ``diff``, the exports and the warm start, and nothing here shows it
better: with the project's space a schedule's every stage is an ordinary policy that every backend
applies and every command reads. PBA's explore rule carries over as is to the probability and
magnitude grids.

**Storage.** The store keeps policies; the schedule is stored with the final stage's policy, in
its provenance (``schedule``, from :attr:`MethodResult.schedule
<autoaug.search.methods.base.MethodResult.schedule>`, with its content hash, checked when read:
:func:`autoaug.policies.reference.resolve_schedule`); the method's record (``method``) holds the
population, every exploit/explore event and each member's lineage.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from autoaug.core.values import is_int, is_number
from autoaug.search.decide.assemble import AssembledPolicy, TrialRecord
from autoaug.search.decide.rescore import Candidate
from autoaug.search.decide.warm_start import warm_start_points
from autoaug.search.methods.base import (
    Method,
    MethodResult,
    MethodSettings,
    PreparedSearch,
    all_failed,
    check_space_family,
    check_validation_left_to_the_method,
    interrupted,
    no_study,
)
from autoaug.search.methods.pba.reporter import PbaReporter
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC
from autoaug.search.space import SearchSpace

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["PbaConfig", "METHOD", "PBA_INITS", "explore_params", "PbaExplore", "initial_population", "PBA_FILE"]

#: How the population's first policies are drawn.
PBA_INITS = ("random", "zero")
#: The method's record in the run directory (the schedule, the events; written when it ends).
PBA_FILE = "pba.json"


@dataclass(frozen=True)
class PbaConfig(MethodSettings):
    """The PBA method's own settings (a PBA search's ``method_config``; a ``pba`` section in files and
    ``--set pba.population=8``). Defaults are PBA's (Ho et al., 2019) where they apply.

    Args:
        population: members trained at once (PBA: 16).
        perturbation_interval: epochs between a member's exploit/explore decisions (PBA: 3).
        quantile: the fraction of the population at the bottom that clones one at the top
            (Ray Tune's ``quantile_fraction``; at most 0.5; PBA: 0.25).
        resample_probability: probability that explore draws a parameter anew rather than
            shifting it (PBA: 0.2).
        max_shift: the largest move, in grid steps, of a probability or a magnitude (PBA: 3).
        init: ``random`` (every member drawn from the space) or ``zero`` (probabilities and
            magnitudes 0, as PBA starts).
    """

    WHAT: ClassVar[str] = "pba"
    FIELD: ClassVar[str] = "pba"
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        # 4 members of the trainer's smoke preset (2 epochs), perturbed after the first (the bottom
        # one clones the top one): about a minute on 2 CPU cores.
        "smoke": {"population": 4, "perturbation_interval": 1},
        # 8 members perturbed every 4 epochs, PBA's quantile and resample probability (pba-cpu's
        # comment below says why).
        "pba-cpu": {"population": 8, "perturbation_interval": 4, "quantile": 0.25, "resample_probability": 0.2},
    }

    population: int = 16
    perturbation_interval: int = 3
    quantile: float = 0.25
    resample_probability: float = 0.2
    max_shift: int = 3
    init: str = "random"

    def __post_init__(self) -> None:
        if not is_int(self.population) or self.population < 2:
            raise self.invalid("population", "an integer >= 2 (exploit needs a member to copy)")
        if not is_int(self.perturbation_interval) or self.perturbation_interval < 1:
            raise self.invalid("perturbation_interval", "an integer >= 1 (epochs)")
        if not is_number(self.quantile) or not 0 < self.quantile <= 0.5:
            raise self.invalid("quantile", "a number in (0, 0.5]")
        if not is_number(self.resample_probability) or not 0 <= self.resample_probability <= 1:
            raise self.invalid("resample_probability", "a number in [0, 1]")
        if not is_int(self.max_shift) or self.max_shift < 0:
            raise self.invalid("max_shift", "an integer >= 0 (grid steps)")
        if self.init not in PBA_INITS:
            raise self.invalid("init", f"one of {list(PBA_INITS)}")
        object.__setattr__(self, "quantile", float(self.quantile))
        object.__setattr__(self, "resample_probability", float(self.resample_probability))


# ----------------------------------------------------------------------------------------------
# Explore and the first population
def explore_params(
    params: Mapping[str, Any], space: SearchSpace, rng: random.Random, resample_probability: float, max_shift: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """PBA's explore over ``space``: returns the perturbed parameters and, per parameter, what was
    done (``resample``, ``+k``/``-k`` steps, ``keep``). Every value stays on the space's grid:
    operation types among its candidates, probabilities on its grid, magnitudes in its bins."""
    out: dict[str, Any] = {}
    ops: dict[str, str] = {}
    steps = space.num_probabilities - 1
    for name in space.param_names():
        value = params[name]
        if name.endswith("_type"):
            if rng.random() < resample_probability:
                out[name], ops[name] = rng.choice(space.op_choices), "resample"
            else:
                out[name], ops[name] = value, "keep"
            continue
        top = steps if name.endswith("_prob") else space.num_magnitude_bins - 1
        index = round(float(value) * steps) if name.endswith("_prob") else int(value)
        if rng.random() < resample_probability:
            new, ops[name] = rng.randint(0, top), "resample"
        else:
            amount = rng.randint(0, max_shift) * rng.choice((-1, 1))
            new = min(max(index + amount, 0), top)
            ops[name] = f"{new - index:+d}"
        out[name] = new / steps if name.endswith("_prob") else new
    return out, ops


class PbaExplore:
    """PBT's ``custom_explore_fn``: :func:`explore_params` on a member's ``config["policy"]``, the
    operations recorded in ``config["explore"]``. Picklable (it travels in Tune's experiment state);
    its random generator is seeded from the search's seed."""

    def __init__(self, space: Mapping[str, Any], resample_probability: float, max_shift: int, seed: int) -> None:
        self.space = dict(space)
        self.resample_probability = resample_probability
        self.max_shift = max_shift
        self.rng = random.Random(seed)

    def __call__(self, config: dict) -> dict:
        params, ops = explore_params(
            config["policy"], SearchSpace.from_dict(self.space), self.rng, self.resample_probability, self.max_shift
        )
        return {**config, "policy": params, "explore": ops}


def initial_population(config: SearchConfig) -> list[dict[str, Any]]:
    """The members' first parameters: the warm start's candidates, then ``init``'s draws (seeded
    by ``SearchConfig.seed``)."""
    s, space = config.method_settings(PbaConfig), config.space
    points = list(warm_start_points(config.warm_start, space, store=config.store)) if config.warm_start else []
    rng = random.Random(config.seed)
    while len(points) < s.population:
        if s.init == "zero":  # operations drawn, every probability and magnitude 0
            points.append(
                {
                    n: rng.choice(space.op_choices) if n.endswith("_type") else 0.0 if n.endswith("_prob") else 0
                    for n in space.param_names()
                }
            )
        else:
            points.append(space.random_params(rng))
    return points[: s.population]


# ----------------------------------------------------------------------------------------------
# The method
class PbaMethod(Method):
    name = "pba"
    space_families = ("aa",)  # explore moves the aa family's parameters
    help = "a population trained once, its policies evolved as it trains: a schedule (Population Based Augmentation)"
    settings = PbaConfig
    unit = "members"
    #: Members train K at a time on pack servers (``--pack``); an exploit restarts one there from another's state.
    packs = True
    pack_trials = "population"
    reporter_class = PbaReporter
    #: Its record in the run directory (the provenance's ``method`` with the schedule).
    record_file: ClassVar[str] = PBA_FILE
    presets = {
        # Population Based Augmentation on a CPU, at most 1 CPU-hour (about 25 minutes on 2 cores):
        # 8 members of the proxy-cpu recipe (one 120-epoch run: 2.5-4 min on one core, so 20-32
        # CPU-minutes of training) perturbed every 4 epochs (30 rounds; each costs a member a pause and
        # a pipeline rebuild of 1-2 s: 4-8 CPU-minutes more); PBA's quantile 0.25 and resample
        # probability 0.2; ranked on the mean validation accuracy of the last 3 epochs (mostly the
        # current policy's). The base is measured first, as in every CPU preset (3 proxy runs, about
        # 7 minutes on 2 cores: on traffic signs the flip of `standard` costs more than any policy
        # finds); no transfer warm start (5 proxy runs more; PBA starts from random policies) and no
        # re-scoring (one schedule): docs/search.md, "Population Based Augmentation".
        "pba-cpu": {
            "train": {"preset": "proxy-cpu"},
            "concurrency": 2,
            "cpus_per_trial": 1,
            "gpus_per_trial": 0,
            "score_window": 3,
            "base": "auto",
        },
    }

    def check(self, config: SearchConfig) -> None:
        check_space_family(config, self.name, self.space_families)  # explore_params moves the aa family's parameters
        s, t = config.method_settings(PbaConfig), config.train
        if t.val_size == 0:
            raise ValueError(
                "train.val_size is 0: PBA ranks the population on the validation split; "
                "give a validation size (None = every image not used for training)"
            )
        check_validation_left_to_the_method(t, "PBA ranks the population on the validation accuracy after every epoch")
        if s.perturbation_interval >= t.epochs:
            raise ValueError(
                f"pba.perturbation_interval {s.perturbation_interval} is not below train.epochs "
                f"{t.epochs}: no member would ever exploit another; lower the interval"
            )
        if config.rescore:
            raise ValueError(
                "rescore is on (as in the cpu preset), but PBA returns one schedule: "
                "no candidates to choose from; use --preset pba-cpu, or --set rescore=false"
            )

    def num_trials(self, config: SearchConfig) -> int:
        return config.method_settings(PbaConfig).population

    def max_candidates(self, config: SearchConfig) -> int:
        return 1  # the best member's schedule

    def warm_start_capacity(self, config: SearchConfig) -> tuple[int, str]:
        return config.method_settings(PbaConfig).population, "members; raise pba.population"

    def study_names(self, config: SearchConfig) -> Sequence[str]:
        return ()

    def can_resume(self, run: RunDir) -> bool:
        from autoaug.search.tune.experiment import can_restore

        return can_restore(run.uri)

    def run(self, search: PreparedSearch) -> MethodResult:
        """The population run or continued (:func:`autoaug.search.methods.pba.runner.run_population`),
        then what it found (:func:`_result`)."""
        # Ray Tune and the trainer: imported when the search runs (`autoaug --help` reads this module)
        from autoaug.search.methods.pba import runner

        config, s = search.config, search.config.method_settings(PbaConfig)
        explore = PbaExplore(config.space.to_dict(), s.resample_probability, s.max_shift, config.seed)
        members, events, wall, packs = runner.run_population(search, s, explore, lambda: initial_population(config))
        return _result(search, members, events, wall, packs)


def _result(
    search: PreparedSearch,
    members: list[tuple[TrialRecord, Any, dict[str, Any]]],
    events: list[dict[str, Any]],
    wall: float,
    packs: dict[str, float] | None = None,
) -> MethodResult:
    """What the population found: its ``members`` (as :mod:`.runner` read them: each a trial, its
    schedule and state) checked to have finished (:func:`_check_finished`), the best member's
    schedule (its last stage the stored policy), the record of the method with its ``events``
    (:func:`_pba_record`, also written to ``pba.json``)."""
    config, s = search.config, search.config.method_settings(PbaConfig)
    records = [m[0] for m in members]
    _check_finished(search, records, s.population)
    scored = [m for m in members if m[0].succeeded and m[1] is not None]
    if not scored:
        raise all_failed(records, config.name, "members")
    best, schedule, state = max(scored, key=lambda m: (m[0].score, -m[0].index))
    schedule = schedule.with_name(config.name)
    final = schedule.final.with_name(config.name)
    assembled = AssembledPolicy(
        policy=final,
        selected=(best,),
        duplicates_removed=0,
        sources=(best.trial_id,) * len(final.sub_policies),
        rule="best",  # the best member's own (last) policy, nothing concatenated
    )
    events.sort(key=lambda e: (e["epoch"], e["member"]))
    record = _pba_record(s, best, schedule, state, events, members, config.epochs)
    if packs:  # what this driver's pack servers did (a resumed search: since it resumed)
        record["packs"] = packs
    # the run directory's record holds the schedule too (the provenance's is MethodResult.schedule)
    search.run.write_json(
        PBA_FILE, {**record, "schedule": {**schedule.to_dict(), "content_hash": schedule.content_hash}}
    )
    search.display.log(
        f"pba: best member {best.trial_id} ({METRIC} {best.score:.4f}), schedule of {len(schedule.stages)} "
        f"stage(s) from epochs {[e + 1 for e in schedule.start_epochs(config.epochs)]}; "
        f"{sum(1 for e in events)} exploit/explore events in the population"
    )
    return MethodResult(
        trials=records,
        assembled=assembled,
        candidates=[Candidate("pba_schedule", final, (best.trial_id,), best.score)],
        optuna=no_study("PBA uses no Optuna study: PBT's exploit/explore proposes the policies"),
        timing={"population_wall_s": wall},
        provenance=record,
        schedule=schedule,
    )


def _check_finished(search: PreparedSearch, records: list[TrialRecord], population: int) -> None:
    """Raise :class:`SearchInterruptedError` unless every member trained to the end (or the time
    budget ended the search, and no member is left part-way before its end)."""
    config, finished = search.config, [r for r in records if r.finished]
    if len(finished) < population and not (search.budget_ended() and all(r.finished or r.epochs == 0 for r in records)):
        raise interrupted(config, f"with {len(finished)} of {population} members trained to the end")


def _pba_record(
    s: PbaConfig,
    best: TrialRecord,
    schedule: Any,
    state: dict[str, Any],
    events: list[dict[str, Any]],
    members: list[tuple[TrialRecord, Any, dict[str, Any]]],
    epochs: int,
) -> dict[str, Any]:
    """The method's record (the provenance's ``method``): the settings, the best member, its
    schedule (hash, stages) and lineage, every exploit/explore event and each member's outcome."""
    return {
        "name": "pba",
        **s.to_dict(),
        "explore": "resample each parameter with resample_probability, else shift a probability/magnitude by "
        "0..max_shift grid steps (clipped); operation types resampled or kept",
        "best_member": best.trial_id,
        "schedule_hash": schedule.content_hash,
        "stored_policy": "the schedule's last stage",
        "stage_starts": [stage.start for stage in schedule.stages],
        "stage_epochs": schedule.start_epochs(epochs),
        "lineage": list(state.get("lineage", [])),
        "events": events,
        "members": [
            {
                "trial_id": r.trial_id,
                "score": r.score,
                "status": r.status,
                "stages": None if sch is None else len(sch.stages),
                "schedule_hash": None if sch is None else sch.content_hash,
            }
            for r, sch, _ in members
        ],
    }


METHOD = PbaMethod()
