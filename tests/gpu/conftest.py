"""The GPU tests: every GPU path of the project on a CUDA device (``tests/gpu``, marker ``gpu``).

Without a CUDA device each test is skipped with one line saying so. Where a GPU is,
``benchmarks/gpu_check.py`` runs them (with the figures it measures); ``pytest tests/gpu`` alone
works too. ``AUTOAUG_GPU_REPORT=FILE`` writes what the tests measured (each op's distance between
DALI on the GPU, DALI on the CPU and torchvision) to ``FILE`` as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch


def cuda_missing(dali: bool = True) -> str | None:
    """Why the GPU tests cannot run here (one line), or ``None`` where they can; ``dali``: they
    need NVIDIA DALI too (a test module without DALI says ``NEEDS_DALI = False``: it runs on a
    machine lent with torch alone)."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch.cuda.is_available() is False on this machine"
    if not dali:
        return None
    try:
        from nvidia.dali.backend import GetCUDADeviceCount

        if GetCUDADeviceCount() < 1:
            return "needs a CUDA GPU that DALI sees: nvidia.dali reports no CUDA device"
    except ImportError as exc:  # the light install: no DALI
        return f"needs NVIDIA DALI (the search extra): {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.gpu)
            reason = cuda_missing(dali=getattr(item.module, "NEEDS_DALI", True))
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


_REPORT: dict = {}


@pytest.fixture(scope="session")
def gpu_report():
    """A dict the tests record measured figures in; written to ``$AUTOAUG_GPU_REPORT`` at the end."""
    yield _REPORT
    path = os.environ.get("AUTOAUG_GPU_REPORT")
    if path and _REPORT:
        _REPORT["device"] = torch.cuda.get_device_name(0)
        Path(path).write_text(json.dumps(_REPORT, indent=2, sort_keys=True) + "\n")
