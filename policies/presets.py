"""Preset policies: published AutoAugment policies, RandAugment, TrivialAugment, none, crop, standard.

Every preset is an ordinary :class:`~policies.Policy`, so one application path serves them all:

* ``autoaugment-cifar10``, ``autoaugment-svhn``, ``autoaugment-imagenet``: the 25 sub-policies
  published in the appendix of the AutoAugment paper (Cubuk et al., CVPR 2019; tables for reduced
  CIFAR-10, SVHN and reduced ImageNet), 10 magnitude bins (0-9) under the ``"autoaugment"`` ranges.
  The magnitudes of the operations that take none (AutoContrast, Equalize, Invert) are kept as
  published; they have no effect.
* ``randaugment:n=N,m=M`` (defaults ``n=2``, ``m=9``): RandAugment (Cubuk et al. 2020) as a
  policy: every ordered N-tuple of its 14 operations (``14**N`` sub-policies, drawn uniformly, as
  RandAugment draws N operations independently with replacement), probability 1, bin ``M`` of 31
  (torchvision's ``RandAugment`` binning). Its operations are those declared as RandAugment's
  (``ops.randaugment_ops()``, read when the preset is built: an operation declared with a place
  there joins them).
* ``trivialaugment``: TrivialAugment-wide (Mueller & Hutter 2021): one operation of the 14 at a
  uniformly drawn bin of 31, i.e. the 14 x 31 = 434 single-operation sub-policies, probability 1,
  ``ranges="wide"``.
* ``none``: identity, ``base="none"`` (no augmentation at all).
* ``crop``: identity, ``base="crop"`` (only the pad-4 random crop, no flip).
* ``standard``: identity, ``base="standard"`` (only the pad-4 crop + flip of the base recipe).

``none``, ``crop`` and ``standard`` are the bases alone (:mod:`autoaug.policies.bases`), one
preset per base.

:func:`resolve` accepts each name bare or with a ``preset:`` prefix.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from autoaug.policies.ops import randaugment_ops
from autoaug.policies.policy import BASES, Policy

__all__ = [
    "resolve",
    "is_preset",
    "names",
    "autoaugment",
    "randaugment",
    "trivialaugment",
    "PREFIX",
    "RANDAUGMENT_NUM_BINS",
]

PREFIX = "preset:"
#: Bins of RandAugment's and TrivialAugment's magnitude (torchvision: ``num_magnitude_bins=31``).
RANDAUGMENT_NUM_BINS = 31
#: Largest RandAugment N accepted (14**4 = 38,416 sub-policies already).
MAX_RANDAUGMENT_N = 4

# AutoAugment paper appendix, "Policy on reduced CIFAR-10" (5 best policies x 5 sub-policies).
_AUTOAUGMENT_CIFAR10 = [
    [("Invert", 0.1, 7), ("Contrast", 0.2, 6)],
    [("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)],
    [("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)],
    [("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)],
    [("AutoContrast", 0.5, 8), ("Equalize", 0.9, 2)],
    [("ShearY", 0.2, 7), ("Posterize", 0.3, 7)],
    [("Color", 0.4, 3), ("Brightness", 0.6, 7)],
    [("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)],
    [("Equalize", 0.6, 5), ("Equalize", 0.5, 1)],
    [("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)],
    [("Color", 0.7, 7), ("TranslateX", 0.5, 8)],
    [("Equalize", 0.3, 7), ("AutoContrast", 0.4, 8)],
    [("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)],
    [("Brightness", 0.9, 6), ("Color", 0.2, 8)],
    [("Solarize", 0.5, 2), ("Invert", 0.0, 3)],
    [("Equalize", 0.2, 0), ("AutoContrast", 0.6, 0)],
    [("Equalize", 0.2, 8), ("Equalize", 0.6, 4)],
    [("Color", 0.9, 9), ("Equalize", 0.6, 6)],
    [("AutoContrast", 0.8, 4), ("Solarize", 0.2, 8)],
    [("Brightness", 0.1, 3), ("Color", 0.7, 0)],
    [("Solarize", 0.4, 5), ("AutoContrast", 0.9, 3)],
    [("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)],
    [("AutoContrast", 0.9, 2), ("Solarize", 0.8, 3)],
    [("Equalize", 0.8, 8), ("Invert", 0.1, 3)],
    [("TranslateY", 0.7, 9), ("AutoContrast", 0.9, 1)],
]

# AutoAugment paper appendix, "Policy on SVHN".
_AUTOAUGMENT_SVHN = [
    [("ShearX", 0.9, 4), ("Invert", 0.2, 3)],
    [("ShearY", 0.9, 8), ("Invert", 0.7, 5)],
    [("Equalize", 0.6, 5), ("Solarize", 0.6, 6)],
    [("Invert", 0.9, 3), ("Equalize", 0.6, 3)],
    [("Equalize", 0.6, 1), ("Rotate", 0.9, 3)],
    [("ShearX", 0.9, 4), ("AutoContrast", 0.8, 3)],
    [("ShearY", 0.9, 8), ("Invert", 0.4, 5)],
    [("ShearY", 0.9, 5), ("Solarize", 0.2, 6)],
    [("Invert", 0.9, 6), ("AutoContrast", 0.8, 1)],
    [("Equalize", 0.6, 3), ("Rotate", 0.9, 3)],
    [("ShearX", 0.9, 4), ("Solarize", 0.3, 3)],
    [("ShearY", 0.8, 8), ("Invert", 0.7, 4)],
    [("Equalize", 0.9, 5), ("TranslateY", 0.6, 6)],
    [("Invert", 0.9, 4), ("Equalize", 0.6, 7)],
    [("Contrast", 0.3, 3), ("Rotate", 0.8, 4)],
    [("Invert", 0.8, 5), ("TranslateY", 0.0, 2)],
    [("ShearY", 0.7, 6), ("Solarize", 0.4, 8)],
    [("Invert", 0.6, 4), ("Rotate", 0.8, 4)],
    [("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)],
    [("ShearX", 0.1, 6), ("Invert", 0.6, 5)],
    [("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)],
    [("ShearY", 0.8, 4), ("Invert", 0.8, 8)],
    [("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)],
    [("ShearY", 0.8, 5), ("AutoContrast", 0.7, 3)],
    [("ShearX", 0.7, 2), ("Invert", 0.1, 5)],
]

# AutoAugment paper appendix, "Policy on reduced ImageNet" (torchvision's IMAGENET policy).
_AUTOAUGMENT_IMAGENET = [
    [("Posterize", 0.4, 8), ("Rotate", 0.6, 9)],
    [("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)],
    [("Equalize", 0.8, 8), ("Equalize", 0.6, 3)],
    [("Posterize", 0.6, 7), ("Posterize", 0.6, 6)],
    [("Equalize", 0.4, 7), ("Solarize", 0.2, 4)],
    [("Equalize", 0.4, 4), ("Rotate", 0.8, 8)],
    [("Solarize", 0.6, 3), ("Equalize", 0.6, 7)],
    [("Posterize", 0.8, 5), ("Equalize", 1.0, 2)],
    [("Rotate", 0.2, 3), ("Solarize", 0.6, 8)],
    [("Equalize", 0.6, 8), ("Posterize", 0.4, 6)],
    [("Rotate", 0.8, 8), ("Color", 0.4, 0)],
    [("Rotate", 0.4, 9), ("Equalize", 0.6, 2)],
    [("Equalize", 0.0, 7), ("Equalize", 0.8, 8)],
    [("Invert", 0.6, 4), ("Equalize", 1.0, 8)],
    [("Color", 0.6, 4), ("Contrast", 1.0, 8)],
    [("Rotate", 0.8, 8), ("Color", 1.0, 2)],
    [("Color", 0.8, 8), ("Solarize", 0.8, 7)],
    [("Sharpness", 0.4, 7), ("Invert", 0.6, 8)],
    [("ShearX", 0.6, 5), ("Equalize", 1.0, 9)],
    [("Color", 0.4, 0), ("Equalize", 0.6, 3)],
    [("Equalize", 0.4, 7), ("Solarize", 0.2, 4)],
    [("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)],
    [("Invert", 0.6, 4), ("Equalize", 1.0, 8)],
    [("Color", 0.6, 4), ("Contrast", 1.0, 8)],
    [("Equalize", 0.8, 8), ("Equalize", 0.6, 3)],
]

_AUTOAUGMENT = {
    "cifar10": _AUTOAUGMENT_CIFAR10,
    "svhn": _AUTOAUGMENT_SVHN,
    "imagenet": _AUTOAUGMENT_IMAGENET,
}


def autoaugment(dataset: str) -> Policy:
    """The published AutoAugment policy for ``dataset`` (``cifar10``, ``svhn`` or ``imagenet``)."""
    if dataset not in _AUTOAUGMENT:
        raise ValueError(f"unknown AutoAugment policy {dataset!r}; expected one of {sorted(_AUTOAUGMENT)}")
    return Policy(f"autoaugment-{dataset}", 10, _AUTOAUGMENT[dataset])


def randaugment(n: int = 2, m: int = 9) -> Policy:
    """RandAugment(N, M) as the uniform policy over all ordered N-tuples of its 14 operations."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RANDAUGMENT_N:
        raise ValueError(f"randaugment: n={n!r} is invalid; expected an int in [1, {MAX_RANDAUGMENT_N}]")
    if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < RANDAUGMENT_NUM_BINS:
        raise ValueError(f"randaugment: m={m!r} is invalid; expected an int in [0, {RANDAUGMENT_NUM_BINS - 1}]")
    subs = [[(op, 1.0, m) for op in combo] for combo in itertools.product(randaugment_ops(), repeat=n)]
    return Policy(f"randaugment:n={n},m={m}", RANDAUGMENT_NUM_BINS, subs)


