"""The base augmentations (policies.bases): each base does what its record says in DALI and in
torchvision, and the two agree; the exports say what to apply before a policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autoaug.policies import Policy, presets
from autoaug.policies.bases import NAMES, REGISTRY, crop_padding
from autoaug.policies.export import to_dali_source, to_timm

DRAWS = 256


def _dali_draws(base, image, n=DRAWS, seed=0):
    from nvidia.dali import fn, pipeline_def

    from autoaug.policies.dali_apply import apply_base

    batch = [image] * n

    @pipeline_def(batch_size=n, num_threads=1, device_id=None, seed=seed)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        return apply_base(base, x, image_size=image.shape[:2])

    p = pipe()
    p.build()
    (out,) = p.run()
    return [np.asarray(out[i]) for i in range(n)]


def _torch_draws(base, image, n=DRAWS, seed=0):
    transform = Policy("p", 10, [], base=base).to_torchvision()  # the base, then the (identity) policy
    chw = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return [transform(chw).permute(1, 2, 0).numpy() for _ in range(n)]


@pytest.fixture(scope="module")
def outcomes(marker_image, outcome_of):
    """``{(backend, base): [(dy, dx, mirrored), ...]}`` over DRAWS draws each."""
    draws = {"dali": _dali_draws, "torchvision": _torch_draws}
    return {
        (backend, base): [outcome_of(marker_image, out) for out in run(base, marker_image)]
        for backend, run in draws.items()
        for base in NAMES
    }


@pytest.mark.parametrize("backend", ["dali", "torchvision"])
def test_each_base_shifts_and_mirrors_as_its_record_says(outcomes, backend):
    none = outcomes[(backend, "none")]
    assert set(none) == {(0, 0, False)}  # none: the image itself, every time
    for base in ("crop", "standard"):
        got = outcomes[(backend, base)]
        shifts = {(dy, dx) for dy, dx, _ in got}
        # pad-and-random-crop: every shift within the 4 px padding, the extremes reached on both axes
        assert all(-4 <= dy <= 4 and -4 <= dx <= 4 for dy, dx in shifts)
        assert {dy for dy, _ in shifts} == {dx for _, dx in shifts} == set(range(-4, 5))
        mirrored = sum(m for _, _, m in got) / len(got)
        if base == "crop":
            assert mirrored == 0  # never mirrors: a traffic sign keeps its meaning
        else:
            assert 0.35 < mirrored < 0.65  # 1/2 (a standard error is 0.03 over 256 draws)


def test_dali_and_torchvision_agree(outcomes):
    for base in NAMES:
        dali, tv = outcomes[("dali", base)], outcomes[("torchvision", base)]
        for k in (0, 1):  # both axes: uniform over -4..4, mean 0 (standard error 0.16)
            assert abs(np.mean([o[k] for o in dali]) - np.mean([o[k] for o in tv])) < 0.8
        assert abs(np.mean([o[2] for o in dali]) - np.mean([o[2] for o in tv])) < 0.15
        assert ({(dy, dx) for dy, dx, _ in dali} == {(0, 0)}) == ({(dy, dx) for dy, dx, _ in tv} == {(0, 0)})


def test_padding_follows_the_image_size_in_both_backends(outcome_of):
    assert crop_padding(32, 32) == 4 and crop_padding(64, 48) == 6 and crop_padding(5, 5) == 1
    image = np.full((64, 48, 3), 77, np.uint8)
    for draws in (_dali_draws("crop", image, n=128), _torch_draws("crop", image, n=128)):
        # the zero border a shift leaves is at most 6 px (1/8 of 48) wide, and reaches 6
        widths = [int((d == 0).all(axis=(0, 2)).sum()) for d in draws]
        heights = [int((d == 0).all(axis=(1, 2)).sum()) for d in draws]
        assert max(widths) == max(heights) == 6 and all(d.shape == image.shape for d in draws)


def test_to_torchvision_composes_the_base_of_the_policy():
    from torchvision.transforms import v2

    from autoaug.policies.torch_apply import PolicyTransform, RandomPadCrop

    aa = presets.resolve("autoaugment-cifar10")
    kinds = {base: [type(t) for t in getattr(aa.with_base(base).to_torchvision(), "transforms", [])] for base in NAMES}
    assert kinds == {
        "none": [],
        "crop": [RandomPadCrop, PolicyTransform],
        "standard": [RandomPadCrop, v2.RandomHorizontalFlip, PolicyTransform],
    }
    assert isinstance(aa.with_base("crop").to_torchvision(base=False), PolicyTransform)


@pytest.mark.parametrize(
    "base, says",
    [
        ("none", "searched with base 'none': nothing is applied before this policy"),
        ("crop", "searched with base 'crop': apply a random crop"),
        ("standard", "searched with base 'standard': apply a random crop"),
    ],
)
def test_exports_say_what_to_apply_before_the_policy(base, says):
    policy = presets.resolve("autoaugment-cifar10").with_base(base)
    timm = to_timm(policy)
    assert timm["base"] == base and timm["note"].startswith(says)
    assert ("horizontal flip" in timm["note"]) == REGISTRY[base].flip
    assert ("no flip" in timm["note"]) == (base == "crop")
    source = " ".join(to_dali_source(policy).split())  # the note is wrapped in the docstring
    assert timm["note"] in source
