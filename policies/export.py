"""Export a :class:`~autoaug.policies.policy.Policy` for other libraries' AutoAugment.

* :func:`to_dali_source` -- Python source that builds an ``nvidia.dali.auto_aug.core.Policy`` from
  DALI's own augmentations (``nvidia.dali.auto_aug.augmentations``), each re-declared with this
  project's magnitude range (``aug.augmentation(mag_range=(lo, hi))``, :mod:`autoaug.policies.ops`),
  so DALI's ``apply_auto_augment`` draws the same sub-policy uniformly, applies each op with the
  same probability, and maps each bin to the same magnitude (DALI and this project both use
  ``linspace(lo, hi, num_magnitude_bins)[bin]``, negated with probability 1/2 for signed ops).
* :func:`to_timm` -- timm's AutoAugment format: ``[[(op name, probability, level), ...], ...]``
  plus the ``hparams`` the ops read, for ``timm.data.auto_augment.AutoAugment``. timm maps a
  level to a magnitude with fixed per-op units (rotate ``level * 3`` degrees, shear
  ``level * 0.03``, translate ``level * translate_pct / 10`` of the width, enhance
  ``1 +- level * 0.09``, solarize ``256 - int(level * 25.6)``, posterize
  ``int(level * 0.4) + 4`` bits); the level written is the project's magnitude divided by that
  unit, so the magnitudes agree (solarize within 1 grey level: timm truncates to an integer).

Neither library has Cutout or SamplePairing in its AutoAugment ops; a policy using them (with a
probability above 0) is refused with a message naming the op (search with
``--exclude-ops Cutout,SamplePairing``, or apply the policy with :mod:`autoaug.policies.dali_apply`
/ ``Policy.to_torchvision()``). The export holds the policy step only: a policy searched on the base
``standard`` expects the pad-4 random crop and horizontal flip before it, on ``crop`` the crop alone
(:mod:`autoaug.policies.bases`); the exports say so (:func:`base_note`).
"""

from __future__ import annotations

import textwrap
from typing import Any

from autoaug.policies import bases as _bases
from autoaug.policies import ops as _ops
from autoaug.policies.policy import Policy

__all__ = [
    "FORMATS",
    "to_dali_source",
    "schedule_to_dali_source",
    "to_timm",
    "base_note",
    "TIMM_UNITS",
    "DALI_NAMES",
    "UnsupportedOpError",
]

#: ``policies export --format`` choices.
FORMATS = ("json", "dali", "timm")

#: Project op -> DALI ``auto_aug.augmentations`` function.
DALI_NAMES = {
    "Identity": "identity",
    "ShearX": "shear_x",
    "ShearY": "shear_y",
    "TranslateX": "translate_x",
    "TranslateY": "translate_y",
    "Rotate": "rotate",
    "AutoContrast": "auto_contrast",
    "Invert": "invert",
    "Equalize": "equalize",
    "Solarize": "solarize",
    "Posterize": "posterize",
    "Contrast": "contrast",
    "Color": "color",
    "Brightness": "brightness",
    "Sharpness": "sharpness",
}

#: Project op -> (timm op name, magnitude per level); None: no magnitude.
TIMM_UNITS: dict[str, tuple[str, float | None]] = {
    "ShearX": ("ShearX", 0.03),
    "ShearY": ("ShearY", 0.03),
    "Rotate": ("Rotate", 3.0),
    "TranslateX": ("TranslateXRel", None),
    "TranslateY": ("TranslateYRel", None),
    "Brightness": ("BrightnessIncreasing", 0.09),
    "Color": ("ColorIncreasing", 0.09),
    "Contrast": ("ContrastIncreasing", 0.09),
    "Sharpness": ("SharpnessIncreasing", 0.09),
    "Solarize": ("SolarizeIncreasing", 25.6),
    "Posterize": ("PosterizeOriginal", None),
    "AutoContrast": ("AutoContrast", None),
    "Equalize": ("Equalize", None),
    "Invert": ("Invert", None),
}


class UnsupportedOpError(ValueError):
    """The policy uses an op the target library's AutoAugment does not have."""


def _check(policy: Policy, known: set[str], target: str) -> None:
    for i, sub in enumerate(policy.sub_policies):
        for op in sub:
            if op.op not in known and op.probability > 0:
                raise UnsupportedOpError(
                    f"cannot export {policy.name!r} to {target}: sub-policy {i} uses {op.op}, which {target}'s "
                    f"AutoAugment does not have (exportable ops: {', '.join(sorted(known))}); search with "
                    f"--exclude-ops Cutout,SamplePairing, or apply the policy with autoaug (DALI or torchvision)"
                )


def base_note(policy: Policy) -> str:
    """What to apply before the exported ``policy``: its base's
    :meth:`~autoaug.policies.bases.Base.instructions`."""
    return _bases.get(policy.base).instructions()


def to_dali_source(policy: Policy) -> str:
    """Python source defining ``policy`` (an ``nvidia.dali.auto_aug.core.Policy``); see the module docs."""
    _check(policy, set(DALI_NAMES), "DALI")
    lines = [
        f'"""{policy.name}: an AutoAugment policy for nvidia.dali.auto_aug, exported by autoaug.',
        "",
        f"content hash {policy.content_hash}; {policy.num_magnitude_bins} magnitude bins, ranges {policy.ranges!r};",
        *textwrap.wrap(f"{base_note(policy)}.", 100, break_on_hyphens=False, break_long_words=False),
        "",
        "    from nvidia.dali.auto_aug.auto_augment import apply_auto_augment",
        "    images = apply_auto_augment(policy, images, shape=shape)  # shape (H, W): TranslateX/Y are relative",
        '"""',
        "from nvidia.dali.auto_aug import augmentations as aug",
        "from nvidia.dali.auto_aug.core import Policy",
        "",
    ]
    return "\n".join(lines + _dali_policy_lines(policy, "ops", "policy"))


def _dali_policy_lines(policy: Policy, ops_var: str, policy_var: str) -> list[str]:
    """``ops_var = {...}`` (DALI's augmentations with the policy's ranges) and ``policy_var = Policy(...)``."""
    used = sorted({op.op for sub in policy.sub_policies for op in sub if op.op in DALI_NAMES})
    lines = ["# DALI's augmentations with autoaug's magnitude ranges (autoaug.policies.ops)", f"{ops_var} = {{"]
    for name in used:
        rng = _ops.REGISTRY[name].magnitude_range(policy.ranges)
        fn_name = DALI_NAMES[name]
        if rng is None:
            lines.append(f"    {name!r}: aug.{fn_name},")
        else:
            lines.append(f"    {name!r}: aug.{fn_name}.augmentation(mag_range=({rng.lo!r}, {rng.hi!r})),")
    lines += [
        "}",
        "",
        f"{policy_var} = Policy(",
        f"    name={policy.name!r},",
        f"    num_magnitude_bins={policy.num_magnitude_bins},",
        "    sub_policies=[",
    ]
    for sub in policy.sub_policies:
        ops = [
            f"({ops_var}[{op.op!r}], {op.probability!r}, "
            f"{op.magnitude_bin if _ops.REGISTRY[op.op].has_magnitude else None})"  # DALI: None = no magnitude
            for op in sub
            if op.op in DALI_NAMES
        ]
        lines.append(f"        [{', '.join(ops)}],")
    lines += ["    ],", ")", ""]
    return lines


