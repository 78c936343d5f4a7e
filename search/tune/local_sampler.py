"""The ``local`` sampler (``--sampler local``): candidates as moves from the incumbent, not fresh
draws from the whole space.

A search space of 10^32 policies is not searched by 28 or 300 draws from all of it (a TPE that
proposes at random for its first 10 trials is close to random search there); a published
policy moved onto the right base is already a good point. :class:`LocalSampler` proposes each
candidate as the **incumbent with one thing changed**:

* a categorical parameter (an operation of one slot, a ``use_{Op}`` of the ``randaugment`` and
  ``trivialaugment`` families) set to another of its choices;
* a stepped number (a probability, a magnitude bin, RandAugment's ``n`` / ``m``) moved by one
  or two steps, within its range; a stepped float also to its lowest value (a probability of 0
  drops the operation).

**The incumbent** is the first warm-start trial (a trial enqueued with the user attribute
:data:`~autoaug.search.decide.warm_start.WARM_START_ATTR`: the published policy the search starts
from), from the moment it is proposed, so the first proposals already move from it; once it finished,
the finished trials (``COMPLETE``: trained to the end; a trial stopped early scored a shorter
training) are read in the order they finished and one replaces the incumbent only when its
score beats the incumbent's by more than ``margin`` (the search passes the run-to-run noise its
calibration measured: :func:`autoaug.search.decide.calibration_choices.incumbent_margin`; 0: the best
finished trial). Without a warm start, the first trial to finish starts the chain, and before any
trial finished each proposal is a uniform random draw (as ``random``).

**No proposal repeats a trial of the study** -- finished, failed, or running at the same time
(the situation a constant liar handles for TPE): the move is drawn among the neighbours not tried
yet, a parameter first (uniformly among those with an untried move), then one of its untried
moves. When every neighbour was tried, two, then more, things change at once; a parameter outside
the incumbent's (or a distribution the sampler does not move: a float without a step) is drawn at
random. In a search's study (whose user attribute :data:`SEARCH_ATTR` holds its
:class:`~autoaug.search.space.SearchSpace`) a parameter the policy does not depend on at the
incumbent (the bin of ``Invert``, the type of an operation at probability 0:
:meth:`SearchSpace.inert_params`) is not moved, and points that differ only there count as one.

**Deterministic given (seed, study)**: the random choices of trial ``n`` come from a generator
seeded with ``(seed, n)`` and the study's trials, never from a stream consumed by earlier calls, so
a sampler rebuilt on a restored study (the searcher reseeds it from ``(seed, trials)``) makes the
same decisions as one that ran all along with the same seed. Optuna's public sampler interface
only (``infer_relative_search_space``, ``sample_relative``, ``sample_independent``).
"""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autoaug.search.decide.warm_start import WARM_START_ATTR
from autoaug.search.run_dir import SEARCH_ATTR
from autoaug.search.space import SearchSpace

__all__ = ["LocalSampler", "MAX_STEPS"]


#: A stepped number moves by 1 .. MAX_STEPS steps.
MAX_STEPS = 2
#: Tries at each radius beyond one change, before a wider one (then a uniform draw).
_TRIES_PER_RADIUS = 64
_EPOCH = datetime.datetime.min


