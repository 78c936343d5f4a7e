"""Training with a schedule: the DALI policy tables switch at the stage boundaries (one pipeline),
and a schedule's checkpoint resumes with the same earlier stages only."""

from __future__ import annotations

import numpy as np
import pytest

from autoaug.policies import Policy
from autoaug.policies.schedule import Schedule
from autoaug.proxy_models import train as train_module
from autoaug.proxy_models.learner import EpochStats
from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD, DaliLoader
from autoaug.proxy_models.train import TrainConfig, load_checkpoint, train

IDENTITY = Policy("plain", 10, [], base="none")
INVERT = Policy("inverted", 10, [[("Invert", 1.0, 0)]], base="none")


def _pixels(images) -> np.ndarray:
    """The batch's pixels on the 0-255 scale, sorted (the epoch's order does not matter)."""
    x = images.numpy().transpose(0, 2, 3, 1) * np.array(CIFAR10_STD) + np.array(CIFAR10_MEAN)
    return np.sort(np.rint(x).ravel())


@pytest.fixture
def recorded(monkeypatch):
    """Learner.train_epoch replaced: records each epoch's single batch (no optimisation)."""
    epochs: list[np.ndarray] = []
    builds: list[int] = []
    real_build = DaliLoader._build

    def build(self):
        builds.append(1)
        return real_build(self)

    def train_epoch(self, batches):
        seen = 0
        for images, labels in batches:
            epochs.append(_pixels(images))
            seen += len(labels)
        return EpochStats(loss=1.0, accuracy=0.1, seen=seen, images_per_sec=1.0)

    monkeypatch.setattr(train_module.Learner, "train_epoch", train_epoch)
    monkeypatch.setattr(DaliLoader, "_build", build)
    return epochs, builds


def _config(cifar_train, **kw):
    kw = {"epochs": 4, **kw}
    return TrainConfig.from_preset(
        "smoke", data=str(cifar_train), train_size=64, val_size=0, batch_size=64, num_threads=1, **kw
    )


def test_a_schedule_switches_the_dali_policy_at_its_stage_boundaries(cifar_train, recorded):
    epochs, builds = recorded
    schedule = Schedule("s", [(0.0, IDENTITY), (0.5, INVERT)])  # epochs 0-1 plain, 2-3 inverted
    train(_config(cifar_train), schedule)
    assert len(epochs) == 4
    plain = epochs[0]
    assert np.array_equal(epochs[1], plain)  # the same images, another order
    inverted = np.sort(255 - plain)
    assert np.allclose(epochs[2], inverted, atol=1) and np.allclose(epochs[3], inverted, atol=1)
    assert not np.allclose(epochs[2], plain, atol=1)
    assert len(builds) == 1  # one training pipeline (validation has none: val_size 0)


def test_the_stages_stretch_to_a_longer_training(cifar_train, recorded):
    epochs, _ = recorded
    schedule = Schedule("s", [(0.0, IDENTITY), (0.75, INVERT)])
    train(_config(cifar_train, epochs=8), schedule)  # stage 1 from epoch 6 (0-based)
    plain = epochs[0]
    switched = [not np.array_equal(e, plain) for e in epochs]
    assert switched == [False] * 6 + [True] * 2


def test_a_schedule_checkpoint_resumes_only_with_the_same_earlier_stages(cifar_train, recorded, tmp_path):
    cfg = _config(cifar_train, epochs=2)
    first = Schedule("s", [(0.0, IDENTITY), (0.5, INVERT)])
    train(cfg, first, checkpoint_dir=tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["epoch_policy_hashes"] == [IDENTITY.content_hash, INVERT.content_hash]
    assert ckpt["schedule"] == first.to_dict()
    with pytest.raises(ValueError, match="epoch 2 with policy hash"):
        train(cfg, Schedule("s", [(0.0, IDENTITY)]), resume_from=tmp_path)
    with pytest.raises(ValueError, match="not a schedule|give it a schedule"):
        train(cfg, INVERT, resume_from=tmp_path)
