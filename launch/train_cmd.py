"""``autoaug train``: train a model with one policy and record what happened.

::

    autoaug train --data cifar10-jpeg/train.parquet --test-data cifar10-jpeg/test.parquet \\
        --policy autoaugment-cifar10 --preset cpu --seed 0 --out runs/aa-cpu

prints one line per epoch and writes to ``--out``:

* ``metrics.json``: the config, the policy (and its hash), the per-epoch history and the final
  numbers (validation and test accuracy, split and dataset fingerprints, training time);
  rewritten after every epoch with ``"status": "running"`` and finally ``"finished"``;
* ``metrics.csv``: the per-epoch table;
* ``checkpoint.pt``: model, optimizer, scheduler, loader and RNG state after the last finished
  epoch (``--resume`` continues from it).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.launch.data_paths import default_test_data
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
from autoaug.policies.bases import check_name

#: Checked by ``autoaug``'s main before the command runs (the search extra, autoaug.core.extras):
#: the trainer reads its data through the DALI pipeline.
REQUIRES = ("nvidia.dali",)


#: Every option of ``autoaug train``, with the configuration key it sets (the keys of a
#: ``--config`` file and of ``--set``: ``policy``, ``store``, ``out``, ``resume``, ``preset``,
#: ``base`` and the fields of :class:`autoaug.proxy_models.train.TrainConfig`).
OPTIONS: tuple[Option, ...] = (
    option(
        "--policy",
        key="policy",
        help="policy reference, first match wins: a preset (autoaugment-cifar10, randaugment:n=2,m=9, "
        "trivialaugment, none, crop, standard...), a policy JSON file, a stored policy (name, name@N, "
        "name@latest, hash prefix); default standard",
    ),
    base_option(
        "a policy without sub-policies (none, crop, standard) is a base alone: give the preset of the "
        "base you want as --policy instead"
    ),
    option(
        "--store",
        key="store",
        kind="path",
        metavar="URI",
        help="policy store for stored references (default: $AUTOAUG_STORE or ~/.autoaug/policies)",
    ),
    option(
        "--data", key="data", kind="path", help="training data: Parquet file/folder, ImageFolder root or cifar10:ROOT"
    ),
    option(
        "--test-data",
        key="test_data",
        kind="path",
        help="test data (same forms; default: the dataset's test split: test.parquet next to "
        "train.parquet); test accuracy is printed at the end",
    ),
    option("--preset", key="preset", action=Once, help="training preset (docs/training.md; default cpu)"),
    option("--model", key="model", help="model name (wrn-40-2, wrn-28-10, resnet-8, resnet-20, ...)"),
    option("--epochs", key="epochs", type=int),
    option("--batch-size", key="batch_size", type=int),
    option("--lr", key="lr", type=float, help="peak learning rate"),
    *split_size_options(),
    per_class_option(),
    image_size_option(),
    group_by_option(),
    option("--seed", key="seed", type=int, help="model init, data order and augmentation seed"),
    option("--split-seed", key="split_seed", type=int),
    option("--num-threads", key="num_threads", type=int, help="torch and DALI CPU threads"),
    option("--device", key="device", choices=["auto", "cpu", "cuda"]),
    option(
        "--out", key="out", kind="path", metavar="DIR", help="output directory (default: runs/train-<policy>-<time>)"
    ),
    option(
        "--resume",
        key="resume",
        action="store_const",
        const=True,
        help="continue from --out/checkpoint.pt (same config and policy)",
    ),
    CONFIG,
    SET,
    option("-q", "--quiet", action="store_true", help="no progress, only the result"),
    JSON,
)
#: Keys of the layered configuration that are the command's, not the trainer's.
_COMMAND_KEYS = ("policy", "base", "store", "out", "resume", "preset")
_DEFAULTS = {"policy": "standard", "preset": "cpu"}


def _epilog() -> str:
    """The presets and how they size a run to the data, computed from the presets themselves."""
    # The trainer's configuration, only when the help is shown: this module builds the parser, and
    # `autoaug --help` does not load it.
    from autoaug.proxy_models.train_config import PRESETS

    width = max(map(len, PRESETS))
    lines = ['presets (--preset; docs/training.md, "Configuration and presets"):']
    for name, cfg in PRESETS.items():
        size = f"{cfg.image_size}x{cfg.image_size}" if cfg.image_size else "the data's own image size"
        lines += textwrap.wrap(
            f"{name:<{width}}  {cfg.model}, {cfg.epochs} epochs, {cfg.describe_split()}, {size}",
            width=100,
            initial_indent="  ",
            subsequent_indent="  " + " " * (width + 2),
        )
    per_class = PRESETS["eval-cpu"]
    cifar = per_class.resolved([5000] * 10, data_image_size=32).train_size
    gtsrb = per_class.resolved([210] * 43, data_image_size=32).train_size
    text = (
        "Splits sized per class (proxy-cpu, eval-cpu; --train-per-class N): the training split holds N images "
        "per class on average: the sum over classes of min(N, class size), raised to the preset's "
        f"min_train_size ({per_class.min_train_size:,}) and capped at its max_train_size "
        f"({per_class.max_train_size:,}), then drawn stratified like a total. So CIFAR-10 (10 classes of "
        f"5,000) trains on {cifar:,} images and GTSRB (43 classes of 210-2,250) on {gtsrb:,}. --train-size N "
        "gives a total instead; --set min_train_size=/max_train_size= move the bounds. The image size is the "
        "data's own (images of one size) unless --image-size N. metrics.json records the resolved numbers "
        "(config) and what was asked (sizing)."
    )
    return "\n".join(lines) + "\n\n" + textwrap.fill(text, width=100)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train",
        help="train a model with one policy (proxy trial or final evaluation)",
        description=textwrap.fill(
            "Train a model on --data augmented by --policy, print one line per epoch, and write "
            "metrics.json, metrics.csv and checkpoint.pt to --out. Layers: --preset (default cpu), "
            "then --config FILE, then --set KEY=VALUE (e.g. --set epochs=2), then the flags.",
            width=100,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the epilog's lines are its own
    )
    format_help = p.format_help

    def with_epilog() -> str:  # the epilog reads the presets: built only when the help is shown
        p.epilog = _epilog()
        return format_help()

    p.format_help = with_epilog
    add_options(p, OPTIONS)
    p.set_defaults(func=run)
    return p


def _settings(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """``(command settings, TrainConfig)`` from the layers (defaults, --config, --set, flags)."""
    from autoaug.proxy_models.train_config import TrainConfig  # not loaded to build the parser (see _epilog)

    merged = layered(args, OPTIONS, defaults=_DEFAULTS)
    command = {k: merged.pop(k, None) for k in _COMMAND_KEYS}
    if command["base"] is not None:
        check_name(command["base"], "--base")
    if not merged.get("data"):
        raise UserInputError("no training data: give --data (or data: in the --config file)")
    if merged.get("test_data") is None:  # the dataset's test split, found as compare finds it
        merged["test_data"] = default_test_data(str(merged["data"]))
    try:
        config = TrainConfig.from_preset(str(command["preset"]), **merged)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None
    return command, config


def run(args: argparse.Namespace) -> int:
    """Entry point of ``autoaug train``: the flags read into the command's settings and the
    trainer's configuration here, then :mod:`autoaug.launch.train_run` trains."""
    if args.quiet and args.json:
        raise UserInputError("--quiet and --json: give one (--json prints only the result, as JSON)")
    command, config = _settings(args)
    from autoaug.launch import train_run  # the policy, the preflight, then torch's trainer: not the parser

    return train_run.run(args, command, config)
