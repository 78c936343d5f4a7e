"""A policy as people think of it: RandAugment and TrivialAugment points by their family's
parameters, an AutoAugment-shaped policy as its table of sub-policies, a large union grouped by
operation (:func:`describe`, what ``autoaug policies show`` and a search's summary print;
``Policy.table`` lists every sub-policy).

* **RandAugment** (Cubuk et al. 2020): every ordered N-tuple of a set of operations, each applied
  with probability 1 at one magnitude M: "N = 2, M = 9 over 14 ops" (torchvision's and timm's
  ``RandAugment(num_ops, magnitude)``).
* **TrivialAugment** (Müller & Hutter 2021): one operation per image, its magnitude uniform over a
  range of bins: "one of 14 ops, magnitude uniform over bins 0-30" (``TrivialAugmentWide``).
* Anything else up to ``max_rows`` sub-policies: the table; beyond, one row per operation (how
  many sub-policies use it, its probabilities and bins).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from autoaug.policies.ops import REGISTRY
from autoaug.policies.policy import Policy

__all__ = ["Family", "family_of", "describe", "MAX_ROWS"]

#: Sub-policies :func:`describe` lists one by one; a larger policy is grouped by operation.
MAX_ROWS = 25


@dataclasses.dataclass(frozen=True)
class Family:
    """A policy recognised as a point of a published family."""

    kind: str  # "randaugment" or "trivialaugment"
    ops: tuple[str, ...]
    n: int | None = None  # RandAugment: operations per image
    m: int | None = None  # RandAugment: the magnitude bin
    bins: tuple[int, int] | None = None  # TrivialAugment: the first and last bin drawn

    def line(self, policy: Policy) -> str:
        if self.kind == "randaugment":
            return (
                f"RandAugment: N = {self.n} operation{'s' if self.n != 1 else ''} per image, M = {self.m} "
                f"(bin of {policy.num_magnitude_bins}), uniform over {len(self.ops)} ops"
            )
        lo, hi = self.bins or (0, 0)
        return (
            f"TrivialAugment: one of {len(self.ops)} ops per image, magnitude uniform over bins {lo}-{hi} "
            f"(of {policy.num_magnitude_bins})"
        )


def _ordered_ops(policy: Policy) -> tuple[str, ...]:
    return tuple(dict.fromkeys(op.op for sub in policy.sub_policies for op in sub))


def family_of(policy: Policy) -> Family | None:
    """The family ``policy`` is a point of (see the module's documentation), or None."""
    subs = policy.sub_policies
    if not subs or any(op.probability != 1.0 for sub in subs for op in sub):
        return None
    ops = _ordered_ops(policy)
    lengths = {len(sub) for sub in subs}
    if len(lengths) != 1 or len(ops) < 2:
        return None
    (n,) = lengths
    bins = sorted({op.magnitude_bin for sub in subs for op in sub})
    if n == 1 and len(bins) > 1:
        wanted = set(itertools.product(ops, range(bins[0], bins[-1] + 1)))
        got = [(sub[0].op, sub[0].magnitude_bin) for sub in subs]
        if len(got) == len(wanted) and set(got) == wanted:
            return Family("trivialaugment", ops, bins=(bins[0], bins[-1]))
        return None
    if len(bins) == 1:
        got = [tuple(op.op for op in sub) for sub in subs]
        if len(got) == len(ops) ** n and set(got) == set(itertools.product(ops, repeat=n)):
            return Family("randaugment", ops, n=n, m=bins[0])
    return None


def _span(values: Sequence[float], fmt: str = "{:g}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _by_op(policy: Policy) -> list[str]:
    """One row per operation of a large policy: sub-policies using it, probabilities, bins."""
    uses: dict[str, list] = {}
    subs: dict[str, int] = {}
    for sub in policy.sub_policies:
        for op in sub:
            uses.setdefault(op.op, []).append(op)
        for name in {op.op for op in sub}:
            subs[name] = subs.get(name, 0) + 1
    rows = [("op", "sub-policies", "p", "mean p", "bins")]
    for name, seen in sorted(uses.items(), key=lambda kv: -subs[kv[0]]):
        probs = [o.probability for o in seen]
        rows.append(
            (
                name,
                f"{subs[name]:,}",
                _span(probs),
                f"{sum(probs) / len(probs):.2f}",
                _span([o.magnitude_bin for o in seen], "{}") if REGISTRY[name].has_magnitude else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def describe(policy: Policy, *, max_rows: int = MAX_ROWS) -> list[str]:
    """What ``policy`` is, in at most about ``max_rows`` + 20 lines (see the module's documentation)."""
    head = (
        f"{len(policy.sub_policies):,} sub-policies, {policy.num_magnitude_bins} magnitude bins, "
        f"base={policy.base}, ranges={policy.ranges}"
    )
    if policy.is_identity:
        return ["  (no sub-policies: the identity policy)"]
    family = family_of(policy)
    if family is not None:
        return ["  " + family.line(policy), "  ops: " + ", ".join(family.ops), f"  ({head})"]
    if len(policy.sub_policies) <= max_rows:
        return policy.table().splitlines()[1:]
    return [f"  {head}; by operation (every sub-policy: --all):", *_by_op(policy)]
