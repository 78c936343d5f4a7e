"""The ``autoaug`` command line.

Each sub-command lives in its own module exposing ``register(subparsers)``, which adds a parser
and sets ``func`` (a callable taking the parsed args and returning an exit code) with
``set_defaults``. ``main`` turns :class:`autoaug.launch.errors.UserError` and ``ValueError`` raised for bad
input into one readable line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

from autoaug.launch.errors import UserError

# Sub-command modules, in the order they appear in ``autoaug --help``.
COMMAND_MODULES: list[str] = [
    "autoaug.launch.search_cmd",
    "autoaug.launch.policies_cmd",
    "autoaug.launch.train_cmd",
    "autoaug.launch.launch_cmd",
    "autoaug.launch.compare_cmd",
]


def version() -> str:
    try:
        return metadata.version("autoaug")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoaug",
        description=(
            "AutoAugment policy search: find a data-augmentation policy for your dataset with "
            "Ray Tune + Optuna, store it as a versioned artifact, and compare it with the baselines."
        ),
    )
    parser.add_argument("--version", action="version", version=f"autoaug {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(func(args) or 0)
    except (UserError, ValueError) as exc:
        # ValueError: validation errors for bad input (Policy, datasets, configs) carry a message
        # written for the user; anything else is a bug and keeps its traceback.
        print(f"autoaug: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autoaug: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
