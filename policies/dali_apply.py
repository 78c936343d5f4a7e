"""Apply a :class:`~policies.Policy` inside a DALI pipeline.

:func:`apply_policy` is the policy step of a ``pipeline_def(enable_conditionals=True)`` pipeline.
Per sample it draws one sub-policy uniformly and applies each of its operations, in order, with
the operation's probability. It runs on CPU or GPU ``DataNode`` s with the same code and draws its
randomness from DALI random operators, so it is seeded by the pipeline ``seed``.

Design: a table-driven graph of fixed size
------------------------------------------
DALI's own ``apply_auto_augment`` also looks parameters up per sample, but builds one selection
per (stage, op) of every sub-policy; this module builds a graph whose size depends only on the
*number of operation kinds* used at each stage, not on the number of sub-policies, so that
RandAugment (196 sub-policies) or TrivialAugment (434) cost the same as a 5-sub-policy policy:

1. ``k = fn.random.uniform(values=range(K))`` -- the sub-policy index of each sample;
2. for each stage ``s`` (0 .. longest sub-policy - 1): ``fn.lookup_table(k, ...)`` gives the
   sample's operation (as an index into the stage's list of operation kinds, Identity = 0),
   probability and magnitude bin; ``fn.random.coin_flip(probability=<per-sample node>)``
   decides whether the operation is applied (not applied -> Identity);
3. one conditional selection over the stage's operation kinds (``nvidia.dali.auto_aug.core.select``,
   a binary tree of ``if``), where each branch receives only the samples that drew it and looks
   up its per-sample parameter from its magnitude bin and random sign (``@augmentation``).

The operations are ``nvidia.dali.auto_aug`` ``@augmentation`` objects: DALI's own augmentations
(shear, translate, rotate, brightness, contrast, color, posterize, solarize, invert,
auto_contrast, identity) reconfigured with the ranges of :mod:`policies.ops` (``.augmentation(
mag_range=..., randomly_negate=..., mag_to_param=...)``), equalize and sharpness re-declared on
the non-deprecated ``fn.equalize`` / ``fn.filter``, and Cutout and SamplePairing written here.

SamplePairing blends each image with another image of the same batch: ``fn.permute_batch`` with a
``fn.batch_permutation(no_fixed_points=True)``, computed once before any branching (so the partner
is the partner's *input* image, before this policy's operations).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali import math as dmath
from nvidia.dali.auto_aug import augmentations as _a
from nvidia.dali.auto_aug.core import augmentation, select, signed_bin
from nvidia.dali.auto_aug.core import _Augmentation as Augmentation
from nvidia.dali.data_node import DataNode

from policies import ops as _ops
from policies.policy import Policy

__all__ = ["apply_policy", "DALI_OPS", "configured_augmentation", "graph_size"]

_INTERP = {"nearest": types.INTERP_NN, "bilinear": types.INTERP_LINEAR}


# --------------------------------------------------------------------------- operations
# Each is an ``Augmentation``: ``aug(data, magnitude_bin=..., num_magnitude_bins=..., **kwargs)``
# calls ``op(data, mag_to_param(signed magnitude), **accepted kwargs)``. The ranges attached here
# are placeholders; ``configured_augmentation`` attaches the registry's magnitudes per policy.


@augmentation
def _equalize(data, _):
    """Per-channel histogram equalization (``fn.equalize``, OpenCV's formula)."""
    return fn.equalize(data)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, param_device="auto")
def _sharpness(data, kernel):
    """PIL's Sharpness as one 3x3 convolution (DALI's auto_aug kernel) on ``fn.filter``.

    Border pixels are filtered with reflect-101 padding (PIL/torchvision leave them as is).
    """
    return fn.filter(data, kernel)


@augmentation(mag_range=(0, 60 / 331))
def _cutout(data, side, min_side, cutout_center, shape, fill_value=128):
    """Fill a ``side * min(H, W)`` px square, centred on a random pixel, with ``fill_value``.

    ``cutout_center`` is a per-sample uniform [0, 1) pair drawn before branching; the square is
    clipped at the image border by ``fn.erase``.
    """
    size = dmath.floor(side * min_side + 0.5)
    hw = fn.stack(shape[0], shape[1]) if isinstance(shape, DataNode) else np.float32(shape[:2])
    center = dmath.floor(cutout_center * hw)
    anchor = center - dmath.floor(size * 0.5)
    return fn.erase(
        data,
        anchor=fn.cast(anchor, dtype=types.FLOAT),
        shape=fn.cast(fn.stack(size, size), dtype=types.FLOAT),
        axis_names="HW",
        fill_value=fill_value,
    )


