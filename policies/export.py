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

What each op is in each library is part of its declaration (:class:`~autoaug.policies.ops.OpSpec`:
``dali_export``, a :class:`~autoaug.policies.ops.DaliExport`; ``timm_export``, a
:class:`~autoaug.policies.ops.TimmExport`), so an op declared later is exported as it says. An op
whose declaration has none for a format (the built-ins Cutout and SamplePairing: neither library
has them) is refused, in a policy using it with a probability above 0, with one line naming the op
and the format (search with ``--exclude-ops`` and those ops, or apply the policy with
:mod:`autoaug.policies.dali_apply` / ``Policy.to_torchvision()``). The export holds the policy step
only: a policy searched on the base ``standard`` expects the pad-4 random crop and horizontal flip
before it, on ``crop`` the crop alone (:mod:`autoaug.policies.bases`); the exports say so
(:func:`base_note`).
"""

from __future__ import annotations

import math
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
    "exportable_ops",
    "UnsupportedOpError",
]

#: ``policies export --format`` choices.
FORMATS = ("json", "dali", "timm")

#: The export targets, by the name the messages use: the field of an op's declaration each reads.
_EXPORT_FIELD = {"DALI": "dali_export", "timm": "timm_export"}
#: The level timm clips a magnitude to, unless its ``magnitude_max`` hparam says more.
_TIMM_MAX_LEVEL = 10.0


class UnsupportedOpError(ValueError):
    """The policy uses an op the target library's AutoAugment does not have."""


def _export(name: str, target: str) -> Any:
    """``name``'s declared export for ``target`` ("DALI" or "timm"), or None."""
    return getattr(_ops.REGISTRY[name], _EXPORT_FIELD[target])


def exportable_ops(target: str) -> tuple[str, ...]:
    """The operations declared now that ``target`` ("DALI" or "timm") can write, in declaration order."""
    return tuple(name for name in _ops.op_names() if _export(name, target) is not None)


def _check(policy: Policy, target: str) -> None:
    for i, sub in enumerate(policy.sub_policies):
        for op in sub:
            if op.probability > 0 and _export(op.op, target) is None:
                known = exportable_ops(target)
                others = [name for name in _ops.op_names() if name not in known]
                raise UnsupportedOpError(
                    f"cannot export {policy.name!r} to {target}: sub-policy {i} uses {op.op}, which {target}'s "
                    f"AutoAugment does not have (its declaration has no {_EXPORT_FIELD[target]}; exportable ops: "
                    f"{', '.join(sorted(known))}); search with --exclude-ops {','.join(others)}, or apply the policy "
                    "with autoaug (DALI or torchvision)"
                )


def base_note(policy: Policy) -> str:
    """What to apply before the exported ``policy``: its base's
    :meth:`~autoaug.policies.bases.Base.instructions`."""
    return _bases.get(policy.base).instructions()


def to_dali_source(policy: Policy) -> str:
    """Python source defining ``policy`` (an ``nvidia.dali.auto_aug.core.Policy``); see the module docs."""
    _check(policy, "DALI")
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
    used = sorted({op.op for sub in policy.sub_policies for op in sub if _export(op.op, "DALI") is not None})
    lines = ["# DALI's augmentations with autoaug's magnitude ranges (autoaug.policies.ops)", f"{ops_var} = {{"]
    for name in used:
        lines.append(f"    {name!r}: {_dali_augmentation(name, policy.ranges)},")
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
            if _export(op.op, "DALI") is not None
        ]
        lines.append(f"        [{', '.join(ops)}],")
    lines += ["    ],", ")", ""]
    return lines


def _dali_augmentation(name: str, ranges: str) -> str:
    """The expression of DALI's augmentation for op ``name`` under ``ranges`` (its declared
    :class:`~autoaug.policies.ops.DaliExport`, re-declared with the op's range)."""
    spec = _ops.REGISTRY[name]
    export = spec.dali_export
    rng = spec.magnitude_range(ranges)
    if rng is None:
        return f"aug.{export.augmentation}"
    lo, hi = (rng.lo, rng.hi) if export.scale == 1 else (rng.lo * export.scale + 0.0, rng.hi * export.scale + 0.0)
    arguments = f"mag_range=({lo!r}, {hi!r})"
    if export.randomly_negate is not None:
        arguments += f", randomly_negate={export.randomly_negate!r}"
    return f"aug.{export.augmentation}.augmentation({arguments})"


