"""The learner's own SGD and schedule: torch.optim's arithmetic bit for bit, its checkpoint layout
both ways, and a training process that never imports the compiler stack (what they are for)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import torch

from autoaug.proxy_models.learner import SGD, Learner, StepSchedule, WarmupCosine
from autoaug.proxy_models.train_config import TrainConfig

CFG = TrainConfig.from_preset("smoke", epochs=3, warmup_epochs=1, lr=0.2)


def _batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(n)]


def _learner(torch_optim: bool, cfg: TrainConfig = CFG) -> Learner:
    """A seeded learner; with ``torch_optim`` its optimizer and schedule are torch.optim's SGD and
    LambdaLR as the learner configured them before (the reference)."""
    torch.manual_seed(0)
    learner = Learner(cfg, num_classes=3, steps_per_epoch=4)
    if torch_optim:
        learner.optimizer = torch.optim.SGD(
            learner.model.parameters(),
            lr=cfg.lr,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
        )
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, WarmupCosine(4, 12))
    return learner


def _same_weights(a: Learner, b: Learner) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))


@pytest.mark.parametrize("nesterov", [True, False])
def test_training_equals_torch_optims_sgd_and_lambdalr_bit_for_bit(nesterov):
    cfg = TrainConfig.from_preset("smoke", epochs=3, warmup_epochs=1, lr=0.2, nesterov=nesterov)
    ours, ref = _learner(False, cfg), _learner(True, cfg)
    lrs = []
    for batches in (_batches(4, 1), _batches(4, 2), _batches(4, 3)):
        lrs.append((ours.lr, ref.lr))
        ours.train_epoch(batches)
        ref.train_epoch(batches)
        assert _same_weights(ours, ref)  # every parameter and batch-norm statistic, exactly
    assert all(a == b for a, b in lrs) and ours.lr == ref.lr == 0.0
    mine, theirs = ours.optimizer.state_dict(), ref.optimizer.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert mine["state"].keys() == theirs["state"].keys()
    assert all(
        torch.equal(mine["state"][i]["momentum_buffer"], theirs["state"][i]["momentum_buffer"]) for i in mine["state"]
    )
    assert ours.scheduler.state_dict() == ref.scheduler.state_dict()


@pytest.mark.parametrize("saved_by_torch", [True, False], ids=["torch-to-ours", "ours-to-torch"])
def test_a_checkpoint_resumes_across_the_two_implementations(saved_by_torch):
    """A run checkpointed before this optimizer existed resumes on it, and the other way round:
    the state_dict layouts are the same."""
    first, rest = _batches(4, 1), _batches(4, 2) + _batches(4, 3)
    writer = _learner(saved_by_torch)
    writer.train_epoch(first)
    buffer = io.BytesIO()
    torch.save(writer.state_dict(), buffer)  # as a checkpoint file
    buffer.seek(0)
    reader = _learner(not saved_by_torch)
    reader.load_state_dict(torch.load(buffer, weights_only=False))
    assert reader.lr == writer.lr
    for i in range(0, 8, 4):
        writer.train_epoch(rest[i : i + 4])
        reader.train_epoch(rest[i : i + 4])
    assert _same_weights(writer, reader) and reader.lr == writer.lr == 0.0


def test_a_state_for_another_model_is_refused_by_name():
    small = SGD([torch.zeros(2, requires_grad=True)], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.0)
    other = SGD([torch.zeros(2, requires_grad=True)] * 3, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.0)
    with pytest.raises(ValueError, match="optimizer state for 3 parameters, this model has 1"):
        small.load_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum"):
        SGD([torch.zeros(1)], lr=0.1, momentum=0.0, nesterov=True, weight_decay=0.0)
    StepSchedule(small, WarmupCosine(2, 4))
    assert small.param_groups[0]["lr"] == pytest.approx(0.05)  # factor(0) from the start, as LambdaLR


def test_a_training_process_does_not_import_the_compiler_stack(tmp_path):
    """torch.optim's step and torch.use_deterministic_algorithms import torch._dynamo (1.1-1.7
    CPU-s a process): a run that does not compile, checkpoint and resume included, never does."""
    code = (
        "import sys, torch\n"
        "from autoaug.proxy_models.learner import Learner\n"
        "from autoaug.proxy_models.train import _TorchState\n"
        "from autoaug.proxy_models.train_config import TrainConfig\n"
        "cfg = TrainConfig.from_preset('smoke', epochs=1, deterministic=True)\n"
        "with _TorchState(cfg, torch.device('cpu')):\n"
        "    assert torch.are_deterministic_algorithms_enabled()\n"
        "    l = Learner(cfg, num_classes=3, steps_per_epoch=1)\n"
        "    l.train_epoch([(torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 0]))])\n"
        "    l.load_state_dict(l.state_dict())\n"
        "    l.evaluate([(torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 0]))])\n"
        "assert not torch.are_deterministic_algorithms_enabled()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"