class LocalSampler(optuna.samplers.BaseSampler):
    """Proposes the incumbent with one parameter changed (see the module documentation).

    Args:
        seed: the seed of every random choice (with the trial's number).
        margin: how much a finished trial must beat the incumbent's score by to replace it (in the
            score's units; >= 0). 0: the best finished trial is the incumbent.
        max_steps: a stepped number moves by 1 .. ``max_steps`` steps.
    """

    def __init__(self, seed: int | None = None, margin: float = 0.0, max_steps: int = MAX_STEPS) -> None:
        if margin is None or not math.isfinite(margin) or margin < 0:
            raise ValueError(f"LocalSampler margin: {margin!r} is invalid; expected a number >= 0")
        if max_steps < 1:
            raise ValueError(f"LocalSampler max_steps: {max_steps!r} is invalid; expected an integer >= 1")
        self.seed = 0 if seed is None else int(seed)
        self.margin = float(margin)
        self.max_steps = int(max_steps)

    # -- what Optuna calls ---------------------------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        inc = self.incumbent(study)
        if inc is None:
            return {}
        return {name: dist for name, dist in inc.distributions.items() if not dist.single()}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        inc = self.incumbent(study)
        if inc is None or not search_space:
            return {}
        space = {name: dist for name, dist in search_space.items() if name in inc.params}
        inert = _inert_params(study)
        tried = _tried(study.get_trials(deepcopy=False), space, inert, exclude=trial.number)
        try:
            return self.propose(dict(inc.params), space, tried, self._rng(trial.number), inert)
        except (ValueError, TypeError):  # the incumbent is no point of these distributions: a draw
            return {}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return draw(param_distribution, self._rng(trial.number, param_name))

    def reseed_rng(self) -> None:
        """Nothing to reseed: every choice comes from ``(seed, trial number)``."""

    # -- the decisions -------------------------------------------------------------------------
    def incumbent(self, study: optuna.Study) -> FrozenTrial | None:
        """The trial the next proposal moves from (None: none yet, the proposal is random)."""
        trials = study.get_trials(deepcopy=False)
        finished = sorted(
            (t for t in trials if t.state == TrialState.COMPLETE and t.value is not None),
            key=lambda t: (t.datetime_complete or _EPOCH, t.number),
        )
        warm = [
            t
            for t in trials
            if WARM_START_ATTR in t.user_attrs and t.params and t.state in (TrialState.RUNNING, TrialState.COMPLETE)
        ]
        if warm:
            inc = min(warm, key=lambda t: t.number)
            if inc.state != TrialState.COMPLETE:
                return inc  # the warm start, still training: nothing can beat it yet
        elif finished:
            inc = finished[0]
        else:
            return None
        sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        for t in finished:
            if t.number != inc.number and sign * (t.value - inc.value) > self.margin:
                inc = t
        return inc

    def moves(self, name: str, dist: BaseDistribution, value: Any) -> list[Any]:
        """The values parameter ``name`` may move to from ``value`` (empty: it is not moved)."""
        if isinstance(dist, CategoricalDistribution):
            here = dist.to_internal_repr(value)
            return [c for i, c in enumerate(dist.choices) if i != here]
        if isinstance(dist, IntDistribution):
            steps = [value + k * dist.step for k in range(-self.max_steps, self.max_steps + 1) if k]
            return [v for v in steps if dist.low <= v <= dist.high]
        if isinstance(dist, FloatDistribution) and dist.step is not None:
            at = round((value - dist.low) / dist.step)
            top = round((dist.high - dist.low) / dist.step)
            ks = [at + k for k in range(-self.max_steps, self.max_steps + 1) if k and 0 <= at + k <= top]
            if at > self.max_steps:
                ks.insert(0, 0)  # to its lowest: a probability 0 drops the operation
            return [_on_grid(dist, k) for k in ks]
        return []

    def propose(
        self,
        incumbent: Mapping[str, Any],
        space: Mapping[str, BaseDistribution],
        tried: set[Hashable],
        rng: random.Random,
        inert: Callable[[Mapping[str, Any]], frozenset[str]] = lambda params: frozenset(),
    ) -> dict[str, Any]:
        """``incumbent`` with one parameter moved to a point not in ``tried`` (keys of
        :func:`point_key`); when every such neighbour was tried, several moved at once; ``{}`` (a
        uniform draw) when none is found. ``inert(params)``: the parameters the point does not
        depend on (not moved)."""
        still = inert(incumbent)
        names = [name for name in sorted(space) if name not in still]
        options = {name: self.moves(name, space[name], incumbent[name]) for name in names}
        open_moves: dict[str, list[Any]] = {}
        for name in names:
            fresh = [v for v in options[name] if point_key({**incumbent, name: v}, space, inert) not in tried]
            if fresh:
                open_moves[name] = fresh
        if open_moves:
            name = rng.choice(sorted(open_moves))
            return {**incumbent, name: rng.choice(open_moves[name])}
        movable = [name for name in names if options[name]]
        for radius in range(2, len(movable) + 1):
            for _ in range(_TRIES_PER_RADIUS):
                point = dict(incumbent)
                for name in rng.sample(movable, radius):
                    point[name] = rng.choice(options[name])
                if point_key(point, space, inert) not in tried:
                    return point
        return {}

    def _rng(self, number: int, name: str = "") -> random.Random:
        # A string seed is hashed with SHA-512: the same generator in every process.
        return random.Random(f"autoaug-local:{self.seed}:{number}:{name}")


