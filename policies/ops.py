"""The operation registry: one record per augmentation operation.

Every operation of the AutoAugment search space (Cubuk et al., CVPR 2019) has one :class:`OpSpec`
in :data:`REGISTRY` holding

* its name (the string used in :class:`policies.Policy` sub-policies),
* its magnitude range under each range convention (``"autoaugment"`` and ``"wide"``),
* whether the magnitude is randomly negated per application (``signed``),
* how a magnitude becomes the operation's parameter (e.g. enhance factor ``1 + m``),
* the names of its DALI and torchvision operators (``dali_op``, ``torch_op``, for the docs).

The implementations live with their backends -- ``autoaug.policies.dali_apply.DALI_OPS`` and
``autoaug.policies.torch_apply.TORCH_OPS``, keyed by op name -- which import this registry; the
registry imports neither (no import cycle, and neither DALI nor torch is loaded by it).

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
]

#: The two magnitude-range conventions a :class:`~policies.Policy` can use.
RANGE_CONVENTIONS = ("autoaugment", "wide")

IDENTITY = "Identity"


def bin_value(lo: float, hi: float, magnitude_bin: int, num_magnitude_bins: int) -> float:
    """``numpy.linspace(lo, hi, num_magnitude_bins)[magnitude_bin]`` in float64 (bin 0 = ``lo``)."""
    if num_magnitude_bins < 1:
        raise ValueError(f"num_magnitude_bins must be >= 1, got {num_magnitude_bins!r}")
    if not 0 <= magnitude_bin < num_magnitude_bins:
        raise ValueError(
            f"magnitude_bin {magnitude_bin!r} is outside [0, {num_magnitude_bins - 1}]"
        )
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


def _posterize_bits(m: float) -> int:
    # bits kept, rounded half-to-even like torch.round / numpy.round (torchvision's AutoAugment)
    return int(round(m))


@dataclass(frozen=True)
class OpSpec:
    """One operation of the registry.

    Attributes:
        name: name used in policies (``"ShearX"``, ...).
        ranges: magnitude range per convention (``{"autoaugment": ..., "wide": ...}``); empty for
            operations without a magnitude (AutoContrast, Invert, Equalize, Identity).
        signed: the magnitude is negated with probability 1/2 per application.
        to_param: maps a (signed) magnitude to the operation's parameter (e.g. ``1 + m``).
        dali_op / torch_op: the library operators used, for documentation.
        description: one-line description.
    """

    name: str
    ranges: Mapping[str, MagnitudeRange]
    signed: bool
    dali_op: str
    torch_op: str
    description: str
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

    def magnitude(
        self, magnitude_bin: int, num_magnitude_bins: int, ranges: str = "autoaugment"
    ) -> float:
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
    OpSpec(
        IDENTITY,
        {},
        False,
        "-",
        "-",
        "returns the image unchanged (RandAugment/TrivialAugment 'Identity')",
    ),
    # Shear: paper +-0.3 (shear factor, PIL affine coefficient); TA-wide +-0.99.
    OpSpec(
        "ShearX",
        {
            "autoaugment": MagnitudeRange(0.0, 0.3, "shear factor", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "shear factor", source=_TA),
        },
        True,
        "fn.warp_affine (per-sample matrix from the policy table)",
        "F.affine(shear=[degrees(atan(m)), 0], center=[0, 0])",
        "shears along x about the top-left corner: out(x, y) = in(x + m*y, y) (PIL's affine)",
    ),
    OpSpec(
        "ShearY",
        {
            "autoaugment": MagnitudeRange(0.0, 0.3, "shear factor", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "shear factor", source=_TA),
        },
        True,
        "fn.warp_affine (per-sample matrix from the policy table)",
        "F.affine(shear=[0, degrees(atan(m))], center=[0, 0])",
        "shears along y about the top-left corner: out(x, y) = in(x, y + m*x) (PIL's affine)",
    ),
    # Translate: paper +-150 px on 331 px images -> +-(150/331)*width (torchvision's AutoAugment
    # uses the same 150/331 scaling); TA-wide 32 px on 32 px CIFAR images -> +-1.0*width.
    OpSpec(
        "TranslateX",
        {
            "autoaugment": MagnitudeRange(0.0, 150 / 331, "px", "width", _AA),
            "wide": MagnitudeRange(0.0, 32 / 32, "px", "width", _TA),
        },
        True,
        "fn.warp_affine (per-sample matrix from the policy table)",
        "F.affine(translate=[m, 0])",
        "shifts the image horizontally by m pixels (fill 128)",
    ),
    OpSpec(
        "TranslateY",
        {
            "autoaugment": MagnitudeRange(0.0, 150 / 331, "px", "height", _AA),
            "wide": MagnitudeRange(0.0, 32 / 32, "px", "height", _TA),
        },
        True,
        "fn.warp_affine (per-sample matrix from the policy table)",
        "F.affine(translate=[0, m])",
        "shifts the image vertically by m pixels (fill 128)",
    ),
    # Rotate: paper +-30 degrees; TA-wide +-135.
    OpSpec(
        "Rotate",
        {
            "autoaugment": MagnitudeRange(0.0, 30.0, "degrees", source=_AA),
            "wide": MagnitudeRange(0.0, 135.0, "degrees", source=_TA),
        },
        True,
        "fn.warp_affine (rotation about the centre, as fn.rotate)",
        "F.rotate",
        "rotates counter-clockwise by m degrees about the centre (fill 128)",
    ),
    OpSpec("AutoContrast", {}, False, "auto_aug.auto_contrast (fn.reductions.min/max + arithmetic)",
           "F.autocontrast", "stretches each channel to the full 0..255 range"),
    OpSpec("Invert", {}, False, "x ^ 255 (the Solarize branch at threshold 0)", "F.invert", "inverts all pixels"),
    OpSpec("Equalize", {}, False, "fn.equalize", "F.equalize",
           "equalizes the histogram of each channel"),
    # Solarize: threshold 256 (identity) -> 0 in both conventions (paper: 0-256).
    OpSpec(
        "Solarize",
        _same(MagnitudeRange(256.0, 0.0, "threshold", source=_AA + "; same in " + _TA)),
        False,
        "x ^ 255 where x >= threshold (arithmetic)",
        "F.solarize (threshold 256 = identity)",
        "inverts pixels >= threshold",
    ),
    # Posterize: paper 4-8 bits kept -> 8 (identity) -> 4; the released TF code's 0-4 is a known
    # bug. TA-wide 8 -> 2 bits.
    OpSpec(
        "Posterize",
        {
            "autoaugment": MagnitudeRange(8.0, 4.0, "bits kept", source=_AA),
            "wide": MagnitudeRange(8.0, 2.0, "bits kept", source=_TA),
        },
        False,
        "auto_aug.posterize (x & mask)",
        "F.posterize",
        "keeps the top (rounded) m bits of each channel",
        _posterize_bits,
    ),
    # Enhance ops: paper factor 0.1-1.9, expressed as 1 +- m with m in 0..0.9 so that bin 0 is
    # the identity (torchvision's and DALI's convention); TA-wide 1 +- 0..0.99.
    OpSpec(
        "Contrast",
        {
            "autoaugment": MagnitudeRange(0.0, 0.9, "factor 1+-m", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "factor 1+-m", source=_TA),
        },
        True,
        "auto_aug.contrast (fn.reductions.mean + arithmetic)",
        "F.adjust_contrast",
        "blends with the mean grey level (factor 1 = identity)",
        _enhance_factor,
    ),
    OpSpec(
        "Color",
        {
            "autoaugment": MagnitudeRange(0.0, 0.9, "factor 1+-m", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "factor 1+-m", source=_TA),
        },
        True,
        "fn.saturation (auto_aug.color)",
        "F.adjust_saturation",
        "blends with the greyscale image (factor 1 = identity)",
        _enhance_factor,
    ),
    OpSpec(
        "Brightness",
        {
            "autoaugment": MagnitudeRange(0.0, 0.9, "factor 1+-m", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "factor 1+-m", source=_TA),
        },
        True,
        "fn.brightness (auto_aug.brightness)",
        "F.adjust_brightness",
        "multiplies by the factor (blend with black; factor 1 = identity)",
        _enhance_factor,
    ),
    OpSpec(
        "Sharpness",
        {
            "autoaugment": MagnitudeRange(0.0, 0.9, "factor 1+-m", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "factor 1+-m", source=_TA),
        },
        True,
        "fn.filter (PIL's 3x3 smoothing kernel, per-sample)",
        "F.adjust_sharpness",
        "blends with a smoothed image (factor 1 = identity)",
        _enhance_factor,
    ),
    # Cutout: paper up to 60 px on 331 px -> (60/331)*min(H, W) px square side. Not in TA-wide.
    OpSpec(
        "Cutout",
        _same(MagnitudeRange(0.0, 60 / 331, "px square side", "min_side", _AA)),
        False,
        "fn.erase (hand-written: random centre, fill 128)",
        "F.erase (hand-written: random centre, fill 128)",
        "fills a square of side m pixels, centred at a uniformly random pixel, with grey 128 "
        "(clipped at the border)",
        lambda m: int(round(m)),
    ),
    # SamplePairing (Inoue 2018): blend weight of the other image 0..0.4 (paper). Not in TA-wide.
    OpSpec(
        "SamplePairing",
        _same(MagnitudeRange(0.0, 0.4, "blend weight", source=_AA)),
        False,
        "hand-written: fn.permute_batch(fn.batch_permutation) + blend",
        "hand-written: blend with the previous image (or the rolled batch)",
        "(1 - m) * image + m * other image (DALI: another image of the batch; torchvision: "
        "the previous image the transform saw, or the rolled batch)",
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
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
    "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
)  # fmt: skip


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

