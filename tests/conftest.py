"""Shared fixtures.

The real CIFAR-10 Parquet is located through ``AUTOAUG_CIFAR10`` (a folder holding
``train.parquet``/``test.parquet``), falling back to ``../shared/data/cifar10-jpeg`` next to the
checkout. When it is absent, tests that need it are skipped, unless ``AUTOAUG_REQUIRE_DATA=1``
(set by ``.ci/run``), in which case they fail: CI must never pass by skipping real-data tests.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
_DEFAULT_DATA = REPO.parent / "shared" / "data" / "cifar10-jpeg"


def cifar10_dir() -> Path | None:
    path = Path(os.environ.get("AUTOAUG_CIFAR10", _DEFAULT_DATA))
    return path if (path / "train.parquet").is_file() else None


@pytest.fixture(scope="session")
def cifar_dir() -> Path:
    path = cifar10_dir()
    if path is None:
        msg = (
            "real CIFAR-10 Parquet not found: set AUTOAUG_CIFAR10 to a folder holding "
            f"train.parquet and test.parquet (looked in {os.environ.get('AUTOAUG_CIFAR10', _DEFAULT_DATA)})"
        )
        if os.environ.get("AUTOAUG_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def cifar_train(cifar_dir: Path) -> Path:
    return cifar_dir / "train.parquet"


@pytest.fixture(scope="session")
def cifar_test(cifar_dir: Path) -> Path:
    return cifar_dir / "test.parquet"


@pytest.fixture(scope="session")
def cifar_sample(cifar_train: Path) -> tuple[np.ndarray, np.ndarray]:
    """256 real CIFAR-10 training images (uint8 NHWC RGB) with their labels, all classes present.

    Decoded with PIL independently of the project's loaders, so tests of those loaders can
    compare against it.
    """
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(cifar_train, columns=["image", "label"])
    labels = table.column("label").to_numpy()
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(labels), size=256, replace=False))
    images = table.column("image").take(idx).to_pylist()
    decoded = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images])
    return decoded, labels[idx].astype(np.int64)
