"""Configuration values: the type checks every package's validation shares, and the layering
of nested mappings.

``bool`` is an ``int`` to Python but never a count or a seed here: both checks refuse it.
"""
from __future__ import annotations

import copy
import math
import numbers
from typing import Any, Mapping

__all__ = ["is_int", "is_number", "deep_merge"]


def is_int(x: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    """A finite real number (int or float, Python or NumPy), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``override``: nested mappings merged recursively, other values
    replaced. Neither input is modified. (The layering rule of presets, configuration files,
    ``--set`` and flags: :mod:`autoaug.launch.config`, ``SearchConfig.from_dict``.)"""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