def draw(dist: BaseDistribution, rng: random.Random) -> Any:
    """A uniform draw from ``dist`` (on its grid, if stepped; log-uniform, if ``log``)."""
    if isinstance(dist, CategoricalDistribution):
        return rng.choice(dist.choices)
    if isinstance(dist, IntDistribution):
        if dist.log:
            return int(
                min(dist.high, max(dist.low, round(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))))))
            )
        return dist.low + dist.step * rng.randint(0, (dist.high - dist.low) // dist.step)
    if isinstance(dist, FloatDistribution):
        if dist.step is not None:
            return _on_grid(dist, rng.randint(0, round((dist.high - dist.low) / dist.step)))
        if dist.log:
            return math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
        return rng.uniform(dist.low, dist.high)
    raise ValueError(f"LocalSampler: cannot sample the distribution {dist!r}")


def _on_grid(dist: FloatDistribution, k: int) -> float:
    return min(dist.high, round(dist.low + k * dist.step, 12))


def _canonical(dist: BaseDistribution, value: Any) -> Hashable:
    if isinstance(dist, CategoricalDistribution):
        return dist.to_internal_repr(value)
    step = getattr(dist, "step", None)
    if step:
        return round((float(value) - dist.low) / step)
    return round(float(value), 12)


def point_key(
    params: Mapping[str, Any],
    space: Mapping[str, BaseDistribution],
    inert: Callable[[Mapping[str, Any]], frozenset[str]] = lambda params: frozenset(),
) -> tuple:
    """What tells two points apart: each parameter's place in its distribution (a stepped float
    as its step: ``0.6000000000000001`` is ``0.6``), None for those the point does not depend on."""
    still = inert(params)
    return tuple(None if name in still else _canonical(space[name], params[name]) for name in sorted(space))


def _tried(
    trials: Iterable[FrozenTrial],
    space: Mapping[str, BaseDistribution],
    inert: Callable[[Mapping[str, Any]], frozenset[str]],
    exclude: int,
) -> set[Hashable]:
    """The points of every trial of the study but ``exclude`` (running ones included), as keys."""
    out: set[Hashable] = set()
    for t in trials:
        if t.number == exclude or not all(name in t.params for name in space):
            continue
        try:
            out.add(point_key(t.params, space, inert))
        except (ValueError, TypeError):  # a value of another distribution (a changed space)
            continue
    return out


def _inert_params(study: optuna.Study) -> Callable[[Mapping[str, Any]], frozenset[str]]:
    """:meth:`SearchSpace.inert_params` of the study's search space (:data:`SEARCH_ATTR`); a study
    that names none: no parameter is inert."""
    recorded = (study.user_attrs.get(SEARCH_ATTR) or {}).get("space")
    if not isinstance(recorded, Mapping):
        return lambda params: frozenset()
    try:
        space = SearchSpace.from_dict(recorded)
    except (ValueError, TypeError):
        return lambda params: frozenset()
    return space.inert_params
