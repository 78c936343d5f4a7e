"""What ``autoaug compare`` runs, once :mod:`autoaug.launch.compare_cmd` has built its configuration:
the preflight, the comparison (:func:`autoaug.launch.compare.run_compare`), and its table and files
printed, or the ``--json`` document."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from autoaug.launch import preflight
from autoaug.launch.compare import run_compare
from autoaug.launch.compare.per_class import run_balanced_accuracy
from autoaug.launch.output import display_for, json_result

__all__ = ["run", "comparison_json"]


def run(args: argparse.Namespace, config: Any) -> int:
    """Compare as ``config`` (the :class:`autoaug.launch.compare.CompareConfig` the flags built) says."""
    config = preflight.for_compare(config)  # paths absolute, inputs checked, before Ray
    with json_result(bool(args.json)) as emit:
        try:
            with display_for(args) as display:
                comparison = run_compare(config, display=display)  # RunFailedError: exit 1 (launch.cli.main)
        except KeyboardInterrupt:
            print(
                f"\nautoaug compare: interrupted; finished runs are saved in {config.out}/runs; re-run the "
                "same command to continue",
                file=sys.stderr,
            )
            raise
        if args.json:
            emit(comparison_json(comparison))
            return 0
    print()
    print(comparison.table())
    print()
    print(f"trained {comparison.trained} run(s), reused {len(comparison.runs) - comparison.trained}")
    for key in ("results_md", "results_csv", "results_parquet", "runs_csv", "plot", "per_class_csv", "per_class_plot"):
        if key in comparison.files:
            print(f"wrote {comparison.files[key]}")
    for ref in comparison.attached:
        print(f"attached the results to {ref} (autoaug policies show {ref})")
    return 0


def comparison_json(comparison) -> dict:
    """The ``--json`` document of a finished comparison."""
    return {
        "out": comparison.config.out,
        "summaries": [dataclasses.asdict(s) for s in comparison.summaries],
        "runs": [
            {
                k: r.get(k)
                for k in (
                    "run_id",
                    "policy",
                    "kind",
                    "ref",
                    "policy_hash",
                    "base",
                    "seed",
                    "test_accuracy",
                    "val_accuracy",
                    "train_time_s",
                    "history",
                    "test_class_correct",
                    "test_class_total",
                )
            }
            | {"balanced_accuracy": run_balanced_accuracy(r)}
            for r in comparison.runs
        ],
        "per_class": comparison.per_class.to_dict(),
        "trained": comparison.trained,
        "reused": len(comparison.runs) - comparison.trained,
        "files": dict(comparison.files),
        "attached": list(comparison.attached),
        "dataset_fingerprint": comparison.dataset_fingerprint,
    }
