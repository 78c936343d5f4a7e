"""The operation registry: one record per augmentation operation.

Every operation of the AutoAugment search space (Cubuk et al., CVPR 2019) has one :class:`OpSpec`
in :data:`REGISTRY` holding

* its name (the string used in :class:`policies.Policy` sub-policies),
* its magnitude range under each range convention (``"autoaugment"`` and ``"wide"``),
* whether the magnitude is randomly negated per application (``signed``),
* how a magnitude becomes the operation's parameter (``to_param``, e.g. enhance factor ``1 + m``),

-- the facts every backend shares. Each backend declares each operation once, next to its
implementation, with a registration decorator (``@dali_op("Rotate", ...)`` in
:mod:`autoaug.policies.dali_apply`, ``@torch_op("Rotate", ...)`` in
:mod:`autoaug.policies.torch_apply`) that fills its table (``DALI_OPS``, ``TORCH_OPS``) and refuses
a name this registry does not have (:func:`check_backend_name`); ``tests/policies/
test_ops_registry.py`` checks that each backend declares exactly the registry's operations. The
registry imports neither backend (no import cycle, and neither DALI nor torch is loaded by it).

Adding an operation: its :class:`OpSpec` here, then one ``@dali_op`` and one ``@torch_op``
declaration next to the code applying it (and its row in the op table of docs/policies.md).

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

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = [
    "OpSpec",
    "MagnitudeRange",
    "REGISTRY",
    "OP_NAMES",
    "IDENTITY",
    "RANGE_CONVENTIONS",
    "AUTOAUGMENT_OPS",
    "RANDAUGMENT_OPS",
    "get",
    "bin_value",
    "check_backend_name",
]

#: The two magnitude-range conventions a :class:`~policies.Policy` can use.
RANGE_CONVENTIONS = ("autoaugment", "wide")

IDENTITY = "Identity"


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


def _enhance_factor(m: float) -> float:
    # contrast/color/brightness/sharpness: factor 1 +- m (1.0 is the identity)
    return 1.0 + m


def _rounded(m: float) -> int:
    # posterize's bits kept, cutout's side in pixels: rounded half-to-even like torch.round /
    # numpy.round (torchvision's AutoAugment)
    return int(round(m))


@dataclass(frozen=True, kw_only=True)
class OpSpec:
    """One operation of the registry: what every backend agrees on (no backend code).

    Attributes:
        name: name used in policies (``"ShearX"``, ...).
        description: one-line description.
        ranges: magnitude range per convention (``{"autoaugment": ..., "wide": ...}``); empty (the
            default) for operations without a magnitude (AutoContrast, Invert, Equalize, Identity).
        signed: the magnitude is negated with probability 1/2 per application.
        to_param: maps a (signed, in pixels for size-relative ops) magnitude to the operation's
            parameter (e.g. ``1 + m``); the identity by default.
    """

    name: str
    description: str
    ranges: Mapping[str, MagnitudeRange] = field(default_factory=dict)
    signed: bool = False
    to_param: Callable[[float], Any] = field(default=_identity_param, repr=False, compare=False)

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


def _check_convention(ranges: str) -> None:
    if ranges not in RANGE_CONVENTIONS:
        raise ValueError(f"unknown ranges {ranges!r}; expected one of {list(RANGE_CONVENTIONS)}")


def _same(rng: MagnitudeRange) -> dict[str, MagnitudeRange]:
    return {"autoaugment": rng, "wide": rng}


_AA = "AutoAugment paper (Cubuk et al. 2019), Table 1 / appendix"
_TA = "TrivialAugment-wide (Mueller & Hutter 2021), torchvision TrivialAugmentWide"

_SPECS = [
    OpSpec(name=IDENTITY, description="returns the image unchanged (RandAugment/TrivialAugment 'Identity')"),
    # Shear: paper +-0.3 (shear factor, PIL affine coefficient); TA-wide +-0.99.
    OpSpec(
        name="ShearX",
        description="shears along x about the top-left corner: out(x, y) = in(x + m*y, y) (PIL's affine)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 0.3, "shear factor", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "shear factor", source=_TA),
        },
        signed=True,
    ),
    OpSpec(
        name="ShearY",
        description="shears along y about the top-left corner: out(x, y) = in(x, y + m*x) (PIL's affine)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 0.3, "shear factor", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "shear factor", source=_TA),
        },
        signed=True,
    ),
    # Translate: paper +-150 px on 331 px images -> +-(150/331)*width (torchvision's AutoAugment
    # uses the same 150/331 scaling); TA-wide 32 px on 32 px CIFAR images -> +-1.0*width.
    OpSpec(
        name="TranslateX",
        description="shifts the image horizontally by m pixels (fill 128)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 150 / 331, "px", "width", _AA),
            "wide": MagnitudeRange(0.0, 32 / 32, "px", "width", _TA),
        },
        signed=True,
    ),
    OpSpec(
        name="TranslateY",
        description="shifts the image vertically by m pixels (fill 128)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 150 / 331, "px", "height", _AA),
            "wide": MagnitudeRange(0.0, 32 / 32, "px", "height", _TA),
        },
        signed=True,
    ),
    # Rotate: paper +-30 degrees; TA-wide +-135.
    OpSpec(
        name="Rotate",
        description="rotates counter-clockwise by m degrees about the centre (fill 128)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 30.0, "degrees", source=_AA),
            "wide": MagnitudeRange(0.0, 135.0, "degrees", source=_TA),
        },
        signed=True,
    ),
    OpSpec(name="AutoContrast", description="stretches each channel to the full 0..255 range"),
    OpSpec(name="Invert", description="inverts all pixels"),
    OpSpec(name="Equalize", description="equalizes the histogram of each channel"),
    # Solarize: threshold 256 (identity) -> 0 in both conventions (paper: 0-256).
    OpSpec(
        name="Solarize",
        description="inverts pixels >= threshold",
        ranges=_same(MagnitudeRange(256.0, 0.0, "threshold", source=_AA + "; same in " + _TA)),
    ),
    # Posterize: paper 4-8 bits kept -> 8 (identity) -> 4; the released TF code's 0-4 is a known
    # bug. TA-wide 8 -> 2 bits.
    OpSpec(
        name="Posterize",
        description="keeps the top (rounded) m bits of each channel",
        ranges={
            "autoaugment": MagnitudeRange(8.0, 4.0, "bits kept", source=_AA),
            "wide": MagnitudeRange(8.0, 2.0, "bits kept", source=_TA),
        },
        to_param=_rounded,
    ),
    # Enhance ops: paper factor 0.1-1.9, expressed as 1 +- m with m in 0..0.9 so that bin 0 is
    # the identity (torchvision's and DALI's convention); TA-wide 1 +- 0..0.99.
    *(
        OpSpec(
            name=name,
            description=description,
            ranges={
                "autoaugment": MagnitudeRange(0.0, 0.9, "factor 1+-m", source=_AA),
                "wide": MagnitudeRange(0.0, 0.99, "factor 1+-m", source=_TA),
            },
            signed=True,
            to_param=_enhance_factor,
        )
        for name, description in (
            ("Contrast", "blends with the mean grey level (factor 1 = identity)"),
            ("Color", "blends with the greyscale image (factor 1 = identity)"),
            ("Brightness", "multiplies by the factor (blend with black; factor 1 = identity)"),
            ("Sharpness", "blends with a smoothed image (factor 1 = identity)"),
        )
    ),
    # Cutout: paper up to 60 px on 331 px -> (60/331)*min(H, W) px square side. Not in TA-wide.
    OpSpec(
        name="Cutout",
        description="fills a square of side m pixels, centred at a uniformly random pixel, with grey 128 "
        "(clipped at the border)",
        ranges=_same(MagnitudeRange(0.0, 60 / 331, "px square side", "min_side", _AA)),
        to_param=_rounded,
    ),
    # SamplePairing (Inoue 2018): blend weight of the other image 0..0.4 (paper). Not in TA-wide.
    OpSpec(
        name="SamplePairing",
        description="(1 - m) * image + m * other image (DALI: another image of the batch; torchvision: "
        "the previous image the transform saw, or the rolled batch)",
        ranges=_same(MagnitudeRange(0.0, 0.4, "blend weight", source=_AA)),
    ),
]

#: name -> :class:`OpSpec`, in a fixed order (Identity first; op ids used by the DALI tables).
REGISTRY: dict[str, OpSpec] = {spec.name: spec for spec in _SPECS}
#: All operation names in registry order.
OP_NAMES: tuple[str, ...] = tuple(REGISTRY)
#: The 16 operations of the AutoAugment search space (Identity excluded).
AUTOAUGMENT_OPS: tuple[str, ...] = tuple(n for n in OP_NAMES if n != IDENTITY)
#: RandAugment's 14 operations (also TrivialAugment's), in the order of the RandAugment paper.
RANDAUGMENT_OPS: tuple[str, ...] = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)


def get(name: str) -> OpSpec:
    """The :class:`OpSpec` called ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(unknown_op_message(name)) from None


def unknown_op_message(name: object) -> str:
    hint = ""
    if isinstance(name, str):
        close = difflib.get_close_matches(name, OP_NAMES, n=1, cutoff=0.6)
        if not close:
            close = [n for n in OP_NAMES if n.lower() == name.lower()]
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    return f"unknown op {name!r}{hint}; expected one of {list(OP_NAMES)}"


def check_backend_name(backend: str, name: object, declared: Mapping[str, Any]) -> None:
    """What a backend's registration decorator (``dali_op``, ``torch_op``) checks before it
    records ``name``: a ``ValueError`` of one line when the registry has no such operation (add
    its :class:`OpSpec` to :data:`REGISTRY` first) or when ``backend`` already declared it."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(
            f"{backend}: {unknown_op_message(name)}; declare the op in autoaug.policies.ops.REGISTRY first"
        )
    if name in declared:
        raise ValueError(f"{backend}: op {name!r} is declared twice; each backend declares each op once")
