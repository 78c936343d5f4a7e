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
import time
from pathlib import Path
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.core.location import atomic_write_local
from autoaug.core.metrics import epoch_record, metrics_json

_METRICS_JSON = "metrics.json"
_METRICS_CSV = "metrics.csv"


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from autoaug.proxy_models.train import PRESETS

    p = subparsers.add_parser(
        "train",
        help="train a model with one policy (proxy trial or final evaluation)",
        description=(
            "Train a model on --data augmented by --policy, print one line per epoch, and write "
            "metrics.json, metrics.csv and checkpoint.pt to --out. Flags override the --preset."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--policy", default="standard",
                   help="preset name (autoaugment-cifar10, randaugment:n=2,m=9, trivialaugment, none, standard...), "
                        "a policy JSON file, or a stored policy reference (name@N, name@latest, hash prefix)")
    p.add_argument("--store", metavar="URI", default=None,
                   help="policy store for stored references (default: $AUTOAUG_STORE or ~/.autoaug/policies)")
    p.add_argument("--data", required=True, help="training data: Parquet file/folder, ImageFolder root or cifar10:ROOT")
    p.add_argument("--test-data", default=None, help="test data (same forms); test accuracy is printed at the end")
    p.add_argument("--preset", default="cpu", choices=list(PRESETS), help="training preset (docs/training.md)")
    p.add_argument("--model", default=None, help="model name (wrn-40-2, wrn-28-10, resnet-8, resnet-20, ...)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate")
    p.add_argument("--train-size", type=int, default=None,
                   help="images in the reduced training split (0: all images not used for validation)")
    p.add_argument("--val-size", type=int, default=None, help="validation images (0: no validation)")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=None, help="model init, data order and augmentation seed")
    p.add_argument("--split-seed", type=int, default=None)
    p.add_argument("--num-threads", type=int, default=None, help="torch and DALI CPU threads")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None)
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output directory (default: runs/train-<policy>-<time>)")
    p.add_argument("--resume", action="store_true",
                   help="continue from --out/checkpoint.pt (same config and policy)")
    p.set_defaults(func=run)
    return p


def _resolve_policy(ref: str, store_uri: str | None) -> Any:
    """``--policy REF`` by the one precedence (:mod:`autoaug.policies.reference`); the store is
    opened only for a store reference."""
    from autoaug.core.errors import StoreError
    from autoaug.policies.reference import resolve
    from autoaug.policies.store import default_store_uri

    try:
        return resolve(ref, store=store_uri or default_store_uri()).policy
    except (StoreError, ValueError, LookupError, OSError) as exc:
        raise UserInputError(f"--policy {ref!r}: {exc}") from None


def _build_config(args: argparse.Namespace) -> Any:
    from autoaug.proxy_models.train import TrainConfig

    overrides = {
        "data": args.data,
        "test_data": args.test_data,
        "model": args.model,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "train_size": args.train_size,
        "val_size": args.val_size,
        "image_size": args.image_size,
        "seed": args.seed,
        "split_seed": args.split_seed,
        "num_threads": args.num_threads,
        "device": args.device,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    try:
        return TrainConfig.from_preset(args.preset, **overrides)
    except ValueError as exc:
        raise UserInputError(str(exc)) from None


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
    from autoaug.proxy_models.train import CHECKPOINT_NAME, train, write_history_csv

    config = _build_config(args)
    policy = _resolve_policy(args.policy, args.store)
    out = Path(args.out) if args.out else Path("runs") / f"train-{policy.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    resume_from = None
    if args.resume:
        if not (out / CHECKPOINT_NAME).is_file():
            raise UserInputError(f"--resume: no checkpoint at {out / CHECKPOINT_NAME}")
        resume_from = out
    elif (out / CHECKPOINT_NAME).is_file():
        raise UserInputError(f"{out} already holds a training run; pass --resume to continue it or choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"--out {str(out)!r}: cannot create the directory ({exc.strerror})") from None

    base = {
        "status": "running",
        "config": config.to_dict(),
        "policy": policy.to_dict(),
        "policy_hash": policy.content_hash,
    }
    history: list[dict[str, Any]] = []

    def report(metrics: dict[str, Any]) -> None:
        row = epoch_record(metrics)
        history.append(row)
        print(format_epoch(metrics, config.epochs), flush=True)
        write_history_csv(history, out / _METRICS_CSV)
        _write_json(out / _METRICS_JSON, dict(base, history=history))

    if resume_from is not None:
        # The checkpoint carries the history of the epochs already done.
        from autoaug.proxy_models.train import load_checkpoint

        try:
            history.extend(epoch_record(row) for row in load_checkpoint(resume_from)["history"])
        except (ValueError, FileNotFoundError) as exc:
            raise UserInputError(f"--resume: {exc}") from None
        print(f"resuming {out} after epoch {len(history)}/{config.epochs}", flush=True)
    print(
        f"training {config.model} on {config.data} with policy {policy.name!r} "
        f"({len(policy.sub_policies)} sub-policies, base {policy.base}); preset {args.preset}, "
        f"{config.epochs} epochs, seed {config.seed} -> {out}",
        flush=True,
    )
    try:
        result = train(config, policy, report=report, checkpoint_dir=out, resume_from=resume_from)
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
    summary = f"done in {result.train_time_s:.1f}s: val_acc {_fmt(result.val_accuracy, '.4f')}"
    if result.test_accuracy is not None:
        summary += f"  test_acc {result.test_accuracy:.4f} (test error {100 * (1 - result.test_accuracy):.2f}%)"
    print(summary, flush=True)
    print(f"wrote {out / _METRICS_JSON}, {out / _METRICS_CSV}, {out / CHECKPOINT_NAME}", flush=True)
    return 0
