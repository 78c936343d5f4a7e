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
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoaug.core.errors import UserInputError
from autoaug.core.location import atomic_write_local
from autoaug.core.metrics import epoch_record, metrics_json
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

if TYPE_CHECKING:
    from autoaug.core.progress import Progress

_METRICS_JSON = "metrics.json"
_METRICS_CSV = "metrics.csv"
#: Checked by ``autoaug``'s main before the command runs (the search extra, autoaug.core.extras):
#: the trainer reads its data through the DALI pipeline.
REQUIRES = ("nvidia.dali",)


def _preset_names() -> list[str]:
    from autoaug.proxy_models.train_config import PRESETS

    return list(PRESETS)


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
    """The presets and how they size a run to the data, computed from the presets themselves
    (imports the trainer's configuration, and so torch: only when the help is shown)."""
    import textwrap

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

    def with_epilog() -> str:  # the epilog imports torch: build it only when help is shown
        p.epilog = _epilog()
        return format_help()

    p.format_help = with_epilog
    add_options(p, OPTIONS)
    p.set_defaults(func=run)
    return p


def _resolve_policy(ref: str, store_uri: str | None) -> Any:
    """``--policy REF`` by the one precedence (:mod:`autoaug.policies.reference`); the store is
    opened only for a store reference."""
    from autoaug.core.errors import StoreError
    from autoaug.policies.reference import resolve
    from autoaug.policies.store import default_store_uri

    try:
        return resolve(ref, store=store_uri or default_store_uri())
    except (StoreError, ValueError, LookupError, OSError) as exc:
        raise UserInputError(f"--policy {ref!r}: {exc}") from None


def _on_base(policy: Any, base: str | None, ref: str) -> Any:
    """``--base``: the policy moved onto ``base`` (:func:`autoaug.policies.bases.rebase`). A policy
    without sub-policies is a base alone (the presets none, crop, standard) and cannot be moved:
    asking for another base is refused, naming the preset to give instead."""
    from autoaug.policies.bases import rebase

    if base is None or policy.base == base:
        return policy
    if policy.is_identity:
        raise UserInputError(
            f"--base {base}: policy {ref!r} has no sub-policies, it is the base {policy.base!r} alone and "
            f"keeps it; to train the base {base!r} alone give --policy {base}"
        )
    return rebase(policy, base)