@augmentation(mag_range=(0, 0.4))
def _sample_pairing(data, weight, paired):
    """``(1 - w) * image + w * paired`` rounded to uint8; ``paired`` is another image of the batch."""
    return fn.cast_like(data * (1.0 - weight) + paired * weight, data)


#: Registry name -> base ``Augmentation`` (ranges attached per policy by ``configured_augmentation``).
DALI_OPS: dict[str, Augmentation] = {
    "Identity": _a.identity,
    "ShearX": _a.shear_x,
    "ShearY": _a.shear_y,
    "TranslateX": _a.translate_x,
    "TranslateY": _a.translate_y,
    "Rotate": _a.rotate,
    "AutoContrast": _a.auto_contrast,
    "Invert": _a.invert,
    "Equalize": _equalize,
    "Solarize": _a.solarize,
    "Posterize": _a.posterize,
    "Contrast": _a.contrast,
    "Color": _a.color,
    "Brightness": _a.brightness,
    "Sharpness": _sharpness,
    "Cutout": _cutout,
    "SamplePairing": _sample_pairing,
}
assert set(DALI_OPS) == set(_ops.OP_NAMES)


def _vec_x(m):
    return np.array([m, 0.0], dtype=np.float32)


def _vec_y(m):
    return np.array([0.0, m], dtype=np.float32)


def _f32(m):
    return np.float32(m)


def _posterize_mask(m):
    bits = _ops.REGISTRY["Posterize"].to_param(m)
    return np.uint8(0xFF ^ ((1 << (8 - bits)) - 1))


def _sharpness_kernel(m):
    # PIL: out = blurred + f * (img - blurred), f = 1 + m  ->  kernel (1 + m) * ident - m * blur
    return np.asarray(_a.sharpness_kernel(m), dtype=np.float32)


_MAG_TO_PARAM = {
    "ShearX": _vec_x,
    "ShearY": _vec_y,
    "TranslateX": _vec_x,  # relative offset; the op multiplies by the sample's width
    "TranslateY": _vec_y,  # ... by the sample's height
    "Rotate": _f32,
    "Solarize": _f32,
    "Posterize": _posterize_mask,
    "Contrast": lambda m: np.float32(_ops.REGISTRY["Contrast"].to_param(m)),
    "Color": lambda m: np.float32(_ops.REGISTRY["Color"].to_param(m)),
    "Brightness": lambda m: np.float32(_ops.REGISTRY["Brightness"].to_param(m)),
    "Sharpness": _sharpness_kernel,
    "Cutout": _f32,  # fraction of min(H, W); the op multiplies and rounds
    "SamplePairing": _f32,
}


def configured_augmentation(name: str, num_magnitude_bins: int, ranges: str) -> Augmentation:
    """The ``Augmentation`` for registry op ``name`` with the registry's magnitudes attached."""
    spec = _ops.get(name)
    base = DALI_OPS[name]
    if not spec.has_magnitude:
        return base
    mags = np.asarray(spec.magnitudes(num_magnitude_bins, ranges), dtype=np.float64)
    return base.augmentation(
        mag_range=mags, randomly_negate=spec.signed, mag_to_param=_MAG_TO_PARAM[name]
    )


# --------------------------------------------------------------------------- policy step
def _stage_tables(policy: Policy, stage: int):
    """Operation kinds of one stage (Identity first) and the per-sub-policy lookup tables."""
    kinds = [_ops.IDENTITY]
    used = {sub[stage].op for sub in policy.sub_policies if stage < len(sub)}
    kinds += [n for n in _ops.OP_NAMES if n in used and n != _ops.IDENTITY]
    local, probs, bins = [], [], []
    for sub in policy.sub_policies:
        if stage < len(sub):
            op = sub[stage]
            local.append(kinds.index(op.op))
            probs.append(op.probability if op.op != _ops.IDENTITY else 0.0)
            bins.append(op.magnitude_bin)
        else:
            local.append(0)
            probs.append(0.0)
            bins.append(0)
    return kinds, local, probs, bins


def _lookup(k, values, dtype):
    return fn.lookup_table(
        k, keys=list(range(len(values))), values=[float(v) for v in values], dtype=dtype,
        default_value=0.0,
    )  # fmt: skip


