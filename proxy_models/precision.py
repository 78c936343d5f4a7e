"""Numeric precision of a training run: the autocast dtype (``TrainConfig.amp_dtype``) and CUDA's
TF32 settings (``TrainConfig.tf32``), read, set and put back around a run
(:class:`autoaug.proxy_models.train._TorchState`)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from autoaug.core.errors import AutoaugWarning
from autoaug.proxy_models.train_config import TrainConfig

__all__ = [
    "amp_dtype",
    "amp_enabled",
    "native_on_cpu",
    "precision_name",
    "run_precision",
    "tf32_state",
    "restore_tf32",
    "set_tf32",
]


def native_on_cpu(name: str) -> bool:
    """Whether this CPU has native instructions for autocast in ``name`` (``"bfloat16"``:
    AVX512-BF16 or AMX; ``"float16"``: AVX512-FP16 or AMX-FP16), as oneDNN reports it."""
    try:
        return bool(
            torch.ops.mkldnn._is_mkldnn_bf16_supported()
            if name == "bfloat16"
            else torch.ops.mkldnn._is_mkldnn_fp16_supported()
        )
    except (AttributeError, RuntimeError):  # no oneDNN in this torch build: nothing to say
        return True


def amp_enabled(config: TrainConfig, device: torch.device) -> bool:
    """Whether a run of ``config`` on ``device`` autocasts: ``config.amp``; None: on CUDA;
    ``"native"``: on CUDA, and on a CPU with native instructions for the autocast dtype."""
    if config.amp is None:
        return device.type == "cuda"
    if config.amp == "native":
        return device.type == "cuda" or native_on_cpu(config.amp_dtype or "bfloat16")
    return bool(config.amp)


def amp_dtype(config: TrainConfig, device: torch.device) -> torch.dtype:
    """The autocast dtype of ``config`` on ``device`` (asked when amp is on): ``config.amp_dtype``, else float16 on CUDA
    and bfloat16 on the CPU. bfloat16 on a GPU without it (before Ampere) falls back to float16
    with one warning; a CPU without native instructions for the dtype (AVX512-BF16/AMX for
    bfloat16, AVX512-FP16/AMX-FP16 for float16) runs it emulated, and a warning says so."""
    name = config.amp_dtype or ("float16" if device.type == "cuda" else "bfloat16")
    if device.type == "cuda" and name == "bfloat16" and not torch.cuda.is_bf16_supported():
        warnings.warn(
            "amp_dtype bfloat16: this GPU has no bfloat16 support; autocast uses float16 (with gradient "
            "scaling) instead",
            AutoaugWarning,
            stacklevel=2,
        )
        name = "float16"
    if device.type == "cpu":
        if not native_on_cpu(name):
            warnings.warn(
                f"amp on the CPU with {name}: this CPU has no native {name} instructions, so autocast runs "
                "emulated and is likely slower than float32 (set amp=false, or amp='native')",
                AutoaugWarning,
                stacklevel=2,
            )
    return getattr(torch, name)


def precision_name(enabled: bool, dtype: torch.dtype) -> str:
    """What a run computes in, as its record says it: the autocast dtype's name (``"bfloat16"``,
    ``"float16"``) when autocast is on, else ``"float32"``."""
    return str(dtype).removeprefix("torch.") if enabled else "float32"


def run_precision(config: TrainConfig, device: torch.device) -> str:
    """The precision a run of ``config`` on ``device`` trains in on this machine
    (:func:`precision_name`). Under ``amp: "native"`` it depends on the CPU, so two machines can
    train one config in two precisions, and their runs are not interchangeable."""
    if not amp_enabled(config, device):
        return "float32"
    with warnings.catch_warnings():  # asked, not trained: no "emulated" warning
        warnings.simplefilter("ignore", AutoaugWarning)
        return precision_name(True, amp_dtype(config, device))


def tf32_state() -> tuple[Any, Any]:
    """TF32 settings of CUDA matmuls and cuDNN convolutions, to put back after a run (torch >= 2.9
    spells them ``fp32_precision``; the older ``allow_tf32`` flags must not be mixed with it)."""
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(matmul, "fp32_precision") and hasattr(getattr(conv, "conv", None), "fp32_precision"):
        return ("precision", (matmul.fp32_precision, conv.conv.fp32_precision))
    return ("allow", (matmul.allow_tf32, conv.allow_tf32))


def restore_tf32(state: tuple[Any, Any]) -> None:
    kind, (matmul, conv) = state
    if kind == "precision":
        torch.backends.cuda.matmul.fp32_precision = matmul
        torch.backends.cudnn.conv.fp32_precision = conv
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv


def set_tf32(on: bool) -> None:
    """TF32 on (or off) for CUDA matmuls and cuDNN convolutions: float32 tensors, tensor-core
    products with a 10-bit mantissa (Ampere and later; a no-op elsewhere)."""
    kind, _ = tf32_state()
    if kind == "precision":
        restore_tf32(("precision", ("tf32", "tf32") if on else ("ieee", "ieee")))
    else:
        restore_tf32(("allow", (on, on)))
