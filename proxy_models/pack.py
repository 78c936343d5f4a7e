"""A pack: several proxy runs ("members") trained in lockstep by one process on one device.

A trial of a search keeps a GPU a few percent busy: its host side (a copy per batch, about a
thousand small kernel launches a step, the optimizer's loop over tensors) bounds it, not the
arithmetic. A pack trains K members as one stacked model instead: every parameter, buffer and
momentum buffer of the K models is one tensor with a leading member axis, the forward and backward
pass is one ``torch.func.vmap`` over ``functional_call`` (its batching rule for convolutions is a
grouped convolution, one group per member, as in HFTA; batch norm keeps per-member statistics), and
the optimizer step is one pass over the stacked tensors, each member at its own learning rate.
The launches of a step are those of one run, whatever K.

Each member is a run of its own: its :class:`~autoaug.proxy_models.train_config.TrainConfig`
(members of one pack differ only in ``seed``), its policy or schedule, its data stream (its own
:class:`~autoaug.proxy_models.pipeline.DaliLoader`, or with ``loader: device`` its own
:class:`~autoaug.proxy_models.device_feed.DeviceFeed`, the batches made on the pack's device, all
members' at once: the batches its solo run would see), its
initialisation, history, checkpoints and reports, in the trainer's own checkpoint format: a member's
checkpoint resumes as a solo run and a solo run's checkpoint as a member. Members share one
validation loader when their validation images are the same. Members may join and leave between
epochs (:meth:`Pack.add`, :meth:`Pack.remove`) and a round may train any subset of them, each at its
own epoch (:meth:`Pack.train_epoch`): what a search's pack server does when the scheduler stops a
member and the next candidate takes its slot.

What a member computes does not depend on its pack-mates or on K beyond float rounding (a grouped
convolution sums in another order than a plain one); a round of one member trains it with the
solo run's :class:`~autoaug.proxy_models.learner.Learner`, bit for bit.

>>> results = train_pack(config, [policy_a, policy_b, policy_c])   # three members, one process

Precision: float32 or bfloat16 autocast (no per-step host synchronisation). float16 needs a
gradient scaler whose skipped steps would couple the members; a pack refuses it in one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from autoaug.core import failpoints
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.device_feed import DeviceFeed, serve_together
from autoaug.proxy_models.learner import EpochStats, EvalStats, Learner, WarmupCosine
from autoaug.proxy_models.models import build_model
from autoaug.proxy_models.precision import amp_dtype, amp_enabled, precision_name
from autoaug.proxy_models.train import (
    RESUMABLE_CHANGES,
    TrainConfig,
    TrainResult,
    _check_resumable,
    _make_loader,
    _open_run,
    _resolve_policy,
    _Run,
    _TorchState,
    checkpoint_bytes,
    load_checkpoint,
    loader_threads,
)

__all__ = [
    "PACK_FIELDS_FREE",
    "Member",
    "Pack",
    "PackLearner",
    "even_packs",
    "pack_compatible",
    "plan_packs",
    "train_pack",
]

#: The configuration fields in which the members of one pack may differ.
PACK_FIELDS_FREE = ("seed",)


def plan_packs(configs: Sequence[TrainConfig], k: int, *, at_once: int = 1) -> list[list[int]]:
    """Runs of ``configs`` (their indices) in packs of at most ``k``: runs whose configurations
    differ in :data:`PACK_FIELDS_FREE` only share a pack, in their order, in as few packs as hold
    them but no fewer than ``at_once`` (the packs that train at once: none idles while another
    holds two runs' work) and as even as can be (7 runs in packs of 4: 4 and 3; a pack's members
    train in lockstep, so its slowest sets its time)."""
    if k < 1 or at_once < 1:
        raise ValueError(f"plan_packs: k {k} and at_once {at_once} must be 1 or more")
    groups: dict[str, list[int]] = {}
    for i, config in enumerate(configs):
        fields = {n: v for n, v in config.to_dict().items() if n not in PACK_FIELDS_FREE}
        groups.setdefault(json.dumps(fields, sort_keys=True, default=str), []).append(i)
    return [[members[i] for i in pack] for members in groups.values() for pack in even_packs(len(members), k, at_once)]


def even_packs(n: int, k: int, at_once: int = 1) -> list[list[int]]:
    """``range(n)`` in order, in as few packs of at most ``k`` as hold them but no fewer than
    ``at_once`` (and none empty), as even as can be (7 in packs of 4: 4 and 3)."""
    if k < 1 or at_once < 1:
        raise ValueError(f"even_packs: k {k} and at_once {at_once} must be 1 or more")
    count = max(math.ceil(n / k), min(n, at_once))
    size, extra = divmod(n, count) if count else (0, 0)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(range(start, end)))
        start = end
    return out


def pack_compatible(a: TrainConfig, b: TrainConfig) -> list[tuple[str, Any, Any]]:
    """The fields (name, a's, b's) that keep runs of ``a`` and ``b`` out of one pack: every field
    but :data:`PACK_FIELDS_FREE` (and what a resumed run may change) must be equal."""
    changed = a.changed_fields(b.to_dict(), ignore=(*PACK_FIELDS_FREE, *RESUMABLE_CHANGES))
    return [(name, now, saved) for name, saved, now in changed]


# --------------------------------------------------------------------------------------------
# The stacked model and its optimisation
# --------------------------------------------------------------------------------------------
class PackLearner:
    """K members' models stacked (a leading member axis on every tensor) and trained in lockstep:
    :class:`~autoaug.proxy_models.learner.Learner`'s recipe (SGD with Nesterov momentum and
    weight decay, warm-up + cosine per step, label smoothing, autocast) for all of them at once.

    State goes in and out per member in :meth:`Learner.state_dict`'s layout (:meth:`load`,
    :meth:`states`), so members can move between packs, and between a pack and a solo run.
    """

    def __init__(
        self, config: TrainConfig, *, num_classes: int, steps_per_epoch: int, device: torch.device | str = "cpu"
    ) -> None:
        from torch.func import functional_call, vmap

        self.config = config
        self.device = device = torch.device(device)
        self.amp = amp_enabled(config, device)
        wanted = config.amp_dtype or ("float16" if device.type == "cuda" else "bfloat16")
        if self.amp and wanted == "float16":
            raise ValueError(
                "a pack trains in float32 or bfloat16: float16 needs a gradient scaler, whose skipped steps "
                "would tie the members together (set amp_dtype: bfloat16, or train one trial per process)"
            )
        self.amp_dtype = amp_dtype(config, device) if self.amp else torch.bfloat16
        if self.amp and self.amp_dtype == torch.float16:  # bfloat16 asked of a GPU without it
            raise ValueError("a pack trains in float32 or bfloat16: this GPU has no bfloat16 (set amp: false)")
        self.precision = precision_name(self.amp, self.amp_dtype)
        self.template = build_model(config.model, num_classes=num_classes).to(device)
        if self.amp:
            _autocast_modules(self.template, self.amp_dtype)
        self.num_classes = num_classes
        self.param_names = [n for n, _ in self.template.named_parameters()]
        self.buffer_names = [n for n, _ in self.template.named_buffers()]
        self.state_names = list(self.template.state_dict())
        self.schedule = WarmupCosine(round(config.warmup_epochs * steps_per_epoch), steps_per_epoch * config.epochs)
        self.steps_per_epoch = steps_per_epoch
        self.criterion = nn.CrossEntropyLoss(label_smoothing=config.label_smoothing, reduction="none")
        template = self.template

        def forward(params: dict, buffers: dict, images: torch.Tensor) -> torch.Tensor:
            return functional_call(template, (params, buffers), (images,))

        self._train_forward = vmap(forward, in_dims=(0, 0, 0), randomness="error")
        self._eval_forward = vmap(forward, in_dims=(0, 0, None), randomness="error")
        self.size = 0

    # ---- state in and out ------------------------------------------------------------------
    def load(self, states: Sequence[Mapping[str, Any]]) -> None:
        """Stack the members' states (each :meth:`Learner.state_dict`'s layout)."""
        if not states:
            raise ValueError("a pack needs at least one member")
        dev = self.device
        self.size = k = len(states)
        models = [s["model"] for s in states]
        self.params = {
            n: torch.stack([m[n].detach().to(dev) for m in models]).contiguous().requires_grad_(True)
            for n in self.param_names
        }
        self.buffers = {n: torch.stack([m[n].to(dev) for m in models]).contiguous() for n in self.buffer_names}
        # Momentum: a member that has not stepped yet starts from a zero buffer, which the first
        # step turns into its gradient exactly (0 * m + g), as a fresh buffer would be.
        self.momentum = {}
        for i, name in enumerate(self.param_names):
            bufs = []
            for s in states:
                held = s["optimizer"]["state"].get(i, s["optimizer"]["state"].get(str(i), {})).get("momentum_buffer")
                bufs.append(held.to(dev) if held is not None else torch.zeros_like(self.params[name][0]))
            self.momentum[name] = torch.stack(bufs).contiguous()
        self.steps = [int(s["scheduler"]["last_epoch"]) for s in states]
        self.base_lrs = [float(s["scheduler"]["base_lrs"][0]) for s in states]
        self.group = {k2: v for k2, v in states[0]["optimizer"]["param_groups"][0].items() if k2 != "params"}
        self.scaler_state = dict(states[0].get("scaler") or {})
        # The optimizer's tensors as lists (one multi-tensor kernel an operation, not one a
        # parameter), and each member's slices of the parameters and of the step's update.
        self._param_list = [self.params[n] for n in self.param_names]
        self._momentum_list = [self.momentum[n] for n in self.param_names]
        self._update = [torch.empty_like(p, requires_grad=False) for p in self._param_list]
        self._member_params = [[p[j] for p in self._param_list] for j in range(k)]
        self._member_update = [[u[j] for u in self._update] for j in range(k)]

    def states(self) -> list[dict[str, Any]]:
        """Each member's state, :meth:`Learner.state_dict`'s layout (copies)."""
        out = []
        for k in range(self.size):
            model = {}
            for name in self.state_names:
                src = self.params[name] if name in self.params else self.buffers[name]
                model[name] = src[k].detach().clone()
            stepped = self.steps[k] > 0
            lr = self.base_lrs[k] * self.schedule(self.steps[k])
            opt_state = (
                {i: {"momentum_buffer": self.momentum[n][k].clone()} for i, n in enumerate(self.param_names)}
                if stepped
                else {}
            )
            out.append(
                {
                    "model": model,
                    "optimizer": {
                        "state": opt_state,
                        "param_groups": [{**self.group, "lr": lr, "params": list(range(len(self.param_names)))}],
                    },
                    "scheduler": _scheduler_state(self.base_lrs[k], self.steps[k], lr, self.schedule),
                    "scaler": dict(self.scaler_state),
                }
            )
        return out

    def lr(self, k: int) -> float:
        return self.base_lrs[k] * self.schedule(self.steps[k])

    # ---- one epoch -------------------------------------------------------------------------
    def lrs(self, step: int = 0) -> list[float]:
        """Each member's learning rate at ``step`` of this epoch (host numbers: no device read)."""
        return [self.base_lrs[k] * self.schedule(self.steps[k] + step) for k in range(self.size)]

    def forward_backward(
        self, images: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """One batch per member (``images`` K x N x C x H x W, ``labels`` K x N): each member's
        mean loss (K), the logits (K x N x classes) and the gradients of the parameters (stacked,
        in :attr:`param_names` order; a member's slice is its own loss's gradient)."""
        k, n = labels.shape
        logits = self._train_forward(self.params, self.buffers, images)  # (autocast: _autocast_modules)
        losses = self.criterion(logits.float().reshape(k * n, -1), labels.reshape(-1)).view(k, n).mean(1)
        grads = torch.autograd.grad(losses.sum(), [self.params[name] for name in self.param_names])
        return losses, logits, grads

    @torch.no_grad()
    def apply_gradients(self, grads: Sequence[torch.Tensor], lrs: Sequence[float]) -> None:
        """One SGD step of every member (``lrs``: their K learning rates, :meth:`lrs`):
        :class:`Learner`'s arithmetic (L2 weight decay, momentum, Nesterov; the parameter moved by
        ``-lr`` times the update) on the stacked tensors, each operation one multi-tensor kernel
        over every parameter (``torch._foreach_*``, as ``torch.optim.SGD``'s ``foreach`` path),
        then one per member for its learning rate."""
        cfg = self.config
        momentum, decay, nesterov = cfg.momentum, cfg.weight_decay, cfg.nesterov
        grads = list(grads)
        if decay != 0:
            grads = torch._foreach_add(grads, self._param_list, alpha=decay)
        torch._foreach_mul_(self._momentum_list, momentum)
        torch._foreach_add_(self._momentum_list, grads)
        torch._foreach_copy_(self._update, grads if nesterov else self._momentum_list)
        if nesterov:
            torch._foreach_add_(self._update, self._momentum_list, alpha=momentum)
        for params, update, lr in zip(self._member_params, self._member_update, lrs):
            torch._foreach_add_(params, update, alpha=-lr)

    def train_epoch(self, iterables: Sequence[Iterable[tuple[torch.Tensor, torch.Tensor]]]) -> list[EpochStats]:
        """One epoch of every member: step ``i`` trains member ``k`` on the ``i``-th batch of
        ``iterables[k]``. Loss and accuracy are summed on the device and read once at the end."""
        if len(iterables) != self.size:
            raise ValueError(f"{len(iterables)} data streams for a pack of {self.size}")
        k, dev = self.size, self.device
        self.template.train()
        loss_sum = torch.zeros(k, dtype=torch.float64, device=dev)
        correct = torch.zeros(k, dtype=torch.int64, device=dev)
        seen = step = 0
        iterators = [iter(it) for it in iterables]
        t0 = time.perf_counter()
        t_first: float | None = None
        first_n = 0
        for batch in zip(*iterators):
            if t_first is None:
                t_first = time.perf_counter()
                first_n = int(batch[0][1].shape[0])
            images = torch.stack([b[0] for b in batch]).to(dev, non_blocking=True)
            labels = torch.stack([b[1].view(-1) for b in batch]).to(dev, non_blocking=True).long()
            n = labels.shape[1]
            losses, logits, grads = self.forward_backward(images, labels)
            self.apply_gradients(grads, self.lrs(step))
            with torch.no_grad():
                loss_sum += losses.detach().double() * n
                correct += (logits.detach().argmax(-1) == labels).sum(1)
            seen += n
            step += 1
            failpoints.hit("pack.mid_epoch")
        for it in iterators:  # every stream to its end (DALI's epoch), and all of one length
            for _ in it:
                raise ValueError("the members' data streams differ in length: a pack's members need one batch count")
        if step != self.steps_per_epoch:
            raise ValueError(f"an epoch of {step} steps, the pack was built for {self.steps_per_epoch}")
        self.steps = [s + step for s in self.steps]
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t_end = time.perf_counter()
        if seen > first_n and t_first is not None and t_end > t_first:
            rate = (seen - first_n) / (t_end - t_first)
        else:
            rate = seen / (t_end - t0) if t_end > t0 else float("inf")
        losses_h, correct_h = loss_sum.tolist(), correct.tolist()
        return [
            EpochStats(loss=losses_h[j] / seen, accuracy=correct_h[j] / seen, seen=seen, images_per_sec=rate)
            for j in range(k)
        ]

    def evaluate_per_class(
        self,
        batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
        members: Sequence[int] | None = None,
        *,
        per_image: bool = False,
    ) -> list[EvalStats]:
        """One pass of ``batches`` (the same images for every member) for ``members`` (indices;
        None: all): each member's :class:`EvalStats`, as :meth:`Learner.evaluate_per_class` gives."""
        dev, c = self.device, self.num_classes
        chosen = list(range(self.size)) if members is None else list(members)
        k = len(chosen)
        if k == 0:
            return []
        if k == self.size:
            params, buffers = self.params, self.buffers
        else:
            index = torch.tensor(chosen, device=dev)
            params = {n: p.detach().index_select(0, index) for n, p in self.params.items()}
            buffers = {n: b.index_select(0, index) for n, b in self.buffers.items()}
        self.template.eval()
        loss_sum = torch.zeros(k, dtype=torch.float64, device=dev)
        class_correct = torch.zeros(k * c, dtype=torch.int64, device=dev)
        class_total = torch.zeros(c, dtype=torch.int64, device=dev)
        offsets = (torch.arange(k, device=dev) * c).view(k, 1)
        seen = 0
        image_correct: list[torch.Tensor] = []
        image_loss: list[torch.Tensor] = []
        with torch.inference_mode():
            for images, labels in batches:
                images = images.to(dev, non_blocking=True)
                labels = labels.to(dev, non_blocking=True).long().view(-1)
                logits = self._eval_forward(params, buffers, images)  # (k, n, classes)
                n = labels.shape[0]
                losses = nn.functional.cross_entropy(
                    logits.float().reshape(k * n, -1), labels.repeat(k), reduction="none"
                ).view(k, n)
                loss_sum += losses.double().sum(1)
                right = logits.argmax(-1) == labels
                class_total += torch.bincount(labels, minlength=c)[:c]
                class_correct += torch.bincount((labels + offsets)[right], minlength=k * c)[: k * c]
                seen += n
                if per_image:
                    image_correct.append(right.cpu())
                    image_loss.append(losses.cpu())
        if seen == 0:
            raise ValueError("the evaluation loader yielded no images")
        totals = tuple(int(t) for t in class_total.tolist())
        corrects = class_correct.view(k, c).tolist()
        losses_h = loss_sum.tolist()
        out = []
        for j in range(k):
            per = {}
            if per_image:
                per = dict(
                    image_correct=torch.cat([r[j] for r in image_correct]).numpy(),
                    image_loss=torch.cat([r[j] for r in image_loss]).numpy(),
                )
            right_j = tuple(int(v) for v in corrects[j])
            out.append(
                EvalStats(
                    accuracy=sum(right_j) / seen,
                    loss=losses_h[j] / seen,
                    seen=seen,
                    class_correct=right_j,
                    class_total=totals,
                    **per,
                )
            )
        return out


class _LowPrecisionConv2d(nn.Conv2d):
    """A convolution computed in ``lower`` (its input and its parameters cast to it, as autocast
    casts them): ``torch.autocast`` does not reach the operations of a ``vmap``."""

    lower: torch.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(self.lower) if self.bias is not None else None
        return self._conv_forward(x.to(self.lower), self.weight.to(self.lower), bias)


class _LowPrecisionLinear(nn.Linear):
    """A linear layer computed in ``lower``, as :class:`_LowPrecisionConv2d`."""

    lower: torch.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(self.lower) if self.bias is not None else None
        return nn.functional.linear(x.to(self.lower), self.weight.to(self.lower), bias)


class _Float32BatchNorm2d(nn.BatchNorm2d):
    """Batch norm computed in float32 and returned in its input's precision, as the mixed-precision
    kernel autocast calls computes it (a ``vmap`` cannot take a low-precision input with float32
    parameters, so the input goes in as a float32 copy). The activations after it stay in the
    lower precision, as in the solo run: returned in float32, they kept the residual additions and
    ReLUs of a pack's member in float32 where its solo run's are in bfloat16."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).to(x.dtype)


def _autocast_modules(model: nn.Module, lower: torch.dtype) -> None:
    """``model``'s convolutions and linear layers computed in ``lower`` and its batch norms in
    float32, in place: autocast's policy for them (its lower-precision list), for a model called
    under ``vmap``, where autocast does not apply."""
    for module in model.modules():
        if type(module) is nn.Conv2d:
            module.__class__ = _LowPrecisionConv2d
            module.lower = lower
        elif type(module) is nn.Linear:
            module.__class__ = _LowPrecisionLinear
            module.lower = lower
        elif type(module) is nn.BatchNorm2d:
            module.__class__ = _Float32BatchNorm2d


def _scheduler_state(base_lr: float, steps: int, lr: float, factor: WarmupCosine) -> dict[str, Any]:
    """:class:`~autoaug.proxy_models.learner.StepSchedule`'s ``state_dict`` after ``steps`` steps."""
    return {
        "base_lrs": [base_lr],
        "last_epoch": steps,
        "_step_count": steps + 1,
        "_last_lr": [lr],
        "_get_lr_called_within_step": False,
        "_is_initial": False,
        "lr_lambdas": [dict(vars(factor))],
    }


def _streams(loaders: Sequence[Any]) -> Sequence[Any]:
    """The members' training streams of a round: their device feeds made together, each step's
    batches of all of them augmented at once (:func:`~autoaug.proxy_models.device_feed.serve_together`:
    each member's batches are still its own); DALI loaders each by itself."""
    if len(loaders) > 1 and all(isinstance(loader, DeviceFeed) for loader in loaders):
        return serve_together(loaders)
    return loaders


class _SoloEngine:
    """A round of one member: the solo run's :class:`Learner` itself (bit for bit a solo run)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.precision = learner.precision

    def load(self, states: Sequence[Mapping[str, Any]]) -> None:
        (state,) = states
        self.learner.load_state_dict(state)

    def states(self) -> list[dict[str, Any]]:
        return [self.learner.state_dict()]

    def lr(self, k: int) -> float:
        return self.learner.lr

    def train_epoch(self, iterables: Sequence[Iterable]) -> list[EpochStats]:
        (batches,) = iterables
        return [self.learner.train_epoch(batches)]

    def evaluate_per_class(self, batches: Iterable, members: Sequence[int] | None = None, *, per_image: bool = False):
        if members is not None and not list(members):
            return []
        return [self.learner.evaluate_per_class(batches, per_image=per_image)]


# --------------------------------------------------------------------------------------------
# Members and the pack
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Member:
    """One run of a pack: its data and progress (the trainer's ``_Run``), its model's state between
    rounds, where its checkpoints go and whom its epochs are reported to."""

    key: Hashable
    run: _Run
    state: dict[str, Any]
    rng: torch.Tensor  # torch's RNG as its solo run would hold it (saved in its checkpoints)
    learner: Learner  # its solo learner: a round of this member alone trains with it
    checkpoint_dir: str | os.PathLike | None = None
    report: Callable[[dict[str, Any]], Any] | None = None
    on_validate: Callable[[int, EvalStats, Any], Any] | None = None
    test_stats: EvalStats | None = None

    @property
    def epoch(self) -> int:
        """Epochs trained."""
        return self.run.start_epoch

    @property
    def done(self) -> bool:
        return self.run.done


class Pack:
    """Members trained in lockstep on one device (see the module's documentation).

    Use as a context manager: torch's process-wide settings (threads, deterministic algorithms,
    TF32) are set for the pack's configuration and put back after, and torch's RNG is restored.
    """

    def __init__(self, config: TrainConfig, *, vmap_single: bool = False) -> None:
        self.config = config
        self.device = config.resolve_device()
        self.members: dict[Hashable, Member] = {}
        self._engine: Any = None
        self._engine_keys: tuple[Hashable, ...] = ()
        self._val_loaders: dict[str, Any] = {}
        self._vmap_single = vmap_single  # tests: a round of one member through the stacked path
        self._state: Any = None

    def __enter__(self) -> Pack:
        self._state = _TorchState(self.config, self.device)
        self._state.__enter__()
        self._rng = torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])
        self._rng.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._rng.__exit__(*exc)
        self._state.__exit__(*exc)

    # ---- membership ------------------------------------------------------------------------
    def add(
        self,
        key: Hashable,
        policy: Any,
        *,
        config: TrainConfig | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        resume_from: str | os.PathLike | Mapping[str, Any] | None = None,
        report: Callable[[dict[str, Any]], Any] | None = None,
        on_validate: Callable[[int, EvalStats, Any], Any] | None = None,
        split: Any = None,
    ) -> Member:
        """A member: ``config`` (the pack's with another seed, say; default the pack's) trained on
        ``policy`` (a Policy, a Schedule, a preset name), fresh or resumed from a checkpoint (a
        directory, a file, or a checkpoint already loaded); ``split``: its own
        :class:`~autoaug.proxy_models.splits.Split` of the data instead of the one ``config``
        describes (one fold of a density search's), as
        :func:`autoaug.proxy_models.train.train` takes it: the members validate each on its own
        images, and train in lockstep only with as many steps an epoch. Every check of a run happens here,
        before it trains; a configuration that cannot share the pack is refused in one line.
        ``report`` receives each epoch's metrics; ``on_validate(epoch, stats, val_indices)`` each
        validation's :class:`EvalStats` with every image's outcome, as
        :func:`autoaug.proxy_models.train.train`'s ``on_validate`` does."""
        if key in self.members:
            raise ValueError(f"pack member {key!r} exists already")
        config = self.config if config is None else config
        differ = pack_compatible(self.config, config)
        if differ:
            details = ", ".join(f"{k}: pack {a!r} vs member {b!r}" for k, a, b in differ)
            raise ValueError(
                f"this run cannot join the pack: its configuration differs in more than its seed ({details})"
            )
        policy = _resolve_policy(policy)
        checkpoint = None
        if resume_from is not None:
            checkpoint = dict(resume_from) if isinstance(resume_from, Mapping) else load_checkpoint(resume_from)
            if config.is_resolved:
                _check_resumable(checkpoint, config, policy)
        run = _open_run(config, policy, self.device, checkpoint, split, build_val=False)
        run.val_loader = self._val_loader(run)
        if self.members:
            first = next(iter(self.members.values())).run
            if run.steps_per_epoch != first.steps_per_epoch or run.num_classes != first.num_classes:
                raise ValueError(
                    f"this run cannot join the pack: {run.steps_per_epoch} steps an epoch and {run.num_classes} "
                    f"classes, the pack's members {first.steps_per_epoch} and {first.num_classes}"
                )
        torch.manual_seed(run.config.seed)  # the model's initialisation, as a solo run draws it
        learner = Learner(
            run.config, num_classes=run.num_classes, steps_per_epoch=run.steps_per_epoch, device=self.device
        )
        if checkpoint is not None:
            learner.load_state_dict(checkpoint)
        run.restore(self.device)  # (torch's RNG as the checkpoint saved it)
        member = Member(
            key, run, learner.state_dict(), torch.get_rng_state(), learner, checkpoint_dir, report, on_validate
        )
        self.members[key] = member
        return member

    def _val_loader(self, run: _Run) -> Any:
        """The validation loader of ``run``: one per set of validation images, shared by the
        members that validate on it (a validation pass serves every member at once)."""
        if not len(run.split.val):
            return None
        key = (run.split.fingerprint, run.config.data)
        if key not in self._val_loaders:
            ds = open_dataset(run.config.data, split="train")
            self._val_loaders[key] = _make_loader(
                ds,
                run.split.val,
                run.config,
                self.device,
                policy=None,
                train=False,
                num_threads=loader_threads(run.config),
            )
        return self._val_loaders[key]

    def remove(self, key: Hashable) -> Member:
        """Take a member out (stopped by its scheduler, say); its state is kept in the returned object."""
        self._sync_states()
        self._engine, self._engine_keys = None, ()
        return self.members.pop(key)

    # ---- training --------------------------------------------------------------------------
    def _sync_states(self) -> None:
        """The engine's stacked state written back to its members."""
        if self._engine is None:
            return
        for key, state in zip(self._engine_keys, self._engine.states()):
            if key in self.members:
                self.members[key].state = state

    def _engine_for(self, keys: tuple[Hashable, ...]) -> Any:
        if self._engine is not None and keys == self._engine_keys:
            return self._engine
        self._sync_states()
        members = [self.members[k] for k in keys]
        first = members[0].run
        if len(members) == 1 and not self._vmap_single:
            engine: Any = _SoloEngine(members[0].learner)
        else:
            engine = PackLearner(
                first.config, num_classes=first.num_classes, steps_per_epoch=first.steps_per_epoch, device=self.device
            )
        engine.load([m.state for m in members])
        self._engine, self._engine_keys = engine, keys
        return engine

    def train_epoch(
        self, keys: Sequence[Hashable] | None = None, *, errors: bool = False
    ) -> dict[Hashable, dict[str, Any] | BaseException]:
        """One epoch of each member in ``keys`` (None: every member not done), each at its own
        epoch: train, validate where its configuration validates, test after its last epoch,
        checkpoint, report. Returns each member's metrics (what it reported). A member whose epoch
        fails (a diverged loss) raises; with ``errors``, its exception is its entry instead and
        the others' epochs count."""
        keys = tuple(k for k in (self.members if keys is None else keys) if not self.members[k].done)
        if not keys:
            return {}
        engine = self._engine_for(keys)
        members = [self.members[k] for k in keys]
        t0 = time.perf_counter()
        epochs = [m.epoch for m in members]
        for m, epoch in zip(members, epochs):
            m.run.begin_epoch(epoch)
        stats = engine.train_epoch(_streams([m.run.train_loader for m in members]))
        failed: dict[Hashable, BaseException] = {}
        metrics: list[dict[str, Any]] = []
        for j, (m, e, s) in enumerate(zip(members, epochs, stats)):
            try:
                metrics.append(m.run.epoch_metrics(e, s, engine.lr(j)))
            except (FloatingPointError, RuntimeError) as exc:
                if not errors:
                    raise
                failed[m.key] = exc
                metrics.append({})
        # validation: the members validating this epoch, grouped by their shared loader
        validating = [
            j
            for j, (m, e) in enumerate(zip(members, epochs))
            if m.run.val_loader is not None and m.run.config.validates(e + 1) and m.key not in failed
        ]
        for loader in {id(members[j].run.val_loader): members[j].run.val_loader for j in validating}.values():
            group = [j for j in validating if members[j].run.val_loader is loader]
            per_image = any(members[j].on_validate is not None for j in group)
            for j, vs in zip(group, engine.evaluate_per_class(loader, group, per_image=per_image)):
                metrics[j]["val_accuracy"], metrics[j]["val_loss"] = vs.accuracy, vs.loss
                if members[j].on_validate is not None:
                    members[j].on_validate(epochs[j] + 1, vs, members[j].run.split.val)
        for j, (m, e) in enumerate(zip(members, epochs)):
            if e + 1 == m.run.config.epochs and m.run.test_loader is not None and m.key not in failed:
                (m.test_stats,) = engine.evaluate_per_class(m.run.test_loader, [j])
                metrics[j]["test_accuracy"], metrics[j]["test_loss"] = m.test_stats.accuracy, m.test_stats.loss
        elapsed = time.perf_counter() - t0
        states = engine.states()
        out: dict[Hashable, dict[str, Any] | BaseException] = dict(failed)
        for j, (m, e) in enumerate(zip(members, epochs)):
            m.state = states[j]
            if m.key in failed:
                continue
            torch.set_rng_state(m.rng)  # what its checkpoint records, as its solo run's would
            reported = m.run.end_epoch(
                e,
                metrics[j],
                images_per_sec=stats[j].images_per_sec,
                epoch_time=elapsed,
                learner_state=m.state,
                device=self.device,
                checkpoint_dir=m.checkpoint_dir,
            )
            out[m.key] = reported
            if m.report is not None:
                m.report(reported)
        return out

    def checkpoint(self, key: Hashable) -> bytes:
        """Member ``key``'s checkpoint after the epochs it trained, as the trainer's file holds it
        (for a caller that keeps its checkpoints elsewhere: a search's trial)."""
        m = self.members[key]  # (its state is the engine's as of its last epoch: train_epoch set it)
        torch.set_rng_state(m.rng)
        return checkpoint_bytes(m.run.checkpoint_state(m.epoch - 1, m.state, self.device))

    def result(self, key: Hashable) -> TrainResult:
        """A member's :class:`TrainResult` (after its last epoch), its model rebuilt from its state."""
        self._sync_states()
        m = self.members[key]
        run = m.run
        if run.test_loader is not None and m.test_stats is None:
            engine = self._engine_for((key,))
            (m.test_stats,) = engine.evaluate_per_class(run.test_loader, [0])
        model = build_model(run.config.model, num_classes=run.num_classes).to(self.device)
        model.load_state_dict(m.state["model"])
        return run.result(model, m.test_stats, m.learner.precision, m.checkpoint_dir)


def train_pack(
    config: TrainConfig,
    policies: Sequence[Any],
    *,
    seeds: Sequence[int] | None = None,
    reports: Sequence[Callable[[dict[str, Any]], Any] | None] | None = None,
    checkpoint_dirs: Sequence[str | os.PathLike | None] | None = None,
    resume_from: Sequence[str | os.PathLike | None] | None = None,
    on_validate: Sequence[Callable[[int, EvalStats, Any], Any] | None] | None = None,
    splits: Sequence[Any] | None = None,
) -> list[TrainResult]:
    """Train one member per policy in one pack, in lockstep from their first epoch to their last:
    each as :func:`autoaug.proxy_models.train.train` would train it alone (``seeds``: each
    member's ``config.seed``; default the config's), with its own reports, validation callbacks
    (:meth:`Pack.add`), checkpoints, resume and split (``splits``: each member's, as ``train``'s
    ``split``; default the one the config describes). Returns the members' results in order."""
    n = len(policies)
    if n == 0:
        raise ValueError("train_pack needs at least one policy")
    for name, given in (
        ("seeds", seeds),
        ("reports", reports),
        ("checkpoint_dirs", checkpoint_dirs),
        ("resume_from", resume_from),
        ("on_validate", on_validate),
        ("splits", splits),
    ):
        if given is not None and len(given) != n:
            raise ValueError(f"{name}: {len(given)} given for {n} policies")
    with Pack(config) as pack:
        for i, policy in enumerate(policies):
            cfg = config if seeds is None else dataclasses.replace(config, seed=int(seeds[i]))
            pack.add(
                i,
                policy,
                config=cfg,
                checkpoint_dir=checkpoint_dirs[i] if checkpoint_dirs else None,
                resume_from=resume_from[i] if resume_from else None,
                report=reports[i] if reports else None,
                on_validate=on_validate[i] if on_validate else None,
                split=splits[i] if splits else None,
            )
        while pack.train_epoch():
            pass
        return [pack.result(i) for i in range(n)]
