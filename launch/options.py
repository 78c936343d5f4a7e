"""The one CLI option layer: every option of ``autoaug train``, ``search`` and ``compare`` is
declared once, as an :class:`Option` holding its flag, its argparse settings, the configuration
key it sets and its kind.

* :func:`add_options` adds a command's options to its parser (in named groups);
* :func:`layered` builds the command's configuration mapping from the same layers for every
  command: the command's defaults <- ``--config FILE`` (YAML) <- ``--set KEY=VALUE`` <- the flags
  the user gave, each flag landing on its declared key;
* :func:`path_flags` lists the flags whose values are local paths or URIs (``kind="path"``), which
  ``autoaug launch`` rewrites or ships with a job.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from autoaug.launch.config import flag_overrides, layered_config
from autoaug.policies.bases import NAMES
from autoaug.policies.reference import split_references
from autoaug.search.space import FAMILIES

__all__ = [
    "Option",
    "Once",
    "option",
    "CONFIG",
    "SET",
    "JSON",
    "split_size_options",
    "per_class_option",
    "image_size_option",
    "group_by_option",
    "base_option",
    "space_option",
    "warm_start_options",
    "add_options",
    "layered",
    "trainer_assignments",
    "path_flags",
]


@dataclass(frozen=True)
class Option:
    """One command-line option.

    ``key``: the dotted configuration key the flag sets (``"train.epochs"``), a function turning
    the flag's value into a nested mapping (for a flag that sets several keys), or None for an
    option that is not part of the configuration (``--config``, ``--quiet``...). ``kind``:
    ``"path"`` when the value names a local file/folder or a URI, else ``"value"``.
    """

    flags: tuple[str, ...]
    key: str | Callable[[Any], Mapping[str, Any]] | None = None
    kind: str = "value"
    group: str | None = None
    argparse: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        if "dest" in self.argparse:
            return self.argparse["dest"]
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.lstrip("-").replace("-", "_")


class Once(argparse.Action):
    """An option given at most once: ``--preset cpu --preset smoke`` is refused (exit 2, naming both
    values) instead of the last silently winning, as two flags of one setting are
    (:func:`add_options`). The same value twice is that value."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, None)
        if before is not None and before != self.default and before != values:
            parser.error(f"argument {option_string}: given twice, {before!r} then {values!r}; expected one")
        setattr(namespace, self.dest, values)


def option(*flags: str, key: Any = None, kind: str = "value", group: str | None = None, **kwargs: Any) -> Option:
    """An :class:`Option`; ``kwargs`` go to ``ArgumentParser.add_argument``."""
    if kind not in ("value", "path"):
        raise ValueError(f"option {flags[0]}: kind must be 'value' or 'path', got {kind!r}")
    return Option(tuple(flags), key, kind, group, dict(kwargs))


#: ``--config FILE`` and ``--set KEY=VALUE``: the two layers every configurable command takes.
CONFIG = option("--config", kind="path", metavar="FILE", help="YAML file with settings (--set and flags override it)")
SET = option(
    "--set",
    dest="assignments",
    action="append",
    metavar="KEY=VALUE",
    help="override one setting, e.g. --set epochs=2 (repeatable; YAML values; for search and compare, a "
    "setting of the trainer means train.KEY)",
)

#: ``--json``: the result as one JSON document on stdout and nothing else there (progress and
#: messages go to stderr); ``search``, ``train``, ``compare``, ``policies list`` and ``policies show``.
JSON = option(
    "--json",
    action="store_true",
    default=False,
    help="print the result as one JSON document on stdout, nothing else (progress goes to stderr)",
)


def split_size_options(prefix: str = "", group: str | None = None) -> tuple[Option, Option]:
    """``--train-size`` and ``--val-size``, the reduced split of every command that trains
    (``search``, ``train``, ``compare``); ``prefix`` is where the trainer's keys sit in the
    command's configuration (``"train."`` for search and compare)."""
    return (
        option(
            "--train-size",
            key=f"{prefix}train_size",
            group=group,
            type=int,
            metavar="N",
            help="images in the reduced training split (0: all images not used for validation)",
        ),
        option(
            "--val-size",
            key=f"{prefix}val_size",
            group=group,
            type=int,
            metavar="N",
            help="validation images (0: none; unset: the preset's)",
        ),
    )


