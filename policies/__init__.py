"""Augmentation policies: what a policy is, how it is applied, where it is kept.

* :class:`Policy`, :class:`Op` -- the immutable, validated value object (``autoaug.policies.policy``).
* :data:`autoaug.policies.ops.REGISTRY` -- the 16 AutoAugment operations + Identity, with magnitude
  ranges and their DALI and torchvision implementations.
* :func:`autoaug.policies.presets.resolve` -- published AutoAugment policies, RandAugment, TrivialAugment,
  ``none`` and ``standard``.
* :func:`autoaug.policies.dali_apply.apply_policy` -- the DALI pipeline step;
  :meth:`Policy.to_torchvision` -- the torchvision v2 transform.
* :func:`autoaug.policies.preview.render_grid` -- a PNG grid of augmented images.
* :func:`resolve_policy` -- a preset name, a policy JSON file or a store reference to a Policy.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from autoaug.policies import ops
from autoaug.policies.policy import Op, Policy

__all__ = ["Op", "Policy", "ops", "resolve_policy"]


def resolve_policy(ref: "str | os.PathLike | Policy", store: Any = None) -> Policy:
    """Turn a reference into a :class:`Policy`.

    Tried in this order:

    1. a :class:`Policy` is returned as is;
    2. a preset (``autoaugment-cifar10``, ``randaugment:n=2,m=9``, ``preset:trivialaugment``...,
       see :func:`autoaug.policies.presets.resolve`);
    3. a path to an existing policy JSON file (as written by :meth:`Policy.to_json`);
    4. when ``store`` is given (any object with ``.load(ref)``, e.g.
       :class:`autoaug.policies.store.PolicyStore`), a store reference such as ``name@3``,
       ``name@latest`` or a hash prefix.

    Raises:
        ValueError: if nothing matches, saying what was tried.
    """
    from autoaug.policies import presets

    if isinstance(ref, Policy):
        return ref
    if not isinstance(ref, (str, os.PathLike)):
        raise ValueError(
            f"policy reference {ref!r} is a {type(ref).__name__}; expected a preset name, a "
            "path to a policy JSON file, a store reference (name@N) or a Policy"
        )
    text = os.fspath(ref)
    if presets.is_preset(text):
        return presets.resolve(text)
    path = Path(text)
    if path.suffix.lower() == ".json" or path.is_file():
        if not path.is_file():
            raise ValueError(f"policy file {text!r} does not exist")
        try:
            return Policy.from_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"policy file {text!r} is not a valid policy: {exc}") from None
    if store is not None:
        return store.load(text)
    raise ValueError(
        f"cannot resolve policy {text!r}: not a preset (known: {', '.join(presets.names())}), "
        "not an existing JSON file, and no policy store was given for a store reference"
    )
