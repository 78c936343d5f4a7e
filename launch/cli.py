"""The ``autoaug`` command line.

Each sub-command lives in its own module exposing ``register(subparsers)``, which adds a parser
and sets ``func`` (a callable taking the parsed args and returning an exit code) with
``set_defaults``; every one is imported to build the parser, so what a command runs lives in its
run module, imported when it runs (docs/ARCHITECTURE.md, "Imports at the top, light paths kept
light"). ``main`` is the one place where errors become exit statuses
(:data:`EXIT_CODES`): every :class:`autoaug.core.errors.AutoaugError` is printed as one line on
stderr, without a traceback, and every :class:`autoaug.core.errors.AutoaugWarning` as one
``autoaug: warning:`` line (once per message, wherever it was raised).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import os
import sys
import warnings
from importlib import metadata

from autoaug.core.errors import (
    AutoaugError,
    AutoaugWarning,
    ClusterError,
    DataError,
    MissingExtraError,
    RunExistsError,
    RunFileError,
    SearchError,
    SearchInterruptedError,
    StorageAccessError,
    StorageError,
    StoreError,
    UserInputError,
)
from autoaug.core.extras import require
from autoaug.core.failpoints import check_environment
from autoaug.core.interrupt import EXIT_SIGTERM, sigterm_as_interrupt
from autoaug.core.location import storage_error
from autoaug.core.ray_session import embedded_on_loopback
from autoaug.launch.options import path_flags

# Sub-command modules, in the order they appear in ``autoaug --help``.
COMMAND_MODULES: list[str] = [
    "autoaug.launch.search_cmd",
    "autoaug.launch.policies_cmd",
    "autoaug.launch.train_cmd",
    "autoaug.launch.launch_cmd",
    "autoaug.launch.compare_cmd",
    "autoaug.launch.report_cmd",
]


#: Exit status of each kind of error, the first matching class winning (docs/search.md,
#: docs/cluster.md, docs/store.md document these).
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (SearchInterruptedError, 130),  # resumable: the message says how
    (RunExistsError, 2),
    (RunFileError, 2),  # the message names the file and what to do (restore it, or --overwrite)
    (MissingExtraError, 2),  # the message names the extra to install
    (StorageAccessError, 2),  # a read-only or denied place: fix it or choose another
    (StorageError, 1),  # a full disk or quota: free space, run again (searches and compares resume)
    (UserInputError, 2),
    (DataError, 2),
    (StoreError, 2),
    (SearchError, 1),
    (ClusterError, 1),
    (AutoaugError, 1),
    # Validation errors of the value objects (Policy, configs) and a path the user named that
    # cannot be opened carry a message written for the user; anything else is a bug and keeps
    # its traceback.
    (ValueError, 2),
    (FileNotFoundError, 2),
    (PermissionError, 2),
)


def exit_code(exc: BaseException) -> int | None:
    """The exit status for ``exc`` (None: not an error ``autoaug`` reports in one line)."""
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return None


def version() -> str:
    try:
        return metadata.version("autoaug")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(message=f"autoaug {version()}\n")


def _build() -> tuple[argparse.ArgumentParser, argparse.Action]:
    parser = argparse.ArgumentParser(
        prog="autoaug",
        description=(
            "AutoAugment policy search: find a data-augmentation policy for your dataset with "
            "Ray Tune + Optuna, store it as a versioned artifact, and compare it with the baselines."
        ),
    )
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser, subparsers


def build_parser() -> argparse.ArgumentParser:
    """The ``autoaug`` parser with every sub-command."""
    return _build()[0]


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """``{command name: its parser}`` (the sub-parsers action's public ``choices``)."""
    return dict(_build()[1].choices)


def command_path_flags(command: str) -> frozenset[str]:
    """The flags of ``command`` whose values are paths or URIs, from the options it declares
    (``OPTIONS`` of its module, :mod:`autoaug.launch.options`)."""
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if name.rsplit(".", 1)[-1].removesuffix("_cmd") == command:
            return path_flags(getattr(module, "OPTIONS", ()))
    return frozenset()


def _require(func, command: str) -> None:
    """Check the libraries the command's module lists in ``REQUIRES`` (the search extra,
    :mod:`autoaug.core.extras`) before it runs."""
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    needs = getattr(module, "REQUIRES", ())
    if needs:
        require(needs, f"autoaug {command}")


def _fatal_signals_leave_a_trace() -> None:
    """A crash in native code (a segfault in a library) prints the Python stack on stderr instead
    of ending the command without a word (``faulthandler``; on only where stderr is a real file)."""
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()
        except (AttributeError, ValueError, OSError):  # stderr replaced by an object without a file
            pass


def main(argv: list[str] | None = None) -> int:
    _fatal_signals_leave_a_trace()
    with warnings.catch_warnings():
        warnings.filterwarnings("always", category=AutoaugWarning)
        shown, printed = warnings.showwarning, set()

        def show(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, AutoaugWarning):
                shown(message, category, filename, lineno, file, line)
            elif str(message) not in printed:  # e.g. the preflight's split, then the trainer's
                printed.add(str(message))
                print(f"autoaug: warning: {message}", file=sys.stderr, flush=True)

        warnings.showwarning = show
        with sigterm_as_interrupt() as term:  # SIGTERM (kill, Slurm, Kubernetes, systemd) stops as Ctrl-C does
            return _main(argv, term)


def _storage(exc: BaseException) -> BaseException | None:
    """The :class:`StorageError` for a full / read-only / denied filesystem met by a write outside
    :func:`autoaug.core.location.writing` (a library's own file, e.g. a plot), naming the file the
    error names; None for any other error."""
    if isinstance(exc, StorageError):
        return None
    where = getattr(exc, "filename", None)
    return storage_error(exc, os.fspath(where) if where is not None else "a file")


def _loopback(args: argparse.Namespace):
    """A command with no cluster address (an embedded Ray, if it starts one) runs with Ray's
    multi-node switch off, so that instance listens on 127.0.0.1 only
    (:func:`autoaug.core.ray_session.embedded_on_loopback`); any other, as it is."""
    if getattr(args, "address", None) is not None or os.environ.get("RAY_ADDRESS"):
        return contextlib.nullcontext()
    return embedded_on_loopback()


def _main(argv: list[str] | None, term=None) -> int:
    def terminated() -> bool:  # stopped by SIGTERM, not Ctrl-C
        return term is not None and term.received

    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        # A malformed AUTOAUG_FAILPOINTS (a test's fault injection, read at import) is one line here,
        # before the command does anything: importing autoaug.core.failpoints never raises.
        check_environment()
        _require(func, args.command)
        try:
            with _loopback(args):
                return int(func(args) or 0)
        except OSError as exc:  # a write no writer turned into a StorageError: still one line
            storage = _storage(exc)
            if storage is None:
                raise
            raise storage from exc
    except tuple(cls for cls, _ in EXIT_CODES) as exc:
        code = exit_code(exc)
        prefix = "autoaug: " if isinstance(exc, SearchInterruptedError) else "autoaug: error: "
        if isinstance(exc, SearchInterruptedError) and terminated():
            prefix, code = "autoaug: terminated (SIGTERM): ", EXIT_SIGTERM
        print(f"{prefix}{exc}", file=sys.stderr)
        return code if code is not None else 1
    except KeyboardInterrupt:
        print("autoaug: terminated (SIGTERM)" if terminated() else "autoaug: interrupted", file=sys.stderr)
        return EXIT_SIGTERM if terminated() else 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
