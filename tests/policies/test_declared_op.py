"""An operation added with one declaration (``ops.declare_op``) is applied by both backends and
trains: a policy using it agrees between DALI (CPU) and torchvision, trains a step through the
project's DALI training path (``train``: a fixed policy and a schedule) and through the
``Learner`` on torchvision batches, and the declaration is gone after the test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from autoaug.policies import Policy, ops
from autoaug.policies.dali_apply import decode_trace
from autoaug.policies.torch_apply import apply_op, to_torchvision

# The op: every channel times 1 - m (m from 0, the identity, to 0.6), rounded. Unsigned.
DARKEN_RANGE = ops.MagnitudeRange(0.0, 0.6, "fraction darker")
# As the op-backend tests allow an op whose backends round differently (Brightness).
TOLERANCE = 1.0


def darken_dali(data, _, param):
    from nvidia.dali import fn

    return fn.cast_like(data * param, data)


def darken_torch(img, factor, **_):
    return (img.float() * factor).round_().clamp_(0, 255).to(img.dtype)


@pytest.fixture
def darken():
    """The op ``Darken``, declared for one test (its declaration removed afterwards)."""
    with ops.declare_op(
        name="Darken",
        description="multiplies every channel by 1 - m",
        ranges=DARKEN_RANGE,
        to_param=lambda m: 1.0 - m,
        dali=ops.DaliImpl(branch=darken_dali, table="param", operator="x * (1 - m), fn.cast_like"),
        torch=ops.TorchImpl(darken_torch, "x * (1 - m), rounded"),
    ) as spec:
        yield spec
    assert "Darken" not in ops.REGISTRY


def mad(a, b) -> np.ndarray:
    return np.abs(a.astype(np.int32) - b.astype(np.int32)).mean(axis=(1, 2, 3))


def torch_per_image(images: np.ndarray, policy: Policy, trace) -> np.ndarray:
    """Each image through torchvision's ``apply_op``, with the sub-policy and signs DALI drew."""
    out = []
    for img, (k, fired) in zip(images, decode_trace(policy, trace)):
        x = torch.from_numpy(img).permute(2, 0, 1)
        for op, name in zip(policy.sub_policies[k], fired):
            assert name.lstrip("-") == op.op  # probability 1: every op fires
            x = apply_op(x, op.op, op.magnitude_bin, policy.num_magnitude_bins, negate=name.startswith("-"))
        out.append(x.permute(1, 2, 0).numpy())
    return np.stack(out)


def test_a_declared_op_agrees_between_dali_and_torchvision(darken, images64, dali_run):
    for magnitude_bin in (0, 9):
        policy = Policy("d", 10, [[("Darken", 1.0, magnitude_bin)]])
        [(out, trace)] = dali_run(policy, images64, seed=3, return_trace=True)
        ref = torch_per_image(images64, policy, trace)
        assert mad(out, ref).mean() <= TOLERANCE
        if magnitude_bin == 0:
            assert np.array_equal(out, images64) and np.array_equal(ref, images64)  # bin 0 is the identity
        else:
            expected = np.round(images64 * 0.4)  # 1 - 0.6
            assert np.abs(out - expected).max() <= 1 and np.abs(ref - expected).max() <= 1


def test_a_declared_op_shares_a_stage_with_built_in_ops(darken, images64, dali_run):
    # one stage holding the new branch next to built-in ones (the Warp branch, Solarize's), and a
    # second stage: the selection routes each image to its own op
    policy = Policy(
        "mix",
        10,
        [[("Darken", 1.0, 9), ("Rotate", 1.0, 9)], [("Invert", 1.0, 0), ("Darken", 1.0, 5)], [("Rotate", 1.0, 4)]],
    )
    [(out, trace)] = dali_run(policy, images64, seed=5, return_trace=True)
    assert {k for k, _ in decode_trace(policy, trace)} == {0, 1, 2}
    ref = torch_per_image(images64, policy, trace)
    assert mad(out, ref).mean() <= 0.5 + TOLERANCE  # Rotate's tolerance + Darken's


def test_the_search_space_sees_a_declared_op(darken, images64, dali_run):
    from autoaug.search.space import SearchSpace

    space = SearchSpace(num_sub_policies=1, ops=["Invert", "Darken"])
    params = {"sp0_op0_type": "Darken", "sp0_op0_prob": 1.0, "sp0_op0_mag": 9}
    params |= {"sp0_op1_type": "Invert", "sp0_op1_prob": 1.0, "sp0_op1_mag": 0}
    policy = space.to_policy(params, name="found")
    assert policy.ops_used == ("Invert", "Darken") and space.to_params(policy) == params
    [out] = dali_run(policy, images64[:8])
    assert np.abs(out - (255 - np.round(images64[:8] * 0.4))).max() <= 1


def _normalized(images: torch.Tensor) -> torch.Tensor:
    from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD

    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (images.float() - mean) / std


def test_a_policy_with_a_declared_op_trains_a_step_on_both_backends(darken, cifar_train, cifar_sample):
    from autoaug.policies.schedule import Schedule
    from autoaug.proxy_models.learner import Learner
    from autoaug.proxy_models.train import TrainConfig, train

    policy = Policy("dark", 10, [[("Darken", 1.0, 9)], [("Darken", 0.5, 4), ("Invert", 0.2, 0)]], base="crop")
    config = TrainConfig.from_preset(
        "smoke", data=str(cifar_train), train_size=64, val_size=0, batch_size=64, epochs=1, num_threads=1
    )
    # DALI: the training run (DaliLoader -> apply_policy), and a schedule (PolicyInputs over every
    # declared op: the switchable policy step of PBA and of schedules)
    for trained in (policy, Schedule("s", [(0.0, policy)])):
        result = train(config, trained)
        [epoch] = result.history
        assert math.isfinite(epoch["train_loss"]) and result.history[0]["epoch"] == 1

    # torchvision: the transform a user trains with, batches through the same Learner step
    images, labels = cifar_sample
    transform = to_torchvision(policy)
    torch.manual_seed(0)
    batch = torch.stack([transform(torch.from_numpy(x).permute(2, 0, 1)) for x in images[:64]])
    assert batch.float().mean() < 0.9 * torch.from_numpy(images[:64]).float().mean()  # darkened
    learner = Learner(config, num_classes=10, steps_per_epoch=1)
    before = [p.detach().clone() for p in learner.model.parameters()]
    stats = learner.train_epoch([(_normalized(batch), torch.from_numpy(labels[:64]))])
    assert stats.seen == 64 and math.isfinite(stats.loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))  # a step was taken


def test_the_declaration_is_scoped():
    assert "Darken" not in ops.REGISTRY and "Darken" not in ops.OP_NAMES
    with pytest.raises(ValueError, match=r"unknown op 'Darken'"):
        Policy("d", 10, [[("Darken", 1.0, 9)]])
