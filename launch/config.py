"""Configuration files and command-line overrides, shared by the ``autoaug`` sub-commands.

A command's configuration is a nested mapping built in layers, later layers winning key by key
(nested mappings are merged, everything else is replaced)::

    defaults / preset  <-  YAML file (--config FILE)  <-  --set KEY=VALUE  <-  dedicated flags

and finally turned into the command's frozen dataclass (for example
:meth:`autoaug.search.config.SearchConfig.from_dict`), whose validation errors become one-line
:class:`autoaug.core.errors.UserInputError` messages.

>>> merged = deep_merge({"train": {"preset": "cpu", "epochs": 8}}, {"train": {"epochs": 2}})
>>> merged
{'train': {'preset': 'cpu', 'epochs': 2}}
>>> set_dotted({}, "space.exclude_ops", ["SamplePairing"])
{'space': {'exclude_ops': ['SamplePairing']}}
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from autoaug.core.errors import UserInputError
from autoaug.core.values import deep_merge

__all__ = [
    "load_yaml",
    "deep_merge",
    "set_dotted",
    "parse_assignments",
    "flag_overrides",
    "build_config",
    "layered_config",
]

T = TypeVar("T")


def _yaml() -> Any:
    """PyYAML, imported when a configuration is read (a ``--config`` file, ``--set``): this module
    is imported to build the parser, and ``autoaug --help`` does not load PyYAML."""
    import yaml

    return yaml


def _strict_loader() -> Any:
    """``yaml.SafeLoader`` refusing a key given twice in one mapping (PyYAML keeps the last value
    silently, as ``json.loads`` does; policy JSON is refused the same way: core.values.loads_strict)."""
    yaml = _yaml()

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue  # SafeLoader reports an unhashable key itself
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {key!r} appears twice in one mapping (first at line "
                        f"{seen[key].start_mark.line + 1}); expected each key once",
                        key_node.start_mark,
                    )
                seen[key] = key_node
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML mapping from ``path``; :class:`UserInputError` naming the file and the problem.

    An empty file is an empty mapping.
    """
    yaml = _yaml()

    text_path = os.fspath(path)
    try:
        with open(text_path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_strict_loader())
    except FileNotFoundError:
        raise UserInputError(f"config file {text_path!r} does not exist") from None
    except IsADirectoryError:
        raise UserInputError(f"config file {text_path!r} is a directory, expected a YAML file") from None
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" (line {mark.line + 1}, column {mark.column + 1})"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(f"config file {text_path!r} is not valid YAML{where}: {problem}") from None
    except OSError as exc:
        raise UserInputError(f"cannot read config file {text_path!r}: {exc.strerror or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise UserInputError(
            f"config file {text_path!r} must hold a mapping of keys to values at the top level, "
            f"got a {type(data).__name__}"
        )
    return dict(data)


def set_dotted(target: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Set ``target["a"]["b"] = value`` for ``key="a.b"`` (creating the mappings); returns target."""
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise UserInputError(f"invalid config key {key!r}: expected names separated by dots, e.g. train.epochs")
    node = target
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise UserInputError(f"config key {key!r}: {part!r} holds a value, not a section")
        node = child
    node[parts[-1]] = value
    return target


def parse_assignments(assignments: Iterable[str] | None) -> dict[str, Any]:
    """``["train.epochs=2", "space.exclude_ops=[Invert]"]`` -> nested mapping; values are parsed as
    YAML scalars / flow collections (``2`` is an int, ``true`` a bool, ``null`` None)."""
    yaml = _yaml()

    out: dict[str, Any] = {}
    for item in assignments or ():
        key, sep, raw = item.partition("=")
        if not sep:
            raise UserInputError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.epochs=2")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        set_dotted(out, key.strip(), value)
    return out


def flag_overrides(args: argparse.Namespace, mapping: Mapping[str, str | Callable[[Any], Mapping]]) -> dict[str, Any]:
    """Overrides from the flags the user actually gave (value not ``None``).

    ``mapping`` maps an argparse ``dest`` to a dotted config key, or to a function turning the
    flag's value into a nested mapping (for flags that set several keys).
    """
    out: dict[str, Any] = {}
    for dest, target in mapping.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if callable(target):
            out = deep_merge(out, target(value))
        else:
            set_dotted(out, target, value)
    return out


def layered_config(
    *,
    defaults: Mapping[str, Any] | None = None,
    file: str | os.PathLike | None = None,
    assignments: Iterable[str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge the layers: ``defaults`` <- YAML ``file`` <- ``--set`` ``assignments`` <- ``flags``."""
    merged = dict(defaults or {})
    if file is not None:
        merged = deep_merge(merged, load_yaml(file))
    merged = deep_merge(merged, parse_assignments(assignments))
    return deep_merge(merged, flags or {})


def build_config(factory: Callable[[Mapping[str, Any]], T], data: Mapping[str, Any], *, what: str = "config") -> T:
    """``factory(data)``, with ``ValueError``/``TypeError`` turned into a one-line UserInputError."""
    try:
        return factory(data)
    except (ValueError, TypeError) as exc:
        message = " ".join(str(exc).split())
        raise UserInputError(f"invalid {what}: {message}") from None
