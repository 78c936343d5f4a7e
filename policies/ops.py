"""The operation registry: one declaration per augmentation operation.

Every operation a :class:`policies.Policy` may name is one :class:`OpSpec`, declared once with
:func:`declare_op`, holding

* its name (the string used in sub-policies) and a one-line description,
* its magnitude range under each range convention (``"autoaugment"`` and ``"wide"``),
* whether the magnitude is randomly negated per application (``signed``),
* how a magnitude becomes the operation's parameter (``to_param``, e.g. enhance factor ``1 + m``),
* how each backend applies that parameter: ``dali`` (:class:`DaliImpl`: the branch of the DALI
  policy step its samples go to and the per-sample table it reads) and ``torch``
  (:class:`TorchImpl`: a function on a uint8 tensor), each with the operators it uses, for the
  docs (:func:`docs_table` is docs/policies.md's op table),
* how the exports write it (:mod:`autoaug.policies.export`): ``dali_export`` (:class:`DaliExport`:
  the function of ``nvidia.dali.auto_aug.augmentations`` it is) and ``timm_export``
  (:class:`TimmExport`: timm's op and its unit per level), each ``None`` when that library has no
  such op, and ``randaugment``, its place in RandAugment's operations (``None``: not one).

This is DALI's ``@augmentation(mag_range=..., randomly_negate=..., mag_to_param=...)`` for both
backends at once. Everything else is derived from the declarations *when read*, never copied at
import: :data:`REGISTRY` is a read-only view of them, ``OP_NAMES`` and ``RANDAUGMENT_OPS`` are
computed on each access (:func:`op_names`, :func:`randaugment_ops`), and the backends' tables
(``dali_ops.DALI_OPS``, ``DALI_BRANCHES``, ``kind_order()``; ``torch_apply.TORCH_OPS``) are live
views built from ``OpSpec.dali`` / ``OpSpec.torch``. So an operation declared after import (a
plugin, a test) is at once valid in a policy, in a search space, in both backends and in the
exports its declaration gives (and one of RandAugment's operations if it has a place there), and
gone again when its declaration is removed (:class:`Declaration` is a context manager).

The registry imports neither backend: an implementation is a callable, or, for the built-in
operations (:mod:`autoaug.policies.builtin_ops`), the name of a function of the backend module (``autoaug.policies.dali_ops``,
``autoaug.policies.torch_apply``), looked up when that backend reads the declaration; so neither
DALI nor torch is loaded by this module. A new operation under another range is
:meth:`OpSpec.derive` (DALI's ``op.augmentation(mag_range=...)``): the same implementations under
a new name (policies name operations, and a policy's content hash must keep meaning the same
thing, so an existing operation is never re-ranged in place).

Adding an operation: one :func:`declare_op` call (see ``tests/policies/test_declared_op.py``,
which declares one, searches it, applies a policy using it through DALI and torchvision, trains a
step on each and exports it for DALI and timm); a built-in one is one :class:`OpSpec` in
:mod:`autoaug.policies.builtin_ops` plus its row in docs/policies.md (``tests/policies/test_policy_docs.py`` prints
the table to paste).

Magnitude bins
--------------
A policy has ``num_magnitude_bins`` bins ``B``. Bin ``b`` maps *linearly* onto the range
``(identity, maximum)`` of the chosen convention: ``value = lo + (hi - lo) * b / (B - 1)``
(``numpy.linspace(lo, hi, B)[b]``, the convention of torchvision's ``AutoAugment`` and of DALI's
``@augmentation``), so **bin 0 is always the identity** and bin ``B - 1`` the maximum. A signed
operation negates the value with probability 1/2 each time it is applied.

Ranges follow the AutoAugment paper, scaled to the image size where the paper gives pixels
(``"autoaugment"``), or TrivialAugment-wide (``"wide"``, Müller & Hutter, ICCV 2021); the
comment on each record says where its figures come from. Operations TrivialAugment does not
have (Cutout, SamplePairing) use the AutoAugment range under both conventions.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "OpSpec",
    "DaliImpl",
    "TorchImpl",
    "MagnitudeRange",
    "Declaration",
    "declare_op",
    "REGISTRY",
    "op_names",
    "IDENTITY",
    "RANGE_CONVENTIONS",
    "AUTOAUGMENT_OPS",  # noqa: F822 (module __getattr__)
    "randaugment_ops",
    "DaliExport",
    "TimmExport",
    "DALI_TABLES",
    "LiveTable",
    "get",
    "bin_value",
    "docs_table",
    "BUILTIN_OPS",  # noqa: F822 (module __getattr__)
    "DOCS_TABLE_HEADER",
]

#: The two magnitude-range conventions a :class:`~policies.Policy` can use.
RANGE_CONVENTIONS = ("autoaugment", "wide")

IDENTITY = "Identity"

#: The per-sample tables a DALI branch may read (:attr:`DaliImpl.table`), by the name of the
#: branch function's argument: ``param`` a float, ``matrix`` a 2x3 affine matrix (given as the
#: 3x2x3 terms ``A + W*B + H*C``), ``kernel`` a 3x3 kernel.
DALI_TABLES = ("param", "matrix", "kernel")

#: What an operation name looks like: a letter, then letters and digits (``"Rotate"``, ``"Darken2"``).
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")


def bin_value(lo: float, hi: float, magnitude_bin: int, num_magnitude_bins: int) -> float:
    """``numpy.linspace(lo, hi, num_magnitude_bins)[magnitude_bin]`` in float64 (bin 0 = ``lo``)."""
    if num_magnitude_bins < 1:
        raise ValueError(f"num_magnitude_bins must be >= 1, got {num_magnitude_bins!r}")
    if not 0 <= magnitude_bin < num_magnitude_bins:
        raise ValueError(f"magnitude_bin {magnitude_bin!r} is outside [0, {num_magnitude_bins - 1}]")
    if num_magnitude_bins == 1:
        return float(lo)
    return float(lo) + (float(hi) - float(lo)) * magnitude_bin / (num_magnitude_bins - 1)


@dataclass(frozen=True)
class MagnitudeRange:
    """Magnitude at bin 0 (``lo``, the identity) and at the last bin (``hi``).

    ``relative_to`` is ``None`` for absolute units, or ``"width"``, ``"height"`` or ``"min_side"``
    when the magnitude is a fraction of that image dimension (translate, cutout): the pixel
    value is the fraction times the dimension of the image being augmented.
    """

    lo: float
    hi: float
    unit: str
    relative_to: str | None = None
    source: str = ""

    def describe(self) -> str:
        def fmt(v: float) -> str:
            return f"{v:.4g}"

        if self.relative_to is None:
            return f"{fmt(self.lo)} -> {fmt(self.hi)} {self.unit}"
        dim = {"width": "W", "height": "H", "min_side": "min(H,W)"}[self.relative_to]
        return f"{fmt(self.lo)} -> {fmt(self.hi)}*{dim} {self.unit}"


def _identity_param(m: float) -> float:
    return m


# --------------------------------------------------------------------------- backend parts
#: An implementation: a callable, or the name of a function of the backend's module.
Implementation = Callable[..., Any] | str


@dataclass(frozen=True, kw_only=True)
class DaliImpl:
    """How the DALI policy step applies an operation (:mod:`autoaug.policies.dali_apply`).

    A stage of the step sends each sample to one *branch* (an ``nvidia.dali.auto_aug``
    ``@augmentation``, not converted by AutoGraph) with its parameter looked up, before branching,
    from a per-sample table. An operation either has its own branch (``branch``) or joins one
    (``kind``): ShearX, ShearY, TranslateX, TranslateY and Rotate join ``dali_ops``'s shared
    ``"Warp"`` branch (one ``fn.warp_affine``, their matrices differing only in the table), Invert
    joins Solarize's (threshold 0).

    Attributes:
        operator: the DALI operators used, for the docs (docs/policies.md's op table).
        branch: the op's own branch, ``fn(data, _, **arguments) -> data`` (its kind is the op's
            name). It takes its table by the table's name, and any of the shared arguments
            ``fill_value``, ``interp_type`` and those of a branch's ``arguments``.
        kind: instead of ``branch``, the branch it joins: a shared branch of
            ``autoaug.policies.dali_ops`` (``"Warp"``) or another operation's own branch.
        table: the table its own branch reads (:data:`DALI_TABLES`), or ``None``.
        to_table: its entry of the table from ``table_input`` (default: a float, 0 for ``None``).
        table_input: ``"param"``, the op's parameter (:meth:`OpSpec.param`, size-relative
            magnitudes as fractions of the size), or ``"magnitude"``, the unsigned magnitude
            (the branch converts it once the size is known: Cutout).
        sized: its own branch needs the image size.
        arguments: ``(images, size, height, width) -> dict``, arguments its own branch shares with
            every stage (built once per policy step, before any branching), or ``None``.
    """

    operator: str
    branch: Implementation | None = None
    kind: str | None = None
    table: str | None = None
    to_table: Implementation | None = None
    table_input: str = "param"
    sized: bool = False
    arguments: Implementation | None = None

    def check(self, op: str) -> None:
        """``ValueError`` of one line naming ``op`` when the fields do not make an implementation."""
        where = f"declare_op {op!r}: dali"
        if not isinstance(self.operator, str) or not self.operator:
            raise ValueError(f"{where}.operator={self.operator!r}; expected the DALI operators used (for the docs)")
        if (self.branch is None) == (self.kind is None):
            raise ValueError(f"{where}: give branch= (its own branch) or kind= (the branch it joins), not both or none")
        if self.kind is not None and (self.table, self.sized, self.arguments) != (None, False, None):
            raise ValueError(
                f"{where}: with kind={self.kind!r}, table / sized / arguments are the branch's; pass none of them"
            )
        if self.table not in (None, *DALI_TABLES):
            raise ValueError(f"{where}.table={self.table!r}; expected None or one of {list(DALI_TABLES)}")
        if self.table_input not in ("param", "magnitude"):
            raise ValueError(f"{where}.table_input={self.table_input!r}; expected 'param' or 'magnitude'")
        for name in ("branch", "to_table", "arguments"):
            value = getattr(self, name)
            if value is not None and not (callable(value) or isinstance(value, str)):
                raise ValueError(f"{where}.{name}={value!r}; expected a function or a function's name")
        if callable(self.branch) and self.table is not None:
            if self.table not in inspect.signature(self.branch).parameters:
                raise ValueError(
                    f"{where}.branch {getattr(self.branch, '__name__', self.branch)} takes no {self.table!r} "
                    "argument, its table"
                )


@dataclass(frozen=True)
class TorchImpl:
    """How torchvision applies an operation (:mod:`autoaug.policies.torch_apply`).

    Attributes:
        apply: ``fn(img uint8 [..., C, H, W], param, *, fill, interpolation, other, generator) ->
            img`` (take ``**_`` for the keywords it does not use); ``param`` is
            :meth:`OpSpec.param` for the image's size.
        operator: the torchvision functions used, for the docs (docs/policies.md's op table).
    """

    apply: Implementation
    operator: str

    def check(self, op: str) -> None:
        if not (callable(self.apply) or isinstance(self.apply, str)):
            raise ValueError(f"declare_op {op!r}: torch.apply={self.apply!r}; expected a function or a function's name")
        if not isinstance(self.operator, str) or not self.operator:
            raise ValueError(
                f"declare_op {op!r}: torch.operator={self.operator!r}; expected the torchvision functions used"
            )


# --------------------------------------------------------------------------- exports
@dataclass(frozen=True)
class DaliExport:
    """How ``policies export --format dali`` writes an operation (:mod:`autoaug.policies.export`):
    as a function of ``nvidia.dali.auto_aug.augmentations`` re-declared with the op's range,
    ``aug.<augmentation>.augmentation(mag_range=(scale * lo, scale * hi))``. That function must
    turn the magnitude into the op's parameter (its ``mag_to_param`` is the op's ``to_param``, up
    to ``scale``) and negate it as the op does.

    Attributes:
        augmentation: the function's name (``"shear_x"``).
        scale: DALI's magnitude per unit of the op's: ``-1.0`` exports an op ``1 - m`` as DALI's
            ``brightness`` (``1 + m``).
        randomly_negate: written into the re-declaration when not ``None``; ``None`` keeps DALI's
            own, which is the op's ``signed`` for every built-in operation.
    """

    augmentation: str
    scale: float = 1.0
    randomly_negate: bool | None = None

    def check(self, op: str) -> None:
        where = f"declare_op {op!r}: dali_export"
        if not isinstance(self.augmentation, str) or not self.augmentation.isidentifier():
            raise ValueError(
                f"{where}.augmentation={self.augmentation!r}; expected the name of a function of "
                "nvidia.dali.auto_aug.augmentations"
            )
        if isinstance(self.scale, bool) or not isinstance(self.scale, int | float) or not self.scale:
            raise ValueError(f"{where}.scale={self.scale!r}; expected a non-zero number")
        if self.randomly_negate not in (None, True, False):
            raise ValueError(f"{where}.randomly_negate={self.randomly_negate!r}; expected None or a bool")


@dataclass(frozen=True)
class TimmExport:
    """How ``policies export --format timm`` writes an operation (:mod:`autoaug.policies.export`):
    as the op ``op`` of ``timm.data.auto_augment`` at a *level*, which timm turns into its op's
    argument with a fixed unit (rotate ``level * 3`` degrees).

    Attributes:
        op: timm's op name (``"Rotate"``); ``None``: left out of the exported sub-policy, exact for
            an op that changes nothing (Identity).
        unit: the op's magnitude per timm level: the level is ``magnitude / unit``.
        level: instead of ``unit``, ``fn(magnitude, rng) -> level`` for a conversion that is not a
            unit (Solarize's threshold counts down from 256), with ``magnitude`` the op's unsigned
            magnitude (a fraction of the size for size-relative ops) and ``rng`` its
            :class:`MagnitudeRange` in the policy's convention; ``ValueError`` (one line) when
            timm's op cannot take that magnitude.
        hparams: ``fn(rng) -> dict``: the timm ``hparams`` its levels assume
            (TranslateX: ``{"translate_pct": rng.hi}``), or ``None``.

    An op without a magnitude has neither ``unit`` nor ``level`` (timm's op ignores the level).
    """

    op: str | None
    unit: float | None = None
    level: Callable[[float, MagnitudeRange], float] | None = field(default=None, compare=False)
    hparams: Callable[[MagnitudeRange | None], Mapping[str, Any]] | None = field(default=None, compare=False)

    def check(self, op: str, has_magnitude: bool) -> None:
        where = f"declare_op {op!r}: timm_export"
        if self.op is None:
            if (self.unit, self.level, self.hparams) != (None, None, None):
                raise ValueError(f"{where}: op=None (left out of the sub-policy) takes no unit, level or hparams")
            return
        if not isinstance(self.op, str) or not self.op:
            raise ValueError(f"{where}.op={self.op!r}; expected the name of a timm.data.auto_augment op, or None")
        if self.unit is not None and (
            isinstance(self.unit, bool) or not isinstance(self.unit, int | float) or not self.unit > 0
        ):
            raise ValueError(f"{where}.unit={self.unit!r}; expected a positive number (the magnitude per level)")
        for name in ("level", "hparams"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"{where}.{name}={getattr(self, name)!r}; expected a function")
        if self.unit is not None and self.level is not None:
            raise ValueError(f"{where}: give unit= or level=, not both")
        if has_magnitude and self.unit is None and self.level is None:
            raise ValueError(f"{where}: the op has a magnitude; give unit= (magnitude per timm level) or level=")
        if not has_magnitude and (self.unit, self.level) != (None, None):
            raise ValueError(f"{where}: the op has no magnitude; pass neither unit nor level")


# --------------------------------------------------------------------------- the declaration
@dataclass(frozen=True, kw_only=True)
class OpSpec:
    """The declaration of one operation: what every backend agrees on, and how each applies it.

    Attributes:
        name: name used in policies (``"ShearX"``, ...).
        description: one-line description.
        ranges: magnitude range per convention (``{"autoaugment": ..., "wide": ...}``; one
            :class:`MagnitudeRange` is the same under both); empty (the default) for operations
            without a magnitude (AutoContrast, Invert, Equalize, Identity).
        signed: the magnitude is negated with probability 1/2 per application.
        to_param: maps a (signed, in pixels for size-relative ops) magnitude to the operation's
            parameter (e.g. ``1 + m``); the identity by default.
        dali: how DALI applies it (:class:`DaliImpl`).
        torch: how torchvision applies it (:class:`TorchImpl`).
        dali_export: how the DALI export writes it (:class:`DaliExport`, or the name of DALI's
            augmentation for ``DaliExport(name)``); ``None``: DALI's AutoAugment has no such op,
            and a policy using it is not exported to DALI.
        timm_export: how the timm export writes it (:class:`TimmExport`); ``None``: timm has no
            such op.
        randaugment: its place in RandAugment's (and TrivialAugment's) operations,
            :data:`RANDAUGMENT_OPS` (ordered by place, then declaration); ``None``: not one of them.
    """

    name: str
    description: str
    ranges: Mapping[str, MagnitudeRange] = field(default_factory=dict)
    signed: bool = False
    to_param: Callable[[float], Any] = field(default=_identity_param, repr=False, compare=False)
    dali: DaliImpl | None = field(default=None, repr=False, compare=False)
    torch: TorchImpl | None = field(default=None, repr=False, compare=False)
    dali_export: DaliExport | None = field(default=None, repr=False, compare=False)
    timm_export: TimmExport | None = field(default=None, repr=False, compare=False)
    randaugment: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.ranges, MagnitudeRange):
            object.__setattr__(self, "ranges", _same(self.ranges))
        if isinstance(self.dali_export, str):
            object.__setattr__(self, "dali_export", DaliExport(self.dali_export))

    @property
    def has_magnitude(self) -> bool:
        return bool(self.ranges)

    def magnitude_range(self, ranges: str = "autoaugment") -> MagnitudeRange | None:
        _check_convention(ranges)
        return self.ranges.get(ranges) if self.ranges else None

    def magnitudes(self, num_magnitude_bins: int, ranges: str = "autoaugment") -> list[float]:
        """Unsigned magnitudes of all bins (relative units for size-relative ops)."""
        rng = self.magnitude_range(ranges)
        if rng is None:
            return [0.0] * num_magnitude_bins
        return [bin_value(rng.lo, rng.hi, b, num_magnitude_bins) for b in range(num_magnitude_bins)]

    def magnitude(self, magnitude_bin: int, num_magnitude_bins: int, ranges: str = "autoaugment") -> float:
        """Unsigned magnitude of one bin (relative units for size-relative ops)."""
        rng = self.magnitude_range(ranges)
        if rng is None:
            return 0.0
        return bin_value(rng.lo, rng.hi, magnitude_bin, num_magnitude_bins)

    def param(
        self,
        magnitude_bin: int,
        num_magnitude_bins: int,
        ranges: str = "autoaugment",
        *,
        image_size: tuple[int, int] | None = None,
        negate: bool = False,
    ) -> Any:
        """The parameter the backends pass to the operator for this bin.

        ``image_size`` is ``(height, width)`` and is required by size-relative operations (the
        returned value is then in pixels). ``negate`` flips the sign of a signed operation's
        magnitude (ignored for unsigned operations).
        """
        rng = self.magnitude_range(ranges)
        if rng is None:
            return None
        m = self.magnitude(magnitude_bin, num_magnitude_bins, ranges)
        if negate and self.signed:
            m = -m
        if rng.relative_to is not None:
            if image_size is None:
                raise ValueError(
                    f"{self.name}: its magnitude is relative to the image {rng.relative_to}; "
                    "pass image_size=(height, width)"
                )
            h, w = image_size
            dim = {"width": w, "height": h, "min_side": min(h, w)}[rng.relative_to]
            m = m * dim
        return self.to_param(m)

    def derive(self, name: str, **changes: Any) -> OpSpec:
        """A new operation ``name`` applied as this one, with ``changes`` (``ranges``, ``signed``,
        ``to_param``, ``description``, and its exports ``dali_export``, ``timm_export``,
        ``randaugment``): re-ranging, as DALI's ``op.augmentation(mag_range=...)``. Declare it with
        :func:`declare_op`. On DALI it joins this operation's branch, so this one must stay declared
        while it is. It keeps this operation's exports when only its range (or description)
        changes, none when its sign or ``to_param`` does (the other library's op would compute
        another parameter), unless given; it is not one of RandAugment's operations unless given."""
        allowed = ("ranges", "signed", "to_param", "description", "dali_export", "timm_export", "randaugment")
        unknown = sorted(set(changes) - set(allowed))
        if unknown:
            raise ValueError(f"{self.name}.derive: cannot change {unknown}; expected {', '.join(allowed)}")
        if {"signed", "to_param"} & set(changes):
            changes.setdefault("dali_export", None)
            changes.setdefault("timm_export", None)
        changes.setdefault("randaugment", None)
        dali = self.dali
        if dali is not None and dali.kind is None:  # join this op's branch rather than build a twin
            dali = DaliImpl(
                operator=dali.operator, kind=self.name, to_table=dali.to_table, table_input=dali.table_input
            )
        changes.setdefault("description", f"{self.description} (derived from {self.name})")
        return dataclasses.replace(self, name=name, dali=dali, **changes)


def _check_convention(ranges: str) -> None:
    if ranges not in RANGE_CONVENTIONS:
        raise ValueError(f"unknown ranges {ranges!r}; expected one of {list(RANGE_CONVENTIONS)}")


def _same(rng: MagnitudeRange) -> dict[str, MagnitudeRange]:
    return {"autoaugment": rng, "wide": rng}


# --------------------------------------------------------------------------- the registry
#: name -> :class:`OpSpec`, in declaration order (the built-ins first, Identity first of all: the
#: order of the DALI branches of a stage). Written only by :func:`declare_op` / :class:`Declaration`.
_DECLARED: dict[str, OpSpec] = {}

#: A read-only, live view of the declared operations (name -> :class:`OpSpec`, declaration order).
REGISTRY: Mapping[str, OpSpec] = MappingProxyType(_DECLARED)


class Declaration:
    """What :func:`declare_op` returns: the declared :class:`OpSpec` (``.spec``), and the way to
    take it back: :meth:`remove`, or use the declaration as a context manager
    (``with declare_op(...) as spec:`` declares it for the ``with`` block)."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec

    def remove(self) -> None:
        """Undeclare the operation (nothing when it is already gone)."""
        if _DECLARED.get(self.spec.name) is self.spec:
            del _DECLARED[self.spec.name]

    def __enter__(self) -> OpSpec:
        return self.spec

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"Declaration({self.spec.name!r})"


def declare_op(spec: OpSpec | None = None, /, **fields: Any) -> Declaration:
    """Declare an operation: an :class:`OpSpec`, or its fields as keywords
    (``declare_op(name="Darken", description=..., ranges=MagnitudeRange(...), to_param=...,
    dali=DaliImpl(...), torch=TorchImpl(...))``). From then on policies may use it, search spaces
    may list it, and both backends apply it; the returned :class:`Declaration` undeclares it.

    A declaration lives in the process that made it: to use an operation in a search's trial
    processes (Ray workers), declare it in a module those processes import.

    Raises ``ValueError`` (one line naming the operation) when the name is taken or malformed, a
    range convention is missing or unknown, or a backend's part is missing or inconsistent."""
    if spec is None:
        try:
            spec = OpSpec(**fields)
        except TypeError as exc:
            raise ValueError(f"declare_op: {exc}; expected the fields of OpSpec") from None
    elif fields:
        raise ValueError(f"declare_op: pass an OpSpec or its fields, not both (got {sorted(fields)})")
    if not isinstance(spec, OpSpec):
        raise ValueError(f"declare_op: expected an OpSpec, got {type(spec).__name__}")
    name = spec.name
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"declare_op: name {name!r}; expected a letter then up to 63 letters or digits")
    if name in _DECLARED:
        raise ValueError(
            f"declare_op: op {name!r} is already declared; remove its declaration first, or declare "
            f"a derived op under another name (ops.get({name!r}).derive(...))"
        )
    if not isinstance(spec.description, str) or not spec.description:
        raise ValueError(f"declare_op {name!r}: description={spec.description!r}; expected a one-line description")
    if spec.ranges:
        if set(spec.ranges) != set(RANGE_CONVENTIONS) or not all(
            isinstance(r, MagnitudeRange) for r in spec.ranges.values()
        ):
            raise ValueError(
                f"declare_op {name!r}: ranges={dict(spec.ranges)!r}; expected a MagnitudeRange, or one per "
                f"convention {list(RANGE_CONVENTIONS)}"
            )
        for rng in spec.ranges.values():
            if rng.relative_to not in (None, "width", "height", "min_side"):
                raise ValueError(
                    f"declare_op {name!r}: relative_to={rng.relative_to!r}; expected None, 'width', 'height' or "
                    "'min_side'"
                )
    if not isinstance(spec.signed, bool) or not callable(spec.to_param):
        raise ValueError(f"declare_op {name!r}: signed must be a bool and to_param a function")
    for backend, kind in (("dali", DaliImpl), ("torch", TorchImpl)):
        part = getattr(spec, backend)
        if not isinstance(part, kind):
            raise ValueError(
                f"declare_op {name!r}: {backend}={part!r}; expected a {kind.__name__} (every op is applied by both "
                "backends)"
            )
        part.check(name)
    _check_exports(spec)
    _DECLARED[name] = spec
    return Declaration(spec)


