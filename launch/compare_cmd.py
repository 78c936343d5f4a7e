"""``autoaug compare``: train the same model with found policies and the baselines over seeds.

::

    autoaug compare --policy cifar10-r8@latest --data cifar10-jpeg/train.parquet --seeds 3 \\
        --preset cpu --out runs/compare-r8
    autoaug compare --policy found.json --baselines standard,trivialaugment --seeds 5 --epochs 20 ...
    autoaug compare --config compare.yaml --set train.epochs=4

Prints a line per finished run (``[k/total] ...``) and the final table (mean, standard deviation
and 95% confidence interval of the test accuracy and of the balanced accuracy per policy, mean
training time), then the classes on which each policy is worse than the best baseline beyond the
noise, and writes ``results.md``, ``results.csv``, ``results.parquet``, ``runs.csv``,
``comparison.png``, ``per_class.csv`` and ``per_class.png`` to ``--out``. Results of policies given as store references are attached to the stored version
(``autoaug policies show NAME@N`` lists them). Re-running with the same ``--out`` reuses the
finished runs. See docs/compare.md.

Exit status: 0 success; 1 a training run failed (the finished ones are kept); 2 bad input;
130 interrupted (re-run the same command to resume).
"""

from __future__ import annotations

import argparse
import dataclasses

from autoaug.core.errors import UserInputError
from autoaug.launch.options import (
    CONFIG,
    JSON,
    SET,
    Once,
    Option,
    add_options,
    base_option,
    group_by_option,
    image_size_option,
    layered,
    option,
    per_class_option,
    split_size_options,
)

__all__ = ["register", "run", "build_compare_config"]

#: Checked by ``autoaug``'s main before the command runs (the search extra, autoaug.core.extras).
REQUIRES = ("ray", "nvidia.dali", "scipy", "matplotlib")


def build_compare_config(args: argparse.Namespace):
    """The :class:`autoaug.launch.compare.CompareConfig` for parsed arguments (config file, --set, flags)."""
    # The compare package (Ray, torch, scipy, matplotlib), when the command runs: not for the parser.
    from autoaug.launch.compare.config import CONFIG_KEYS, config_from_dict

    merged = layered(args, OPTIONS, own=CONFIG_KEYS)  # --set epochs=2: train.epochs
    return config_from_dict(merged)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``autoaug compare``: the configuration built here, then
    :mod:`autoaug.launch.compare_run` compares."""
    if args.quiet and args.json:
        raise UserInputError("--quiet and --json: give one (--json prints only the result, as JSON)")
    config = build_compare_config(args)
    from autoaug.launch import compare_run  # Ray, torch, the statistics and plots: not the parser

    return compare_run.run(args, config)


#: Every option of ``autoaug compare``, with the key of the compare configuration it sets (see
#: :func:`autoaug.launch.compare.config_from_dict`).
OPTIONS: tuple[Option, ...] = (
    option(
        "--policy",
        key="policies",
        group="what",
        dest="policies",
        action="append",
        metavar="REF",
        help="policy to evaluate (repeatable), first match wins: a preset, a policy JSON file, a stored "
        "reference (name, name@N, name@latest, hash prefix)",
    ),
    option(
        "--baselines",
        key="baselines",
        group="what",
        metavar="LIST",
        # the default is candidates.DEFAULT_BASELINES (not imported here: it would load the compare
        # package at every start of autoaug; tests/launch/test_compare.py checks the two agree)
        help="comma-separated preset baselines (default: none,crop,standard,randaugment:n=2,m=9,"
        "trivialaugment,autoaugment-cifar10; '' for none)",
    ),
    base_option(
        "applies to every policy with sub-policies, --policy ones and baselines such as "
        "autoaugment-cifar10 (labelled 'NAME [base BASE]'); the presets none, crop and standard are bases "
        "alone and keep theirs",
        group="what",
    ),
    option("--seeds", key="seeds", group="what", type=int, metavar="N", help="seeds per policy (default 3)"),
    option(
        "--first-seed",
        key="first_seed",
        group="what",
        type=int,
        metavar="S",
        help="first seed (default 0): seeds S..S+N-1",
    ),
    option(
        "--store",
        key="store",
        kind="path",
        group="what",
        metavar="URI",
        help="policy store of the references (default $AUTOAUG_STORE or ~/.autoaug/policies)",
    ),
    option(
        "--no-attach",
        key="attach",
        group="what",
        dest="attach",
        action="store_const",
        const=False,
        help="do not attach the results to the stored policies",
    ),
    option(
        "--data",
        key="data",
        kind="path",
        group="train",
        metavar="PATH",
        help="training data: Parquet file/folder, ImageFolder root, cifar10:ROOT or a URI",
    ),
    option(
        "--test-data",
        key="test_data",
        kind="path",
        group="train",
        metavar="PATH",
        help="test data (default: the dataset's test split: test.parquet next to train.parquet)",
    ),
    option(
        "--preset",
        key="preset",
        group="train",
        metavar="NAME",
        action=Once,
        help="training preset (docs/training.md; default cpu)",
    ),
    option("--epochs", key="train.epochs", group="train", type=int, metavar="N", help="override the preset's epochs"),
    option("--model", key="train.model", group="train", metavar="NAME", help="override the preset's model"),
    *split_size_options("train.", group="train"),
    per_class_option("train.", group="train"),
    image_size_option("train.", group="train"),
    group_by_option("train.", group="train"),
    dataclasses.replace(CONFIG, group="train"),
    dataclasses.replace(SET, group="train"),
    option(
        "--cpus-per-run",
        key="cpus_per_run",
        group="how",
        type=int,
        metavar="C",
        help="CPUs (and trainer threads) per run (default 1)",
    ),
    option(
        "--gpus-per-run",
        key="gpus_per_run",
        group="how",
        type=float,
        metavar="G",
        help="GPUs per run; fractions share a GPU (default 1 for CUDA presets, else 0)",
    ),
    option(
        "--pack",
        key="pack",
        group="how",
        type=int,
        metavar="K",
        help="runs trained together by one process on one device, each still its own run (default 1; a pack "
        "reserves --cpus-per-run CPUs and its runs' GPUs, at most one: docs/compare.md)",
    ),
    option(
        "--address",
        key="address",
        group="how",
        metavar="ADDR",
        help="Ray cluster (HOST:6379 on a cluster machine, ray://HEAD:10001, auto); default: embedded local Ray",
    ),
    option(
        "--out",
        key="out",
        kind="path",
        group="how",
        metavar="DIR",
        help="output folder (default runs/compare); re-use it to resume",
    ),
    option("-q", "--quiet", group="how", action="store_true", help="no progress, only the final table"),
    option(
        "-v",
        "--verbose",
        key="verbose",
        group="how",
        action="store_const",
        const=True,
        help="also Ray's own output: the runs' logs, banners and warnings",
    ),
    dataclasses.replace(JSON, group="how"),
)
_GROUPS = {"what": "what to compare", "train": "training", "how": "how to run"}


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
    add_options(p, OPTIONS, _GROUPS)
    p.set_defaults(func=run)