def schedule_to_dali_source(schedule: Any) -> str:
    """Python source defining a :class:`~autoaug.policies.schedule.Schedule` for
    ``nvidia.dali.auto_aug``: one ``Policy`` per stage (``stage_0``, ...), ``STAGES`` (start as a
    fraction of training, policy) and ``policy_at(epoch, epochs)`` (0-based epoch), with which a
    training loop picks the policy of an epoch (a DALI pipeline built per stage, or rebuilt at the
    stage boundaries: ``nvidia.dali.auto_aug`` takes the policy when the graph is built)."""
    for i, stage in enumerate(schedule.stages):
        try:
            _check(stage.policy, set(DALI_NAMES), "DALI")
        except UnsupportedOpError as exc:
            raise UnsupportedOpError(f"stage {i}: {exc}") from None
    lines = [
        f'"""{schedule.name}: an augmentation schedule of {len(schedule.stages)} stages for nvidia.dali.auto_aug, '
        "exported by autoaug.",
        "",
        f"content hash {schedule.content_hash}; stage k applies from STAGES[k][0] of training on;",
        *textwrap.wrap(f"{base_note(schedule.final)}.", 100, break_on_hyphens=False, break_long_words=False),
        "",
        "    from nvidia.dali.auto_aug.auto_augment import apply_auto_augment",
        "    images = apply_auto_augment(policy_at(epoch, epochs), images, shape=shape)",
        '"""',
        "import math",
        "",
        "from nvidia.dali.auto_aug import augmentations as aug",
        "from nvidia.dali.auto_aug.core import Policy",
        "",
    ]
    for i, stage in enumerate(schedule.stages):
        lines += [f"# stage {i}: from {stage.start!r} of training"] + _dali_policy_lines(
            stage.policy, f"ops_{i}", f"stage_{i}"
        )
    lines += [
        "STAGES = [" + ", ".join(f"({s.start!r}, stage_{i})" for i, s in enumerate(schedule.stages)) + "]",
        "",
        "",
        "def policy_at(epoch, epochs):",
        '    """The policy of 0-based ``epoch`` in a training of ``epochs`` epochs."""',
        "    current = STAGES[0][1]",
        "    for start, policy in STAGES:",
        "        if math.ceil(start * epochs - 1e-6) <= epoch:",
        "            current = policy",
        "    return current",
        "",
    ]
    return "\n".join(lines)


def _timm_level(name: str, bin_: int, policy: Policy) -> float:
    spec = _ops.REGISTRY[name]
    if not spec.has_magnitude:
        return 0.0
    m = spec.magnitude(bin_, policy.num_magnitude_bins, policy.ranges)
    timm_name, unit = TIMM_UNITS[name]
    if name in ("TranslateX", "TranslateY"):
        hi = spec.magnitude_range(policy.ranges).hi
        return 0.0 if hi == 0 else 10.0 * m / hi  # translate_pct = hi (a fraction of the width/height)
    if name == "Solarize":
        return (256.0 - m) / unit  # threshold m
    if name == "Posterize":
        bits = spec.to_param(m)
        if bits < 4:
            raise UnsupportedOpError(
                f"cannot export {policy.name!r} to timm: Posterize keeping {bits} bits (bin {bin_}); timm's "
                "PosterizeOriginal keeps 4 to 8 bits"
            )
        return (bits - 4) * 2.5 + 0.01  # int(level * 0.4) + 4 == bits
    return m / unit


def to_timm(policy: Policy) -> dict[str, Any]:
    """``{"format", "name", "content_hash", "base", "hparams", "policy"}`` for timm; see the module docs.

    Load it with::

        from timm.data.auto_augment import AugmentOp, AutoAugment
        aa = AutoAugment([[AugmentOp(n, p, m, hparams=doc["hparams"]) for n, p, m in sp] for sp in doc["policy"]])
    """
    _check(policy, set(TIMM_UNITS) | {"Identity"}, "timm")
    translate = [(_ops.REGISTRY[n].magnitude_range(policy.ranges)) for n in ("TranslateX", "TranslateY")]
    if translate[0].hi != translate[1].hi:  # pragma: no cover - equal under both conventions
        raise UnsupportedOpError("timm uses one translate_pct for TranslateX and TranslateY")
    subs = []
    for sub in policy.sub_policies:
        # Identity does nothing: leaving it out of the sub-policy is exact.
        subs.append(
            [
                [TIMM_UNITS[op.op][0], op.probability, round(_timm_level(op.op, op.magnitude_bin, policy), 6)]
                for op in sub
                if op.op in TIMM_UNITS and op.probability > 0
            ]
        )
    return {
        "format": "timm-autoaugment",
        "name": policy.name,
        "content_hash": policy.content_hash,
        "base": policy.base,
        "note": base_note(policy),
        "hparams": {"translate_pct": translate[0].hi, "img_mean": [128, 128, 128], "magnitude_std": 0},
        "policy": subs,
    }
