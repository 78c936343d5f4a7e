"""What the cores can do and what the proxy's step asks of them (``benchmarks/trial_throughput.py``'s
roof): the measured peak GFLOP/s of a large matmul and a channels-last 3x3 convolution, float32 and
bfloat16, per thread count; and the FLOPs per image of a model's training step and evaluation
(``torch.utils.flop_counter.FlopCounterMode``: convolutions and matmuls only)."""

from __future__ import annotations

import dataclasses
import time

import torch

from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.train_config import TrainConfig


def matmul_gflops(n: int, dtype: torch.dtype, threads: int, repeats: int) -> float:
    """Best GFLOP/s of ``torch.mm`` of two n x n matrices of ``dtype`` with ``threads`` torch
    threads (2 n^3 FLOPs per product; one warm-up product first)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        out = torch.empty(n, n, dtype=dtype)
        torch.mm(a, b, out=out)
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t)
        return 2 * n**3 / best / 1e9
    finally:
        torch.set_num_threads(before)


def conv_gflops(batch: int, channels: int, size: int, dtype: torch.dtype, threads: int, repeats: int) -> float:
    """Best GFLOP/s of a 3x3 convolution (``channels`` in and out, ``size`` x ``size``, padding 1,
    channels-last: oneDNN's preferred layout) with ``threads`` torch threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        x = (
            torch.randn(batch, channels, size, size, generator=gen)
            .to(dtype)
            .contiguous(memory_format=torch.channels_last)
        )
        w = torch.randn(channels, channels, 3, 3, generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
        with torch.inference_mode():
            torch.nn.functional.conv2d(x, w, padding=1)
            best = float("inf")
            for _ in range(repeats):
                t = time.perf_counter()
                torch.nn.functional.conv2d(x, w, padding=1)
                best = min(best, time.perf_counter() - t)
        return 2 * batch * channels * channels * 9 * size * size / best / 1e9
    finally:
        torch.set_num_threads(before)


def measure_peak(all_threads: int, *, quick: bool = False, repeats: int = 5) -> dict[str, dict[str, dict[str, float]]]:
    """``{dtype: {"matmul": {threads: GFLOP/s}, "conv": {...}}}`` for float32 and bfloat16, with one
    thread (per core) and ``all_threads``: a large ``torch.mm`` (2048 x 2048; MKL for float32,
    oneDNN for bfloat16 -- MKL may not use AVX-512 on AMD CPUs, so the float32 matmul can sit well
    below what the cores do) and a large channels-last 3x3 convolution (oneDNN for both dtypes:
    256 channels, 32x32, batch 32)."""
    counts = sorted({1, all_threads})
    n, (batch, channels) = (512, (4, 128)) if quick else (2048, (32, 256))
    return {
        name: {
            "matmul": {str(t): matmul_gflops(n, dtype, t, repeats) for t in counts},
            "conv": {str(t): conv_gflops(batch, channels, 32, dtype, t, repeats) for t in counts},
        }
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))
    }


def count_flops(cfg: TrainConfig, num_classes: int, image_size: int, batch: int = 8) -> dict[str, float]:
    """FLOPs per image of the training step (forward + backward of the loss) and of evaluation
    (forward), as ``FlopCounterMode`` counts them, on the eager float32 model."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    learner = Learner(
        dataclasses.replace(cfg, compile=False, amp=False, channels_last=False),
        num_classes=num_classes,
        steps_per_epoch=1,
        device="cpu",
    )
    x = torch.randn(batch, 3, image_size, image_size)
    y = torch.randint(0, num_classes, (batch,))
    learner.model.train()
    with FlopCounterMode(display=False) as train_counter:
        learner.criterion(learner.model(x), y).backward()
    learner.model.eval()
    with torch.inference_mode(), FlopCounterMode(display=False) as eval_counter:
        learner.model(x)
    return {"train": train_counter.get_total_flops() / batch, "eval": eval_counter.get_total_flops() / batch}


def peak_for(peak: dict[str, dict[str, dict[str, float]]], dtype: str, threads: int) -> float | None:
    """The measured peak (GFLOP/s) of ``dtype`` at ``threads``: the best of its kernels (matmul,
    convolution); one thread's figure times ``threads`` when that count was not measured."""
    best = None
    for by_threads in peak.get(dtype, {}).values():
        value = by_threads.get(str(threads))
        if value is None and "1" in by_threads:
            value = by_threads["1"] * threads
        if value is not None and (best is None or value > best):
            best = value
    return best


def peak_lines(peak: dict, flops: dict) -> list[str]:
    lines = [
        f"FLOPs per image (FlopCounterMode: convolutions + matmuls): training step "
        f"{flops['train'] / 1e6:.1f} MFLOP (forward + backward), evaluation {flops['eval'] / 1e6:.1f} MFLOP"
    ]
    for dtype, kinds in peak.items():
        for kind, by_threads in kinds.items():
            lines.append(
                f"peak {dtype:8s} {kind:6s}: "
                + ", ".join(f"{g:,.0f} GFLOP/s with {t} thread{'s' if t != '1' else ''}" for t, g in by_threads.items())
            )
    return lines
