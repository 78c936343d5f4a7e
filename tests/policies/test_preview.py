"""Preview grid PNG of a policy on real images."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from autoaug.policies import presets
from autoaug.policies.preview import augment_with_labels, render_grid


@pytest.mark.parametrize("backend", ["dali", "torchvision"])
def test_render_grid_writes_a_png_of_real_images(backend, images64, tmp_path):
    policy = presets.resolve("autoaugment-cifar10")
    out = render_grid(policy, images64[:4], tmp_path / "sub" / "grid.png", columns=6, seed=0, backend=backend)
    assert out.is_file()
    with Image.open(out) as png:
        assert png.format == "PNG"
        width, height = png.size
        grid = np.asarray(png.convert("RGB"))
    # 1 original + 6 draws per row, 4 rows, cells >= 96 px
    assert width >= 7 * 96 and height >= 4 * 96
    # the first cell (below the 2-line header, 4 px padding) is the original, upscaled x3
    assert np.array_equal(grid[36:132:3, 4:100:3], images64[0])
    again = render_grid(policy, images64[:4], tmp_path / "again.png", columns=6, seed=0, backend=backend)
    assert again.read_bytes() == out.read_bytes()  # same seed, same grid


def test_labels_name_the_ops_that_fired(images64):
    policy = presets.resolve("autoaugment-cifar10")
    for backend in ("dali", "torchvision"):
        augmented, labels = augment_with_labels(policy, images64[:3], columns=5, backend=backend)
        assert len(augmented) == len(labels) == 15
        for img, (k, fired) in zip(augmented, labels):
            assert img.shape == (32, 32, 3) and 0 <= k < 25
            names = [op.op for op in policy.sub_policies[k]]
            assert all(f.lstrip("-") in names for f in fired)


def test_preview_errors(images64, tmp_path):
    policy = presets.resolve("autoaugment-cifar10")
    with pytest.raises(
        ValueError,
        match=r"backend='opencv'; expected one of \['dali', "
        r"'torchvision'\]",
    ):
        render_grid(policy, images64[:2], tmp_path / "x.png", backend="opencv")
    with pytest.raises(ValueError, match="images must be uint8 RGB in NHWC"):
        render_grid(policy, images64[:2].astype(np.float32), tmp_path / "x.png")
    with pytest.raises(ValueError, match="columns=0; expected an int >= 1"):
        render_grid(policy, images64[:2], tmp_path / "x.png", columns=0)


@pytest.mark.parametrize("backend", ["dali", "torchvision"])
def test_base_is_drawn_only_when_asked(backend, marker_image, outcome_of):
    """The preset crop is the base alone: without base=True its draws are the image itself; with
    it, shifted copies that are never mirrored (standard: mirrored too)."""
    images = np.stack([marker_image] * 2)
    plain, labels = augment_with_labels(presets.resolve("crop"), images, columns=24, backend=backend)
    assert all(np.array_equal(img, marker_image) for img in plain) and {k for k, _ in labels} == {-1}
    for name, flips in (("crop", False), ("standard", True)):
        drawn, _ = augment_with_labels(presets.resolve(name), images, columns=24, backend=backend, base=True)
        got = [outcome_of(marker_image, img) for img in drawn]
        assert len({(dy, dx) for dy, dx, _ in got}) > 5
        assert any(m for _, _, m in got) == flips