def schedule_to_dali_source(schedule: Any) -> str:
    """Python source defining a :class:`~autoaug.policies.schedule.Schedule` for
    ``nvidia.dali.auto_aug``: one ``Policy`` per stage (``stage_0``, ...), ``STAGES`` (start as a
    fraction of training, policy) and ``policy_at(epoch, epochs)`` (0-based epoch), with which a
    training loop picks the policy of an epoch (a DALI pipeline built per stage, or rebuilt at the
    stage boundaries: ``nvidia.dali.auto_aug`` takes the policy when the graph is built)."""
    for i, stage in enumerate(schedule.stages):
        try:
            _check(stage.policy, "DALI")
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
    """The timm level of op ``name`` at ``bin_`` (its declared
    :class:`~autoaug.policies.ops.TimmExport`: magnitude / unit, or its ``level`` function)."""
    spec = _ops.REGISTRY[name]
    if not spec.has_magnitude:
        return 0.0
    export = spec.timm_export
    m = spec.magnitude(bin_, policy.num_magnitude_bins, policy.ranges)
    try:
        level = export.level(m, spec.magnitude_range(policy.ranges)) if export.level is not None else m / export.unit
    except ValueError as exc:
        raise UnsupportedOpError(f"cannot export {policy.name!r} to timm: {name} at bin {bin_}: {exc}") from None
    if not math.isfinite(level) or level < 0:
        raise UnsupportedOpError(
            f"cannot export {policy.name!r} to timm: {name} at bin {bin_} is level {level!r}; timm's {export.op} "
            "takes levels from 0"
        )
    return level


def _timm_hparams(policy: Policy, used: list[str]) -> dict[str, Any]:
    """The hparams the ops' levels assume (each :class:`~autoaug.policies.ops.TimmExport`'s
    ``hparams``): those of the ops ``used``, which must agree, then those of the other declared ops
    for the names still unset (so that they do not depend on which ops a policy happens to use)."""
    hparams: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for name in [*used, *(n for n in exportable_ops("timm") if n not in used)]:
        spec = _ops.REGISTRY[name]
        if spec.timm_export.hparams is None:
            continue
        for key, value in spec.timm_export.hparams(spec.magnitude_range(policy.ranges)).items():
            if key not in hparams:
                hparams[key], owner[key] = value, name
            elif hparams[key] != value and name in used:
                raise UnsupportedOpError(
                    f"cannot export {policy.name!r} to timm: {owner[key]} needs {key}={hparams[key]!r} and {name} "
                    f"{key}={value!r}; timm takes one {key} for every op"
                )
    return hparams


def to_timm(policy: Policy) -> dict[str, Any]:
    """``{"format", "name", "content_hash", "base", "hparams", "policy"}`` for timm; see the module docs.

    Load it with::

        from timm.data.auto_augment import AugmentOp, AutoAugment
        aa = AutoAugment([[AugmentOp(n, p, m, hparams=doc["hparams"]) for n, p, m in sp] for sp in doc["policy"]])
    """
    _check(policy, "timm")
    subs = []
    used: list[str] = []
    for sub in policy.sub_policies:
        # An op exported as no timm op (TimmExport(None): Identity, which does nothing) is left out: exact.
        kept = [(op, _export(op.op, "timm")) for op in sub if op.probability > 0]
        kept = [(op, export) for op, export in kept if export.op is not None]
        subs.append(
            [[export.op, op.probability, round(_timm_level(op.op, op.magnitude_bin, policy), 6)] for op, export in kept]
        )
        used += [op.op for op, _ in kept if op.op not in used]
    hparams = {**_timm_hparams(policy, used), "img_mean": [128, 128, 128], "magnitude_std": 0}
    top = max((level for sub in subs for _, _, level in sub), default=0.0)
    if top > _TIMM_MAX_LEVEL:  # timm clips a level to 10 unless magnitude_max says more (the wide ranges)
        hparams["magnitude_max"] = top
    return {
        "format": "timm-autoaugment",
        "name": policy.name,
        "content_hash": policy.content_hash,
        "base": policy.base,
        "note": base_note(policy),
        "hparams": hparams,
        "policy": subs,
    }
