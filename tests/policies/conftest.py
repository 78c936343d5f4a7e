"""Helpers for the policy tests: run a policy through a DALI CPU pipeline or the torchvision
transform on real CIFAR-10 images."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def run_dali(
    policy, images, *, seed=0, iterations=1, image_size=None, return_trace=False, interpolation="nearest", num_threads=2
):
    """Run ``apply_policy`` on ``images`` (uint8 NHWC, one batch) ``iterations`` times.

    Returns a list (one entry per iteration) of uint8 NHWC arrays, or of ``(images, trace)``
    when ``return_trace``.
    """
    from nvidia.dali import fn, pipeline_def

    from autoaug.policies.dali_apply import apply_policy

    batch = [np.ascontiguousarray(x) for x in images]

    @pipeline_def(batch_size=len(batch), num_threads=num_threads, device_id=None, seed=seed, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        return apply_policy(policy, x, image_size=image_size, return_trace=return_trace, interpolation=interpolation)

    p = pipe()
    p.build()
    results = []
    for _ in range(iterations):
        outs = p.run()
        arrays = [np.stack([np.asarray(o[i]) for i in range(len(batch))]) for o in outs]
        results.append(tuple(arrays) if return_trace else arrays[0])
    return results


def to_chw(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous()


def to_hwc(images: torch.Tensor) -> np.ndarray:
    return images.permute(0, 2, 3, 1).numpy()


@pytest.fixture(scope="session")
def images64(cifar_sample) -> np.ndarray:
    """64 real CIFAR-10 images (uint8 NHWC)."""
    return np.ascontiguousarray(cifar_sample[0][:64])


@pytest.fixture(scope="session")
def images256(cifar_sample) -> np.ndarray:
    return np.ascontiguousarray(cifar_sample[0])


@pytest.fixture(scope="session")
def dali_run():
    """:func:`run_dali` as a fixture (test modules cannot import a conftest by name)."""
    return run_dali
