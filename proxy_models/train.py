"""The short training loop every trial runs (and the long one that evaluates a found policy).

The configuration and its presets live in :mod:`autoaug.proxy_models.train_config` (re-exported
here), the model's optimisation step by step in :mod:`autoaug.proxy_models.learner`; this module
runs it: data, loop, checkpoints and resume, one reproducibility contract with the learner -- a
resumed run must equal an uninterrupted one.

>>> from autoaug.proxy_models.train import TrainConfig, train
>>> cfg = TrainConfig.from_preset("smoke", data="path/to/train.parquet", epochs=2)
>>> result = train(cfg, policy, report=print, checkpoint_dir="runs/x")
>>> result.val_accuracy, result.history[-1]["train_loss"]

Recipe (AutoAugment's CIFAR training, per step): SGD with Nesterov momentum, weight decay on every
parameter, linear learning-rate warm-up then cosine decay to zero, optional label smoothing. Data
come from :class:`autoaug.proxy_models.pipeline.DaliLoader` (decode -> base crop/flip -> policy ->
normalize, on the CPU or the GPU) or, with ``loader: device``, from
:class:`autoaug.proxy_models.device_feed.DeviceFeed` (the same steps on images kept on the run's
device, batched torch operations); the model from :func:`autoaug.proxy_models.models.build_model`.

Reproducibility: the model is initialised from ``seed`` and the loader's data order and
augmentation draws come from ``seed`` (split membership from ``split_seed``), so two runs of one
config give identical metrics on one machine (CPU; see :class:`TrainConfig` ``deterministic`` for
the GPU). A run resumed from a checkpoint ends with exactly the metrics of an uninterrupted run.
Global torch state touched by training (RNG, thread count, deterministic-algorithm flags) is
restored on return.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autoaug.core import failpoints
from autoaug.core.location import atomic_write_local
from autoaug.core.machine import machine_kind
from autoaug.core.metrics import balanced_accuracy
from autoaug.proxy_models.learner import EvalStats, Learner
from autoaug.proxy_models.precision import amp_dtype, restore_tf32, set_tf32, tf32_state
from autoaug.proxy_models.train_config import (
    PRESETS,
    RESUMABLE_CHANGES,
    TrainConfig,
    eval_batch_size,
    resolve_config,
    sizing_record,
)

__all__ = [
    "PRESETS",
    "CHECKPOINT_NAME",
    "checkpoint_bytes",
    "TrainConfig",
    "resolve_config",
    "sizing_record",
    "TrainResult",
    "amp_dtype",
    "load_checkpoint",
    "eval_batch_size",
    "loader_threads",
    "train",
    "write_history_csv",
    "schedule_inputs",
]

CHECKPOINT_NAME = "checkpoint.pt"
_CHECKPOINT_FORMAT = 1


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns (``config``: the config resolved against the data, as trained)."""

    history: list[dict[str, Any]]
    val_accuracy: float | None
    test_accuracy: float | None
    split_fingerprint: str
    dataset_fingerprint: str
    train_time_s: float
    model: nn.Module
    config: TrainConfig | None = None
    test_loss: float | None = None
    checkpoint_path: str | None = None
    #: Per class (label order) of the test pass: images predicted right, and images. None without test data.
    test_class_correct: list[int] | None = None
    test_class_total: list[int] | None = None
    #: The precision the run trained in: the autocast dtype ("bfloat16", "float16") or "float32"
    #: (:attr:`autoaug.proxy_models.learner.Learner.precision`; machine-dependent under ``amp: native``).
    precision: str | None = None
    #: The kind of machine it trained on (:func:`autoaug.core.machine.machine_kind`: the CPU's model and
    #: numerics-changing instruction sets, or the GPU's model): one seed trains another model on another kind.
    machine: str | None = None

    @property
    def val_loss(self) -> float | None:
        return self.history[-1].get("val_loss") if self.history else None

    @property
    def test_balanced_accuracy(self) -> float | None:
        """Mean over the classes present in the test data of their accuracy (recall)."""
        if self.test_class_correct is None or self.test_class_total is None:
            return None
        return balanced_accuracy(self.test_class_correct, self.test_class_total)


