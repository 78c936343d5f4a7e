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
import itertools
import json
import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.core.values import DuplicateKeyError, clip, loads_strict, short_repr
from autoaug.core.values import is_int as _is_int
from autoaug.policies import bases as _bases
from autoaug.policies import ops as _ops

__all__ = [
    "Op",
    "Policy",
    "PolicyError",
    "BASES",
    "RANGES",
    "HASH_DECIMALS",
    "MAX_SUB_POLICIES",
    "MAX_OPS_PER_SUB_POLICY",
    "MAX_MAGNITUDE_BINS",
    "MAX_POLICY_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "read_policy_text",
]

# Limits (docs/policies.md, "Limits"): a policy beyond them is refused when it is built or loaded,
# with a one-line message, instead of hanging training (380,000 sub-policies) or failing deep
# inside it (RecursionError, MemoryError).
#: Sub-policies in one policy: the DALI step keys its lookup tables by ``2 * sub_policy + sign``
#: and DALI's ``fn.lookup_table`` takes keys 0..65535, so no larger policy can train.
MAX_SUB_POLICIES = 32_768
#: Operations in one sub-policy (each is a stage of the DALI graph; AutoAugment uses 2).
MAX_OPS_PER_SUB_POLICY = 16
#: ``num_magnitude_bins`` (AutoAugment uses 10, RandAugment/TrivialAugment 31).
MAX_MAGNITUDE_BINS = 1_000
#: Size of a policy JSON document or file (RandAugment n=3, 2,744 sub-policies of 3 ops, written by
#: ``to_json()``: 0.9 MB; 32,768 sub-policies of 4 ops: about 13 MB).
MAX_POLICY_JSON_BYTES = 64 * 2**20
#: Nesting of a policy JSON document (a policy needs 4 levels: object, list, list, object).
MAX_JSON_DEPTH = 32
#: Longest message a :class:`PolicyError` carries (one line; quoted values are shortened).
MAX_MESSAGE_CHARS = 1000