def _check_exports(spec: OpSpec) -> None:
    """``ValueError`` of one line naming the op when its export fields are malformed."""
    name = spec.name
    if spec.dali_export is not None:
        if not isinstance(spec.dali_export, DaliExport):
            raise ValueError(
                f"declare_op {name!r}: dali_export={spec.dali_export!r}; expected a DaliExport, the name of a "
                "function of nvidia.dali.auto_aug.augmentations, or None"
            )
        spec.dali_export.check(name)
    if spec.timm_export is not None:
        if not isinstance(spec.timm_export, TimmExport):
            raise ValueError(f"declare_op {name!r}: timm_export={spec.timm_export!r}; expected a TimmExport or None")
        spec.timm_export.check(name, spec.has_magnitude)
    place = spec.randaugment
    if place is not None and (isinstance(place, bool) or not isinstance(place, int) or place < 0):
        raise ValueError(
            f"declare_op {name!r}: randaugment={place!r}; expected None or its place in RandAugment's operations "
            "(an int >= 0)"
        )


def op_names() -> tuple[str, ...]:
    """All operation names, in declaration order (Identity first), as declared now."""
    return tuple(_DECLARED)


def randaugment_ops() -> tuple[str, ...]:
    """RandAugment's operations (also TrivialAugment's), as declared now: those with a place
    (:attr:`OpSpec.randaugment`), by place, then in declaration order."""
    members = [spec for spec in _DECLARED.values() if spec.randaugment is not None]
    return tuple(spec.name for spec in sorted(members, key=lambda spec: spec.randaugment))