def write_history_csv(history: list[Mapping[str, Any]], path: str | os.PathLike) -> None:
    """Write per-epoch metrics as a CSV table (one row per epoch, columns in first-seen order)."""
    columns: list[str] = []
    for row in history:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    atomic_write_local(path, buf.getvalue().encode())


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------
def checkpoint_bytes(state: dict[str, Any]) -> bytes:
    """A checkpoint's file content (what :func:`load_checkpoint` reads)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    atomic_write_local(path, checkpoint_bytes(state))


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a trainer checkpoint (a directory holding ``checkpoint.pt``, or the file itself).

    Raises ``FileNotFoundError`` when it is missing and ``ValueError`` when the file is not a
    checkpoint written by :func:`train`.
    """
    p = Path(path)
    file = p / CHECKPOINT_NAME if p.is_dir() else p
    if not file.is_file():
        raise FileNotFoundError(f"no trainer checkpoint at {file} (expected a directory holding {CHECKPOINT_NAME})")
    try:
        state = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:  # pickle / zip errors from a truncated or foreign file
        raise ValueError(f"{file} is not a readable trainer checkpoint: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != _CHECKPOINT_FORMAT:
        raise ValueError(f"{file} is not a trainer checkpoint of format {_CHECKPOINT_FORMAT}")
    return state


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def _use_deterministic_algorithms(mode: bool, *, warn_only: bool, compiling: bool) -> None:
    """``torch.use_deterministic_algorithms``, which also sets Inductor's ``deterministic`` option
    and so imports the compiler stack (``torch._inductor``, ``torch._dynamo``: 1.1-1.7 CPU-s a
    process). A run that does not compile, in a process that has not loaded Inductor, sets only
    the flag the kernels read."""
    if compiling or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


class _TorchState:
    """Set torch's process-wide knobs for a run and put them back afterwards."""

    def __init__(self, config: TrainConfig, device: torch.device) -> None:
        self.config, self.device = config, device

    def __enter__(self) -> _TorchState:
        self.saved = (
            torch.get_num_threads(),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        )
        if self.config.num_threads is not None:
            torch.set_num_threads(self.config.num_threads)
        # warn_only: an op without a deterministic kernel warns instead of failing the run.
        _use_deterministic_algorithms(self.config.deterministic, warn_only=True, compiling=bool(self.config.compile))
        if self.device.type == "cuda" and self.config.deterministic:
            # cuBLAS reproduces its results only with a fixed workspace (torch's reproducibility
            # notes); it reads this when the process creates its first cuBLAS handle, so a run
            # that is the process's first CUDA work is deterministic without the user setting it.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if self.device.type == "cuda":
            torch.backends.cudnn.deterministic = self.config.deterministic
            torch.backends.cudnn.benchmark = not self.config.deterministic
        self.saved_tf32 = None
        if self.device.type == "cuda" and self.config.tf32 is not None:
            self.saved_tf32 = tf32_state()
            set_tf32(self.config.tf32)
        return self

    def __exit__(self, *exc: object) -> None:
        threads, det, warn_only, cudnn_det, cudnn_bench = self.saved
        torch.set_num_threads(threads)
        _use_deterministic_algorithms(det, warn_only=warn_only, compiling=bool(self.config.compile))
        torch.backends.cudnn.deterministic = cudnn_det
        torch.backends.cudnn.benchmark = cudnn_bench
        if self.saved_tf32 is not None:
            restore_tf32(self.saved_tf32)


def _resolve_policy(policy: Any) -> Any:
    from autoaug import policies
    from autoaug.policies.schedule import Schedule

    if isinstance(policy, (policies.Policy, Schedule)):
        return policy
    if isinstance(policy, str):
        return policies.resolve_policy(policy)
    raise ValueError(
        f"policy must be a policies.Policy, a Schedule or a preset name / policy JSON path, got {type(policy).__name__}"
    )


def loader_threads(config: TrainConfig) -> int:
    """DALI worker threads of a run: ``config.loader_threads``, else its torch threads
    (``num_threads``, else torch's current setting)."""
    return config.loader_threads or config.num_threads or torch.get_num_threads()


def _make_loader(
    ds: Any, indices: Any, config: TrainConfig, device: torch.device, *, policy: Any, train: bool, num_threads: int
) -> Any:
    from autoaug.policies.schedule import Schedule
    from autoaug.proxy_models.pipeline import DaliLoader

    batch_size = config.batch_size if train else eval_batch_size(config)
    if train and config.loader == "device":
        from autoaug.proxy_models.device_feed import DeviceFeed

        first = policy.at(0, config.epochs) if isinstance(policy, Schedule) else policy  # (set_policy: the rest)
        return DeviceFeed(
            ds,
            indices,
            batch_size=batch_size,
            policy=first,
            seed=config.seed,
            image_size=config.image_size,
            device=device,
        )
    inputs = None
    if isinstance(policy, Schedule):
        inputs, policy = schedule_inputs(policy, config.image_size), policy.at(0, config.epochs)
    return DaliLoader(
        ds,
        indices,
        batch_size=batch_size,
        policy=policy,
        train=train,
        seed=config.seed,
        image_size=config.image_size,
        num_threads=num_threads,
        device=str(device),  # "cuda:N": DALI on the model's GPU
        policy_inputs=inputs,
    )


def schedule_inputs(schedule: Any, image_size: Any) -> Any:
    """The DALI policy step a :class:`~autoaug.policies.schedule.Schedule` trains through: its
    tables are pipeline inputs (:class:`~autoaug.policies.dali_apply.PolicyInputs`), switched at the
    stage boundaries without rebuilding the pipeline. The graph depends only on the stages' shape
    (every registered operation, the most sub-policies and operations per sub-policy), so runs whose
    schedules differ only in their policies -- the members of a PBA population, a run resumed with
    the later stages changed -- build one graph (and restore each other's DALI checkpoints)."""
    from autoaug.policies import ops
    from autoaug.policies.dali_apply import PolicyInputs

    policies = [s.policy for s in schedule.stages]
    return PolicyInputs(
        ops.OP_NAMES,
        max([1, *(len(p.sub_policies) for p in policies)]),
        max([1, *(p.max_ops_per_sub_policy for p in policies if p.sub_policies)]),
        image_size,
    )


def train(
    config: TrainConfig,
    policy: Any,
    report: Callable[[dict[str, Any]], Any] | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    resume_from: str | os.PathLike | None = None,
    on_batch: Callable[[int, int, int], Any] | None = None,
    split: Any = None,
    on_validate: Callable[[int, EvalStats, Any], Any] | None = None,
) -> TrainResult:
    """Train ``config.model`` on ``config.data`` augmented by ``policy``; see the module docs.

    ``policy``: a :class:`policies.Policy` (or a preset name / policy JSON path, resolved with
    :func:`policies.resolve_policy`), or a :class:`autoaug.policies.schedule.Schedule`: the policy
    of each epoch is ``schedule.at(epoch, config.epochs)``, its tables switched in the running DALI
    pipeline at the stage boundaries (:func:`schedule_inputs`; a one-stage schedule trains its
    policy through that same switchable step, a Policy through the fixed one). A schedule's
    checkpoint records the policy of every epoch trained; resuming it with a schedule whose
    earlier stages differ is refused, later stages may change. ``report(metrics)`` is called once after each epoch with
    ``epoch`` (1-based), ``train_loss``, ``train_accuracy``, ``val_loss``, ``val_accuracy``,
    ``lr``, ``images_per_sec`` (training images per second this epoch, after the first batch so
    that pipeline start-up does not count), ``epoch_time_s`` (wall time of the epoch: training +
    validation), ``time_total_s``; after the last epoch also ``test_accuracy``/``test_loss`` when
    ``config.test_data`` is set (the result also holds the test pass's per-class counts,
    ``test_class_correct`` / ``test_class_total``, and ``test_balanced_accuracy``). With ``checkpoint_dir`` the trainer first writes
    ``checkpoint_dir/checkpoint.pt`` atomically and adds ``metrics["checkpoint_dir"]``.
    ``resume_from``: a directory holding ``checkpoint.pt``; training continues after its epoch.
    ``on_batch(epoch, batch, batches)`` (optional) is called after each training step (1-based
    epoch and batch, batches per epoch): a progress display's hook.
    ``split``: a :class:`autoaug.proxy_models.splits.Split` of ``config.data`` to train and validate
    on instead of the reduced split the config describes (e.g. one fold of
    :func:`autoaug.proxy_models.splits.stratified_folds`); its fingerprint is recorded as usual.
    ``on_validate(epoch, stats, val_indices)`` (optional) is called after each validation with its
    :class:`EvalStats`, per-image outputs included, and the validation indices in their order.

    ``config`` is first sized to the data (:func:`resolve_config`: a split per class becomes a
    total, an automatic image size the data's own); the checkpoint and ``TrainResult.config`` hold
    the resolved config, so a run records what it computed.

    Bad config, data, policy or checkpoint raise (``ValueError``, ``FileNotFoundError``) before the
    first epoch.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if config.data is None:
        raise ValueError("TrainConfig.data is not set: give the training data source (e.g. a Parquet file)")
    if report is not None and not callable(report):
        raise ValueError(f"report must be callable, got {report!r}")
    policy = _resolve_policy(policy)
    device = config.resolve_device()
    checkpoint = None
    if resume_from is not None:
        checkpoint = load_checkpoint(resume_from)
        if config.is_resolved:  # else once the data have resolved it (a checkpoint holds a resolved config)
            _check_resumable(checkpoint, config, policy)

    with _TorchState(config, device), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return _train(config, policy, device, report, checkpoint_dir, checkpoint, on_batch, split, on_validate)


def _counted(batches: Any, on_batch: Callable[[int, int, int], Any], epoch: int, total: int) -> Any:
    """``batches``, calling ``on_batch(epoch, k, total)`` when batch ``k`` has been trained on
    (that is, when the next one is asked for, or the pass ends)."""
    k = 0
    for batch in batches:
        if k:
            on_batch(epoch, k, total)
        yield batch
        k += 1
    if k:
        on_batch(epoch, k, total)


def _check_resumable(checkpoint: dict[str, Any], config: TrainConfig, policy: Any) -> None:
    from autoaug.policies.schedule import Schedule

    differ = config.changed_fields(checkpoint["config"], ignore=RESUMABLE_CHANGES)
    if differ:
        details = ", ".join(f"{k}: checkpoint {before!r} vs now {now!r}" for k, before, now in differ)
        raise ValueError(f"cannot resume: the config differs from the checkpoint's ({details})")
    trained = checkpoint.get("epoch_policy_hashes")
    if isinstance(policy, Schedule) or trained is not None:
        if not isinstance(policy, Schedule) or trained is None:
            raise ValueError(
                "cannot resume: the checkpoint was trained with a "
                + ("fixed policy, not a schedule" if trained is None else "schedule; give it a schedule")
            )
        # The epochs already trained must have had the schedule's policies; later stages may differ
        # (a PBA member resumed from another's checkpoint with a perturbed policy).
        for epoch, trained_hash in enumerate(trained):
            want = policy.at(epoch, config.epochs)
            if want.content_hash != trained_hash:
                raise ValueError(
                    f"cannot resume: the checkpoint trained epoch {epoch + 1} with policy hash "
                    f"{trained_hash[:12]}, the schedule gives {want.name!r} ({want.content_hash[:12]}) there"
                )
        return
    if checkpoint["policy_hash"] != policy.content_hash:
        before = checkpoint["policy"]
        raise ValueError(
            f"cannot resume: the checkpoint was trained with policy {before.get('name')!r} (base "
            f"{before.get('base', 'standard')}, hash {checkpoint['policy_hash'][:12]}), not {policy.name!r} (base "
            f"{policy.base}, hash {policy.content_hash[:12]})"
        )


@dataclasses.dataclass
class _Run:
    """One run's data and progress, shared by the solo loop (:func:`_train`) and a pack's members
    (:mod:`autoaug.proxy_models.pack`): everything a run checks and opens before its first epoch,
    what a checkpoint restored, and what each epoch adds (history, policy hashes, train time)."""

    config: TrainConfig
    policy: Any
    split: Any
    dataset_fp: str
    num_classes: int
    train_loader: Any
    val_loader: Any
    test_loader: Any
    steps_per_epoch: int
    checkpoint: dict[str, Any] | None
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    start_epoch: int = 0
    train_time: float = 0.0
    epoch_hashes: list[str] = dataclasses.field(default_factory=list)
    current: Any = None  # the policy of the epoch being trained
    device: Any = None  # the torch.device it trains on (its machine kind: TrainResult.machine)

    @property
    def schedule(self) -> Any:
        """The :class:`~autoaug.policies.schedule.Schedule` trained (its policy switched per epoch), or None."""
        return self.policy if hasattr(self.policy, "stages") else None

    @property
    def done(self) -> bool:
        return self.start_epoch >= self.config.epochs

    def begin_epoch(self, epoch: int) -> None:
        """Set the loader to ``epoch``'s policy (a schedule's stage; the pipeline is kept). The
        failpoint ``train.later_epoch`` is hit from a run's second epoch on, whichever process
        trains it (docs/failpoints.md)."""
        if epoch > 0:
            failpoints.hit("train.later_epoch")
        schedule = self.schedule
        if schedule is not None:
            self.current = schedule.at(epoch, self.config.epochs)
            self.train_loader.set_policy(self.current)  # the tables of this epoch
            self.epoch_hashes.append(self.current.content_hash)
        else:
            self.current = self.policy

    def restore(self, device: torch.device) -> None:
        """The progress of the checkpoint this run resumes (the learner's state is its own);
        torch's RNG as it was after the checkpoint's epoch."""
        checkpoint = self.checkpoint
        if checkpoint is None:
            return
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if device.type == "cuda" and checkpoint["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(checkpoint["rng"]["cuda"], device)
        self.train_loader.load_state_dict(checkpoint["loader"])
        self.history = [dict(row) for row in checkpoint["history"]]
        self.start_epoch = int(checkpoint["epoch"])
        self.train_time = float(checkpoint["train_time_s"])
        self.epoch_hashes = list(checkpoint.get("epoch_policy_hashes", []))

    def epoch_metrics(self, epoch: int, stats: Any, lr: float) -> dict[str, Any]:
        """The trained epoch's metrics (validation filled in by the caller); a diverged run raises."""
        if stats.seen == 0:
            raise RuntimeError(f"epoch {epoch + 1}: the training loader yielded no batches")
        if not math.isfinite(stats.loss):
            raise FloatingPointError(
                f"training diverged in epoch {epoch + 1}: mean training loss is {stats.loss} "
                f"(lr={self.config.lr}; try a lower lr or more warm-up epochs)"
            )
        return {
            "epoch": epoch + 1,
            "train_loss": stats.loss,
            "train_accuracy": stats.accuracy,
            "val_loss": None,
            "val_accuracy": None,
            "lr": lr,
        }

    def end_epoch(
        self,
        epoch: int,
        metrics: dict[str, Any],
        *,
        images_per_sec: float,
        epoch_time: float,
        learner_state: Mapping[str, Any],
        device: torch.device,
        checkpoint_dir: str | os.PathLike | None,
    ) -> dict[str, Any]:
        """Record the epoch: timing, history and (with ``checkpoint_dir``) the checkpoint, written
        atomically before the metrics are returned for the report."""
        self.train_time += epoch_time
        metrics.update(images_per_sec=images_per_sec, epoch_time_s=epoch_time, time_total_s=self.train_time)
        ckpt_path = Path(checkpoint_dir) / CHECKPOINT_NAME if checkpoint_dir is not None else None
        if ckpt_path is not None:
            metrics["checkpoint_dir"] = str(checkpoint_dir)
        self.history.append(metrics)
        self.start_epoch = epoch + 1
        if ckpt_path is not None:
            _save_checkpoint(ckpt_path, self.checkpoint_state(epoch, learner_state, device))
        return dict(metrics)

    def checkpoint_state(self, epoch: int, learner_state: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
        """What a checkpoint after ``epoch`` holds (a resumed run continues exactly from it)."""
        schedule, current = self.schedule, self.current
        return {
            "format": _CHECKPOINT_FORMAT,
            "epoch": epoch + 1,
            "config": self.config.to_dict(),
            "policy": current.to_dict(),
            "policy_hash": current.content_hash,
            **(
                {}
                if schedule is None
                else {"schedule": schedule.to_dict(), "epoch_policy_hashes": list(self.epoch_hashes)}
            ),
            "dataset_fingerprint": self.dataset_fp,
            "split_fingerprint": self.split.fingerprint,
            **learner_state,
            # Epoch counter + DALI's own checkpoint of its random operators (the device feed:
            # its generator's state), so a resumed run sees the data order and augmentation
            # draws of the uninterrupted one.
            "loader": self.train_loader.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            },
            "history": self.history,
            "train_time_s": self.train_time,
        }

    def result(
        self, model: nn.Module, test_stats: EvalStats | None, precision: str, checkpoint_dir: Any
    ) -> TrainResult:
        final = self.history[-1] if self.history else {}
        return TrainResult(
            history=self.history,
            val_accuracy=final.get("val_accuracy"),
            test_accuracy=test_stats.accuracy if test_stats is not None else None,
            split_fingerprint=self.split.fingerprint,
            dataset_fingerprint=self.dataset_fp,
            train_time_s=self.train_time,
            model=model,
            config=self.config,
            test_loss=test_stats.loss if test_stats is not None else None,
            checkpoint_path=str(Path(checkpoint_dir) / CHECKPOINT_NAME) if checkpoint_dir is not None else None,
            test_class_correct=list(test_stats.class_correct) if test_stats is not None else None,
            test_class_total=list(test_stats.class_total) if test_stats is not None else None,
            precision=precision,
            machine=machine_kind(self.device if self.device is not None else "cpu"),
        )


def _open_run(
    config: TrainConfig,
    policy: Any,
    device: torch.device,
    checkpoint: dict[str, Any] | None,
    given_split: Any = None,
    *,
    build_val: bool = True,
) -> _Run:
    """Everything of a run that can fail, before its first epoch: the data opened and checked,
    the config sized to them, the split, the memory a run needs, the loaders; a checkpoint to
    resume checked against them. ``build_val=False``: no validation loader (a pack's members share
    one, :mod:`autoaug.proxy_models.pack`)."""
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.memory import check_memory
    from autoaug.proxy_models.splits import config_split

    num_threads = loader_threads(config)  # DALI's; torch's were set by _TorchState
    ds = open_dataset(config.data, split="train")
    if not config.is_resolved:
        config = resolve_config(config, ds)
        if checkpoint is not None:
            _check_resumable(checkpoint, config, policy)
    dataset_fp = ds.fingerprint()
    if given_split is not None:
        split = dataclasses.replace(given_split, dataset_fingerprint=dataset_fp)
        if len(split.train) and (split.train.min() < 0 or max(split.train.max(), split.val.max(initial=0)) >= len(ds)):
            raise ValueError(f"the given split indexes beyond the {len(ds)} images of {config.data}")
    else:
        split = config_split(ds, config, dataset_fingerprint=dataset_fp)  # grouped by config.group_by
    if checkpoint is not None:
        if checkpoint["dataset_fingerprint"] != dataset_fp:
            raise ValueError(
                f"cannot resume: {config.data} is not the dataset the checkpoint was trained on "
                f"(fingerprint {dataset_fp[:12]} vs {checkpoint['dataset_fingerprint'][:12]})"
            )
        if checkpoint["split_fingerprint"] != split.fingerprint:
            raise ValueError("cannot resume: the train/validation split differs from the checkpoint's")
    test_ds = None
    if config.test_data is not None:
        test_ds = open_dataset(config.test_data, split="test")
        if tuple(test_ds.classes) != tuple(ds.classes):
            raise ValueError(
                f"test data {config.test_data} has classes {list(test_ds.classes)[:10]}, "
                f"but the training data has {list(ds.classes)[:10]}"
            )
    check_memory(
        config,
        num_classes=ds.num_classes,
        train_images=len(split.train),
        val_images=len(split.val),
        test_images=len(test_ds) if test_ds is not None else 0,
        eval_batch_size=eval_batch_size(config),
        cuda=device.type == "cuda",
    )  # before anything is decoded: one line, not the kernel's kill
    train_loader = _make_loader(ds, split.train, config, device, policy=policy, train=True, num_threads=num_threads)
    val_loader = None
    if build_val and len(split.val):
        val_loader = _make_loader(ds, split.val, config, device, policy=None, train=False, num_threads=num_threads)
    test_loader = None
    if test_ds is not None:
        import numpy as np

        test_loader = _make_loader(
            test_ds,
            np.arange(len(test_ds), dtype=np.int64),
            config,
            device,
            policy=None,
            train=False,
            num_threads=num_threads,
        )
    steps_per_epoch = len(train_loader)
    if steps_per_epoch < 1:
        raise ValueError(f"the training split of {len(split.train)} images gives no batch of {config.batch_size}")
    return _Run(
        config=config,
        policy=policy,
        split=split,
        dataset_fp=dataset_fp,
        num_classes=ds.num_classes,
        train_loader=train_loader,
        val_loader=val_loader,
        test_loader=test_loader,
        steps_per_epoch=steps_per_epoch,
        checkpoint=checkpoint,
        device=device,
    )


def _train(
    config: TrainConfig,
    policy: Any,
    device: torch.device,
    report: Callable[[dict[str, Any]], Any] | None,
    checkpoint_dir: str | os.PathLike | None,
    checkpoint: dict[str, Any] | None,
    on_batch: Callable[[int, int, int], Any] | None = None,
    given_split: Any = None,
    on_validate: Callable[[int, EvalStats, Any], Any] | None = None,
) -> TrainResult:
    run = _open_run(config, policy, device, checkpoint, given_split)
    config = run.config

    # ---- model and optimisation -------------------------------------------------------------
    torch.manual_seed(config.seed)  # model initialisation (the loaders are seeded separately)
    learner = Learner(config, num_classes=run.num_classes, steps_per_epoch=run.steps_per_epoch, device=device)
    if checkpoint is not None:
        learner.load_state_dict(checkpoint)
    run.restore(device)

    test_stats: EvalStats | None = None
    for epoch in range(run.start_epoch, config.epochs):
        run.begin_epoch(epoch)
        t0 = time.perf_counter()
        batches = (
            run.train_loader
            if on_batch is None
            else _counted(run.train_loader, on_batch, epoch + 1, run.steps_per_epoch)
        )
        stats = learner.train_epoch(batches)
        metrics = run.epoch_metrics(epoch, stats, learner.lr)
        if run.val_loader is not None and config.validates(epoch + 1):
            val_stats = learner.evaluate_per_class(run.val_loader, per_image=on_validate is not None)
            metrics["val_accuracy"], metrics["val_loss"] = val_stats.accuracy, val_stats.loss
            if on_validate is not None:
                on_validate(epoch + 1, val_stats, run.split.val)
        if epoch + 1 == config.epochs and run.test_loader is not None:
            test_stats = learner.evaluate_per_class(run.test_loader)
            metrics["test_accuracy"], metrics["test_loss"] = test_stats.accuracy, test_stats.loss
        reported = run.end_epoch(
            epoch,
            metrics,
            images_per_sec=stats.images_per_sec,
            epoch_time=time.perf_counter() - t0,
            learner_state=learner.state_dict(),
            device=device,
            checkpoint_dir=checkpoint_dir,
        )
        if report is not None:
            report(reported)

    if run.test_loader is not None and test_stats is None:
        # Resumed from a checkpoint written after the last epoch: only the test pass is left.
        test_stats = learner.evaluate_per_class(run.test_loader)
    return run.result(learner.model, test_stats, learner.precision, checkpoint_dir)
