"""``autoaug compare``: train the same model with found policies and the baselines over seeds.

::

    autoaug compare --policy cifar10-r8@latest --data cifar10-jpeg/train.parquet --seeds 3 \\
        --preset cpu --out runs/compare-r8
    autoaug compare --policy found.json --baselines standard,trivialaugment --seeds 5 --epochs 20 ...
    autoaug compare --config compare.yaml --set train.epochs=4

Prints a line per finished run (``[k/total] ...``) and the final table (mean, standard deviation
and 95% confidence interval of the test accuracy per policy, mean training time), and writes
``results.md``, ``results.csv``, ``results.parquet``, ``runs.csv`` and ``comparison.png`` to
``--out``. Results of policies given as store references are attached to the stored version
(``autoaug policies show NAME@N`` lists them). Re-running with the same ``--out`` reuses the
finished runs. See docs/compare.md.

Exit status: 0 success; 1 a training run failed (the finished ones are kept); 2 bad input;
130 interrupted (re-run the same command to resume).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from autoaug.launch.config import flag_overrides, layered_config
from autoaug.core.errors import UserInputError

__all__ = ["register", "run", "build_compare_config"]

_FLAG_KEYS: dict[str, Any] = {
    "policies": "policies",
    "baselines": "baselines",
    "seeds": "seeds",
    "first_seed": "first_seed",
    "preset": "preset",
    "data": "data",
    "test_data": "test_data",
    "out": "out",
    "store": "store",
    "address": "address",
    "cpus_per_run": "cpus_per_run",
    "gpus_per_run": "gpus_per_run",
    "epochs": "train.epochs",
    "model": "train.model",
    "train_size": "train.train_size",
    "attach": "attach",
    "verbose": "verbose",
}


def build_compare_config(args: argparse.Namespace):
    """The :class:`autoaug.launch.compare.CompareConfig` for parsed arguments (config file, --set, flags)."""
    from autoaug.launch.compare import config_from_dict

    merged = layered_config(file=args.config, assignments=args.assignments, flags=flag_overrides(args, _FLAG_KEYS))
    return config_from_dict(merged)


def run(args: argparse.Namespace) -> int:
    from autoaug.launch.compare import run_compare

    config = build_compare_config(args)
    quiet = bool(args.quiet)

    def progress(line: str) -> None:
        if not quiet:
            print(line, flush=True)

    try:
        comparison = run_compare(config, progress=progress)  # RunFailedError: exit 1 (launch.cli.main)
    except KeyboardInterrupt:
        print(
            f"\nautoaug compare: interrupted; finished runs are saved in {config.out}/runs; re-run the "
            "same command to continue",
            file=sys.stderr,
        )
        raise
    print()
    print(comparison.table())
    print()
    print(f"trained {comparison.trained} run(s), reused {len(comparison.runs) - comparison.trained}")
    for key in ("results_md", "results_csv", "results_parquet", "runs_csv", "plot"):
        print(f"wrote {comparison.files[key]}")
    for ref in comparison.attached:
        print(f"attached the results to {ref} (autoaug policies show {ref})")
    return 0


def _guard(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except UserInputError:
        raise
    except (ValueError, FileNotFoundError, PermissionError) as exc:
        raise UserInputError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug compare``."""
    p = subparsers.add_parser(
        "compare",
        help="train with found policies and the baselines over several seeds; table and plot",
        description=(
            "Train the same model with each policy (--policy, and the --baselines) for every seed, in "
            "parallel on Ray, evaluate on the test split, and report mean, standard deviation and 95% "
            "confidence interval of the test accuracy per policy. Settings come from the training "
            "--preset, then --config FILE, then --set KEY=VALUE, then the flags."
        ),
    )
    what = p.add_argument_group("what to compare")
    what.add_argument("--policy", dest="policies", action="append", metavar="REF",
                      help="policy to evaluate (repeatable): a stored reference (name@N, name@latest, hash "
                      "prefix), a policy JSON file, or a preset")
    what.add_argument("--baselines", metavar="LIST",
                      help="comma-separated preset baselines (default: none,standard,randaugment:n=2,m=9,"
                      "trivialaugment,autoaugment-cifar10; '' for none)")
    what.add_argument("--seeds", type=int, metavar="N", help="seeds per policy (default 3)")
    what.add_argument("--first-seed", type=int, metavar="S", help="first seed (default 0): seeds S..S+N-1")
    what.add_argument("--store", metavar="URI",
                      help="policy store of the references (default $AUTOAUG_STORE or ~/.autoaug/policies)")
    what.add_argument("--no-attach", dest="attach", action="store_const", const=False,
                      help="do not attach the results to the stored policies")

    train = p.add_argument_group("training")
    train.add_argument("--data", metavar="PATH", help="training data: Parquet file/folder, ImageFolder root, cifar10:ROOT or a URI")
    train.add_argument("--test-data", metavar="PATH",
                       help="test data (default: the dataset's test split, e.g. test.parquet next to train.parquet)")
    train.add_argument("--preset", metavar="NAME", help="training preset: smoke, cpu (default), paper, final")
    train.add_argument("--epochs", type=int, metavar="N", help="override the preset's epochs")
    train.add_argument("--model", metavar="NAME", help="override the preset's model")
    train.add_argument("--train-size", type=int, metavar="N", help="override the reduced training split size")
    train.add_argument("--config", metavar="FILE", help="YAML file with compare settings (flags override it)")
    train.add_argument("--set", dest="assignments", action="append", metavar="KEY=VALUE",
                       help="override one setting, e.g. --set train.lr=0.1 (repeatable)")

    how = p.add_argument_group("how to run")
    how.add_argument("--cpus-per-run", type=int, metavar="C", help="CPUs (and trainer threads) per run (default 1)")
    how.add_argument("--gpus-per-run", type=float, metavar="G",
                     help="GPUs per run; fractions share a GPU (default 1 for CUDA presets, else 0)")
    how.add_argument("--address", metavar="ADDR",
                     help="Ray cluster (HOST:6379 on a cluster machine, ray://HEAD:10001, auto); default: embedded local Ray")
    how.add_argument("--out", metavar="DIR", help="output folder (default runs/compare); re-use it to resume")
    how.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the final table")
    how.add_argument("-v", "--verbose", action="store_const", const=True, help="show the runs' own output")
    p.set_defaults(func=_guard)
