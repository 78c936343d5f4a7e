"""What changed between two policies: sub-policies added, removed and changed
(:func:`diff_policies`, used by ``PolicyStore.diff`` and ``autoaug policies diff``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoaug.policies import ops as _ops
from autoaug.policies.policy import Op, Policy

__all__ = ["PolicyDiff", "SubPolicyChange", "diff_policies"]


def _fmt_op(op: Op) -> str:
    return str(op)  # e.g. "Rotate(p=0.7 m2)"


def _fmt_sub(sub: Sequence[Op]) -> str:
    return "  ->  ".join(_fmt_op(op) for op in sub) if sub else "(identity)"


@dataclass(frozen=True)
class SubPolicyChange:
    """A sub-policy with the same ops in the same order but other probabilities or bins."""

    index_a: int
    index_b: int
    before: tuple[Op, ...]
    after: tuple[Op, ...]

    def __str__(self) -> str:
        parts = []
        for a, b in zip(self.before, self.after):
            if a == b:
                parts.append(_fmt_op(a))
                continue
            p = f"{a.probability:g}"
            if a.probability != b.probability:
                p = f"{p}->{b.probability:g}"
            m = ""
            if a.magnitude_bin != b.magnitude_bin:
                m = f" m{a.magnitude_bin}->{b.magnitude_bin}"
            elif _ops.REGISTRY[a.op].has_magnitude:
                m = f" m{a.magnitude_bin}"
            parts.append(f"{a.op}(p={p}{m})")
        return "  ->  ".join(parts)


@dataclass(frozen=True)
class PolicyDiff:
    """Differences between two policies, sub-policy by sub-policy.

    Sub-policies are matched as a multiset (a policy draws one uniformly, so their order does not
    change what it does): identical ones are ``unchanged``; the rest are paired as ``changed``
    when they apply the same ops in the same order, else reported as ``removed`` (only in *a*) or
    ``added`` (only in *b*). Indices refer to the position in the respective policy.
    """

    label_a: str
    label_b: str
    fields: tuple[tuple[str, Any, Any], ...]
    added: tuple[tuple[int, tuple[Op, ...]], ...]
    removed: tuple[tuple[int, tuple[Op, ...]], ...]
    changed: tuple[SubPolicyChange, ...]
    unchanged: int
    reordered: bool

    @property
    def same_content(self) -> bool:
        """True when both policies apply the same sub-policies with the same settings (names may differ)."""
        return (
            not self.added
            and not self.removed
            and not self.changed
            and all(name == "name" for name, _, _ in self.fields)
        )

    def __str__(self) -> str:
        lines = [f"--- {self.label_a}", f"+++ {self.label_b}"]
        for name, a, b in self.fields:
            lines.append(f"  {name}: {a} -> {b}")
        for change in self.changed:
            lines.append(f"~ [{change.index_a}]->[{change.index_b}] {change}")
        for index, sub in self.removed:
            lines.append(f"- [{index}] {_fmt_sub(sub)}")
        for index, sub in self.added:
            lines.append(f"+ [{index}] {_fmt_sub(sub)}")
        summary = (
            f"{len(self.added)} added, {len(self.removed)} removed, {len(self.changed)} changed, "
            f"{self.unchanged} unchanged sub-policies"
        )
        if self.same_content:
            summary += " (same content" + (", different order)" if self.reordered else ")")
        lines.append(summary)
        return "\n".join(lines)


def diff_policies(a: Policy, b: Policy, label_a: str | None = None, label_b: str | None = None) -> PolicyDiff:
    """Compare two policies (see :class:`PolicyDiff` for how sub-policies are matched)."""
    for what, p in (("a", a), ("b", b)):
        if not isinstance(p, Policy):
            raise TypeError(f"diff_policies: {what} must be a policies.Policy, got {type(p).__name__}")
    fields = tuple(
        (name, getattr(a, name), getattr(b, name))
        for name in ("name", "num_magnitude_bins", "base", "ranges")
        if getattr(a, name) != getattr(b, name)
    )
    subs_a = [tuple(s) for s in a.sub_policies]
    subs_b = [tuple(s) for s in b.sub_policies]

    exact: dict[tuple[Op, ...], list[int]] = {}
    for i, sub in enumerate(subs_a):
        exact.setdefault(sub, []).append(i)
    unchanged = 0
    rest_b: list[int] = []
    for j, sub in enumerate(subs_b):
        if exact.get(sub):
            exact[sub].pop(0)
            unchanged += 1
        else:
            rest_b.append(j)
    rest_a = sorted(i for indices in exact.values() for i in indices)

    by_ops: dict[tuple[str, ...], list[int]] = {}
    for i in rest_a:
        by_ops.setdefault(tuple(op.op for op in subs_a[i]), []).append(i)
    changed: list[SubPolicyChange] = []
    added: list[tuple[int, tuple[Op, ...]]] = []
    for j in rest_b:
        candidates = by_ops.get(tuple(op.op for op in subs_b[j]))
        if candidates:
            i = candidates.pop(0)
            changed.append(SubPolicyChange(i, j, subs_a[i], subs_b[j]))
        else:
            added.append((j, subs_b[j]))
    removed = sorted((i, subs_a[i]) for indices in by_ops.values() for i in indices)
    changed.sort(key=lambda c: c.index_a)
    reordered = not added and not removed and not changed and subs_a != subs_b
    return PolicyDiff(
        label_a=label_a if label_a is not None else a.name,
        label_b=label_b if label_b is not None else b.name,
        fields=fields,
        added=tuple(added),
        removed=tuple(removed),
        changed=tuple(changed),
        unchanged=unchanged,
        reordered=reordered,
    )
