"""The AutoAugment search space and its encoding as Optuna parameters.

A candidate policy (Cubuk et al., CVPR 2019) is ``K`` sub-policies (default 5) of 2 operations;
each operation has three parameters:

* ``sp{i}_op{j}_type`` -- categorical over the candidate operations (default the 16 AutoAugment
  operations of :data:`autoaug.policies.ops.AUTOAUGMENT_OPS`, minus ``exclude_ops``);
* ``sp{i}_op{j}_prob`` -- the probability, a stepped float over the 11 values 0, 0.1, ..., 1
  (``FloatDistribution(0, 1, step=0.1)``: ordinal, and only those values can be sampled);
* ``sp{i}_op{j}_mag`` -- the magnitude bin, an integer in ``0 .. num_magnitude_bins - 1``.

:class:`SearchSpace` is the one place that maps between a parameter dict (an Optuna trial's
``params``, or the ``config`` Ray Tune hands a trial) and a :class:`policies.Policy`, both ways:
:meth:`SearchSpace.to_policy` and :meth:`SearchSpace.to_params`. The space is fixed (not
conditional), so it is given to Optuna as a dict of distributions (:meth:`distributions`); the
equivalent define-by-run function is :meth:`suggest`.

>>> space = SearchSpace(num_sub_policies=2)
>>> params = space.to_params(Policy("p", 10, [[("Rotate", 0.7, 2), ("Invert", 0.1, 0)],
...                                           [("Color", 0.4, 9), ("Equalize", 1.0, 3)]]))
>>> params["sp0_op0_type"], params["sp0_op0_prob"], params["sp0_op0_mag"]
('Rotate', 0.7, 2)
>>> space.to_policy(params, name="p") == Policy("p", 10, [[("Rotate", 0.7, 2), ("Invert", 0.1, 0)],
...                                                       [("Color", 0.4, 9), ("Equalize", 1.0, 3)]])
True
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autoaug.core.values import check_keys, is_int as _is_int
from autoaug.policies import Policy, ops as _ops
from autoaug.policies.policy import BASES, RANGES

__all__ = ["SearchSpace", "PARAM_FIELDS"]

#: The three parameters of one operation, in the order they are suggested.
PARAM_FIELDS = ("type", "prob", "mag")


def _as_name_tuple(value: Any, field: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(
            f"SearchSpace.{field}: {value!r} is not a list of operation names; expected e.g. "
            f"['Rotate', 'Invert'] (known: {list(_ops.OP_NAMES)})"
        )
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or name not in _ops.REGISTRY:
            raise ValueError(f"SearchSpace.{field}: {_ops.unknown_op_message(name)}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"SearchSpace.{field}: operations listed more than once: {duplicates}")
    return names


@dataclass(frozen=True)
class SearchSpace:
    """AutoAugment's policy search space; see the module documentation.

    Args:
        num_sub_policies: sub-policies per candidate policy (``K``; the paper uses 5).
        ops_per_sub_policy: operations per sub-policy (the paper uses 2).
        ops: candidate operation types (names of :data:`autoaug.policies.ops.REGISTRY`).
        exclude_ops: operations removed from ``ops`` (e.g. ``["SamplePairing"]``).
        num_magnitude_bins: magnitude bins ``B``; bins are ``0 .. B-1`` (the paper uses 10).
        num_probabilities: probability values, evenly spaced over [0, 1] (11: 0, 0.1, ..., 1).
        base: ``Policy.base`` of every candidate (``"standard"``: crop + flip first).
        ranges: ``Policy.ranges`` of every candidate (``"autoaugment"`` or ``"wide"``).

    Raises:
        ValueError: naming the field, the bad value and what is allowed.
    """

    num_sub_policies: int = 5
    ops_per_sub_policy: int = 2
    ops: tuple[str, ...] = _ops.AUTOAUGMENT_OPS
    exclude_ops: tuple[str, ...] = ()
    num_magnitude_bins: int = 10
    num_probabilities: int = 11
    base: str = "standard"
    ranges: str = "autoaugment"

    def __post_init__(self) -> None:
        for name in ("num_sub_policies", "ops_per_sub_policy", "num_magnitude_bins"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"SearchSpace.{name}: {value!r} is invalid; expected an integer >= 1")
        if not _is_int(self.num_probabilities) or self.num_probabilities < 2:
            raise ValueError(
                f"SearchSpace.num_probabilities: {self.num_probabilities!r} is invalid; expected an "
                "integer >= 2 (11 gives 0, 0.1, ..., 1)"
            )
        if self.base not in BASES:
            raise ValueError(f"SearchSpace.base: {self.base!r} is invalid; expected one of {list(BASES)}")
        if self.ranges not in RANGES:
            raise ValueError(f"SearchSpace.ranges: {self.ranges!r} is invalid; expected one of {list(RANGES)}")
        object.__setattr__(self, "ops", _as_name_tuple(self.ops, "ops"))
        object.__setattr__(self, "exclude_ops", _as_name_tuple(self.exclude_ops, "exclude_ops"))
        if not self.op_choices:
            raise ValueError(
                f"SearchSpace: excluding {list(self.exclude_ops)} from {list(self.ops)} leaves no "
                "operation to search over"
            )

    # ------------------------------------------------------------------ the space
    @property
    def op_choices(self) -> tuple[str, ...]:
        """Candidate operation types: ``ops`` minus ``exclude_ops``, in the order of ``ops``."""
        excluded = set(self.exclude_ops)
        return tuple(n for n in self.ops if n not in excluded)

    @property
    def probabilities(self) -> tuple[float, ...]:
        """The allowed probabilities (``0, 0.1, ..., 1`` by default), exactly as a Policy holds them."""
        steps = self.num_probabilities - 1
        return tuple(k / steps for k in range(steps + 1))

    @property
    def probability_step(self) -> float:
        return 1.0 / (self.num_probabilities - 1)

    @property
    def num_ops(self) -> int:
        """Operations per candidate policy (``K * ops_per_sub_policy``)."""
        return self.num_sub_policies * self.ops_per_sub_policy

    @property
    def size(self) -> int:
        """Number of distinct parameter assignments: ``(types * probabilities * bins) ** num_ops``."""
        per_op = len(self.op_choices) * self.num_probabilities * self.num_magnitude_bins
        return per_op**self.num_ops

    @staticmethod
    def param_name(sub_policy: int, op: int, field: str) -> str:
        """Name of one parameter, e.g. ``param_name(0, 1, "prob") == "sp0_op1_prob"``."""
        if field not in PARAM_FIELDS:
            raise ValueError(f"unknown parameter field {field!r}; expected one of {list(PARAM_FIELDS)}")
        return f"sp{sub_policy}_op{op}_{field}"

    def param_names(self) -> list[str]:
        """Every parameter name, in suggestion order (sub-policy, operation, field)."""
        return [
            self.param_name(i, j, f)
            for i in range(self.num_sub_policies)
            for j in range(self.ops_per_sub_policy)
            for f in PARAM_FIELDS
        ]

    def distributions(self) -> dict[str, Any]:
        """The space as ``{name: optuna distribution}`` (what ``OptunaSearch(space=...)`` takes)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        dists: dict[str, Any] = {}
        for i in range(self.num_sub_policies):
            for j in range(self.ops_per_sub_policy):
                dists[self.param_name(i, j, "type")] = CategoricalDistribution(self.op_choices)
                dists[self.param_name(i, j, "prob")] = FloatDistribution(0.0, 1.0, step=self.probability_step)
                dists[self.param_name(i, j, "mag")] = IntDistribution(0, self.num_magnitude_bins - 1)
        return dists

    def suggest(self, trial: Any, name: str = "candidate") -> Policy:
        """Define-by-run form: suggest every parameter on an ``optuna.Trial``; returns the Policy."""
        params = {}
        for pname, dist in self.distributions().items():
            if pname.endswith("_type"):
                params[pname] = trial.suggest_categorical(pname, dist.choices)
            elif pname.endswith("_prob"):
                params[pname] = trial.suggest_float(pname, dist.low, dist.high, step=dist.step)
            else:
                params[pname] = trial.suggest_int(pname, dist.low, dist.high)
        return self.to_policy(params, name=name)

    def random_params(self, rng: random.Random) -> dict[str, Any]:
        """Parameters drawn uniformly from the space with ``rng``, in suggestion order: an operation
        among the candidates, a probability on the grid, a magnitude bin. (The same ``rng`` state
        draws the same parameters: the benchmarks' random policies, PBA's ``init: random``.)"""
        params: dict[str, Any] = {}
        for name in self.param_names():
            if name.endswith("_type"):
                params[name] = rng.choice(self.op_choices)
            elif name.endswith("_prob"):
                params[name] = rng.choice(self.probabilities)
            else:
                params[name] = rng.randint(0, self.num_magnitude_bins - 1)
        return params

    # ------------------------------------------------------------- the encoding
    def _probability(self, value: Any, where: str) -> float:
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
            raise ValueError(f"{where}: {value!r} is not a number; expected one of {list(self.probabilities)}")
        steps = self.num_probabilities - 1
        k = round(float(value) * steps)
        # Optuna's stepped floats come back as e.g. 0.6000000000000001: snap to the grid.
        if not 0 <= k <= steps or abs(float(value) * steps - k) > 1e-6:
            raise ValueError(
                f"{where}: {value!r} is not on the probability grid; expected one of {list(self.probabilities)}"
            )
        return k / steps

    def to_policy(self, params: Mapping[str, Any], name: str = "candidate") -> Policy:
        """Decode a parameter dict (exactly the keys of :meth:`param_names`) into a Policy.

        Probabilities are snapped to the grid (Optuna may return ``0.6000000000000001``).

        Raises:
            ValueError: naming the parameter, the bad value and the allowed values, or listing
                missing / unexpected keys.
        """
        if not isinstance(params, Mapping):
            raise ValueError(f"search parameters must be a dict, got {type(params).__name__}")
        expected = self.param_names()
        missing = [k for k in expected if k not in params]
        unknown = sorted(set(params) - set(expected))
        if missing or unknown:
            raise ValueError(
                f"search parameters do not match the space ({self.num_sub_policies} sub-policies x "
                f"{self.ops_per_sub_policy} ops)"
                + (f"; missing: {missing[:6]}{' ...' if len(missing) > 6 else ''}" if missing else "")
                + (f"; unexpected: {unknown[:6]}{' ...' if len(unknown) > 6 else ''}" if unknown else "")
            )
        sub_policies = []
        for i in range(self.num_sub_policies):
            sub = []
            for j in range(self.ops_per_sub_policy):
                tname, pname, mname = (self.param_name(i, j, f) for f in PARAM_FIELDS)
                op = params[tname]
                if op not in self.op_choices:
                    raise ValueError(
                        f"parameter {tname!r}: {op!r} is not a candidate operation; expected one of "
                        f"{list(self.op_choices)}"
                    )
                prob = self._probability(params[pname], f"parameter {pname!r}")
                mag = params[mname]
                if not _is_int(mag) or not 0 <= mag < self.num_magnitude_bins:
                    raise ValueError(
                        f"parameter {mname!r}: {mag!r} is not a magnitude bin; expected an integer in "
                        f"[0, {self.num_magnitude_bins - 1}]"
                    )
                sub.append((op, prob, int(mag)))
            sub_policies.append(sub)
        return Policy(name, self.num_magnitude_bins, sub_policies, base=self.base, ranges=self.ranges)

    def to_params(self, policy: Policy) -> dict[str, Any]:
        """Encode a Policy of this space's shape as a parameter dict (inverse of :meth:`to_policy`).

        Useful to enqueue a known policy (e.g. a published one) as a first trial.

        Raises:
            ValueError: if the policy does not fit the space (count of sub-policies or operations,
                an operation that is not a candidate, a probability off the grid, a different
                number of magnitude bins, base or ranges).
        """
        if not isinstance(policy, Policy):
            raise ValueError(f"expected a policies.Policy, got {type(policy).__name__}")
        for field, want in (
            ("num_magnitude_bins", self.num_magnitude_bins),
            ("base", self.base),
            ("ranges", self.ranges),
        ):
            if getattr(policy, field) != want:
                raise ValueError(
                    f"policy {policy.name!r} has {field}={getattr(policy, field)!r}, but the search "
                    f"space has {field}={want!r}"
                )
        if len(policy.sub_policies) != self.num_sub_policies:
            raise ValueError(
                f"policy {policy.name!r} has {len(policy.sub_policies)} sub-policies; the search "
                f"space has {self.num_sub_policies}"
            )
        params: dict[str, Any] = {}
        for i, sub in enumerate(policy.sub_policies):
            if len(sub) != self.ops_per_sub_policy:
                raise ValueError(
                    f"policy {policy.name!r}, sub-policy {i}: has {len(sub)} operations; the search "
                    f"space has {self.ops_per_sub_policy} per sub-policy"
                )
            for j, op in enumerate(sub):
                where = f"policy {policy.name!r}, sub-policy {i}, op {j}"
                if op.op not in self.op_choices:
                    raise ValueError(
                        f"{where}: {op.op!r} is not a candidate operation; expected one of {list(self.op_choices)}"
                    )
                params[self.param_name(i, j, "type")] = op.op
                params[self.param_name(i, j, "prob")] = self._probability(op.probability, f"{where}: probability")
                params[self.param_name(i, j, "mag")] = op.magnitude_bin
        return params

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ops"] = list(self.ops)
        d["exclude_ops"] = list(self.exclude_ops)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SearchSpace":
        if not isinstance(data, Mapping):
            raise ValueError(f"search space must be a mapping, got {type(data).__name__}")
        check_keys(data, (f.name for f in dataclasses.fields(cls)), "search space key(s)")
        return cls(**dict(data))

    def describe(self) -> str:
        """One line: shape, candidate operations and the size of the space."""
        excluded = f" (excluded: {', '.join(self.exclude_ops)})" if self.exclude_ops else ""
        return (
            f"{self.num_sub_policies} sub-policies x {self.ops_per_sub_policy} ops; "
            f"{len(self.op_choices)} op types{excluded}, {self.num_probabilities} probabilities, "
            f"{self.num_magnitude_bins} magnitude bins; about 10^{math.log10(self.size):.1f} policies"
        )
