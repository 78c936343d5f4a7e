"""The :class:`Policy` value object every package exchanges.

A policy is a list of sub-policies; a sub-policy is a list of operations applied in order; an
operation is ``(op, probability, magnitude_bin)``. When a policy is applied, one sub-policy is
drawn uniformly per image and each of its operations is applied with its probability, at the
magnitude of its bin (see :mod:`autoaug.policies.ops` for the magnitude ranges).

>>> p = Policy("mine", 10, [[("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)],
...                         [("Invert", 0.1, 0), ("Contrast", 0.2, 6)]])
>>> p.sub_policies[0][0]
Op(op='Rotate', probability=0.7, magnitude_bin=2)
>>> Policy.from_json(p.to_json()) == p
True
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from autoaug.policies import ops as _ops

__all__ = ["Op", "Policy", "BASES", "RANGES", "HASH_DECIMALS"]

#: What is applied before the policy in training: pad-4 random crop + horizontal flip, or nothing.
BASES = ("standard", "none")
#: Magnitude-range conventions (see :mod:`autoaug.policies.ops`).
RANGES = _ops.RANGE_CONVENTIONS
#: Probabilities are rounded to this many decimals in the canonical JSON used for hashing.
HASH_DECIMALS = 6
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=,:-]{0,127}$")
_NAME_RULE = (
    "a string of 1-128 characters from [A-Za-z0-9_.+=,:-] starting with a letter or digit "
    "(no '@', '/' or whitespace)"
)
_OP_KEYS = ("op", "probability", "magnitude_bin")
_POLICY_KEYS = ("name", "num_magnitude_bins", "sub_policies", "base", "ranges")


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass(frozen=True)
class Op:
    """One operation of a sub-policy: apply ``op`` with ``probability`` at ``magnitude_bin``.

    Validates what it can on its own (known op name, probability in [0, 1], non-negative integer
    bin); :class:`Policy` checks the bin against ``num_magnitude_bins``.
    """

    op: str
    probability: float
    magnitude_bin: int

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or self.op not in _ops.REGISTRY:
            raise ValueError(f"field 'op': {_ops.unknown_op_message(self.op)}")
        p = self.probability
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not math.isfinite(p):
            raise ValueError(
                f"field 'probability': {p!r} is not a finite number; expected a float in [0, 1]"
            )
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"field 'probability': {p!r} is outside the allowed range [0, 1]")
        b = self.magnitude_bin
        if not _is_int(b):
            raise ValueError(
                f"field 'magnitude_bin': {b!r} is not an integer; expected an int >= 0"
            )
        if b < 0:
            raise ValueError(f"field 'magnitude_bin': {b!r} is negative; expected an int >= 0")
        object.__setattr__(self, "probability", float(p))
        object.__setattr__(self, "magnitude_bin", int(b))

    @classmethod
    def coerce(cls, value: Any) -> "Op":
        """An :class:`Op` from an ``Op``, an ``(op, probability, magnitude_bin)`` sequence or a dict."""
        if isinstance(value, Op):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(_OP_KEYS))
            missing = [k for k in _OP_KEYS if k not in value]
            if unknown or missing:
                raise ValueError(
                    f"op dict has keys {sorted(value)}; expected exactly {list(_OP_KEYS)}"
                    + (f" (unknown: {unknown})" if unknown else "")
                    + (f" (missing: {missing})" if missing else "")
                )
            return cls(value["op"], value["probability"], value["magnitude_bin"])
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            if len(value) != 3:
                raise ValueError(
                    f"op {value!r} has {len(value)} elements; expected a tuple "
                    "(op, probability, magnitude_bin), a dict with those keys, or an Op"
                )
            return cls(*value)
        raise ValueError(
            f"op {value!r} is a {type(value).__name__}; expected a tuple "
            "(op, probability, magnitude_bin), a dict with those keys, or an Op"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "probability": self.probability, "magnitude_bin": self.magnitude_bin}

    def __str__(self) -> str:
        spec = _ops.REGISTRY[self.op]
        mag = f" m{self.magnitude_bin}" if spec.has_magnitude else ""
        return f"{self.op}(p={self.probability:g}{mag})"


@dataclass(frozen=True)
class Policy:
    """An augmentation policy: immutable, validated, with a canonical JSON form and content hash.

    Args:
        name: identifier, 1-128 characters from ``[A-Za-z0-9_.+=,:-]`` (the store uses it in
            references such as ``name@3``, so no ``@``, ``/`` or whitespace).
        num_magnitude_bins: number of magnitude bins ``B`` (bins are ``0 .. B-1``, bin 0 is the
            identity magnitude).
        sub_policies: sequence of sub-policies, each a non-empty sequence of operations given as
            ``(op, probability, magnitude_bin)`` tuples, ``{"op", "probability",
            "magnitude_bin"}`` dicts or :class:`Op`. Zero sub-policies is the identity policy.
        base: ``"standard"`` (pad-4 random crop + horizontal flip before the policy in training)
            or ``"none"``.
        ranges: magnitude-range convention, ``"autoaugment"`` or ``"wide"``.

    Raises:
        ValueError: naming the sub-policy index, the field, the bad value and the allowed values.
    """

    name: str
    num_magnitude_bins: int
    sub_policies: tuple[tuple[Op, ...], ...] = field(default=())
    base: str = "standard"
    ranges: str = "autoaugment"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"field 'name': {self.name!r} is invalid; expected {_NAME_RULE}")
        b = self.num_magnitude_bins
        if not _is_int(b) or b < 1:
            raise ValueError(
                f"field 'num_magnitude_bins': {b!r} is invalid; expected an int >= 1"
            )
        object.__setattr__(self, "num_magnitude_bins", int(b))
        if self.base not in BASES:
            raise ValueError(f"field 'base': {self.base!r} is invalid; expected one of {list(BASES)}")
        if self.ranges not in RANGES:
            raise ValueError(
                f"field 'ranges': {self.ranges!r} is invalid; expected one of {list(RANGES)}"
            )
        subs = self.sub_policies
        if isinstance(subs, (str, bytes, Mapping)) or not isinstance(subs, Iterable):
            raise ValueError(
                f"field 'sub_policies': {subs!r} is not a sequence of sub-policies; expected a "
                "list of lists of (op, probability, magnitude_bin)"
            )
        normalized = []
        for i, sub in enumerate(subs):
            if isinstance(sub, (str, bytes, Mapping, Op)) or not isinstance(sub, Iterable):
                raise ValueError(
                    f"sub-policy {i}: {sub!r} is not a sequence of operations; expected a list "
                    "of (op, probability, magnitude_bin)"
                )
            sub = list(sub)
            if not sub:
                raise ValueError(
                    f"sub-policy {i}: is empty; expected at least one operation (a policy with "
                    "no sub-policies at all is the identity)"
                )
            ops = []
            for j, raw in enumerate(sub):
                try:
                    op = Op.coerce(raw)
                except ValueError as exc:
                    raise ValueError(f"sub-policy {i}, op {j}: {exc}") from None
                if op.magnitude_bin >= self.num_magnitude_bins:
                    raise ValueError(
                        f"sub-policy {i}, op {j} ({op.op}): field 'magnitude_bin': "
                        f"{op.magnitude_bin} is outside the allowed range "
                        f"[0, {self.num_magnitude_bins - 1}] (num_magnitude_bins="
                        f"{self.num_magnitude_bins})"
                    )
                ops.append(op)
            normalized.append(tuple(ops))
        object.__setattr__(self, "sub_policies", tuple(normalized))

    # ------------------------------------------------------------------ views
    def __len__(self) -> int:
        return len(self.sub_policies)

    @property
    def is_identity(self) -> bool:
        """True when the policy has no sub-policies (nothing is applied)."""
        return not self.sub_policies

    @property
    def max_ops_per_sub_policy(self) -> int:
        return max((len(s) for s in self.sub_policies), default=0)

    @property
    def ops_used(self) -> tuple[str, ...]:
        """Names of the operations the policy uses, in registry order."""
        used = {op.op for sub in self.sub_policies for op in sub}
        return tuple(n for n in _ops.OP_NAMES if n in used)

    def magnitude(self, op: Op, *, image_size: tuple[int, int] | None = None, negate=False):
        """The operator parameter of ``op`` under this policy's bins and ranges."""
        return _ops.REGISTRY[op.op].param(
            op.magnitude_bin, self.num_magnitude_bins, self.ranges,
            image_size=image_size, negate=negate,
        )  # fmt: skip

    # ----------------------------------------------------------- serialization
    def to_dict(self) -> dict[str, Any]:
        """Canonical dict: ``name``, ``num_magnitude_bins``, ``sub_policies`` (lists of
        ``{"op", "probability", "magnitude_bin"}``), plus ``base``/``ranges`` when not default."""
        d: dict[str, Any] = {
            "name": self.name,
            "num_magnitude_bins": self.num_magnitude_bins,
            "sub_policies": [[op.to_dict() for op in sub] for sub in self.sub_policies],
        }
        if self.base != "standard":
            d["base"] = self.base
        if self.ranges != "autoaugment":
            d["ranges"] = self.ranges
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Policy":
        if not isinstance(d, Mapping):
            raise ValueError(f"policy must be a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_POLICY_KEYS))
        missing = [k for k in ("name", "num_magnitude_bins", "sub_policies") if k not in d]
        if unknown or missing:
            raise ValueError(
                f"policy dict has keys {sorted(d)}; expected {list(_POLICY_KEYS[:3])} and "
                f"optionally {list(_POLICY_KEYS[3:])}"
                + (f" (unknown: {unknown})" if unknown else "")
                + (f" (missing: {missing})" if missing else "")
            )
        return cls(
            name=d["name"],
            num_magnitude_bins=d["num_magnitude_bins"],
            sub_policies=d["sub_policies"],
            base=d.get("base", "standard"),
            ranges=d.get("ranges", "autoaugment"),
        )

    def to_json(self, indent: int | None = 2) -> str:
        """JSON of :meth:`to_dict` (keys in canonical order)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, s: str | bytes) -> "Policy":
        try:
            d = json.loads(s)
        except json.JSONDecodeError as exc:
            raise ValueError(f"policy JSON is not valid JSON: {exc}") from None
        return cls.from_dict(d)

    def canonical_content_json(self) -> str:
        """Canonical JSON of the content (everything except the name): sorted keys, no spaces,
        probabilities rounded to :data:`HASH_DECIMALS` decimals. Input of :attr:`content_hash`."""
        d = self.to_dict()
        del d["name"]
        for sub in d["sub_policies"]:
            for op in sub:
                op["probability"] = round(op["probability"], HASH_DECIMALS) + 0.0
        return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    @property
    def content_hash(self) -> str:
        """sha256 hex digest of :meth:`canonical_content_json` (independent of the name)."""
        return hashlib.sha256(self.canonical_content_json().encode("ascii")).hexdigest()

    # ---------------------------------------------------------------- helpers
    def with_name(self, name: str) -> "Policy":
        return Policy(name, self.num_magnitude_bins, self.sub_policies, self.base, self.ranges)

    def to_torchvision(self, *, base: bool = False, **kwargs):
        """A ``torchvision.transforms.v2.Transform`` applying this policy (see
        :class:`autoaug.policies.torch_apply.PolicyTransform`). ``base=True`` prepends the pad-4 random
        crop + horizontal flip when ``self.base == "standard"``."""
        from autoaug.policies.torch_apply import to_torchvision

        return to_torchvision(self, base=base, **kwargs)

    def table(self) -> str:
        """A readable multi-line table of the sub-policies."""
        head = (
            f"Policy {self.name!r}: {len(self)} sub-policies, {self.num_magnitude_bins} "
            f"magnitude bins, base={self.base}, ranges={self.ranges}, "
            f"hash={self.content_hash[:12]}"
        )
        if self.is_identity:
            return head + "\n  (identity: no sub-policies)"
        width = len(str(len(self) - 1))
        lines = [head]
        for i, sub in enumerate(self.sub_policies):
            lines.append(f"  {i:>{width}}: " + "  ->  ".join(str(op) for op in sub))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
