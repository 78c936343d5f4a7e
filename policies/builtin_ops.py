"""The built-in operations: the 16 of the AutoAugment search space and Identity, each one
:class:`~autoaug.policies.ops.OpSpec` declared with :func:`~autoaug.policies.ops.declare_op`
(the registry and what a declaration holds: :mod:`autoaug.policies.ops`).

Imported by the package (``autoaug.policies``) right after the registry, so that every import of
a policies module finds them declared (:func:`~autoaug.policies.ops.declare_builtin`:
``autoaug.policies.ops.BUILTIN_OPS`` and ``AUTOAUGMENT_OPS`` name them). A new built-in
operation is one ``OpSpec`` in ``_BUILTIN`` plus its row in docs/policies.md
(``tests/policies/test_policy_docs.py`` prints the table to paste); the comment on each record
says where its figures come from.
"""

from __future__ import annotations

from autoaug.policies.ops import (
    IDENTITY,
    DaliImpl,
    MagnitudeRange,
    OpSpec,
    TimmExport,
    TorchImpl,
    declare_builtin,
)

__all__: list[str] = []  # what it declares is read through autoaug.policies.ops


def _enhance_factor(m: float) -> float:
    # contrast/color/brightness/sharpness: factor 1 +- m (1.0 is the identity)
    return 1.0 + m


def _rounded(m: float) -> int:
    # posterize's bits kept, cutout's side in pixels: rounded half-to-even like torch.round /
    # numpy.round (torchvision's AutoAugment)
    return int(round(m))


_AA = "AutoAugment paper (Cubuk et al. 2019), Table 1 / appendix"
_TA = "TrivialAugment-wide (Mueller & Hutter 2021), torchvision TrivialAugmentWide"
_WARP = "fn.warp_affine (per-sample matrix from the policy table)"


# timm's conversions that are not a unit per level (TimmExport.level); timm maps a level L to
# translate_pct * L / 10, solarize 256 - int(L * 25.6) and posterize int(L * 0.4) + 4 bits.
def _timm_translate_level(m: float, rng: MagnitudeRange) -> float:
    return 0.0 if rng.hi == 0 else 10.0 * m / rng.hi


def _timm_translate_hparams(rng: MagnitudeRange | None) -> dict[str, float]:
    return {"translate_pct": rng.hi}  # the fraction of the width (height) at level 10


def _timm_solarize_level(m: float, rng: MagnitudeRange) -> float:
    return (256.0 - m) / 25.6  # threshold m (timm truncates it to an integer)


def _timm_posterize_level(m: float, rng: MagnitudeRange) -> float:
    bits = _rounded(m)
    if bits < 4:
        raise ValueError(f"keeping {bits} bits; timm's PosterizeOriginal keeps 4 to 8 bits")
    return (bits - 4) * 2.5 + 0.01  # int(level * 0.4) + 4 == bits


def _timm_translate(op: str) -> TimmExport:
    return TimmExport(op, level=_timm_translate_level, hparams=_timm_translate_hparams)