def _settings(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """``(command settings, TrainConfig)`` from the layers (defaults, --config, --set, flags)."""
    from autoaug.policies.bases import check_name
    from autoaug.proxy_models.train_config import TrainConfig

    merged = layered(args, OPTIONS, defaults=_DEFAULTS)
    command = {k: merged.pop(k, None) for k in _COMMAND_KEYS}
    if command["base"] is not None:
        check_name(command["base"], "--base")
    if not merged.get("data"):
        raise UserInputError("no training data: give --data (or data: in the --config file)")
    if merged.get("test_data") is None:  # the dataset's test split, found as compare finds it
        from autoaug.launch.compare.candidates import default_test_data

        merged["test_data"] = default_test_data(str(merged["data"]))
    try:
        config = TrainConfig.from_preset(str(command["preset"]), **merged)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None
    return command, config


def _describe_sizing(requested: Any, resolved: Any) -> str:
    """The split and image size as resolved, and how they were asked for when that differs
    (``2,000 training images, 1,000 validation images, 32x32 (asked: 100 training images per class
    (1,000 to 2,000 in all); image size auto)``)."""
    text = f"{resolved.describe_split()}, {resolved.image_size}x{resolved.image_size}"
    asked = []
    if requested.train_per_class is not None:
        asked.append(requested.describe_train())
    if requested.image_size is None:
        asked.append("image size auto")
    return text + (f" (asked: {'; '.join(asked)})" if asked else "")


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_epoch(m: dict[str, Any], epochs: int) -> str:
    """One human-readable line for an epoch's metrics."""
    width = len(str(epochs))
    parts = [
        f"epoch {m['epoch']:>{width}}/{epochs}",
        f"train_loss {_fmt(m['train_loss'], '.4f')}",
        f"train_acc {_fmt(m['train_accuracy'], '.4f')}",
        f"val_loss {_fmt(m.get('val_loss'), '.4f')}",
        f"val_acc {_fmt(m.get('val_accuracy'), '.4f')}",
    ]
    if m.get("test_accuracy") is not None:
        parts.append(f"test_acc {m['test_accuracy']:.4f}")
    parts += [f"lr {m['lr']:.4g}", f"{m['images_per_sec']:,.0f} img/s", f"{m['epoch_time_s']:.1f}s"]
    return "  ".join(parts)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    atomic_write_local(path, (metrics_json(payload) + "\n").encode("utf-8"))


def run(args: argparse.Namespace) -> int:
    from autoaug.launch.output import display_for, json_result

    if args.quiet and args.json:
        raise UserInputError("--quiet and --json: give one (--json prints only the result, as JSON)")
    with display_for(args) as display, json_result(bool(args.json)) as emit:
        return _run(args, display, emit)


def _run(args: argparse.Namespace, display: Progress, emit: Callable[[Any], None]) -> int:
    from autoaug.launch import preflight

    command, config = _settings(args)
    resolved = _resolve_policy(str(command["policy"]), command["store"])
    from autoaug.proxy_models.train import CHECKPOINT_NAME, train, write_history_csv  # torch: after the input is read

    stored = resolved.policy
    policy = _on_base(stored, command["base"], str(command["policy"]))
    # A schedule (a PBA search's result, a schedule file): its stages switched at their epochs.
    schedule = None
    if resolved.schedule is not None and not resolved.schedule.is_fixed:
        from autoaug.policies.schedule import Schedule

        schedule = Schedule(
            resolved.schedule.name,
            [(s.start, _on_base(s.policy, command["base"], str(command["policy"]))) for s in resolved.schedule.stages],
        )
    rebased_from = stored.base if policy.base != stored.base else None
    label = policy.name + (f"-base-{policy.base}" if rebased_from else "")
    out = Path(command["out"]) if command["out"] else Path("runs") / f"train-{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    resume_from = None
    if command["resume"]:
        if not (out / CHECKPOINT_NAME).is_file():
            raise UserInputError(f"--resume: no checkpoint at {out / CHECKPOINT_NAME}")
        resume_from = out
    elif (out / CHECKPOINT_NAME).is_file():
        raise UserInputError(
            f"{out} already holds a training run; pass --resume to continue it or choose another --out"
        )
    requested = config
    # Sized to the data (resolved), data checked and decoded, --out writable; nothing created yet.
    config = preflight.for_train(config, out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"--out {str(out)!r}: cannot create the directory ({exc.strerror})") from None

    from autoaug.proxy_models.train_config import sizing_record

    base = {
        "status": "running",
        "config": config.to_dict(),  # resolved: what the run computes
        "sizing": sizing_record(requested, config),
        "policy": policy.to_dict(),
        "policy_hash": policy.content_hash,
        "base": policy.base,
        "rebased_from": rebased_from,  # the policy's own base when --base moved it, else None
    }
    if schedule is not None:  # "policy" is then the last stage
        base.update(
            schedule=schedule.to_dict(),
            schedule_hash=schedule.content_hash,
            stage_epochs=schedule.start_epochs(config.epochs),
        )
    history: list[dict[str, Any]] = []

    def report(metrics: dict[str, Any]) -> None:
        row = epoch_record(metrics)
        history.append(row)
        display.log(format_epoch(metrics, config.epochs))
        display.update(
            "epochs", completed=metrics["epoch"], status=f"val_acc {_fmt(metrics.get('val_accuracy'), '.4f')}"
        )
        write_history_csv(history, out / _METRICS_CSV)
        _write_json(out / _METRICS_JSON, dict(base, history=history))

    if resume_from is not None:
        # The checkpoint carries the history of the epochs already done.
        from autoaug.proxy_models.train import load_checkpoint

        try:
            history.extend(epoch_record(row) for row in load_checkpoint(resume_from)["history"])
        except (ValueError, FileNotFoundError) as exc:
            raise UserInputError(f"--resume: {exc}") from None
        display.log(f"resuming {out} after epoch {len(history)}/{config.epochs}")
    display.log(
        f"training {config.model} on {config.data}"
        f"{f' (test: {config.test_data})' if config.test_data else ''} with policy {policy.name!r} "
        f"({len(policy.sub_policies)} sub-policies, base {policy.base}"
        f"{f' instead of its {rebased_from} (--base)' if rebased_from else ''}); preset {command['preset']}, "
        f"{config.epochs} epochs, seed {config.seed} -> {out}"
    )
    if schedule is not None:
        display.log(
            f"schedule {schedule.name!r}: {len(schedule.stages)} stages, from epochs "
            f"{[e + 1 for e in schedule.start_epochs(config.epochs)]} of {config.epochs} (the policy above is the last)"
        )
    display.log(f"split: {_describe_sizing(requested, config)}")
    display.add("epochs", f"train {config.model}", total=config.epochs, unit="epochs", completed=len(history))

    def on_batch(epoch: int, batch: int, batches: int) -> None:
        if batch == 1:
            display.add("batches", f"  epoch {epoch}", total=batches, unit="batches")
        display.update("batches", completed=batch)
        if batch == batches:
            display.remove("batches")

    try:
        result = train(
            config,
            policy if schedule is None else schedule,
            report=report,
            checkpoint_dir=out,
            resume_from=resume_from,
            on_batch=on_batch if display.live else None,
        )
    except (ValueError, FileNotFoundError, FloatingPointError) as exc:
        raise UserInputError(str(exc)) from None

    final = {
        "val_accuracy": result.val_accuracy,
        "val_loss": result.val_loss,
        "test_accuracy": result.test_accuracy,
        "test_loss": result.test_loss,
        "train_time_s": result.train_time_s,
        "split_fingerprint": result.split_fingerprint,
        "dataset_fingerprint": result.dataset_fingerprint,
        "checkpoint": str(out / CHECKPOINT_NAME),
    }
    history[:] = [epoch_record(row) for row in result.history]
    write_history_csv(history, out / _METRICS_CSV)
    _write_json(out / _METRICS_JSON, dict(base, status="finished", history=history, final=final))
    display.stop()
    if args.json:
        emit(
            {
                "out": str(out),
                "policy": policy.to_dict(),
                "policy_hash": policy.content_hash,
                "base": policy.base,
                "rebased_from": rebased_from,
                **(
                    {}
                    if schedule is None
                    else {
                        "schedule": base["schedule"],
                        "schedule_hash": base["schedule_hash"],
                        "stage_epochs": base["stage_epochs"],
                    }
                ),
                "config": config.to_dict(),
                "final": final,
                "history": history,
                "files": {
                    "metrics_json": str(out / _METRICS_JSON),
                    "metrics_csv": str(out / _METRICS_CSV),
                    "checkpoint": str(out / CHECKPOINT_NAME),
                },
            }
        )
        return 0
    summary = f"done in {result.train_time_s:.1f}s: val_acc {_fmt(result.val_accuracy, '.4f')}"
    if result.test_accuracy is not None:
        summary += f"  test_acc {result.test_accuracy:.4f} (test error {100 * (1 - result.test_accuracy):.2f}%)"
    print(summary, flush=True)
    print(f"wrote {out / _METRICS_JSON}, {out / _METRICS_CSV}, {out / CHECKPOINT_NAME}", flush=True)
    return 0
