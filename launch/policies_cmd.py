"""``autoaug policies``: inspect and move policies in a policy store.

Sub-commands::

    autoaug policies list [NAME]                       names (or the versions of NAME)
    autoaug policies show REF [--provenance]           sub-policies, provenance (summarised; all of it), evaluations
    autoaug policies export REF [--format json] [--out FILE]
    autoaug policies import FILE --name NAME [--metadata JSON] [--force]
    autoaug policies diff A B
    autoaug policies check [--grace SECONDS]           verify every version, remove leftovers (fsck)
    autoaug policies preview REF --data PATH --out grid.png [--num-images 8] [--columns 8]

``--store URI`` selects the store (default ``$AUTOAUG_STORE``, else ``~/.autoaug/policies``).
A REF is a preset (``trivialaugment``, ``preset:randaugment:n=2,m=9``...; not stored), a path
to a policy JSON file, or a stored reference (``name``, ``name@latest``, ``name@3``, a
content-hash prefix), in that order of precedence (:mod:`autoaug.policies.reference`): a stored
policy named like a preset is reached with ``name@latest``.

This module builds the parser and lists a local store from its index (no pyarrow: the listing
starts in a quarter of the time); the sub-commands that open the store are
:mod:`autoaug.launch.policies_run`, ``preview`` is :mod:`autoaug.launch.policies_preview`, each
imported when it runs.
"""

from __future__ import annotations

import argparse
import dataclasses

from autoaug.core.errors import UserInputError
from autoaug.core.location import Location
from autoaug.launch.options import JSON, Option, add_options, option
from autoaug.launch.policies_print import print_summaries

_REF_HELP = (
    "policy reference, first match wins: a preset (NAME or preset:NAME), a path to a policy JSON file, "
    "a stored NAME, NAME@latest, NAME@VERSION or content-hash prefix (>= 6 hex digits)"
)


# ----------------------------------------------------------------------------------------------
# Running the sub-commands


def _list_local_store(args: argparse.Namespace) -> tuple[list, str] | None:
    """``(summaries, store uri)`` of a local store listed from its index alone, without pyarrow
    (:func:`autoaug.policies.index.list_local`); None when that is not enough (a store behind a
    URI, one that does not exist, a version without a matching index entry)."""
    from autoaug.policies.index import default_store_uri, list_local  # read to list, not to build the parser

    try:
        location = Location.parse(args.store or default_store_uri(), what="policy store")
    except (UserInputError, ValueError):
        return None  # the store says what is wrong with it
    if not location.local:
        return None
    summaries = list_local(location.path)
    return None if summaries is None else (summaries, location.uri)


def cmd_list(args: argparse.Namespace) -> int:
    """``policies list``: a local store whose index matches its files is listed from the index
    alone, without pyarrow (start-up time); any other from the store itself."""
    if not args.name:
        fast = _list_local_store(args)
        if fast is not None:
            return print_summaries(*fast, args.json)
    return _store_command(args)


def _store_command(args: argparse.Namespace) -> int:
    """Run a sub-command that opens the store (:data:`autoaug.launch.policies_run.COMMANDS`)."""
    from autoaug.launch import policies_run  # pyarrow: not for the parser, nor a local store's listing

    return policies_run.COMMANDS[args.policies_command](args)


def _preview(args: argparse.Namespace) -> int:
    """Run ``policies preview`` (:mod:`autoaug.launch.policies_preview`)."""
    from autoaug.launch import policies_preview  # numpy, Pillow, the datasets, the store

    return policies_preview.cmd_preview(args)


# ----------------------------------------------------------------------------------------------
# Registration


_STORE = option(
    "--store",
    kind="path",
    default=None,
    metavar="URI",
    help="policy store: a local folder or a pyarrow URI (s3://, gs://, hdfs://, file://); "
    "default $AUTOAUG_STORE, else ~/.autoaug/policies",
)
_EXPORT_OUT = option("--out", kind="path", metavar="FILE", help="write to FILE instead of stdout")
_PREVIEW_DATA = option(
    "--data",
    kind="path",
    required=True,
    metavar="PATH",
    help="dataset: a Parquet file or folder, an ImageFolder tree, or cifar10:ROOT",
)
_PREVIEW_OUT = option("--out", kind="path", required=True, metavar="FILE", help="PNG file to write")
#: The options of ``autoaug policies`` and its sub-commands that name paths (``autoaug launch``
#: rewrites them); the others are plain argparse arguments.
OPTIONS: tuple[Option, ...] = (_STORE, _EXPORT_OUT, _PREVIEW_DATA, _PREVIEW_OUT)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug policies`` and its sub-commands."""
    parser = subparsers.add_parser(
        "policies",
        help="list, show, export, import, diff and preview stored policies",
        description=(
            "Inspect the versioned policy store. A REF is, first match winning, a preset (NAME or "
            "preset:NAME), a path to a policy JSON file, or a stored NAME, NAME@latest, NAME@VERSION or "
            "content-hash prefix."
        ),
    )
    add_options(parser, [_STORE])
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="policies_command", metavar="SUBCOMMAND")

    store_opt = _store_option_after_the_sub_command()
    for add in (_add_list, _add_check, _add_show, _add_export, _add_import, _add_diff, _add_preview):
        add(sub, store_opt)


def _store_option_after_the_sub_command() -> argparse.ArgumentParser:
    """A parent parser of every sub-command: ``--store`` accepted after the sub-command too;
    SUPPRESS keeps the value given before it."""
    store_opt = argparse.ArgumentParser(add_help=False)
    add_options(
        store_opt,
        [
            dataclasses.replace(
                _STORE, argparse={**_STORE.argparse, "default": argparse.SUPPRESS, "help": "policy store (see above)"}
            )
        ],
    )
    return store_opt


def _add_list(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies list [NAME]``: stored names, or the versions of one name."""
    p = sub.add_parser("list", parents=[store_opt], help="stored names, or the versions of one name")
    p.add_argument("name", nargs="?", help="show every version of this name")
    add_options(p, [JSON])
    p.set_defaults(func=cmd_list)