def trivialaugment() -> Policy:
    """TrivialAugment-wide: uniform over the 14 operations x 31 bins, ``ranges="wide"``."""
    subs = [[(op, 1.0, b)] for op in randaugment_ops() for b in range(RANDAUGMENT_NUM_BINS)]
    return Policy("trivialaugment", RANDAUGMENT_NUM_BINS, subs, ranges="wide")


_FIXED: dict[str, Callable[[], Policy]] = {
    "autoaugment-cifar10": lambda: autoaugment("cifar10"),
    "autoaugment-svhn": lambda: autoaugment("svhn"),
    "autoaugment-imagenet": lambda: autoaugment("imagenet"),
    "trivialaugment": trivialaugment,
    # one identity preset per base, named like it: none, crop, standard
    **{name: (lambda name=name: Policy(name, 10, [], base=name)) for name in BASES},
}
_RANDAUGMENT_RE = re.compile(r"^randaugment(?::(?P<args>.*))?$")
_ARG_RE = re.compile(r"^\s*(?P<key>[a-z]+)\s*=\s*(?P<value>-?\d+)\s*$")


def names() -> list[str]:
    """The known preset names (RandAugment shown with its default arguments)."""
    return [*list(_FIXED)[:3], "randaugment:n=2,m=9", *list(_FIXED)[3:]]


