"""Configuration values: the type checks every package's validation shares, the layering
of nested mappings, and strict JSON (each key once).

``bool`` is an ``int`` to Python but never a count or a seed here: both checks refuse it.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "is_int",
    "is_number",
    "deep_merge",
    "loads_strict",
    "DuplicateKeyError",
    "clip",
    "short_repr",
    "invalid",
    "check_keys",
]


def is_int(x: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    """A finite real number (int or float, Python or NumPy), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def invalid(
    owner: Any, name: str, expected: str, *, prefix: str | None = None, template: str | None = None
) -> ValueError:
    """The one line of a bad setting: ``{prefix}{name}: {value!r} is invalid; expected {expected}``,
    the value being ``owner``'s attribute ``name``; ``prefix`` defaults to ``{type of owner}.``.
    ``template``: another wording of that line, a ``str.format`` template of ``prefix``, ``name``,
    ``value`` and ``expected`` (``TrainConfig``'s: ``{prefix}{name} must be {expected}, got {value!r}``)."""
    prefix = f"{type(owner).__name__}." if prefix is None else prefix
    template = "{prefix}{name}: {value!r} is invalid; expected {expected}" if template is None else template
    return ValueError(template.format(prefix=prefix, name=name, value=getattr(owner, name), expected=expected))


def check_keys(
    given: Iterable[str],
    known: Iterable[str],
    what: str,
    *,
    template: str | None = None,
    error: Callable[[str], Exception] = ValueError,
) -> None:
    """Refuse (``error``, default ``ValueError``, one line) the keys of ``given`` that are not
    ``known``: ``unknown {what} [...]; expected some of [...]`` (both lists sorted).
    ``template``: another wording of that line, a ``str.format`` template of ``what``, ``unknown``
    (the unknown keys sorted, quoted, comma separated: ``'a', 'b'``) and ``known`` (the known keys in
    their order, comma separated)."""
    known = list(known)
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    if template is None:
        raise error(f"unknown {what} {unknown}; expected some of {sorted(set(known))}")
    raise error(template.format(what=what, unknown=", ".join(map(repr, unknown)), known=", ".join(known)))


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


class DuplicateKeyError(ValueError):
    """A JSON object gives one key twice (``{"op": "Rotate", "op": "Invert"}``): ``json.loads``
    keeps the last value silently, so the document means something its author may not have
    meant. The message names the key, its place (``sub_policies[0][1]``) and both values."""


class _Twice(dict):
    """An object of a document with a duplicated key (found by :func:`loads_strict`'s hook,
    reported once the whole document is parsed, when its place is known)."""

    key: str
    first: Any
    second: Any


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            twice = _Twice(pairs)
            twice.key, twice.first, twice.second = key, out[key], value
            return twice
        out[key] = value
    return out


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) or value is None else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def loads_strict(text: str | bytes) -> Any:
    """``json.loads``, refusing a key given twice in one object with :class:`DuplicateKeyError`
    (every reader of a policy document uses this: a duplicated ``"op"`` must not train as
    whichever value came last). Other errors are ``json.loads``'s own."""
    twice: list[_Twice] = []

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out = _pairs(items)
        if isinstance(out, _Twice):
            twice.append(out)
        return out

    doc = json.loads(text, object_pairs_hook=pairs)
    if not twice:  # the common case: no walk (it took 4.5 s for a document of 380,000 sub-policies)
        return doc
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:  # depth first, in document order: the first duplicate is reported
        place, value = stack.pop()
        if isinstance(value, _Twice):
            where = f"at {place}" if place else "at the top level"
            raise DuplicateKeyError(
                f"the key {json.dumps(value.key)} appears twice in one object {where} "
                f"(first {_short(value.first)}, then {_short(value.second)}); expected each key once"
            )
        if isinstance(value, dict):
            stack.extend((f"{place}.{k}" if place else str(k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{place}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return doc


def clip(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters (middle elided): what an error message
    quotes of data it did not write."""
    text = text.strip().replace("\r", "\\r").replace("\n", "\\n")
    if len(text) <= limit:
        return text
    keep = limit - 3
    return text[: keep - keep // 3] + "..." + text[len(text) - keep // 3 :]


def short_repr(value: Any, limit: int = 80, items: int = 6) -> str:
    """``repr(value)`` on one line, at most ``limit`` characters (middle elided), at most ``items``
    elements of a list, tuple or set, safe for any value (deeply nested containers, integers of
    any size, objects whose ``repr`` raises)."""
    import reprlib

    if isinstance(value, int) and value.bit_length() > 4 * limit:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 2, items, items, 4, items
    r.maxstring = r.maxother = r.maxlong = limit
    try:
        text = r.repr(value)
    except Exception:  # e.g. a broken __repr__
        text = f"<{type(value).__name__}>"
    return clip(text, limit)
