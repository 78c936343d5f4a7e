"""Augmentation policies: what a policy is, how it is applied, where it is kept.

* :class:`Policy`, :class:`Op` -- the immutable, validated value object (``autoaug.policies.policy``).
* :data:`autoaug.policies.ops.REGISTRY` -- the 16 AutoAugment operations + Identity, each one
  declaration (:func:`autoaug.policies.ops.declare_op`: magnitude ranges, sign, magnitude ->
  parameter, its DALI and torchvision implementations); more can be declared.
* :func:`autoaug.policies.presets.resolve` -- published AutoAugment policies, RandAugment, TrivialAugment,
  ``none``, ``crop`` and ``standard`` (the bases alone, :mod:`autoaug.policies.bases`).
* :func:`autoaug.policies.dali_apply.apply_policy` -- the DALI pipeline step;
  :meth:`Policy.to_torchvision` -- the torchvision v2 transform.
* :func:`autoaug.policies.preview.render_grid` -- a PNG grid of augmented images.
* :func:`resolve_policy` -- a preset name, a policy JSON file or a store reference to a Policy,
  by the one precedence every command uses (:mod:`autoaug.policies.reference`).
"""

from __future__ import annotations

from autoaug.policies import (
    builtin_ops,  # noqa: F401  (declares the built-in operations)
    ops,
)
from autoaug.policies.policy import Op, Policy
from autoaug.policies.reference import resolve_policy

__all__ = ["Op", "Policy", "ops", "resolve_policy"]
