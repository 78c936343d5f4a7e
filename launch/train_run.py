"""What ``autoaug train`` runs, once :mod:`autoaug.launch.train_cmd` has read the flags into the
command's settings and the trainer's configuration: the policy resolved (and moved onto
``--base``), the output folder checked, the data checked and decoded (the preflight), the
training itself with one line per epoch, and ``metrics.json``, ``metrics.csv`` and the checkpoint
written as it goes."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoaug.core.errors import StoreError, UserInputError
from autoaug.core.location import atomic_write_local
from autoaug.core.metrics import epoch_record, metrics_json
from autoaug.core.progress import Progress
from autoaug.launch import preflight
from autoaug.launch.output import display_for, json_result
from autoaug.policies.bases import rebase
from autoaug.policies.reference import resolve
from autoaug.policies.schedule import Schedule
from autoaug.policies.store import default_store_uri
from autoaug.proxy_models.train_config import sizing_record

__all__ = ["run", "format_epoch"]

_METRICS_JSON = "metrics.json"
_METRICS_CSV = "metrics.csv"


def run(args: argparse.Namespace, command: dict[str, Any], config: Any) -> int:
    """Train as ``command`` (the command's settings) and ``config`` (the trainer's) say."""
    with display_for(args) as display, json_result(bool(args.json)) as emit:
        return _run(args, command, config, display, emit)


def _run(args: argparse.Namespace, command: dict[str, Any], config: Any, display: Progress, emit: Callable) -> int:
    resolved = _resolve_policy(str(command["policy"]), command["store"])
    # torch (2-3 s): imported once the policy is read, so that a wrong one is refused without it.
    from autoaug.proxy_models import train as trainer

    policy, schedule, rebased_from = _on_base(resolved, command["base"], str(command["policy"]))
    out, resume_from = _out_dir(command, policy, rebased_from, trainer.CHECKPOINT_NAME)
    requested = config
    # Sized to the data (resolved), data checked and decoded, --out writable; nothing created yet.
    config = preflight.for_train(config, out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"--out {str(out)!r}: cannot create the directory ({exc.strerror})") from None
    record = _record(requested, config, policy, rebased_from, schedule)
    history: list[dict[str, Any]] = []
    if resume_from is not None:  # the checkpoint carries the history of the epochs already done
        history.extend(_done_epochs(trainer, resume_from))
        display.log(f"resuming {out} after epoch {len(history)}/{config.epochs}")
    _announce(display, config, requested, command, policy, rebased_from, schedule, out)
    display.add("epochs", f"train {config.model}", total=config.epochs, unit="epochs", completed=len(history))
    try:
        result = trainer.train(
            config,
            policy if schedule is None else schedule,
            report=_reporter(trainer, display, config, out, record, history),
            checkpoint_dir=out,
            resume_from=resume_from,
            on_batch=_batch_bars(display) if display.live else None,
        )
    except (ValueError, FileNotFoundError, FloatingPointError) as exc:
        raise UserInputError(str(exc)) from None
    return _finish(args, emit, display, trainer, result, out, record, history, config)


def _resolve_policy(ref: str, store_uri: str | None) -> Any:
    """``--policy REF`` by the one precedence (:mod:`autoaug.policies.reference`); the store is
    opened only for a store reference."""
    try:
        return resolve(ref, store=store_uri or default_store_uri())
    except (StoreError, ValueError, LookupError, OSError) as exc:
        raise UserInputError(f"--policy {ref!r}: {exc}") from None


def _on_base(resolved: Any, base: str | None, ref: str) -> tuple[Any, Any, str | None]:
    """``(policy, schedule or None, the policy's own base when --base moved it)``: the resolved
    policy and, for a schedule (a PBA search's result, a schedule file: its stages switched at their
    epochs), each of its stages, moved onto ``base`` (:func:`_rebased`)."""
    stored = resolved.policy
    policy = _rebased(stored, base, ref)
    schedule = None
    if resolved.schedule is not None and not resolved.schedule.is_fixed:
        stages = [(s.start, _rebased(s.policy, base, ref)) for s in resolved.schedule.stages]
        schedule = Schedule(resolved.schedule.name, stages)
    return policy, schedule, stored.base if policy.base != stored.base else None


def _rebased(policy: Any, base: str | None, ref: str) -> Any:
    """``--base``: the policy moved onto ``base`` (:func:`autoaug.policies.bases.rebase`). A policy
    without sub-policies is a base alone (the presets none, crop, standard) and cannot be moved:
    asking for another base is refused, naming the preset to give instead."""
    if base is None or policy.base == base:
        return policy
    if policy.is_identity:
        raise UserInputError(
            f"--base {base}: policy {ref!r} has no sub-policies, it is the base {policy.base!r} alone and "
            f"keeps it; to train the base {base!r} alone give --policy {base}"
        )
    return rebase(policy, base)


def _out_dir(
    command: dict[str, Any], policy: Any, rebased_from: str | None, checkpoint: str
) -> tuple[Path, Path | None]:
    """``(--out, the folder to resume from or None)``: ``--out`` (default
    ``runs/train-POLICY-TIME``), refused when it holds a run and ``--resume`` was not given, or
    when ``--resume`` finds no checkpoint there."""
    label = policy.name + (f"-base-{policy.base}" if rebased_from else "")
    out = Path(command["out"]) if command["out"] else Path("runs") / f"train-{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    if command["resume"]:
        if not (out / checkpoint).is_file():
            raise UserInputError(f"--resume: no checkpoint at {out / checkpoint}")
        return out, out
    if (out / checkpoint).is_file():
        raise UserInputError(
            f"{out} already holds a training run; pass --resume to continue it or choose another --out"
        )
    return out, None


def _record(requested: Any, config: Any, policy: Any, rebased_from: str | None, schedule: Any) -> dict[str, Any]:
    """What ``metrics.json`` holds besides the history: the configuration resolved and as asked,
    the policy (and the schedule, its stages' first epochs)."""
    record = {
        "status": "running",
        "config": config.to_dict(),  # resolved: what the run computes
        "sizing": sizing_record(requested, config),
        "policy": policy.to_dict(),
        "policy_hash": policy.content_hash,
        "base": policy.base,
        "rebased_from": rebased_from,  # the policy's own base when --base moved it, else None
    }
    if schedule is not None:  # "policy" is then the last stage
        record.update(
            schedule=schedule.to_dict(),
            schedule_hash=schedule.content_hash,
            stage_epochs=schedule.start_epochs(config.epochs),
        )
    return record


def _done_epochs(trainer: Any, resume_from: Path) -> list[dict[str, Any]]:
    """The history of the epochs the checkpoint in ``resume_from`` holds."""
    try:
        return [epoch_record(row) for row in trainer.load_checkpoint(resume_from)["history"]]
    except (ValueError, FileNotFoundError) as exc:
        raise UserInputError(f"--resume: {exc}") from None


def _announce(
    display: Progress,
    config: Any,
    requested: Any,
    command: dict[str, Any],
    policy: Any,
    rebased_from: str | None,
    schedule: Any,
    out: Path,
) -> None:
    """The lines that say what is trained: model, data, policy, preset, epochs, seed, the schedule's
    stages, the split."""
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


def _reporter(
    trainer: Any, display: Progress, config: Any, out: Path, record: dict[str, Any], history: list[dict[str, Any]]
) -> Callable[[dict[str, Any]], None]:
    """The trainer's ``report``: after each epoch, its line and progress, and ``metrics.csv`` and
    ``metrics.json`` rewritten with the history so far."""

    def report(metrics: dict[str, Any]) -> None:
        row = epoch_record(metrics)
        history.append(row)
        display.log(format_epoch(metrics, config.epochs))
        display.update(
            "epochs", completed=metrics["epoch"], status=f"val_acc {_fmt(metrics.get('val_accuracy'), '.4f')}"
        )
        trainer.write_history_csv(history, out / _METRICS_CSV)
        _write_json(out / _METRICS_JSON, dict(record, history=history))

    return report


def _batch_bars(display: Progress) -> Callable[[int, int, int], None]:
    """The trainer's ``on_batch``: a bar of the epoch's batches, removed when the epoch ends."""

    def on_batch(epoch: int, batch: int, batches: int) -> None:
        if batch == 1:
            display.add("batches", f"  epoch {epoch}", total=batches, unit="batches")
        display.update("batches", completed=batch)
        if batch == batches:
            display.remove("batches")

    return on_batch


def _finish(
    args: argparse.Namespace,
    emit: Callable,
    display: Progress,
    trainer: Any,
    result: Any,
    out: Path,
    record: dict[str, Any],
    history: list[dict[str, Any]],
    config: Any,
) -> int:
    """The finished run: ``metrics.json`` (``"finished"``, the final numbers) and ``metrics.csv``
    written, then the result printed, or as the ``--json`` document."""
    checkpoint = str(out / trainer.CHECKPOINT_NAME)
    final = {
        "val_accuracy": result.val_accuracy,
        "val_loss": result.val_loss,
        "test_accuracy": result.test_accuracy,
        "test_loss": result.test_loss,
        "train_time_s": result.train_time_s,
        "split_fingerprint": result.split_fingerprint,
        "dataset_fingerprint": result.dataset_fingerprint,
        "checkpoint": checkpoint,
    }
    history[:] = [epoch_record(row) for row in result.history]
    trainer.write_history_csv(history, out / _METRICS_CSV)
    _write_json(out / _METRICS_JSON, dict(record, status="finished", history=history, final=final))
    display.stop()
    if args.json:
        schedule_keys = ("schedule", "schedule_hash", "stage_epochs") if "schedule" in record else ()
        emit(
            {
                "out": str(out),
                **{k: record[k] for k in ("policy", "policy_hash", "base", "rebased_from", *schedule_keys)},
                "config": config.to_dict(),
                "final": final,
                "history": history,
                "files": {
                    "metrics_json": str(out / _METRICS_JSON),
                    "metrics_csv": str(out / _METRICS_CSV),
                    "checkpoint": checkpoint,
                },
            }
        )
        return 0
    summary = f"done in {result.train_time_s:.1f}s: val_acc {_fmt(result.val_accuracy, '.4f')}"
    if result.test_accuracy is not None:
        summary += f"  test_acc {result.test_accuracy:.4f} (test error {100 * (1 - result.test_accuracy):.2f}%)"
    print(summary, flush=True)
    print(f"wrote {out / _METRICS_JSON}, {out / _METRICS_CSV}, {checkpoint}", flush=True)
    return 0


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
