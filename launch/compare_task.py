"""One run of ``autoaug compare``, as the Ray task :func:`train_one` (or several in a pack,
:func:`train_pack_runs`): train, evaluate on the test split, return what the run record keeps
(:func:`autoaug.launch.compare.runner.run_record`).

It lives outside the :mod:`autoaug.launch.compare` package on purpose: a worker imports the module
of the task it runs, and this one imports the trainer alone, not the package's statistics, plots
and Parquet (scipy, matplotlib, pyarrow: about 110 MiB and seconds more in every worker)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

import ray

from autoaug.core.metrics import epoch_record
from autoaug.policies.schedule import trainable_from_dict

__all__ = ["train_one", "train_pack_runs"]


def train_one(
    train_config: dict[str, Any], policy: dict[str, Any], queue: Any = None, key: str | None = None
) -> dict[str, Any]:
    """Body of one run (a Ray task): train, evaluate on the test split, return the record.

    With ``queue`` (a ``ray.util.queue.Queue``), ``(key, epoch, validation accuracy)`` is put on it
    after every epoch: the driver's progress display reads it (best effort: a full or gone queue
    never fails the run)."""
    # torch and the trainer, imported by the worker that runs this task: the driver only submits it.
    from autoaug.proxy_models.train import TrainConfig, train

    config = TrainConfig.from_dict(train_config)
    result = train(config, trainable_from_dict(policy), report=_reporter(queue, key))
    return _outcome(result)


def train_pack_runs(
    train_configs: Sequence[dict[str, Any]],
    policies: Sequence[dict[str, Any]],
    queue: Any = None,
    keys: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Body of several runs trained together as one pack (a Ray task; ``compare --pack``): their
    configurations differ in their seeds only (:func:`autoaug.proxy_models.pack.plan_packs`), each
    trained as :func:`train_one` would train it alone up to float rounding
    (:func:`autoaug.proxy_models.pack.train_pack`); each run's record as :func:`train_one`
    returns it, with ``pack``, the runs it trained beside."""
    from autoaug.proxy_models.pack import train_pack
    from autoaug.proxy_models.train import TrainConfig

    configs = [TrainConfig.from_dict(c) for c in train_configs]
    keys = list(keys) if keys is not None else [None] * len(configs)
    results = train_pack(
        configs[0],
        [trainable_from_dict(p) for p in policies],
        seeds=[c.seed for c in configs],
        reports=[_reporter(queue, key) for key in keys],
    )
    return [{**_outcome(r), "pack": len(configs)} for r in results]


def _reporter(queue: Any, key: str | None) -> Callable[[dict[str, Any]], None] | None:
    """What a run reports each epoch to: ``(key, epoch, validation accuracy)`` on ``queue`` (None:
    no queue, nothing reported)."""
    if queue is None:
        return None

    def report(metrics: dict[str, Any]) -> None:
        try:
            queue.put_nowait((key, int(metrics["epoch"]), metrics.get("val_accuracy")))
        except Exception:  # progress only
            pass

    return report


def _outcome(result: Any) -> dict[str, Any]:
    """What a run's record keeps of its :class:`~autoaug.proxy_models.train.TrainResult`."""
    try:
        node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # pragma: no cover - always inside Ray here
        node_id = None
    return {
        "test_accuracy": result.test_accuracy,
        "test_loss": result.test_loss,
        "test_balanced_accuracy": result.test_balanced_accuracy,
        # Per class, in label order: test images predicted right / test images (per-class accuracy).
        "test_class_correct": result.test_class_correct,
        "test_class_total": result.test_class_total,
        "val_accuracy": result.val_accuracy,
        "train_time_s": result.train_time_s,
        "precision": result.precision,
        "machine": result.machine,  # its kind (autoaug.core.machine): runs pair by seed only within one
        "history": [epoch_record(row) for row in result.history],
        "dataset_fingerprint": result.dataset_fingerprint,
        "split_fingerprint": result.split_fingerprint,
        "node_id": node_id,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }
