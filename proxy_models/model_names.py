"""Model names, checked without torch: what a configuration validates in a process that never
builds a model (a search's driver, the command line). :mod:`autoaug.proxy_models.models` builds
them."""

from __future__ import annotations

import re

__all__ = ["MODEL_NAMES", "parse_model_name", "check_model_name"]

#: The names this project uses (:data:`autoaug.proxy_models.models.MODELS`); any valid
#: ``wrn-D-K`` or ``resnet-D`` is accepted too.
MODEL_NAMES = ("wrn-40-2", "wrn-28-10", "resnet-8", "resnet-20")

_WRN_RE = re.compile(r"wrn-(\d+)-(\d+)")
_RESNET_RE = re.compile(r"resnet-(\d+)")


def parse_model_name(name: object) -> tuple[str, int, int]:
    """``name`` -> (family, depth, widen_factor), validating without building anything."""
    if not isinstance(name, str):
        raise ValueError(f"model name must be a string, got {name!r}")
    key = name.strip().lower()
    if m := _WRN_RE.fullmatch(key):
        depth, widen = int(m[1]), int(m[2])
        if depth < 10 or (depth - 4) % 6 != 0:
            raise ValueError(f"WideResNet depth must be 6n + 4 with n >= 1 (10, 16, 22, 28, 40...), got {depth}")
        if widen < 1:
            raise ValueError(f"WideResNet widen_factor must be a positive integer, got {widen}")
        return "wrn", depth, widen
    if m := _RESNET_RE.fullmatch(key):
        depth = int(m[1])
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(f"CIFAR ResNet depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, 44, 56...), got {depth}")
        return "resnet", depth, 1
    raise ValueError(
        f"unknown model {name!r}: expected one of {', '.join(sorted(MODEL_NAMES))}, "
        "or any 'wrn-D-K' (D = 6n + 4) or 'resnet-D' (D = 6n + 2)"
    )


def check_model_name(name: str) -> str:
    """Validate a model name without building the model; returns its canonical (lower-case) form.

    Raises the same ``ValueError`` as :func:`build_model` for an unknown or malformed name.
    """
    parse_model_name(name)
    return name.strip().lower()