def _strip(ref: str) -> str:
    ref = ref.strip()
    return ref[len(PREFIX) :] if ref.startswith(PREFIX) else ref


def is_preset(ref: str) -> bool:
    """True when ``ref`` names a preset (well-formed or not: ``preset:...`` always counts)."""
    if not isinstance(ref, str):
        return False
    if ref.strip().startswith(PREFIX):
        return True
    bare = _strip(ref)
    return bare in _FIXED or _RANDAUGMENT_RE.match(bare) is not None


def _parse_randaugment(args: str | None, ref: str) -> Policy:
    kwargs = {"n": 2, "m": 9}
    if args:
        seen = set()
        for part in args.split(","):
            match = _ARG_RE.match(part)
            if not match or match["key"] not in kwargs or match["key"] in seen:
                raise ValueError(
                    f"preset {ref!r}: bad argument {part.strip()!r}; expected "
                    "randaugment:n=N,m=M with integer N in [1, 4] and M in [0, 30] "
                    "(each at most once, both optional)"
                )
            seen.add(match["key"])
            kwargs[match["key"]] = int(match["value"])
    try:
        return randaugment(**kwargs)
    except ValueError as exc:
        raise ValueError(f"preset {ref!r}: {exc}") from None


def resolve(ref: str) -> Policy:
    """The preset policy named ``ref`` (bare or with a ``preset:`` prefix).

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if not isinstance(ref, str):
        raise ValueError(f"preset name must be a string, got {type(ref).__name__} {ref!r}")
    bare = _strip(ref)
    if bare in _FIXED:
        return _FIXED[bare]()
    match = _RANDAUGMENT_RE.match(bare)
    if match:
        return _parse_randaugment(match["args"], ref)
    raise ValueError(f"unknown preset {ref!r}; known presets: {', '.join(names())}")