def _normalize_size(image_size) -> tuple[int, int] | None:
    if image_size is None:
        return None
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        size = (image_size, image_size)
    elif isinstance(image_size, Sequence) and len(image_size) == 2:
        size = tuple(image_size)
    else:
        raise ValueError(f"image_size={image_size!r}; expected None, an int or (height, width)")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        raise ValueError(f"image_size={image_size!r}; expected positive integers")
    return size  # type: ignore[return-value]


def apply_policy(
    policy: Policy,
    images: DataNode,
    *,
    image_size: int | tuple[int, int] | None = None,
    interpolation: str = "nearest",
    fill_value: int = 128,
) -> DataNode:
    """Apply ``policy`` to a batch of uint8 HWC images inside a DALI pipeline.

    Must be called inside ``@pipeline_def(enable_conditionals=True)``. Works for CPU and GPU
    ``images``; randomness comes from the pipeline seed.

    Args:
        policy: the policy (a policy with no sub-policies returns ``images`` unchanged).
        images: uint8 ``HWC`` DataNode (3 channels).
        image_size: ``(height, width)`` or an int, when all images have that size; size-relative
            magnitudes (translate, cutout) then use constants. ``None`` (default) reads each
            sample's shape, so images of any size work.
        interpolation: ``"nearest"`` (default, as torchvision's AutoAugment and the paper's PIL
            code) or ``"bilinear"``, for shear / translate / rotate.
        fill_value: grey level of pixels uncovered by geometric ops and of the Cutout square.

    Returns:
        the augmented uint8 HWC DataNode.
    """
    if not isinstance(policy, Policy):
        raise ValueError(f"policy must be a policies.Policy, got {type(policy).__name__}")
    if not isinstance(images, DataNode):
        raise ValueError(
            f"images must be a DALI DataNode (inside a pipeline_def), got {type(images).__name__}"
        )
    if interpolation not in _INTERP:
        raise ValueError(
            f"interpolation={interpolation!r}; expected one of {sorted(_INTERP)}"
        )
    if not (isinstance(fill_value, int) and 0 <= fill_value <= 255):
        raise ValueError(f"fill_value={fill_value!r}; expected an int in [0, 255]")
    size = _normalize_size(image_size)
    if policy.is_identity:
        return images

    used = set(policy.ops_used)
    kwargs: dict = {"fill_value": fill_value, "interp_type": _INTERP[interpolation]}
    if used & {"TranslateX", "TranslateY", "Cutout"}:
        kwargs["shape"] = size if size is not None else images.shape(device="cpu")
    if "Cutout" in used:
        if size is not None:
            kwargs["min_side"] = float(min(size))
        else:
            shape = kwargs["shape"]
            kwargs["min_side"] = fn.cast(dmath.min(shape[0], shape[1]), dtype=types.FLOAT)
        kwargs["cutout_center"] = fn.random.uniform(range=[0.0, 1.0], shape=[2])
    if "SamplePairing" in used:
        kwargs["paired"] = fn.permute_batch(
            images, indices=fn.batch_permutation(no_fixed_points=True)
        )

    num_sub = len(policy)
    k = fn.random.uniform(values=list(range(num_sub)), dtype=types.INT32)
    bins_n = policy.num_magnitude_bins
    for stage in range(policy.max_ops_per_sub_policy):
        kinds, local, probs, bins = _stage_tables(policy, stage)
        if len(kinds) == 1:  # only Identity at this stage
            continue
        selected = _lookup(k, local, types.INT32)
        if any(p < 1.0 for p, i in zip(probs, local) if i != 0):
            prob = _lookup(k, probs, types.FLOAT)
            selected = selected * fn.random.coin_flip(probability=prob, dtype=types.INT32)
        mag_bin = _lookup(k, bins, types.INT32)
        if any(_ops.REGISTRY[n].signed for n in kinds):
            mag_bin = signed_bin(mag_bin)
        augs = [configured_augmentation(n, bins_n, policy.ranges) for n in kinds]
        images = select(
            augs, selected, data=images, magnitude_bin=mag_bin, num_magnitude_bins=bins_n,
            **kwargs,
        )  # fmt: skip
    return images


def graph_size(pipe) -> int:
    """Number of operators in a built DALI pipeline (for comparing graph sizes)."""
    import json

    return len(json.loads(pipe.serialize(serialize_as="json")).get("operators", ()))  # noqa
