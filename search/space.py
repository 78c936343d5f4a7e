"""The search spaces and their encoding as Optuna parameters.

Each candidate is materialized as an ordinary :class:`policies.Policy` (so every backend, the
store, the exports and ``compare`` take it as is). ``SearchSpace.family`` chooses the space:

``aa`` (AutoAugment's, the default). A candidate policy (Cubuk et al., CVPR 2019) is ``K``
sub-policies (default 5) of 2 operations; each operation has three parameters:

* ``sp{i}_op{j}_type`` -- categorical over the candidate operations (default the 16 AutoAugment
  operations of :data:`autoaug.policies.ops.AUTOAUGMENT_OPS`, minus ``exclude_ops``);
* ``sp{i}_op{j}_prob`` -- the probability, a stepped float over the 11 values 0, 0.1, ..., 1
  (``FloatDistribution(0, 1, step=0.1)``: ordinal, and only those values can be sampled);
* ``sp{i}_op{j}_mag`` -- the magnitude bin, an integer in ``0 .. num_magnitude_bins - 1``.

``randaugment`` (RandAugment, Cubuk et al. 2020: N operations drawn per image from a set, one
magnitude M). Parameters ``use_{Op}`` (categorical over ``(False, True)``, one per candidate
operation; default the 14 of :data:`autoaug.policies.ops.RANDAUGMENT_OPS`), ``n`` (an integer in
``1 .. MAX_RANDAUGMENT_N_SEARCH``) and ``m`` (a magnitude bin of 31). The policy: every ordered
``n``-tuple of the chosen operations (in ``op_choices`` order), probability 1, bin ``m`` --
exactly :func:`autoaug.policies.presets.randaugment`, so ``randaugment:n=2,m=9`` is a point.

``trivialaugment`` (TrivialAugment, Mueller & Hutter 2021: one operation per image at a uniform
magnitude). Parameters ``use_{Op}`` and ``max_bin`` (``0 .. num_magnitude_bins - 1``). The policy:
one sub-policy ``[(op, 1.0, b)]`` per chosen operation and bin ``b`` in ``0 .. max_bin``, ranges
``wide`` by default -- exactly :func:`autoaug.policies.presets.trivialaugment` for the 14
operations and ``max_bin`` 30.

In the two last families no operation chosen is the identity policy (the base alone), a point
like any other; its ``n``/``m``/``max_bin`` change nothing, and :meth:`SearchSpace.to_params`
returns it with their lowest values (``n=1``, ``m=0``, ``max_bin=0``).

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
>>> ra = SearchSpace(family="randaugment")
>>> ra.to_params(presets.randaugment(2, 9))["n"], ra.to_params(presets.randaugment(2, 9))["m"]
(2, 9)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoaug.core.values import check_keys
from autoaug.core.values import is_int as _is_int
from autoaug.policies import Policy, presets
from autoaug.policies import ops as _ops
from autoaug.policies.policy import BASES, MAX_MAGNITUDE_BINS, MAX_OPS_PER_SUB_POLICY, MAX_SUB_POLICIES, RANGES

__all__ = ["SearchSpace", "PARAM_FIELDS", "FAMILIES", "MAX_RANDAUGMENT_N_SEARCH"]

#: The three parameters of one operation, in the order they are suggested (family ``aa``).
PARAM_FIELDS = ("type", "prob", "mag")
#: The space families (``SearchSpace.family``); the first is the default.
FAMILIES = ("aa", "randaugment", "trivialaugment")
#: Largest RandAugment ``n`` the ``randaugment`` family searches (14**3 = 2,744 sub-policies).
MAX_RANDAUGMENT_N_SEARCH = 3

#: Per family, the defaults of the fields left unset (``None``): operations, magnitude bins, ranges.
_FAMILY_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "aa": {"ops": _ops.AUTOAUGMENT_OPS, "num_magnitude_bins": 10, "ranges": "autoaugment"},
    "randaugment": {
        "ops": _ops.RANDAUGMENT_OPS,
        "num_magnitude_bins": presets.RANDAUGMENT_NUM_BINS,
        "ranges": "autoaugment",
    },
    "trivialaugment": {
        "ops": _ops.RANDAUGMENT_OPS,
        "num_magnitude_bins": presets.RANDAUGMENT_NUM_BINS,
        "ranges": "wide",
    },
}
#: The fields that shape the ``aa`` family only, with their defaults.
_AA_ONLY = {"num_sub_policies": 5, "ops_per_sub_policy": 2, "num_probabilities": 11}
#: The most each size may be: what one policy may hold (:mod:`autoaug.policies.policy`).
#: The finest probability grid a space may have (steps of 0.01): each value is one choice of a
#: categorical parameter that Optuna stores with every trial.
MAX_PROBABILITIES = 101

_LIMITS = {
    "num_sub_policies": MAX_SUB_POLICIES,
    "ops_per_sub_policy": MAX_OPS_PER_SUB_POLICY,
    "num_magnitude_bins": MAX_MAGNITUDE_BINS,
}
_LIMIT_WHY = {
    "num_sub_policies": "the sub-policies a policy may hold: DALI's lookup tables take two keys per sub-policy",
    "ops_per_sub_policy": "the operations a sub-policy may hold",
    "num_magnitude_bins": "the magnitude bins a policy may have",
}


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


def _is_bool(value: Any) -> bool:
    # Python's bool, or NumPy's (a categorical choice may come back as numpy.bool_)
    return isinstance(value, bool) or type(value).__name__ == "bool_"


@dataclass(frozen=True)
class SearchSpace:
    """A policy search space of one family; see the module documentation.

    Args:
        num_sub_policies: sub-policies per candidate policy (``K``; the paper uses 5). ``aa`` only.
        ops_per_sub_policy: operations per sub-policy (the paper uses 2). ``aa`` only.
        ops: candidate operation types (names of :data:`autoaug.policies.ops.REGISTRY`); None:
            the family's (``aa``: the 16 of AutoAugment; the others: the 14 of RandAugment).
        exclude_ops: operations removed from ``ops`` (e.g. ``["SamplePairing"]``).
        num_magnitude_bins: magnitude bins ``B``; bins are ``0 .. B-1``; None: the family's
            (``aa``: 10, as the paper; the others: 31, as torchvision).
        num_probabilities: probability values, evenly spaced over [0, 1] (11: 0, 0.1, ..., 1).
            ``aa`` only.
        base: ``Policy.base`` of every candidate (``"standard"``: crop + flip first).
        ranges: ``Policy.ranges`` of every candidate (``"autoaugment"`` or ``"wide"``); None:
            the family's (``trivialaugment``: ``wide``; the others: ``autoaugment``).
        family: ``aa``, ``randaugment`` or ``trivialaugment`` (:data:`FAMILIES`).

    The fields left None hold the family's values once built. The ``aa``-only fields must keep
    their defaults in the other families.

    Raises:
        ValueError: naming the field, the bad value and what is allowed.
    """

    num_sub_policies: int = 5
    ops_per_sub_policy: int = 2
    ops: tuple[str, ...] | None = None
    exclude_ops: tuple[str, ...] = ()
    num_magnitude_bins: int | None = None
    num_probabilities: int = 11
    base: str = "standard"
    ranges: str | None = None
    family: str = FAMILIES[0]

    def __post_init__(self) -> None:
        if not isinstance(self.family, str) or self.family not in FAMILIES:
            raise ValueError(f"SearchSpace.family: {self.family!r} is invalid; expected one of {list(FAMILIES)}")
        for name, value in _FAMILY_DEFAULTS[self.family].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if self.family != "aa":
            for name, default in _AA_ONLY.items():
                value = getattr(self, name)
                if value != default or not _is_int(value):
                    raise ValueError(
                        f"SearchSpace.{name}: {value!r} does not apply to the {self.family} family "
                        f"(it shapes the aa family only); leave it unset"
                    )
        # Every candidate is a Policy: the space holds no point a policy may not (docs/policies.md, "Limits").
        for name, limit in _LIMITS.items():
            value = getattr(self, name)
            if not _is_int(value) or not 1 <= value <= limit:
                raise ValueError(
                    f"SearchSpace.{name}: {value!r} is invalid; expected an integer from 1 to {limit:,} "
                    f"({_LIMIT_WHY[name]})"
                )
        if not _is_int(self.num_probabilities) or not 2 <= self.num_probabilities <= MAX_PROBABILITIES:
            raise ValueError(
                f"SearchSpace.num_probabilities: {self.num_probabilities!r} is invalid; expected an "
                f"integer from 2 to {MAX_PROBABILITIES} (11 gives 0, 0.1, ..., 1; {MAX_PROBABILITIES}, the finest, "
                "steps of 0.01: each value is a choice listed with every trial)"
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
        """Operations per candidate policy (``K * ops_per_sub_policy``; family ``aa``)."""
        return self.num_sub_policies * self.ops_per_sub_policy

    @property
    def size(self) -> int:
        """Number of distinct parameter assignments: ``aa``: ``(types * probabilities * bins) **
        num_ops``; ``randaugment``: ``2**ops * MAX_RANDAUGMENT_N_SEARCH * bins``;
        ``trivialaugment``: ``2**ops * bins``."""
        if self.family == "randaugment":
            return 2 ** len(self.op_choices) * MAX_RANDAUGMENT_N_SEARCH * self.num_magnitude_bins
        if self.family == "trivialaugment":
            return 2 ** len(self.op_choices) * self.num_magnitude_bins
        per_op = len(self.op_choices) * self.num_probabilities * self.num_magnitude_bins
        return per_op**self.num_ops

    @staticmethod
    def param_name(sub_policy: int, op: int, field: str) -> str:
        """Name of one ``aa`` parameter, e.g. ``param_name(0, 1, "prob") == "sp0_op1_prob"``."""
        if field not in PARAM_FIELDS:
            raise ValueError(f"unknown parameter field {field!r}; expected one of {list(PARAM_FIELDS)}")
        return f"sp{sub_policy}_op{op}_{field}"

    @staticmethod
    def use_name(op: str) -> str:
        """Name of the parameter choosing operation ``op`` (``randaugment``, ``trivialaugment``)."""
        return f"use_{op}"

    @property
    def _magnitude_param(self) -> str:
        return "m" if self.family == "randaugment" else "max_bin"

    def param_names(self) -> list[str]:
        """Every parameter name, in suggestion order: ``aa``: by sub-policy, operation, field;
        the others: ``use_{Op}`` in ``op_choices`` order, then ``n`` and ``m`` (``randaugment``)
        or ``max_bin`` (``trivialaugment``)."""
        if self.family != "aa":
            extra = ["n", "m"] if self.family == "randaugment" else ["max_bin"]
            return [self.use_name(op) for op in self.op_choices] + extra
        return [
            self.param_name(i, j, f)
            for i in range(self.num_sub_policies)
            for j in range(self.ops_per_sub_policy)
            for f in PARAM_FIELDS
        ]

    def distributions(self) -> dict[str, Any]:
        """The space as ``{name: optuna distribution}`` (what :class:`~autoaug.search.tune.searcher.StudySearcher` asks with)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        dists: dict[str, Any] = {}
        if self.family != "aa":
            for op in self.op_choices:
                dists[self.use_name(op)] = CategoricalDistribution((False, True))
            if self.family == "randaugment":
                dists["n"] = IntDistribution(1, MAX_RANDAUGMENT_N_SEARCH)
            dists[self._magnitude_param] = IntDistribution(0, self.num_magnitude_bins - 1)
            return dists
        for i in range(self.num_sub_policies):
            for j in range(self.ops_per_sub_policy):
                dists[self.param_name(i, j, "type")] = CategoricalDistribution(self.op_choices)
                dists[self.param_name(i, j, "prob")] = FloatDistribution(0.0, 1.0, step=self.probability_step)
                dists[self.param_name(i, j, "mag")] = IntDistribution(0, self.num_magnitude_bins - 1)
        return dists

    def suggest(self, trial: Any, name: str = "candidate") -> Policy:
        """Define-by-run form: suggest every parameter on an ``optuna.Trial``; returns the Policy."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution

        params = {}
        for pname, dist in self.distributions().items():
            if isinstance(dist, CategoricalDistribution):
                params[pname] = trial.suggest_categorical(pname, dist.choices)
            elif isinstance(dist, FloatDistribution):
                params[pname] = trial.suggest_float(pname, dist.low, dist.high, step=dist.step)
            else:
                params[pname] = trial.suggest_int(pname, dist.low, dist.high)
        return self.to_policy(params, name=name)

    def random_params(self, rng: random.Random) -> dict[str, Any]:
        """Parameters drawn uniformly from the space with ``rng``, in suggestion order: ``aa``: an
        operation among the candidates, a probability on the grid, a magnitude bin; the others:
        each operation in or out with probability 1/2, ``n`` and ``m`` or ``max_bin`` uniform.
        (The same ``rng`` state draws the same parameters: the benchmarks' random policies,
        PBA's ``init: random``.)"""
        params: dict[str, Any] = {}
        if self.family != "aa":
            for op in self.op_choices:
                params[self.use_name(op)] = rng.random() < 0.5
            if self.family == "randaugment":
                params["n"] = rng.randint(1, MAX_RANDAUGMENT_N_SEARCH)
            params[self._magnitude_param] = rng.randint(0, self.num_magnitude_bins - 1)
            return params
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

    def _check_keys(self, params: Any) -> None:
        if not isinstance(params, Mapping):
            raise ValueError(f"search parameters must be a dict, got {type(params).__name__}")
        expected = self.param_names()
        missing = [k for k in expected if k not in params]
        unknown = sorted(set(params) - set(expected))
        if missing or unknown:
            shape = (
                f"{self.num_sub_policies} sub-policies x {self.ops_per_sub_policy} ops"
                if self.family == "aa"
                else f"{self.family} family, {len(self.op_choices)} candidate ops"
            )
            raise ValueError(
                f"search parameters do not match the space ({shape})"
                + (f"; missing: {missing[:6]}{' ...' if len(missing) > 6 else ''}" if missing else "")
                + (f"; unexpected: {unknown[:6]}{' ...' if len(unknown) > 6 else ''}" if unknown else "")
            )

    def _int_param(self, params: Mapping[str, Any], name: str, low: int, high: int, what: str) -> int:
        value = params[name]
        if not _is_int(value) or not low <= value <= high:
            raise ValueError(f"parameter {name!r}: {value!r} is not {what}; expected an integer in [{low}, {high}]")
        return int(value)

    def to_policy(self, params: Mapping[str, Any], name: str = "candidate") -> Policy:
        """Decode a parameter dict (exactly the keys of :meth:`param_names`) into a Policy.

        Probabilities are snapped to the grid (Optuna may return ``0.6000000000000001``).

        Raises:
            ValueError: naming the parameter, the bad value and the allowed values, or listing
                missing / unexpected keys.
        """
        self._check_keys(params)
        if self.family != "aa":
            return self._family_policy(params, name)
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

    def _family_policy(self, params: Mapping[str, Any], name: str) -> Policy:
        """``to_policy`` of the ``randaugment`` and ``trivialaugment`` families."""
        chosen = []
        for op in self.op_choices:
            key = self.use_name(op)
            if not _is_bool(params[key]):
                raise ValueError(f"parameter {key!r}: {params[key]!r} is not a boolean; expected true or false")
            if params[key]:
                chosen.append(op)
        top = self.num_magnitude_bins - 1
        if self.family == "randaugment":
            n = self._int_param(params, "n", 1, MAX_RANDAUGMENT_N_SEARCH, "a number of operations per image")
            m = self._int_param(params, "m", 0, top, "a magnitude bin")
            subs = [[(op, 1.0, m) for op in combo] for combo in itertools.product(chosen, repeat=n)]
        else:
            max_bin = self._int_param(params, "max_bin", 0, top, "a magnitude bin")
            subs = [[(op, 1.0, b)] for op in chosen for b in range(max_bin + 1)]
        return Policy(name, self.num_magnitude_bins, subs, base=self.base, ranges=self.ranges)

    def to_params(self, policy: Policy) -> dict[str, Any]:
        """Encode a Policy of this space's shape as a parameter dict (inverse of :meth:`to_policy`).

        Useful to enqueue a known policy (e.g. a published one) as a first trial. In the
        ``randaugment`` and ``trivialaugment`` families a policy must be exactly of the family's
        form (a published preset moved onto the space's base is); the identity policy (no
        sub-policies) gives every ``use_{Op}`` False and the lowest ``n``, ``m`` / ``max_bin``
        (1, 0 / 0), which it does not depend on.

        Raises:
            ValueError: if the policy does not fit the space (count of sub-policies or operations,
                an operation that is not a candidate, a probability off the grid, a different
                number of magnitude bins, base or ranges; a policy not of the family's form).
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
        if self.family != "aa":
            return self._family_params(policy)
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

    def _family_params(self, policy: Policy) -> dict[str, Any]:
        """``to_params`` of the ``randaugment`` and ``trivialaugment`` families."""
        ra = self.family == "randaugment"
        params: dict[str, Any] = {self.use_name(op): False for op in self.op_choices}
        if ra:
            params["n"] = 1
        params[self._magnitude_param] = 0
        if policy.is_identity:
            return params

        def refuse(why: str) -> ValueError:
            return ValueError(f"policy {policy.name!r} is not a {self.family}-family policy: {why}")

        subs = policy.sub_policies
        n = len(subs[0])
        for i, sub in enumerate(subs):
            if ra and len(sub) != n:
                raise refuse(
                    f"sub-policy {i} has {len(sub)} operations, sub-policy 0 has {n}; the family applies "
                    "N operations to every image"
                )
            if not ra and len(sub) != 1:
                raise refuse(f"sub-policy {i} has {len(sub)} operations; the family applies one operation per image")
            for op in sub:
                if op.probability != 1.0:
                    raise refuse(
                        f"sub-policy {i} has probability {op.probability:g}; the family applies every chosen "
                        "operation with probability 1"
                    )
                if op.op not in self.op_choices:
                    raise refuse(
                        f"sub-policy {i} uses {op.op!r}, not a candidate operation (candidates: "
                        f"{', '.join(self.op_choices)})"
                    )
                if ra and op.magnitude_bin != subs[0][0].magnitude_bin:
                    raise refuse(
                        f"sub-policy {i} has magnitude bin {op.magnitude_bin}, sub-policy 0 has "
                        f"{subs[0][0].magnitude_bin}; the family applies one magnitude M to every operation"
                    )
        used = {op.op for sub in subs for op in sub}
        for op in self.op_choices:
            params[self.use_name(op)] = op in used
        if ra:
            if n > MAX_RANDAUGMENT_N_SEARCH:
                raise refuse(f"N={n} operations per image; the family searches N in 1..{MAX_RANDAUGMENT_N_SEARCH}")
            params["n"], params["m"] = n, subs[0][0].magnitude_bin
            rule = f"every ordered {n}-tuple of its {len(used)} operations in the space's order"
        else:
            params["max_bin"] = max(op.magnitude_bin for sub in subs for op in sub)
            rule = f"each of its {len(used)} operations at every bin 0..{params['max_bin']}, in the space's order"
        expected = self._family_policy(params, policy.name)
        if expected.sub_policies != subs:
            raise refuse(
                f"its {len(subs)} sub-policies are not {rule} (those are {len(expected.sub_policies)} "
                "sub-policies, in that order)"
            )
        return params

    def inert_params(self, params: Mapping[str, Any]) -> frozenset[str]:
        """The parameters the policy of the point ``params`` does not depend on (changing one
        alone gives the same augmentation): ``aa``: an operation's type and bin at probability 0,
        the bin of an operation without a magnitude (AutoContrast, Equalize, Invert); the others:
        ``n`` and ``m`` / ``max_bin`` when no operation is chosen, ``m`` / ``max_bin`` when no chosen
        one has a magnitude. (The ``local`` sampler moves none of them and counts points that differ
        only there as one: :mod:`autoaug.search.tune.local_sampler`.)

        >>> sorted(SearchSpace(num_sub_policies=1).inert_params(
        ...     {"sp0_op0_type": "Invert", "sp0_op0_prob": 0.5, "sp0_op0_mag": 3,
        ...      "sp0_op1_type": "Rotate", "sp0_op1_prob": 0.0, "sp0_op1_mag": 3}))
        ['sp0_op0_mag', 'sp0_op1_mag', 'sp0_op1_type']
        """
        inert: set[str] = set()
        has_magnitude = {op: _ops.REGISTRY[op].has_magnitude for op in self.op_choices}
        if self.family != "aa":
            chosen = [op for op in self.op_choices if params.get(self.use_name(op))]
            if not chosen:
                inert.update(["n"] if self.family == "randaugment" else [])
            if not any(has_magnitude[op] for op in chosen):
                inert.add(self._magnitude_param)
            return frozenset(inert)
        for i in range(self.num_sub_policies):
            for j in range(self.ops_per_sub_policy):
                tname, pname, mname = (self.param_name(i, j, f) for f in PARAM_FIELDS)
                prob = params.get(pname)
                if isinstance(prob, numbers.Real) and round(float(prob) * (self.num_probabilities - 1)) == 0:
                    inert.update((tname, mname))
                elif not has_magnitude.get(params.get(tname), True):
                    inert.add(mname)
        return frozenset(inert)

    def describe_point(self, params: Mapping[str, Any]) -> str:
        """One short line of a point of the space: ``aa``: its sub-policies; the others: the
        operations chosen and ``N``/``M`` or the bins (``identity`` when none is chosen)."""
        policy = self.to_policy(params)
        if self.family == "aa":
            return "; ".join(" -> ".join(str(op) for op in sub) for sub in policy.sub_policies)
        chosen = [op for op in self.op_choices if params[self.use_name(op)]]
        if not chosen:
            return "identity (no operation chosen: the base alone)"
        ops = f"{len(chosen)} of {len(self.op_choices)} ops ({', '.join(chosen)})"
        if self.family == "randaugment":
            return f"{ops}, N={params['n']}, M={params['m']}"
        return f"{ops}, bins 0..{params['max_bin']}"

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        """The fields; an ``aa`` space without ``family`` (the default family is left out), another
        family's without the ``aa``-only fields."""
        d = dataclasses.asdict(self)
        d["ops"] = list(self.ops)
        d["exclude_ops"] = list(self.exclude_ops)
        if self.family == "aa":
            del d["family"]
        else:
            for name in _AA_ONLY:
                del d[name]
        return d

    def with_family(self, family: str) -> SearchSpace:
        """This space in another family: the fields that hold this family's defaults (operations,
        magnitude bins, ranges) take the new family's, the others (base, excluded operations, a
        list of operations or a binning set by hand) are kept; an ``aa``-only field set by hand
        is refused outside ``aa``, as everywhere.

        >>> SearchSpace(base="crop").with_family("randaugment").describe().startswith("randaugment")
        True
        """
        if family == self.family:
            return self
        if not isinstance(family, str) or family not in FAMILIES:
            raise ValueError(f"SearchSpace.family: {family!r} is invalid; expected one of {list(FAMILIES)}")
        own = _FAMILY_DEFAULTS[self.family]
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, default in own.items():
            if fields[name] == default:
                fields[name] = None
        fields["family"] = family  # an aa-only field set by hand is refused outside aa
        return SearchSpace(**fields)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSpace:
        if not isinstance(data, Mapping):
            raise ValueError(f"search space must be a mapping, got {type(data).__name__}")
        check_keys(data, (f.name for f in dataclasses.fields(cls)), "search space key(s)")
        return cls(**dict(data))

    def describe(self) -> str:
        """One line: the family or shape, candidate operations and the size of the space."""
        excluded = f" (excluded: {', '.join(self.exclude_ops)})" if self.exclude_ops else ""
        k, bins = len(self.op_choices), self.num_magnitude_bins
        if self.family == "randaugment":
            return (
                f"randaugment family: {k} candidate ops{excluded}, N in 1..{MAX_RANDAUGMENT_N_SEARCH}, "
                f"M in {bins} bins; 2^{k} x {MAX_RANDAUGMENT_N_SEARCH} x {bins} points"
            )
        if self.family == "trivialaugment":
            return (
                f"trivialaugment family: {k} candidate ops{excluded}, bins 0..max_bin of {bins} "
                f"(ranges {self.ranges}); 2^{k} x {bins} points"
            )
        return (
            f"{self.num_sub_policies} sub-policies x {self.ops_per_sub_policy} ops; "
            f"{k} op types{excluded}, {self.num_probabilities} probabilities, "
            f"{bins} magnitude bins; about 10^{math.log10(self.size):.1f} policies"
        )
