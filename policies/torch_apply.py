"""Apply a :class:`~policies.Policy` with torchvision (``Policy.to_torchvision()``).

:class:`PolicyTransform` is a ``torchvision.transforms.v2.Transform`` doing what
:func:`autoaug.policies.dali_apply.apply_policy` does in DALI: per image, one sub-policy drawn uniformly,
each of its operations applied in order with its probability, at the magnitude of its bin (the
ranges of :mod:`autoaug.policies.ops`), signed operations negated with probability 1/2. Randomness comes
from torch's global RNG (``torch.manual_seed``; ``DataLoader`` seeds each worker).

Inputs: a uint8 ``CHW`` tensor (or ``tv_tensors.Image``), a batched uint8 ``NCHW`` tensor (each
image gets its own draw) or a PIL image; optionally inside a tuple/dict with other entries (labels
...) that pass through unchanged. As in torchvision v2, the image is the ``tv_tensors.Image`` or PIL
input, or else the first plain tensor.

SamplePairing: a per-sample transform sees one image at a time, so it blends the image with the
**previous image this transform instance saw** (its input, before augmentation; resized to the
current size if they differ); on the very first image there is no partner and SamplePairing is
the identity. Given a batched tensor it blends image ``i`` with image ``i - 1`` of the batch
(``batch.roll(1, 0)``). In a ``DataLoader`` each worker holds its own copy of the transform and so
its own "previous image".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import PIL.Image
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from autoaug.policies import bases as _bases
from autoaug.policies import ops as _ops
from autoaug.policies.policy import Policy

__all__ = [
    "PolicyTransform",
    "RandomPadCrop",
    "base_transforms",
    "to_torchvision",
    "TORCH_OPS",
    "TorchOp",
    "apply_op",
]

_INTERP = {"nearest": v2.InterpolationMode.NEAREST, "bilinear": v2.InterpolationMode.BILINEAR}


# --------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class TorchOp:
    """How torchvision applies one declared operation (derived from its ``OpSpec.torch``).

    Attributes:
        name: the registry name.
        apply: ``fn(img uint8 [..., C, H, W], param, *, fill, interpolation, other, generator) ->
            img``; ``param`` is :meth:`~autoaug.policies.ops.OpSpec.param` of the image's size.
        operator: the torchvision functions used, for the docs (docs/policies.md's op table).
    """

    name: str
    apply: Callable[..., torch.Tensor]
    operator: str


def _torch_op(name: str) -> TorchOp:
    """The :class:`TorchOp` of the declared op ``name`` (``KeyError`` when none is declared)."""
    impl = _ops.REGISTRY[name].torch
    return TorchOp(name, _ops.resolve(impl.apply, globals(), name, "torch.apply"), impl.operator)


#: Declared op name -> :class:`TorchOp`, derived from the declarations (``OpSpec.torch``) when read.
TORCH_OPS: Mapping[str, TorchOp] = _ops.LiveTable("TORCH_OPS", _ops.op_names, _torch_op)


# --------------------------------------------------------------------------- operations
# The functions the built-in declarations of autoaug.policies.ops name (``TorchImpl(apply=...)``).
def identity(img, param, **_):
    return img


def shear_x(img, m, *, fill, interpolation, **_):
    # torchvision's shear is an angle: the AutoAugment/PIL coefficient m is tan(angle).
    return F.affine(
        img,
        angle=0.0,
        translate=[0.0, 0.0],
        scale=1.0,
        shear=[math.degrees(math.atan(m)), 0.0],
        interpolation=interpolation,
        fill=fill,
        center=[0.0, 0.0],
    )


def shear_y(img, m, *, fill, interpolation, **_):
    return F.affine(
        img,
        angle=0.0,
        translate=[0.0, 0.0],
        scale=1.0,
        shear=[0.0, math.degrees(math.atan(m))],
        interpolation=interpolation,
        fill=fill,
        center=[0.0, 0.0],
    )


def translate_x(img, px, *, fill, interpolation, **_):
    return F.affine(
        img, angle=0.0, translate=[float(px), 0.0], scale=1.0, shear=[0.0, 0.0], interpolation=interpolation, fill=fill
    )


def translate_y(img, px, *, fill, interpolation, **_):
    return F.affine(
        img, angle=0.0, translate=[0.0, float(px)], scale=1.0, shear=[0.0, 0.0], interpolation=interpolation, fill=fill
    )


def rotate(img, deg, *, fill, interpolation, **_):
    return F.rotate(img, angle=float(deg), interpolation=interpolation, fill=fill)


def auto_contrast(img, _, **__):
    return F.autocontrast(img)


def invert(img, _, **__):
    return F.invert(img)


def equalize(img, _, **__):
    return F.equalize(img)


def solarize(img, threshold, **_):
    # threshold 256 (bin 0) inverts nothing; torchvision rejects thresholds above 255.
    if threshold > 255:
        return img
    return F.solarize(img, threshold=float(threshold))


def posterize(img, bits, **_):
    return F.posterize(img, bits=int(bits))


def contrast(img, factor, **_):
    return F.adjust_contrast(img, contrast_factor=float(factor))


def color(img, factor, **_):
    return F.adjust_saturation(img, saturation_factor=float(factor))


def brightness(img, factor, **_):
    return F.adjust_brightness(img, brightness_factor=float(factor))


def sharpness(img, factor, **_):
    return F.adjust_sharpness(img, sharpness_factor=float(factor))


def cutout(img, side, *, fill, generator=None, **_):
    side = int(side)
    if side <= 0:
        return img
    h, w = img.shape[-2:]
    cy = int(torch.randint(h, (), generator=generator))
    cx = int(torch.randint(w, (), generator=generator))
    top, left = max(cy - side // 2, 0), max(cx - side // 2, 0)
    bottom, right = min(cy - side // 2 + side, h), min(cx - side // 2 + side, w)
    if bottom <= top or right <= left:
        return img
    value = torch.tensor(fill, dtype=img.dtype).view(-1, 1, 1)
    return F.erase(img, top, left, bottom - top, right - left, value)


def sample_pairing(img, weight, *, other=None, **_):
    if other is None or weight == 0:
        return img
    if other.shape[-2:] != img.shape[-2:]:
        other = F.resize(other, list(img.shape[-2:]), antialias=True)
    out = img.float() * (1.0 - weight) + other.float() * weight
    return out.round_().clamp_(0, 255).to(img.dtype)


def apply_op(
    img: torch.Tensor,
    name: str,
    magnitude_bin: int,
    num_magnitude_bins: int,
    ranges: str = "autoaugment",
    *,
    negate: bool = False,
    interpolation: str = "nearest",
    fill: int = 128,
    other: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Apply one registry operation (always, with the given sign) to a uint8 ``CHW`` tensor."""
    spec = _ops.get(name)
    h, w = img.shape[-2:]
    param = spec.param(magnitude_bin, num_magnitude_bins, ranges, image_size=(h, w), negate=negate)
    channels = img.shape[-3]
    return TORCH_OPS[name].apply(
        img,
        param,
        fill=[float(fill)] * channels,
        interpolation=_INTERP[interpolation],
        other=other,
        generator=generator,
    )


class PolicyTransform(v2.Transform):
    """torchvision v2 transform applying a :class:`~policies.Policy` (policy only, no crop/flip).

    Args:
        policy: the policy.
        interpolation: ``"nearest"`` (default) or ``"bilinear"`` for shear / translate / rotate.
        fill: grey level of uncovered pixels and of the Cutout square (default 128).
    """

    def __init__(self, policy: Policy, *, interpolation: str = "nearest", fill: int = 128):
        super().__init__()
        if not isinstance(policy, Policy):
            raise ValueError(f"policy must be a policies.Policy, got {type(policy).__name__}")
        if interpolation not in _INTERP:
            raise ValueError(f"interpolation={interpolation!r}; expected one of {sorted(_INTERP)}")
        if not (isinstance(fill, int) and 0 <= fill <= 255):
            raise ValueError(f"fill={fill!r}; expected an int in [0, 255]")
        self.policy = policy
        self.interpolation = interpolation
        self.fill = fill
        self._previous: torch.Tensor | None = None
        #: Sub-policy index and fired ops of the last image transformed (used by the preview).
        self.last_applied: list[tuple[int, list[str]]] = []

    def extra_repr(self) -> str:
        return (
            f"policy={self.policy.name!r} ({len(self.policy)} sub-policies), "
            f"interpolation={self.interpolation!r}, fill={self.fill}"
        )

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_previous"] = None
        state["last_applied"] = []
        return state

    # -- one sample ----------------------------------------------------------------------
    def _apply_one(self, img: torch.Tensor, other: torch.Tensor | None):
        policy = self.policy
        if policy.is_identity:
            return img, (-1, [])
        k = int(torch.randint(len(policy), ()))
        fired = []
        for op in policy.sub_policies[k]:
            if op.op == _ops.IDENTITY or float(torch.rand(())) >= op.probability:
                continue
            spec = _ops.REGISTRY[op.op]
            negate = spec.signed and bool(torch.randint(2, ()))
            img = apply_op(
                img,
                op.op,
                op.magnitude_bin,
                policy.num_magnitude_bins,
                policy.ranges,
                negate=negate,
                interpolation=self.interpolation,
                fill=self.fill,
                other=other,
            )
            fired.append(("-" if negate else "") + op.op)
        return img, (k, fired)

    def _apply_tensor(self, img: torch.Tensor) -> torch.Tensor:
        if img.dtype != torch.uint8:
            raise ValueError(f"{type(self).__name__} expects uint8 images, got dtype {img.dtype}")
        if img.ndim not in (3, 4) or img.shape[-3] not in (1, 3):
            raise ValueError(
                f"{type(self).__name__} expects a uint8 tensor of shape [C, H, W] or "
                f"[N, C, H, W] with C in (1, 3), got shape {tuple(img.shape)}"
            )
        if img.ndim == 3:
            previous, self._previous = self._previous, img.detach().clone()
            if previous is not None and previous.shape[-3] != img.shape[-3]:
                previous = None
            out, info = self._apply_one(img, previous)
            self.last_applied = [info]
            return out
        others = img.roll(1, 0) if img.shape[0] > 1 else [None] * len(img)
        results = [self._apply_one(x, o) for x, o in zip(img, others)]
        self.last_applied = [info for _, info in results]
        if len(img):
            self._previous = img[-1].detach().clone()
        return torch.stack([r for r, _ in results]) if results else img

    def _apply_image(self, image: Any) -> Any:
        if isinstance(image, PIL.Image.Image):
            if image.mode not in ("RGB", "L"):
                raise ValueError(f"PIL images must be mode RGB or L, got {image.mode!r}")
            out = self._apply_tensor(F.pil_to_tensor(image))
            return F.to_pil_image(out, mode=image.mode)
        out = self._apply_tensor(image.as_subclass(torch.Tensor))
        if isinstance(image, tv_tensors.Image):
            return tv_tensors.wrap(out, like=image)
        return out

    def forward(self, *inputs: Any) -> Any:
        flat, spec = tree_flatten(inputs if len(inputs) > 1 else inputs[0])
        # torchvision v2's rule: images are the tv_tensors.Image / PIL inputs; when there are
        # none, the first plain tensor is the image and other plain tensors (labels) pass through.
        found = [i for i, x in enumerate(flat) if isinstance(x, (PIL.Image.Image, tv_tensors.Image))]
        if not found:
            found = [i for i, x in enumerate(flat) if type(x) is torch.Tensor][:1]
        if not found:
            raise ValueError(
                f"{type(self).__name__} found no image in its input (expected a uint8 tensor, "
                f"tv_tensors.Image or PIL image); got {[type(x).__name__ for x in flat]}"
            )
        if len(found) > 1:
            raise ValueError(
                f"{type(self).__name__} applies one policy draw to a single image, but found "
                f"{len(found)} image-like inputs"
            )
        flat[found[0]] = self._apply_image(flat[found[0]])
        return tree_unflatten(flat, spec)


class RandomPadCrop(v2.Transform):
    """Zero-pad by ``padding`` px on each side, then crop back to the input size at a random
    offset (uniform over the ``2 * padding + 1`` positions of each axis): the pad-and-random-crop
    of the bases ``crop`` and ``standard``. ``padding=None`` (default) takes
    :func:`autoaug.policies.bases.crop_padding` of the image size (4 px on 32 px images), as the
    DALI pipeline does."""

    def __init__(self, padding: int | None = None, fill: int = 0):
        super().__init__()
        self.padding = padding
        self.fill = fill

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        p = self.padding
        if p is None:
            p = _bases.crop_padding(*F.get_size(flat_inputs[0]))
        return {"padding": p, "top": int(torch.randint(2 * p + 1, ())), "left": int(torch.randint(2 * p + 1, ()))}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        h, w = F.get_size(inpt)
        padded = F.pad(inpt, [params["padding"]], fill=self.fill)
        return F.crop(padded, params["top"], params["left"], h, w)


def base_transforms(base: str) -> list[v2.Transform]:
    """The torchvision steps of the base ``base`` (:data:`autoaug.policies.bases.REGISTRY`):
    :class:`RandomPadCrop` when it crops, ``v2.RandomHorizontalFlip`` when it flips; ``[]`` for
    ``none``."""
    spec = _bases.get(base)
    steps: list[v2.Transform] = []
    if spec.crop:
        steps.append(RandomPadCrop())
    if spec.flip:
        steps.append(v2.RandomHorizontalFlip(_bases.FLIP_PROBABILITY))
    return steps


def to_torchvision(
    policy: Policy, *, base: bool | None = None, interpolation: str = "nearest", fill: int = 128
) -> v2.Transform:
    """The torchvision transform for ``policy``: by default (``base=None``) the augmentation the
    policy was searched and evaluated with -- the steps of ``policy.base``
    (:func:`base_transforms`: :class:`RandomPadCrop` for ``crop``, :class:`RandomPadCrop` and
    ``v2.RandomHorizontalFlip`` for ``standard``, nothing for ``none``) before the policy, as in
    training; ``base=False`` gives the policy step alone (for a pipeline that crops and flips by
    itself); ``base=True`` is the default spelled out."""
    if base not in (None, True, False):
        raise ValueError(f"to_torchvision: base must be None, True or False, got {base!r}")
    transform = PolicyTransform(policy, interpolation=interpolation, fill=fill)
    steps = base_transforms(policy.base) if base is not False else []
    return v2.Compose([*steps, transform]) if steps else transform
