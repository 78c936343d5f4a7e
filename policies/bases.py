"""The base augmentations: what a training image goes through *before* the policy step.

One record per base in :data:`REGISTRY`; every path reads it, none spells a base out again:
:class:`~autoaug.policies.policy.Policy` validation (``Policy.base``), the DALI step
(:func:`autoaug.policies.dali_apply.apply_base`, used by the training input pipeline and the
preview), the torchvision transform (:func:`autoaug.policies.torch_apply.base_transforms`,
``Policy.to_torchvision``), the exports' note on what to apply before an exported policy, and
``--base`` of ``autoaug train`` / ``autoaug compare``.

* ``none``: nothing (no augmentation besides the policy);
* ``crop``: pad-and-random-crop, no flip (for images whose label a mirror changes: traffic signs,
  text, digits);
* ``standard``: pad-and-random-crop, then a horizontal flip with probability 1/2 (AutoAugment's
  CIFAR recipe; the default).

Pad-and-random-crop: zero-pad the image by :func:`crop_padding` pixels on each side (1/8 of the
shorter side, at least 1: 4 px on 32 px images) and crop a window of the original size at an
offset drawn uniformly from the ``2 * pad + 1`` positions of each axis, i.e. shift the content
by -pad..+pad pixels, the uncovered border black.

>>> REGISTRY["crop"].flip, REGISTRY["standard"].flip
(False, True)
>>> crop_padding(32, 32), crop_padding(224, 180)
(4, 22)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoaug.core.errors import UserInputError

__all__ = ["Base", "REGISTRY", "NAMES", "DEFAULT", "FLIP_PROBABILITY", "crop_padding", "get", "check_name", "rebase"]

#: Probability of the horizontal flip of a base that flips.
FLIP_PROBABILITY = 0.5


def crop_padding(height: int, width: int) -> int:
    """Zero padding (px per side) of pad-and-random-crop on an image of ``height`` x ``width``:
    1/8 of the shorter side, rounded, at least 1 (4 on CIFAR's 32 x 32)."""
    return max(1, round(min(height, width) / 8))


@dataclass(frozen=True)
class Base:
    """One base augmentation: pad-and-random-crop or not, then a horizontal flip or not."""

    name: str
    crop: bool  # zero-pad by crop_padding() and crop back to the size at a random offset
    flip: bool  # mirror left-right with probability FLIP_PROBABILITY

    @property
    def summary(self) -> str:
        """What the base does, in a few words (``policies show``, logs)."""
        steps = (["pad-and-random-crop"] if self.crop else []) + (["horizontal flip"] if self.flip else [])
        return " + ".join(steps) or "nothing"

    def instructions(self) -> str:
        """What to apply before a policy searched on this base (the exports' note)."""
        if not (self.crop or self.flip):
            return f"searched with base {self.name!r}: nothing is applied before this policy"
        steps = []
        if self.crop:
            steps.append(
                "a random crop of the image's size from the image zero-padded by 1/8 of its shorter side "
                "(4 px on 32 px images; torchvision: v2.RandomCrop(size, padding=round(size / 8)))"
            )
        if self.flip:
            steps.append("a horizontal flip with probability 0.5 (v2.RandomHorizontalFlip())")
        done = " and ".join(steps) + ("" if self.flip else ", no flip,")
        return f"searched with base {self.name!r}: apply {done} before this policy, as in training"


#: The bases, from the weakest to the strongest; ``Policy.base`` is one of these names.
REGISTRY: dict[str, Base] = {
    "none": Base("none", crop=False, flip=False),
    "crop": Base("crop", crop=True, flip=False),  # for images a mirror changes: traffic signs, text, digits
    "standard": Base("standard", crop=True, flip=True),  # AutoAugment's CIFAR recipe
}
NAMES: tuple[str, ...] = tuple(REGISTRY)
#: ``Policy.base`` when none is given; absent from a policy's canonical dict (and hash).
DEFAULT = "standard"


def get(name: str) -> Base:
    """The :class:`Base` named ``name`` (:class:`UserInputError` for another value)."""
    return REGISTRY[check_name(name)]


def check_name(value: Any, what: str = "base") -> str:
    """``value`` when it names a base; else :class:`UserInputError`, one line naming ``what``
    (``"--base"``), the value and the bases."""
    if not isinstance(value, str) or value not in REGISTRY:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise UserInputError(f"{what} {shown} is not a base; expected one of {', '.join(NAMES)}")
    return value


def rebase(policy: Any, base: str | None) -> Any:
    """``policy`` moved onto ``base``, the way ``--base`` of ``train`` and ``compare`` means it.

    A policy with a policy step (at least one sub-policy) gets ``base`` (:meth:`Policy.with_base`;
    name, sub-policies, bins and ranges kept). A policy without sub-policies -- the presets
    ``none``, ``crop`` and ``standard`` -- *is* a base: it keeps its own and is returned as is,
    as is any policy when ``base`` is None."""
    if base is None:
        return policy
    check_name(base)
    if policy.is_identity:
        return policy
    return policy.with_base(base)
