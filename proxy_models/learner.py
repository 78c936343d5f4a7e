"""One proxy run's model and its optimisation, step by step (:class:`Learner`): what
:func:`autoaug.proxy_models.train.train` (the run: data, checkpoints, resume) and the density
method's fold models (:mod:`autoaug.search.methods.density.fold_models`) train and evaluate with.

Recipe (AutoAugment's CIFAR training, per step): SGD with Nesterov momentum, weight decay on every
parameter, linear learning-rate warm-up then cosine decay to zero (:class:`WarmupCosine`),
optional label smoothing, autocast and gradient scaling where they apply, channels-last and
``torch.compile`` when asked. Its state (model, optimizer, schedule, scaler) is what a checkpoint
saves: a resumed run must equal an uninterrupted one.

The optimizer and the schedule are :class:`SGD` and :class:`StepSchedule`, not ``torch.optim``'s
``SGD`` and ``LambdaLR``: those import the compiler stack (``torch._dynamo``, 1.1-1.7 CPU-s in
every training process: every trial actor, calibration and re-scoring task) on their first step,
for nothing when nothing is compiled. They do the same arithmetic in the same order (bit for bit on the CPU:
``tests/proxy_models/test_learner_optim.py``) and save the same ``state_dict`` layout, so
checkpoints load either way.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from autoaug.core import failpoints
from autoaug.core.metrics import balanced_accuracy
from autoaug.proxy_models.models import build_model
from autoaug.proxy_models.precision import amp_dtype, amp_enabled, precision_name
from autoaug.proxy_models.train_config import TrainConfig

__all__ = ["WarmupCosine", "SGD", "StepSchedule", "EvalStats", "EpochStats", "Learner"]


# --------------------------------------------------------------------------------------------
# Learning-rate schedule
# --------------------------------------------------------------------------------------------
class WarmupCosine:
    """LR multiplier per optimizer step: linear warm-up to 1 over ``warmup_steps``, then cosine
    decay to 0 at ``total_steps`` (a picklable object, so ``LambdaLR.state_dict`` saves it)."""

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return 0.5 * (1.0 + math.cos(math.pi * progress))


# --------------------------------------------------------------------------------------------
# Optimizer and its schedule, without torch.optim's import of the compiler stack
# --------------------------------------------------------------------------------------------
class SGD:
    """SGD with momentum (optionally Nesterov) and L2 weight decay: ``torch.optim.SGD``'s
    arithmetic in the same order, each operation over every parameter at once (its ``foreach``
    path, its default on a GPU: a multi-tensor kernel an operation rather than one a parameter; on
    the CPU the same per-tensor operations as its "for-loop" default), and its ``param_groups`` /
    ``state_dict`` layout (what ``GradScaler`` and checkpoints read). One parameter group; no
    closure, no sparse gradients, no ``maximize``."""

    def __init__(
        self, params: Iterable[torch.Tensor], *, lr: float, momentum: float, nesterov: bool, weight_decay: float
    ) -> None:
        params = list(params)
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum requires a momentum")
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": params,
                "lr": lr,
                "momentum": momentum,
                "dampening": 0,
                "weight_decay": weight_decay,
                "nesterov": nesterov,
                "maximize": False,
                "foreach": None,
                "differentiable": False,
                "fused": None,
            }
        ]
        #: Per parameter: ``{"momentum_buffer": tensor}`` once it has had a gradient.
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    def zero_grad(self) -> None:
        """Drop the gradients (``torch.optim``'s ``set_to_none=True``)."""
        for p in self.param_groups[0]["params"]:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, momentum, decay, nesterov = group["lr"], group["momentum"], group["weight_decay"], group["nesterov"]
        dampening = group["dampening"]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        if decay != 0:
            grads = torch._foreach_add(grads, params, alpha=decay)
        if momentum != 0:
            states = [self.state.setdefault(p, {}) for p in params]
            if all("momentum_buffer" in st for st in states):
                bufs = [st["momentum_buffer"] for st in states]
                torch._foreach_mul_(bufs, momentum)
                torch._foreach_add_(bufs, grads, alpha=1 - dampening)
            else:  # the first step: each buffer starts as its gradient
                bufs = []
                for st, grad in zip(states, grads):
                    buf = st.get("momentum_buffer")
                    if buf is None:
                        buf = st["momentum_buffer"] = grad.detach().clone()
                    else:
                        buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                    bufs.append(buf)
            grads = torch._foreach_add(grads, bufs, alpha=momentum) if nesterov else bufs
        torch._foreach_add_(params, grads, alpha=-lr)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.SGD.state_dict``'s layout: parameters by index."""
        params = self.param_groups[0]["params"]
        index = {id(p): i for i, p in enumerate(params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items()},
            "param_groups": [{**group, "params": list(range(len(params)))}],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A state saved by :meth:`state_dict` or by ``torch.optim.SGD`` over the same parameters."""
        params = self.param_groups[0]["params"]
        (saved,) = state["param_groups"]
        if len(saved["params"]) != len(params):
            raise ValueError(f"optimizer state for {len(saved['params'])} parameters, this model has {len(params)}")
        self.param_groups[0].update({k: v for k, v in saved.items() if k != "params"})
        by_index = dict(zip(saved["params"], params))
        self.state = {}
        for i, s in state["state"].items():
            p = by_index[int(i)]
            self.state[p] = {
                k: (v.detach().to(device=p.device, dtype=p.dtype, copy=True) if isinstance(v, torch.Tensor) else v)
                for k, v in s.items()
            }


class StepSchedule:
    """The learning rate of :class:`SGD`'s group set to ``base_lr * factor(step)`` after each
    :meth:`step` (and ``factor(0)`` at the start): ``torch.optim.lr_scheduler.LambdaLR``'s
    behaviour and ``state_dict`` layout (``last_epoch`` counts the steps)."""

    def __init__(self, optimizer: SGD, factor: WarmupCosine) -> None:
        self.optimizer, self.factor = optimizer, factor
        group = optimizer.param_groups[0]
        group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"]]
        self.last_epoch = 0
        self._apply()

    def _apply(self) -> None:
        self.optimizer.param_groups[0]["lr"] = self.base_lrs[0] * self.factor(self.last_epoch)

    def step(self) -> None:
        self.last_epoch += 1
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        return {
            "base_lrs": list(self.base_lrs),
            "last_epoch": self.last_epoch,
            "_step_count": self.last_epoch + 1,
            "_last_lr": [self.optimizer.param_groups[0]["lr"]],
            "_get_lr_called_within_step": False,
            "_is_initial": False,
            "lr_lambdas": [dict(vars(self.factor))],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A state saved by :meth:`state_dict` or by ``LambdaLR`` with a :class:`WarmupCosine`."""
        self.base_lrs = list(state["base_lrs"])
        self.last_epoch = int(state["last_epoch"])
        (factor,) = state.get("lr_lambdas") or [None]
        if factor:
            vars(self.factor).update(factor)
        # (The learning rate itself is the optimizer's state, as with LambdaLR.)


@dataclasses.dataclass(frozen=True)
class EvalStats:
    """One evaluation pass (see :meth:`Learner.evaluate_per_class`): overall accuracy, mean
    cross-entropy, and per class (label order, one entry per model output) the images predicted
    right and the images seen."""

    accuracy: float
    loss: float
    seen: int
    class_correct: tuple[int, ...]
    class_total: tuple[int, ...]
    #: With ``per_image=True``: per image, in the loader's order (the split's validation indices),
    #: whether the prediction was right (bool) and its cross-entropy (float32): what a paired,
    #: per-image comparison of two runs on the same images reads (``benchmarks/score_noise.py``).
    image_correct: Any = None
    image_loss: Any = None

    @property
    def balanced_accuracy(self) -> float:
        return balanced_accuracy(self.class_correct, self.class_total)


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """Training statistics of one pass (see :meth:`Learner.train_epoch`)."""

    loss: float
    accuracy: float
    seen: int
    images_per_sec: float


def _warn(message: str) -> None:
    import warnings

    from autoaug.core.errors import AutoaugWarning

    warnings.warn(message, AutoaugWarning, stacklevel=3)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Learner:
    """The model and its optimisation for one :class:`TrainConfig`: SGD (Nesterov) + weight decay,
    per-step warm-up + cosine schedule, autocast/gradient scaling, channels-last and
    ``torch.compile`` of the training step as configured.

    :func:`train` drives it; benchmarks use it to time the very same step on synthetic batches.
    The model is initialised from torch's global RNG (``train`` seeds it with ``config.seed``).

    With ``config.compile`` the training step calls the compiled model (``self.step_model``;
    ``self.model`` stays the eager module, sharing its parameters: checkpoints, evaluation and
    :class:`TrainResult` see the plain model). Compiling happens at the first step; if it fails
    (no C++ compiler, an operator the compiler does not support), the step is redone eagerly
    from the state before it and the run goes on eagerly after one warning
    (``self.compiled`` is then False).
    """

    def __init__(
        self, config: TrainConfig, *, num_classes: int, steps_per_epoch: int, device: torch.device | str = "cpu"
    ) -> None:
        self.config = config
        self.device = device = torch.device(device)
        self.amp = amp_enabled(config, device)
        # float16 + loss scaling on CUDA; bfloat16 (no scaling needed) where CPUs support it.
        self.amp_dtype = (
            amp_dtype(config, device) if self.amp else (torch.float16 if device.type == "cuda" else torch.bfloat16)
        )
        #: What the run computes in, for the record: the autocast dtype's name, or "float32". With
        #: ``amp: "native"`` it depends on the machine (bfloat16 only on CPUs with native instructions),
        #: so two runs of one config on different machines may differ by it.
        self.precision = precision_name(self.amp, self.amp_dtype)
        self.channels_last = device.type == "cuda" if config.channels_last is None else config.channels_last
        model = build_model(config.model, num_classes=num_classes).to(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.step_model: nn.Module = model
        self.compiled = False
        self._compile_checked = True
        if config.compile:
            self._compile(config.compile)
        self.optimizer = SGD(
            model.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            nesterov=config.nesterov,
            weight_decay=config.weight_decay,
        )
        total_steps = steps_per_epoch * config.epochs
        warmup_steps = round(config.warmup_epochs * steps_per_epoch)
        self.scheduler = StepSchedule(self.optimizer, WarmupCosine(warmup_steps, total_steps))
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp and self.amp_dtype == torch.float16)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _compile(self, mode: bool | str) -> None:
        try:
            self.step_model = torch.compile(self.model, **({} if mode is True else {"mode": mode}))
        except Exception as exc:  # torch.compile refuses at once (e.g. an unsupported Python)
            self._compile_failed(exc)
            return
        self.compiled = True
        self._compile_checked = False  # the first step compiles; it falls back if that fails

    def _compile_failed(self, exc: BaseException) -> None:
        _warn(
            f"compile: torch.compile failed ({_first_line(exc)}); training eagerly (set compile=false to "
            "skip the attempt)"
        )
        self.step_model, self.compiled, self._compile_checked = self.model, False, True

    def _forward_backward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and logits of one batch, gradients computed (before the optimizer step)."""
        with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype, enabled=self.amp):
            logits = self.step_model(images)
            loss = self.criterion(logits, labels)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        return loss, logits

    def _first_compiled_step(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The first step through the compiled model, where compiling happens; on failure the
        model (batch-norm statistics included) and the RNG are put back and the step is redone
        eagerly."""
        saved = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        rng = torch.get_rng_state()
        try:
            out = self._forward_backward(images, labels)
        except Exception as exc:
            self.model.load_state_dict(saved)
            torch.set_rng_state(rng)
            self._compile_failed(exc)
            return self._forward_backward(images, labels)
        self._compile_checked = True
        return out

    def _to_device(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = images.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels.to(self.device, non_blocking=True).long().view(-1)

    def train_epoch(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> EpochStats:
        """One optimisation step per ``(images, labels)`` batch; one scheduler step per batch.

        ``images_per_sec`` is the steady-state rate: images after the first batch over the time
        after it arrived, so pipeline construction and prefetch warm-up do not count (a single
        batch falls back to the whole pass).
        """
        model, device = self.model, self.device
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = first_n = 0
        t0 = time.perf_counter()
        t_first: float | None = None
        for images, labels in batches:
            if t_first is None:
                t_first, first_n = time.perf_counter(), int(labels.shape[0])
            images, labels = self._to_device(images, labels)
            if self._compile_checked:
                loss, logits = self._forward_backward(images, labels)
            else:
                loss, logits = self._first_compiled_step(images, labels)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            n = labels.shape[0]
            loss_sum += loss.detach().double() * n
            correct += (logits.detach().argmax(1) == labels).sum()
            seen += n
            failpoints.hit("train.mid_epoch")
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t_end = time.perf_counter()
        if seen > first_n and t_first is not None and t_end > t_first:
            rate = (seen - first_n) / (t_end - t_first)
        else:
            rate = seen / (t_end - t0) if t_end > t0 else float("inf")
        if seen == 0:
            return EpochStats(loss=float("nan"), accuracy=float("nan"), seen=0, images_per_sec=0.0)
        return EpochStats(loss=loss_sum.item() / seen, accuracy=correct.item() / seen, seen=seen, images_per_sec=rate)

    def evaluate(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
        """(accuracy, mean cross-entropy without label smoothing) over one pass of ``batches``."""
        stats = self.evaluate_per_class(batches)
        return stats.accuracy, stats.loss

    def evaluate_per_class(
        self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *, per_image: bool = False
    ) -> EvalStats:
        """One pass of ``batches``: accuracy, mean cross-entropy (without label smoothing) and the
        per-class counts of right predictions and images (two ``bincount`` of the predictions the
        accuracy needs anyway); with ``per_image`` also each image's right/wrong and loss."""
        model, device = self.model, self.device
        model.eval()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        class_correct: torch.Tensor | None = None
        class_total: torch.Tensor | None = None
        seen = 0
        image_correct: list[torch.Tensor] = []
        image_loss: list[torch.Tensor] = []
        with torch.inference_mode():
            for images, labels in batches:
                images, labels = self._to_device(images, labels)
                with torch.autocast(device_type=device.type, dtype=self.amp_dtype, enabled=self.amp):
                    logits = model(images)
                losses = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
                loss_sum += losses.double().sum()
                k = logits.shape[1]
                if class_total is None:
                    class_correct = torch.zeros(k, dtype=torch.int64, device=device)
                    class_total = torch.zeros(k, dtype=torch.int64, device=device)
                right = logits.argmax(1) == labels
                class_total += torch.bincount(labels, minlength=k)[:k]
                class_correct += torch.bincount(labels[right], minlength=k)[:k]
                seen += labels.shape[0]
                if per_image:
                    image_correct.append(right.cpu())
                    image_loss.append(losses.cpu())
        if seen == 0 or class_total is None or class_correct is None:
            raise ValueError("the evaluation loader yielded no images")
        correct = tuple(int(c) for c in class_correct.tolist())
        per = {}
        if per_image:
            per = dict(image_correct=torch.cat(image_correct).numpy(), image_loss=torch.cat(image_loss).numpy())
        return EvalStats(
            accuracy=sum(correct) / seen,
            loss=loss_sum.item() / seen,
            seen=seen,
            class_correct=correct,
            class_total=tuple(int(t) for t in class_total.tolist()),
            **per,
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