class PolicyError(UserInputError):
    """A policy (arguments, dict, JSON or file) that is not valid or exceeds a limit.

    An :class:`autoaug.core.errors.UserInputError`, hence also a ``ValueError``. The message is
    one line of at most :data:`MAX_MESSAGE_CHARS` characters naming the place (sub-policy index,
    field, file), the bad value and what is allowed."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(clip(str(message), MAX_MESSAGE_CHARS), *args)


def _short(value: Any, limit: int = 60) -> str:
    return short_repr(value, limit, items=4)


def _keys(mapping: Mapping) -> list[str]:
    """The keys of a mapping as sorted short strings (keys of any type)."""
    return sorted(k if isinstance(k, str) and len(k) <= 40 else _short(k, 40) for k in itertools.islice(mapping, 20))


def _json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in a JSON text, brackets inside strings ignored."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    import numpy as np

    outside = re.sub(r'"(?:[^"\\]|\\.)*"', "", text).encode("utf-8", "replace")
    b = np.frombuffer(outside, dtype=np.uint8)
    step = (b == ord("[")).astype(np.int32) + (b == ord("{")) - (b == ord("]")) - (b == ord("}"))
    return int(np.cumsum(step).max(initial=0))


def read_policy_text(path: str | os.PathLike) -> str:
    """The text of a policy JSON file: at most :data:`MAX_POLICY_JSON_BYTES` bytes of UTF-8 (a BOM
    is allowed). Raises :class:`PolicyError` (not naming the file: callers say which file) or
    ``OSError`` when the file cannot be read."""
    with open(path, "rb") as f:
        data = f.read(MAX_POLICY_JSON_BYTES + 1)
    if len(data) > MAX_POLICY_JSON_BYTES:
        raise PolicyError(
            f"the file is larger than {MAX_POLICY_JSON_BYTES:,} bytes (64 MiB), the limit for a policy file"
        )
    return _decode_utf8(data, "the file")


def _decode_utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PolicyError(
            f"{what} is not UTF-8 text ({exc.reason}: byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); expected a policy JSON document"
        ) from None


#: What can be applied before the policy in training (:mod:`autoaug.policies.bases`): ``none``,
#: ``crop`` (pad-and-random-crop) or ``standard`` (pad-and-random-crop + horizontal flip).
BASES = _bases.NAMES
#: Magnitude-range conventions (see :mod:`autoaug.policies.ops`).
RANGES = _ops.RANGE_CONVENTIONS
#: Probabilities are rounded to this many decimals in the canonical JSON used for hashing.
HASH_DECIMALS = 6
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=,:-]{0,127}$")
_NAME_RULE = (
    "a string of 1-128 characters from [A-Za-z0-9_.+=,:-] starting with a letter or digit (no '@', '/' or whitespace)"
)
_OP_KEYS = ("op", "probability", "magnitude_bin")
_POLICY_KEYS = ("name", "num_magnitude_bins", "sub_policies", "base", "ranges")


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(x)
    except (OverflowError, TypeError, ValueError):  # an int too large for a float, exotic Reals
        return False


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
            if isinstance(self.op, str) and len(self.op) <= 40:
                raise PolicyError(f"field 'op': {_ops.unknown_op_message(self.op)}")
            raise PolicyError(f"field 'op': unknown op {_short(self.op)}; expected one of {list(_ops.OP_NAMES)}")
        p = self.probability
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not _finite(p):
            raise PolicyError(f"field 'probability': {_short(p)} is not a finite number; expected a float in [0, 1]")
        if not 0.0 <= float(p) <= 1.0:
            raise PolicyError(f"field 'probability': {_short(p)} is outside the allowed range [0, 1]")
        b = self.magnitude_bin
        if not _is_int(b):
            raise PolicyError(f"field 'magnitude_bin': {_short(b)} is not an integer; expected an int >= 0")
        if b < 0:
            raise PolicyError(f"field 'magnitude_bin': {_short(b)} is negative; expected an int >= 0")
        object.__setattr__(self, "probability", float(p))
        object.__setattr__(self, "magnitude_bin", int(b))

    @classmethod
    def coerce(cls, value: Any) -> Op:
        """An :class:`Op` from an ``Op``, an ``(op, probability, magnitude_bin)`` sequence or a dict."""
        if isinstance(value, Op):
            return value
        if isinstance(value, Mapping):
            missing = [k for k in _OP_KEYS if k not in value]
            if missing or len(value) != len(_OP_KEYS):
                unknown = _keys({k: None for k in value if k not in _OP_KEYS})
                raise PolicyError(
                    f"op dict has keys {_keys(value)}; expected exactly {list(_OP_KEYS)}"
                    + (f" (unknown: {unknown})" if unknown else "")
                    + (f" (missing: {missing})" if missing else "")
                )
            return cls(value["op"], value["probability"], value["magnitude_bin"])
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            if len(value) != 3:
                raise PolicyError(
                    f"op {_short(value)} has {len(value)} elements; expected a tuple "
                    "(op, probability, magnitude_bin), a dict with those keys, or an Op"
                )
            return cls(*value)
        raise PolicyError(
            f"op {_short(value)} is a {type(value).__name__}; expected a tuple "
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
        base: what is applied before the policy in training (:mod:`autoaug.policies.bases`):
            ``"standard"`` (pad-4 random crop + horizontal flip; the default), ``"crop"`` (the
            crop alone) or ``"none"``.
        ranges: magnitude-range convention, ``"autoaugment"`` or ``"wide"``.

    Raises:
        ValueError: naming the sub-policy index, the field, the bad value and the allowed values.
    """

    name: str
    num_magnitude_bins: int
    sub_policies: tuple[tuple[Op, ...], ...] = field(default=())
    base: str = _bases.DEFAULT
    ranges: str = "autoaugment"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise PolicyError(f"field 'name': {_short(self.name)} is invalid; expected {_NAME_RULE}")
        b = self.num_magnitude_bins
        if not _is_int(b) or not 1 <= b <= MAX_MAGNITUDE_BINS:
            raise PolicyError(
                f"field 'num_magnitude_bins': {_short(b)} is invalid; expected an int from 1 to {MAX_MAGNITUDE_BINS:,}"
            )
        object.__setattr__(self, "num_magnitude_bins", int(b))
        if not isinstance(self.base, str) or self.base not in BASES:
            raise PolicyError(f"field 'base': {_short(self.base)} is invalid; expected one of {list(BASES)}")
        if not isinstance(self.ranges, str) or self.ranges not in RANGES:
            raise PolicyError(f"field 'ranges': {_short(self.ranges)} is invalid; expected one of {list(RANGES)}")
        subs = self.sub_policies
        if isinstance(subs, (str, bytes, Mapping)) or not isinstance(subs, Iterable):
            raise PolicyError(
                f"field 'sub_policies': {_short(subs)} is not a sequence of sub-policies; expected "
                "a list of lists of (op, probability, magnitude_bin)"
            )
        subs = list(itertools.islice(subs, MAX_SUB_POLICIES + 1))
        if len(subs) > MAX_SUB_POLICIES:
            raise PolicyError(
                f"field 'sub_policies': more than {MAX_SUB_POLICIES:,} sub-policies (the limit: DALI's "
                "lookup tables hold 65,536 entries, two per sub-policy)"
            )
        normalized = []
        for i, sub in enumerate(subs):
            if isinstance(sub, (str, bytes, Mapping, Op)) or not isinstance(sub, Iterable):
                raise PolicyError(
                    f"sub-policy {i}: {_short(sub)} is not a sequence of operations; expected a "
                    "list of (op, probability, magnitude_bin)"
                )
            sub = list(itertools.islice(sub, MAX_OPS_PER_SUB_POLICY + 1))
            if not sub:
                raise PolicyError(
                    f"sub-policy {i}: is empty; expected at least one operation (a policy with "
                    "no sub-policies at all is the identity)"
                )
            if len(sub) > MAX_OPS_PER_SUB_POLICY:
                raise PolicyError(f"sub-policy {i}: has more than {MAX_OPS_PER_SUB_POLICY} operations (the limit)")
            ops = []
            for j, raw in enumerate(sub):
                try:
                    op = Op.coerce(raw)
                except ValueError as exc:
                    raise PolicyError(f"sub-policy {i}, op {j}: {exc}") from None
                if op.magnitude_bin >= self.num_magnitude_bins:
                    raise PolicyError(
                        f"sub-policy {i}, op {j} ({op.op}): field 'magnitude_bin': "
                        f"{_short(op.magnitude_bin)} is outside the allowed range "
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
            op.magnitude_bin,
            self.num_magnitude_bins,
            self.ranges,
            image_size=image_size,
            negate=negate,
        )

    # ----------------------------------------------------------- serialization
    def to_dict(self) -> dict[str, Any]:
        """Canonical dict: ``name``, ``num_magnitude_bins``, ``sub_policies`` (lists of
        ``{"op", "probability", "magnitude_bin"}``), plus ``base``/``ranges`` when not default."""
        d: dict[str, Any] = {
            "name": self.name,
            "num_magnitude_bins": self.num_magnitude_bins,
            "sub_policies": [[op.to_dict() for op in sub] for sub in self.sub_policies],
        }
        if self.base != _bases.DEFAULT:
            d["base"] = self.base
        if self.ranges != "autoaugment":
            d["ranges"] = self.ranges
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Policy:
        if not isinstance(d, Mapping):
            raise PolicyError(f"policy must be a dict, got {type(d).__name__}")
        unknown = _keys({k: None for k in d if k not in _POLICY_KEYS})
        missing = [k for k in ("name", "num_magnitude_bins", "sub_policies") if k not in d]
        if unknown or missing:
            raise PolicyError(
                f"policy dict has keys {_keys(d)}; expected {list(_POLICY_KEYS[:3])} and "
                f"optionally {list(_POLICY_KEYS[3:])}"
                + (f" (unknown: {unknown})" if unknown else "")
                + (f" (missing: {missing})" if missing else "")
            )
        return cls(
            name=d["name"],
            num_magnitude_bins=d["num_magnitude_bins"],
            sub_policies=d["sub_policies"],
            base=d.get("base", _bases.DEFAULT),
            ranges=d.get("ranges", "autoaugment"),
        )

    def to_json(self, indent: int | None = 2) -> str:
        """JSON of :meth:`to_dict` (keys in canonical order)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, s: str | bytes) -> Policy:
        """A policy from its JSON document (:meth:`to_json`). At most :data:`MAX_POLICY_JSON_BYTES`
        (bytes: UTF-8) and :data:`MAX_JSON_DEPTH` levels of nesting; raises :class:`PolicyError`."""
        if isinstance(s, (bytes, bytearray)):
            if len(s) > MAX_POLICY_JSON_BYTES:
                raise PolicyError(f"policy JSON is larger than {MAX_POLICY_JSON_BYTES:,} bytes (the limit)")
            s = _decode_utf8(bytes(s), "policy JSON")
        if not isinstance(s, str):
            raise PolicyError(f"policy JSON must be str or bytes, got {type(s).__name__}")
        if len(s) > MAX_POLICY_JSON_BYTES:
            raise PolicyError(f"policy JSON is larger than {MAX_POLICY_JSON_BYTES:,} bytes (the limit)")
        if _json_depth(s) > MAX_JSON_DEPTH:
            raise PolicyError(
                f"policy JSON is nested more than {MAX_JSON_DEPTH} levels deep (the limit; a policy needs 4)"
            )
        try:
            d = loads_strict(s)  # a key given twice is refused, not read as its last value
        except json.JSONDecodeError as exc:
            raise PolicyError(f"policy JSON is not valid JSON: {exc}") from None
        except DuplicateKeyError as exc:
            raise PolicyError(str(exc)) from None
        except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4,300 digits
            if "integer string conversion" in str(exc):
                raise PolicyError(
                    "policy JSON holds an integer of more than 4,300 digits (Python's limit for parsing integers)"
                ) from None
            raise PolicyError(f"policy JSON cannot be read: {type(exc).__name__}: {exc}") from None
        return cls.from_dict(d)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Policy:
        """A policy from a JSON file (:func:`read_policy_text`, :meth:`from_json`). Raises
        :class:`PolicyError` naming the file for a missing, unreadable, oversized, non-UTF-8 or
        invalid file."""
        where = f"policy file {_short(os.fspath(path), 200)}"
        try:
            return cls.from_json(read_policy_text(path))
        except PolicyError as exc:
            raise PolicyError(f"{where}: {exc}") from None
        except OSError as exc:
            raise PolicyError(f"{where} cannot be read: {exc.strerror or exc}") from None

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
    def with_name(self, name: str) -> Policy:
        return Policy(name, self.num_magnitude_bins, self.sub_policies, self.base, self.ranges)

    def with_base(self, base: str) -> Policy:
        """This policy on another base (:mod:`autoaug.policies.bases`): same name, sub-policies,
        bins and ranges. Its content hash changes with the base (``standard`` is not hashed)."""
        return Policy(self.name, self.num_magnitude_bins, self.sub_policies, base, self.ranges)

    def to_torchvision(self, *, base: bool | None = None, **kwargs):
        """A ``torchvision.transforms.v2.Transform`` applying this policy as it was searched: by
        default its base comes first (``standard``: pad-4 random crop + horizontal flip;
        ``crop``: the crop alone; ``none``: nothing); ``base=False`` gives the policy step alone
        (:class:`autoaug.policies.torch_apply.PolicyTransform`)."""
        from autoaug.policies.torch_apply import to_torchvision

        return to_torchvision(self, base=base, **kwargs)

    def table(self, max_rows: int | None = None) -> str:
        """A readable multi-line table of the sub-policies (at most ``max_rows`` of them, then how
        many more: RandAugment N=3 has 2,744)."""
        head = (
            f"Policy {self.name!r}: {len(self)} sub-policies, {self.num_magnitude_bins} "
            f"magnitude bins, base={self.base}, ranges={self.ranges}, "
            f"hash={self.content_hash[:12]}"
        )
        if self.is_identity:
            return head + "\n  (identity: no sub-policies)"
        width = len(str(len(self) - 1))
        lines = [head]
        for i, sub in enumerate(self.sub_policies[:max_rows]):
            lines.append(f"  {i:>{width}}: " + "  ->  ".join(str(op) for op in sub))
        if max_rows is not None and len(self) > max_rows:
            lines.append(f"  ... and {len(self) - max_rows:,} more sub-policies (autoaug policies show: all)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