# The implementations are functions of autoaug.policies.dali_ops and autoaug.policies.torch_apply,
# named here (so that this module loads neither DALI nor torch). The exports: DALI's
# nvidia.dali.auto_aug.augmentations function and timm's op; `randaugment` the place in
# RandAugment's 14 operations, in the order of the RandAugment paper.
_BUILTIN = [
    OpSpec(
        name=IDENTITY,
        description="returns the image unchanged (RandAugment/TrivialAugment 'Identity')",
        dali=DaliImpl(branch="identity", operator="-"),
        torch=TorchImpl("identity", "-"),
        dali_export="identity",
        timm_export=TimmExport(None),  # changes nothing: left out of a timm sub-policy, exactly
        randaugment=0,
    ),
    # Shear: paper +-0.3 (shear factor, PIL affine coefficient); TA-wide +-0.99.
    OpSpec(
        name="ShearX",
        description="shears along x about the top-left corner: out(x, y) = in(x + m*y, y) (PIL's affine)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 0.3, "shear factor", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "shear factor", source=_TA),
        },
        signed=True,
        dali=DaliImpl(kind="Warp", to_table="shear_x_matrix", operator=_WARP),
        dali_export="shear_x",
        timm_export=TimmExport("ShearX", 0.03),
        randaugment=1,
        torch=TorchImpl("shear_x", "F.affine(shear=[degrees(atan(m)), 0], center=[0, 0])"),
    ),
    OpSpec(
        name="ShearY",
        description="shears along y about the top-left corner: out(x, y) = in(x, y + m*x) (PIL's affine)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 0.3, "shear factor", source=_AA),
            "wide": MagnitudeRange(0.0, 0.99, "shear factor", source=_TA),
        },
        signed=True,
        dali=DaliImpl(kind="Warp", to_table="shear_y_matrix", operator=_WARP),
        dali_export="shear_y",
        timm_export=TimmExport("ShearY", 0.03),
        randaugment=2,
        torch=TorchImpl("shear_y", "F.affine(shear=[0, degrees(atan(m))], center=[0, 0])"),
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
        dali=DaliImpl(kind="Warp", to_table="translate_x_matrix", operator=_WARP),
        dali_export="translate_x",
        timm_export=_timm_translate("TranslateXRel"),
        randaugment=3,
        torch=TorchImpl("translate_x", "F.affine(translate=[m, 0])"),
    ),
    OpSpec(
        name="TranslateY",
        description="shifts the image vertically by m pixels (fill 128)",
        ranges={
            "autoaugment": MagnitudeRange(0.0, 150 / 331, "px", "height", _AA),
            "wide": MagnitudeRange(0.0, 32 / 32, "px", "height", _TA),
        },
        signed=True,
        dali=DaliImpl(kind="Warp", to_table="translate_y_matrix", operator=_WARP),
        dali_export="translate_y",
        timm_export=_timm_translate("TranslateYRel"),
        randaugment=4,
        torch=TorchImpl("translate_y", "F.affine(translate=[0, m])"),
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
        dali=DaliImpl(
            kind="Warp", to_table="rotate_matrix", operator="fn.warp_affine (rotation about the centre, as fn.rotate)"
        ),
        torch=TorchImpl("rotate", "F.rotate"),
        dali_export="rotate",
        timm_export=TimmExport("Rotate", 3.0),
        randaugment=5,
    ),
    OpSpec(
        name="AutoContrast",
        description="stretches each channel to the full 0..255 range",
        dali=DaliImpl(branch="auto_contrast", operator="auto_aug.auto_contrast (fn.reductions.min/max + arithmetic)"),
        torch=TorchImpl("auto_contrast", "F.autocontrast"),
        dali_export="auto_contrast",
        timm_export=TimmExport("AutoContrast"),
        randaugment=12,
    ),
    OpSpec(
        name="Invert",
        description="inverts all pixels",
        dali=DaliImpl(
            kind="Solarize", to_table="invert_threshold", operator="x ^ 255 (the Solarize branch at threshold 0)"
        ),
        torch=TorchImpl("invert", "F.invert"),
        dali_export="invert",
        timm_export=TimmExport("Invert"),
    ),
    OpSpec(
        name="Equalize",
        description="equalizes the histogram of each channel",
        dali=DaliImpl(branch="equalize", operator="fn.equalize"),
        torch=TorchImpl("equalize", "F.equalize"),
        dali_export="equalize",
        timm_export=TimmExport("Equalize"),
        randaugment=13,
    ),
    # Solarize: threshold 256 (identity) -> 0 in both conventions (paper: 0-256).
    OpSpec(
        name="Solarize",
        description="inverts pixels >= threshold",
        ranges=MagnitudeRange(256.0, 0.0, "threshold", source=_AA + "; same in " + _TA),
        dali=DaliImpl(branch="solarize", table="param", operator="x ^ 255 where x >= threshold (arithmetic)"),
        torch=TorchImpl("solarize", "F.solarize (threshold 256 = identity)"),
        dali_export="solarize",
        timm_export=TimmExport("SolarizeIncreasing", level=_timm_solarize_level),
        randaugment=11,
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
        dali=DaliImpl(
            branch="posterize", table="param", to_table="posterize_mask", operator="auto_aug.posterize (x & mask)"
        ),
        torch=TorchImpl("posterize", "F.posterize"),
        dali_export="posterize",  # DALI's mask also from the bits kept
        timm_export=TimmExport("PosterizeOriginal", level=_timm_posterize_level),
        randaugment=10,
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
            dali=dali,
            torch=torch,
            dali_export=name.lower(),
            timm_export=TimmExport(f"{name}Increasing", 0.09),  # timm: 1 +- level * 0.09
            randaugment=place,
        )
        for name, description, dali, torch, place in (
            (
                "Contrast",
                "blends with the mean grey level (factor 1 = identity)",
                DaliImpl(
                    branch="contrast", table="param", operator="auto_aug.contrast (fn.reductions.mean + arithmetic)"
                ),
                TorchImpl("contrast", "F.adjust_contrast"),
                8,
            ),
            (
                "Color",
                "blends with the greyscale image (factor 1 = identity)",
                DaliImpl(branch="color", table="param", operator="fn.saturation (auto_aug.color)"),
                TorchImpl("color", "F.adjust_saturation"),
                7,
            ),
            (
                "Brightness",
                "multiplies by the factor (blend with black; factor 1 = identity)",
                DaliImpl(branch="brightness", table="param", operator="fn.brightness (auto_aug.brightness)"),
                TorchImpl("brightness", "F.adjust_brightness"),
                6,
            ),
            (
                "Sharpness",
                "blends with a smoothed image (factor 1 = identity)",
                DaliImpl(
                    branch="sharpness",
                    table="kernel",
                    to_table="sharpness_kernel",
                    operator="fn.filter (PIL's 3x3 smoothing kernel, per-sample)",
                ),
                TorchImpl("sharpness", "F.adjust_sharpness"),
                9,
            ),
        )
    ),
    # Cutout: paper up to 60 px on 331 px -> (60/331)*min(H, W) px square side. Not in TA-wide.
    OpSpec(
        name="Cutout",
        description="fills a square of side m pixels, centred at a uniformly random pixel, with grey 128 "
        "(clipped at the border)",
        ranges=MagnitudeRange(0.0, 60 / 331, "px square side", "min_side", _AA),
        to_param=_rounded,
        dali=DaliImpl(
            branch="cutout",
            table="param",
            table_input="magnitude",
            sized=True,
            arguments="cutout_arguments",
            operator="fn.erase (hand-written: random centre, fill 128)",
        ),
        torch=TorchImpl("cutout", "F.erase (hand-written: random centre, fill 128)"),
    ),
    # SamplePairing (Inoue 2018): blend weight of the other image 0..0.4 (paper). Not in TA-wide.
    OpSpec(
        name="SamplePairing",
        description="(1 - m) * image + m * other image (DALI: another image of the batch; torchvision: "
        "the previous image the transform saw, or the rolled batch)",
        ranges=MagnitudeRange(0.0, 0.4, "blend weight", source=_AA),
        dali=DaliImpl(
            branch="sample_pairing",
            table="param",
            arguments="sample_pairing_arguments",
            operator="hand-written: fn.permute_batch(fn.batch_permutation) + blend",
        ),
        torch=TorchImpl("sample_pairing", "hand-written: blend with the previous image (or the rolled batch)"),
    ),
]
declare_builtin(_BUILTIN)
