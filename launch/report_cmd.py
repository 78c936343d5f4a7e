"""``autoaug report NAME``: a PNG picture of a search, from its Optuna study.

::

    autoaug report cifar10-r8                       # -> cifar10-r8-report.png
    autoaug report cifar10-r8 --storage runs --out docs/report.png --top 8
    autoaug report cifar10-r8 --html cifar10-r8.html     # one self-contained page for a browser

Panels (:mod:`autoaug.search.report`): score per trial and best so far, learning curves,
ops and magnitudes among the top trials, Optuna's parameter importances; printed: the gain of
the stored policy, what helps and hurts, and whether ASHA's rungs rank the trials so far
(:mod:`autoaug.search.decide.rungs`). Works while the search runs (it reads the study) and after it.

``--html OUT.html`` writes instead one self-contained page (:mod:`autoaug.launch.report_html`:
the decisions, the trials and their learning curves, the rungs, the race, what helps and hurts,
the stored policy with its images, the comparisons); with ``--out`` too, also the PNG.
"""

from __future__ import annotations

import argparse

from autoaug.launch.options import JSON, Option, add_options, option

__all__ = ["register", "run"]

#: The search extra's libraries this command needs (checked by autoaug.launch.cli.main).
REQUIRES = ("optuna", "matplotlib")

OPTIONS: tuple[Option, ...] = (
    option(
        "--storage",
        kind="path",
        metavar="DIR|URI",
        help="root of run directories (default $AUTOAUG_RUNS or ~/.autoaug/runs)",
    ),
    option("--out", kind="path", metavar="FILE", help="PNG to write (default NAME-report.png here)"),
    option(
        "--html",
        kind="path",
        metavar="FILE",
        help="write one self-contained HTML page of the search (no network: images inline) instead of the PNG",
    ),
    option("--top", type=int, default=5, metavar="N", help="best trials whose ops are counted (default 5)"),
    JSON,
)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``autoaug report`` (:mod:`autoaug.launch.report_run`)."""
    from autoaug.launch import report_run  # Optuna, matplotlib: what the report draws, not the parser

    return report_run.run(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug report``."""
    p = subparsers.add_parser(
        "report",
        help="PNG report of a search: scores, learning curves, top ops, parameter importances",
        description="Draw a search's Optuna study: score per trial and best so far, learning curves, op and "
        "magnitude frequencies among the top trials, parameter importances.",
    )
    p.add_argument("name", metavar="NAME", help="search name (its run directory under --storage)")
    add_options(p, OPTIONS)
    p.set_defaults(func=run)
