"""Every op on real CIFAR-10 images through both backends (DALI CPU pipeline and torchvision),
at bin 0 and at the highest bin with probability 1: shapes, identity at bin 0, agreement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autoaug.policies import Policy, ops
from autoaug.policies.dali_apply import decode_trace
from autoaug.policies.torch_apply import PolicyTransform, apply_op

RANDOM_POSITION = {"Cutout", "SamplePairing"}  # compared structurally below


@pytest.mark.parametrize("name", [n for n in ops.OP_NAMES if n not in RANDOM_POSITION])
def test_op_dali_matches_torchvision(name, images64, dali_run, op_tolerance, op_checks):
    spec = ops.get(name)
    for magnitude_bin in (0, 9):
        policy = Policy("t", 10, [[(name, 1.0, magnitude_bin)]])
        [(out, trace)] = dali_run(policy, images64, seed=7, return_trace=True)
        assert out.shape == images64.shape and out.dtype == np.uint8
        info = decode_trace(policy, trace)
        negated = [bool(f) and f[0].startswith("-") for _, f in info]
        if name != "Identity":
            assert all(f for _, f in info), "probability 1: the op fires on every image"
        ref = op_checks.torch_reference(images64, name, magnitude_bin, negated)
        assert ref.shape == images64.shape and ref.dtype == np.uint8
        diff = op_checks.mad(out, ref)
        assert diff.mean() <= op_tolerance[name], (name, magnitude_bin, diff.mean())
        if magnitude_bin == 0 and spec.has_magnitude:
            # bin 0 of a magnitude op is the identity, in both backends
            assert op_checks.mad(out, images64).max() <= 0.5, name
            assert op_checks.mad(ref, images64).max() <= 0.5, name
        if magnitude_bin == 9 and name != "Identity":
            assert op_checks.mad(out, images64).mean() > 1.0, f"{name} at the highest bin changed nothing"
        if magnitude_bin == 9 and spec.signed:
            # the sign is random per image: both signs occur, and they differ
            assert 0.2 < np.mean(negated) < 0.8
            flipped = op_checks.torch_reference(images64, name, magnitude_bin, [not n for n in negated])
            assert op_checks.mad(out, flipped).mean() > 2 * op_tolerance[name] + 1.0


def test_equalize_backends_are_both_monotone_equalizations(images64, dali_run, op_checks):
    policy = Policy("t", 10, [[("Equalize", 1.0, 0)]])
    [out] = dali_run(policy, images64)
    ref = op_checks.torch_reference(images64, "Equalize", 0, [False] * len(images64))
    for result in (out, ref):
        for img, src in zip(result[:16], images64[:16]):
            for c in range(3):
                order = np.argsort(src[..., c], axis=None, kind="stable")
                mapped = img[..., c].ravel()[order]
                assert np.all(np.diff(mapped.astype(int)) >= 0)  # a monotone level mapping
                assert mapped[-1] >= 250  # stretched to (nearly) full range


def test_cutout_both_backends(images64, dali_run, op_checks):
    side = round(60 / 331 * 32)  # 6 px
    policy = Policy("t", 10, [[("Cutout", 1.0, 9)]])
    [out] = dali_run(policy, images64, seed=3)
    [out0] = dali_run(Policy("t", 10, [[("Cutout", 1.0, 0)]]), images64, seed=3)
    assert np.array_equal(out0, images64)
    torch.manual_seed(0)
    t = PolicyTransform(policy)
    ref = np.stack([t(torch.from_numpy(x).permute(2, 0, 1)).permute(1, 2, 0).numpy() for x in images64])
    # squares are clipped at the border, so on average a bit under side**2 pixels change
    dali_mean, torch_mean = op_checks.cutout_area(out, images64, side), op_checks.cutout_area(ref, images64, side)
    assert 0.5 * side**2 < dali_mean <= side**2
    assert 0.5 * side**2 < torch_mean <= side**2
    assert abs(dali_mean - torch_mean) < 0.25 * side**2


def test_sample_pairing_dali_blends_with_another_image_of_the_batch(images64, dali_run, op_checks):
    [out] = dali_run(Policy("t", 10, [[("SamplePairing", 1.0, 9)]]), images64, seed=5)
    partners = op_checks.pairing_partners(out, images64)
    assert sorted(partners) == list(range(len(images64)))  # a permutation of the batch
    [out0] = dali_run(Policy("t", 10, [[("SamplePairing", 1.0, 0)]]), images64, seed=5)
    assert np.array_equal(out0, images64)


def test_sample_pairing_torchvision_previous_image_and_rolled_batch(images64, op_checks):
    t = PolicyTransform(Policy("t", 10, [[("SamplePairing", 1.0, 9)]]))
    chw = torch.from_numpy(images64).permute(0, 3, 1, 2).contiguous()
    first = t(chw[0])
    assert torch.equal(first, chw[0])  # no previous image yet: identity
    second = t(chw[1]).permute(1, 2, 0).numpy()
    assert np.abs(second - op_checks.blend(images64[1], images64[0], 0.4)).max() <= 1.0
    batched = t(chw[:8]).permute(0, 2, 3, 1).numpy()
    for i in range(8):
        assert np.abs(batched[i] - op_checks.blend(images64[i], images64[(i - 1) % 8], 0.4)).max() <= 1.0


@pytest.mark.parametrize("name", ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"])
def test_geometric_ops_on_non_square_images(name, images64, dali_run, op_tolerance, op_checks):
    images = np.ascontiguousarray(images64[:16, 4:28, :, :])  # 24 x 32
    policy = Policy("t", 10, [[(name, 1.0, 9)]])
    [(out, trace)] = dali_run(policy, images, seed=2, return_trace=True)
    [(sized, trace2)] = dali_run(policy, images, seed=2, return_trace=True, image_size=(24, 32))
    assert np.array_equal(trace, trace2) and np.array_equal(out, sized)
    negated = [f[0].startswith("-") for _, f in decode_trace(policy, trace)]
    ref = op_checks.torch_reference(images, name, 9, negated)
    assert op_checks.mad(out, ref).mean() <= op_tolerance[name]


def test_bilinear_interpolation_agrees(images64, dali_run, op_checks):
    policy = Policy("t", 10, [[("Rotate", 1.0, 9)]])
    [(out, trace)] = dali_run(policy, images64[:16], seed=1, return_trace=True, interpolation="bilinear")
    negated = [f[0].startswith("-") for _, f in decode_trace(policy, trace)]
    chw = torch.from_numpy(images64[:16]).permute(0, 3, 1, 2)
    ref = torch.stack(
        [apply_op(chw[i], "Rotate", 9, 10, negate=negated[i], interpolation="bilinear") for i in range(16)]
    )
    assert op_checks.mad(out, ref.permute(0, 2, 3, 1).numpy()).mean() < 3.0