#: The lists derived from the declarations on each read (module attributes), so that an op
#: declared or removed later is seen.
#: The built-in operations' names, in declaration order (Identity first): declared by
#: :mod:`autoaug.policies.builtin_ops` (:func:`declare_builtin`), which the package imports right
#: after this module. Read as ``BUILTIN_OPS`` (fixed: operations declared later are in
#: :data:`REGISTRY` and ``OP_NAMES``, not here) and ``AUTOAUGMENT_OPS``, the 16 operations of the
#: AutoAugment search space (Cubuk et al. 2019; the built-ins but Identity).
_BUILTIN: list[str] = []

#: The module's attributes computed when read.
_DERIVED = {
    "OP_NAMES": op_names,
    "RANDAUGMENT_OPS": randaugment_ops,
    "BUILTIN_OPS": lambda: tuple(_BUILTIN),
    "AUTOAUGMENT_OPS": lambda: tuple(n for n in _BUILTIN if n != IDENTITY),
}


def declare_builtin(specs: Iterable[OpSpec]) -> None:
    """Declare the built-in operations ``specs`` (:mod:`autoaug.policies.builtin_ops`), for good."""
    for spec in specs:
        declare_op(spec)
        _BUILTIN.append(spec.name)


def __getattr__(name: str) -> Any:
    if name in _DERIVED:
        return _DERIVED[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LiveTable(Mapping):
    """A read-only mapping derived from the declarations when read: its keys are those of
    ``keys()`` at that moment, its values ``build(key)`` (what the backends' tables are:
    ``dali_ops.DALI_OPS``, ``torch_apply.TORCH_OPS``). ``build`` raises ``KeyError`` for a key
    it does not have."""

    def __init__(self, what: str, keys: Callable[[], Any], build: Callable[[str], Any]) -> None:
        self._what, self._keys, self._build = what, keys, build

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return self._build(key)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._keys()))

    def __len__(self) -> int:
        return len(tuple(self._keys()))

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __repr__(self) -> str:
        return f"<{self._what}: {list(self)}>"