def _add_check(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies check``: verify every stored version, remove what killed saves left behind."""
    p = sub.add_parser(
        "check", parents=[store_opt], help="verify every stored version; remove leftovers of killed saves (fsck)"
    )
    p.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="leave temporary files and claims younger than this alone (default 3600)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_store_command)


def _add_show(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies show REF``: a policy, its provenance and evaluations, and the next steps."""
    p = sub.add_parser(
        "show",
        parents=[store_opt],
        help="sub-policies, provenance (summarised) and evaluations of a policy, and what to do with it next",
    )
    p.add_argument("ref", metavar="REF", help=_REF_HELP)
    p.add_argument(
        "--provenance",
        action="store_true",
        help="the whole provenance (every trial, the configuration, ...) and every evaluation in full, "
        "instead of their summary",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every sub-policy in a table (by default a RandAugment or TrivialAugment point is shown by its "
        "family's parameters, and a policy of more than 25 sub-policies grouped by operation)",
    )
    add_options(p, [JSON])
    p.set_defaults(func=_store_command)


def _add_export(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies export REF``: a policy as JSON, DALI source or timm's format."""
    p = sub.add_parser(
        "export",
        parents=[store_opt],
        help="write a policy as JSON, as DALI auto_aug Python source, or for timm's AutoAugment",
    )
    p.add_argument("ref", metavar="REF", help=_REF_HELP)
    p.add_argument(
        "--format",
        choices=["json", "dali", "timm"],
        default="json",
        help="json: the canonical policy JSON (default); dali: Python building an nvidia.dali.auto_aug "
        "Policy from DALI's own augmentations; timm: timm's AutoAugment format (JSON)",
    )
    p.add_argument(
        "--stage",
        type=int,
        metavar="K",
        help="of a schedule (a PBA search's result): export its stage K alone, as a policy "
        "(default: the whole schedule; timm takes one stage)",
    )
    add_options(p, [_EXPORT_OUT])
    p.set_defaults(func=_store_command)


def _add_import(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies import FILE --name NAME``: store a policy JSON file as the next version of NAME."""
    p = sub.add_parser("import", parents=[store_opt], help="store a policy JSON file as the next version of NAME")
    p.add_argument("file", metavar="FILE", help="policy JSON file ('-' for stdin)")
    p.add_argument("--name", required=True, help="name to store it under")
    p.add_argument("--metadata", metavar="JSON", help="provenance to record, a JSON object")
    p.add_argument("--force", action="store_true", help="write a new version even if the latest one is identical")
    p.set_defaults(func=_store_command)


def _add_diff(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies diff A B``: sub-policies added, removed and changed from A to B."""
    p = sub.add_parser("diff", parents=[store_opt], help="sub-policies added, removed and changed from A to B")
    p.add_argument("a", metavar="A", help=_REF_HELP)
    p.add_argument("b", metavar="B", help=_REF_HELP)
    p.set_defaults(func=_store_command)


def _add_preview(sub: argparse._SubParsersAction, store_opt: argparse.ArgumentParser) -> None:
    """``policies preview REF --data PATH --out FILE``: a grid of images augmented by a policy."""
    p = sub.add_parser("preview", parents=[store_opt], help="render a grid of images augmented by a policy")
    p.add_argument("ref", metavar="REF", help=_REF_HELP)
    add_options(p, [_PREVIEW_DATA, _PREVIEW_OUT])
    p.add_argument("--num-images", type=int, default=8, help="source images, spread over the dataset (rows; default 8)")
    p.add_argument("--columns", type=int, default=8, help="independent draws per image (default 8)")
    p.add_argument("--image-size", type=int, default=None, help="resize images to this size (needed when they differ)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the draws (default 0)")
    p.add_argument(
        "--backend",
        choices=["dali", "torchvision"],
        default="dali",
        help="implementation that applies the policy (default dali)",
    )
    p.add_argument(
        "--with-base",
        action="store_true",
        help="draw the policy's base (crop, or crop + flip) before the policy, as in training; default: "
        "the policy step alone",
    )
    p.set_defaults(func=_preview)