def per_class_option(prefix: str = "", group: str | None = None) -> Option:
    """``--train-per-class N``: the training split sized per class (the CPU presets' way);
    ``--train-size`` gives a total instead. The floor and cap on the total are the preset's
    ``min_train_size``/``max_train_size`` (``--set`` changes them)."""
    return option(
        "--train-per-class",
        key=f"{prefix}train_per_class",
        group=group,
        type=int,
        metavar="N",
        help="training images per class, on average (instead of --train-size): the total is the sum over "
        "classes of min(N, class size), kept within the preset's min_train_size..max_train_size "
        "(--set max_train_size=M to change)",
    )


def _image_size(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None


def image_size_option(prefix: str = "", group: str | None = None) -> Option:
    """``--image-size N|auto``: the square size images are resized and center-cropped to; ``auto``
    (the presets' default, except ``smoke``): the data's own size."""
    return option(
        "--image-size",
        key=f"{prefix}image_size",
        group=group,
        type=_image_size,
        metavar="N",
        help="square size images are resized (shorter side) and center-cropped to; auto (the default "
        "of every preset but smoke): the data's own size, which needs images of one size",
    )


def group_by_option(prefix: str = "", group: str | None = None) -> Option:
    """``--group-by SPEC``: keep groups of related images (a column, or a pattern on
    ``source_path``) on one side of the reduced split (``TrainConfig.group_by``); ``prefix`` as
    for :func:`split_size_options`."""
    return option(
        "--group-by",
        key=f"{prefix}group_by",
        group=group,
        metavar="SPEC",
        help=r"keep each group of related images on one side of the split: a column (e.g. track) or "
        r"COLUMN:REGEX, whose match or capture groups are the group (e.g. "
        r"'source_path:Images/(\d+)/(\d+)_'); default: no groups",
    )


def base_option(rule: str, group: str | None = None, *, auto: bool = False) -> Option:
    """``--base {none,crop,standard}`` (configuration key ``base``): train on this base augmentation
    (:mod:`autoaug.policies.bases`) instead of the policy's own. ``rule`` says, for the command, what
    happens to policies without sub-policies (the presets none, crop, standard: bases alone). The
    value is checked by :func:`autoaug.policies.bases.check_name` wherever it comes from (flag,
    ``--config``, ``--set``), so every layer gets the same one-line error. ``auto`` (``search``):
    also ``auto``, the base chosen by measurement."""
    names = (*NAMES, "auto") if auto else NAMES
    what = "the base every candidate trains on" if auto else "train on this base instead of the policy's own"
    return option(
        "--base",
        key="base",
        group=group,
        metavar="{" + ",".join(names) + "}",
        help=f"{what}: none, crop (pad-4 random crop) or standard (crop + horizontal flip); {rule}",
    )


def space_option(group: str | None = None) -> Option:
    """``--space auto|aa|randaugment|trivialaugment`` (configuration key ``family``; the space's
    own family is also ``--set space.family=...`` and ``space: {family: ...}`` in a file): the
    search space family (:data:`autoaug.search.space.FAMILIES`), or ``auto``: the family of the
    published policy that transfers best in calibration. The value is checked by the
    configuration wherever it comes from, so every layer gets the same one-line error."""
    names = ("auto", *FAMILIES)
    return option(
        "--space",
        key="family",
        group=group,
        metavar="{" + ",".join(names) + "}",
        help="the search space family: aa (AutoAugment's K sub-policies of 2 ops), randaugment (a subset of the "
        "ops, N ops per image at one magnitude M), trivialaugment (a subset of the ops, one per image at a uniform "
        "bin up to max_bin), or auto (the family of the published policy that transfers best in calibration; "
        'needs --warm-start auto; the cpu preset\'s default); docs/search.md, "Space families"',
    )


def _refs(text: str) -> Any:
    refs = list(split_references(text))  # randaugment:n=2,m=9 is one reference
    if not refs:
        raise argparse.ArgumentTypeError(f"expected 'auto' or policy references separated by commas, got {text!r}")
    return "auto" if [r.lower() for r in refs] == ["auto"] else refs


def warm_start_options(group: str | None = None) -> tuple[Option, Option]:
    """``--warm-start auto|REF,...`` and ``--no-warm-start`` (configuration key ``warm_start``)."""
    return (
        option(
            "--warm-start",
            key="warm_start",
            group=group,
            type=_refs,
            metavar="auto|REF,...",
            help="first candidates: the sub-policies of these policies (presets, policy files, stored "
            "versions), or auto: the published policy that transfers best to the data, measured "
            "under the proxy before the search (the cpu preset's default)",
        ),
        option(
            "--no-warm-start",
            key="warm_start",
            group=group,
            dest="warm_start",
            action="store_const",
            const=[],
            help="no warm start: every candidate comes from the sampler",
        ),
    )


def add_options(
    parser: argparse.ArgumentParser, options: Sequence[Option], groups: Mapping[str, str] | None = None
) -> None:
    """Add ``options`` to ``parser``; an option's ``group`` names one of ``groups``'s titles.
    Options that set the same destination (``--warm-start`` and ``--no-warm-start``) conflict:
    giving both is refused (argparse's mutually exclusive group), not decided by their order."""
    made: dict[str, Any] = {}
    dests = [opt.dest for opt in options]
    exclusive: dict[str, Any] = {}
    for opt in options:
        target: Any = parser
        if opt.group is not None:
            if opt.group not in made:
                made[opt.group] = parser.add_argument_group((groups or {}).get(opt.group, opt.group))
            target = made[opt.group]
        if dests.count(opt.dest) > 1:
            if opt.dest not in exclusive:
                exclusive[opt.dest] = target.add_mutually_exclusive_group()
            target = exclusive[opt.dest]
        target.add_argument(*opt.flags, **opt.argparse)


def layered(
    args: argparse.Namespace,
    options: Iterable[Option],
    *,
    defaults: Mapping[str, Any] | None = None,
    own: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The configuration mapping: ``defaults`` <- ``--config`` <- ``--set`` <- the flags given.

    ``own``: the top-level keys of a command whose trainer settings sit under ``train.``
    (``search``, ``compare``); a ``--set`` key that is not one of them but is the trainer's
    (``--set epochs=2``, as ``autoaug train`` takes it) means ``train.epochs`` (:func:`trainer_assignments`).
    """
    keys = {opt.dest: opt.key for opt in options if opt.key is not None}
    assignments = getattr(args, "assignments", None)
    if own is not None and assignments:
        assignments = trainer_assignments(assignments, own)
    return layered_config(
        defaults=defaults,
        file=getattr(args, "config", None),
        assignments=assignments,
        flags=flag_overrides(args, keys),
    )


def trainer_assignments(assignments: Sequence[str], own: Iterable[str], section: str = "train") -> list[str]:
    """``--set`` assignments with the trainer's keys moved under ``section``: ``epochs=2`` becomes
    ``train.epochs=2`` when ``epochs`` is not one of the command's ``own`` keys but a field of
    :class:`autoaug.proxy_models.train_config.TrainConfig`. A command's own key wins (``base``,
    ``seed``...), so nothing it accepted before changes meaning; any other key is left for the
    command's own check, which names the keys it knows."""
    own = set(own)
    trainer: set[str] | None = None
    out = []
    for item in assignments:
        key, sep, _ = item.partition("=")
        first = key.strip().split(".", 1)[0]
        if sep and first and first not in own:
            if trainer is None:
                # The trainer's configuration, only when a key needs it: this module builds the
                # parser, and `autoaug --help` does not load the trainer's configuration.
                from autoaug.proxy_models.train_config import TrainConfig

                trainer = {f.name for f in fields(TrainConfig)}
            if first in trainer:
                item = f"{section}.{item.lstrip()}"
        out.append(item)
    return out


def path_flags(options: Iterable[Option]) -> frozenset[str]:
    """The flags whose values are paths or URIs (``kind="path"``)."""
    return frozenset(f for opt in options if opt.kind == "path" for f in opt.flags if f.startswith("-"))