def resolve(value: Any, namespace: Mapping[str, Any], op: str, field_name: str) -> Any:
    """A backend's implementation: ``value`` itself when callable (or None), else the function of
    that name in ``namespace`` (a backend module's globals); ``ValueError`` naming the op if none."""
    if value is None or callable(value):
        return value
    found = namespace.get(value)
    if not callable(found):
        module = namespace.get("__name__", "the backend")
        raise ValueError(f"op {op!r}: {field_name}={value!r}, but {module} has no function of that name")
    return found


def get(name: str) -> OpSpec:
    """The :class:`OpSpec` called ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return _DECLARED[name]
    except (KeyError, TypeError):
        raise ValueError(unknown_op_message(name)) from None


def unknown_op_message(name: object) -> str:
    names = op_names()
    hint = ""
    if isinstance(name, str):
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        if not close:
            close = [n for n in names if n.lower() == name.lower()]
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    return f"unknown op {name!r}{hint}; expected one of {list(names)}"


#: The header of docs/policies.md's op table (:func:`docs_table`).
DOCS_TABLE_HEADER = (
    "| op | `autoaugment` range (bin 0 -> last bin) | `wide` range | signed | DALI | torchvision | DALI export | "
    "timm export | RandAugment |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def _export_cells(spec: OpSpec) -> str:
    dali, timm = spec.dali_export, spec.timm_export
    dali_cell = (
        "-" if dali is None else f"`aug.{dali.augmentation}`" + ("" if dali.scale == 1 else f" x {dali.scale:g}")
    )
    timm_cell = "-" if timm is None else ("left out" if timm.op is None else f"`{timm.op}`")
    return f"{dali_cell} | {timm_cell} | {'no' if spec.randaugment is None else 'yes'}"


def docs_table(names: Any = None) -> str:
    """docs/policies.md's op table (markdown) for ``names`` (default: the built-in operations), from
    their declarations: ranges, sign, each backend's ``operator`` and the exports."""
    rows = [DOCS_TABLE_HEADER]
    for name in _BUILTIN if names is None else names:
        spec = get(name)
        auto, wide = spec.magnitude_range("autoaugment"), spec.magnitude_range("wide")
        rows.append(
            f"| {name} | {auto.describe() if auto else '-'} | {wide.describe() if wide else '-'} | "
            f"{'yes' if spec.signed else 'no'} | `{spec.dali.operator}` | `{spec.torch.operator}` | "
            f"{_export_cells(spec)} |"
        )
    return "\n".join(rows)
