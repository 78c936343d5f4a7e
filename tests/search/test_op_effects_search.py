"""A real search on data where one operation destroys the label: it is named as hurting, and the
stored policy leaves it out (docs/search.md, "What helps and hurts on your data")."""

from __future__ import annotations

import json

import numpy as np
import pytest

#: Colour-coded classes in inverse pairs (a small square on a noisy grey ground): ``Invert`` turns
#: a red square into a cyan one (green into magenta, ...), so a policy that inverts trains on
#: images whose colour says the other class; short training on few images feels it.
COLOURS = {
    "red": (200, 55, 55),
    "cyan": (55, 200, 200),
    "green": (55, 200, 55),
    "magenta": (200, 55, 200),
    "blue": (55, 55, 200),
    "yellow": (200, 200, 55),
    "orange": (200, 128, 55),
    "azure": (55, 128, 200),
}


def _colours(write_images, path, per_class=80, seed=0):
    """32x32 PNGs of a square of the class's colour (jittered) on a dark noisy background."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    images, labels = [], []
    for label, colour in enumerate(COLOURS.values()):
        for _ in range(per_class):
            img = Image.fromarray(np.clip(rng.normal(128, 40, (32, 32, 3)), 0, 255).astype(np.uint8))
            x, y = (int(v) for v in rng.integers(4, 20, 2))
            fill = tuple(int(np.clip(c + rng.integers(-30, 31), 0, 255)) for c in colour)
            ImageDraw.Draw(img).rectangle([x, y, x + 8, y + 8], fill=fill)
            images.append(img)
            labels.append(label)
    return write_images(path, images, labels, list(COLOURS))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")
def test_an_operation_that_destroys_the_label_is_named_and_left_out(tmp_path, capsys, write_images):
    from autoaug.launch.cli import main

    data = _colours(write_images, tmp_path / "colours.parquet")
    argv = [
        "search",
        "--data",
        str(data),
        "--preset",
        "smoke",
        "--name",
        "colours",
        "--space",
        "randaugment",
        "--set",
        "space.ops=[Identity,Invert,Rotate,ShearX,TranslateY,Sharpness]",
        "--base",
        "crop",
        "--no-warm-start",
        "--sampler",
        "random",
        "--num-trials",
        "12",
        "--no-early-stopping",
        "--no-rescore",
        "--set",
        "train.train_size=384",
        "--set",
        "train.val_size=256",
        "--set",
        "train.epochs=3",
        "--storage",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "runs" / "colours" / "result.json").read_text())
    effects = {r["op"]: r for r in result["provenance"]["op_effects"]["ops"]}
    # Invert is measured as hurting, beyond its interval; nothing else is said to hurt as much.
    assert effects["Invert"]["verdict"] == "hurts", effects
    assert effects["Invert"]["effect"] == min(r["effect"] for r in effects.values())
    assert "  hurts   Invert" in printed
    # The stored policy (the best trial's point) does not invert.
    assert all(op["op"] != "Invert" for sub in result["policy"]["sub_policies"] for op in sub)
    # autoaug report draws it.
    assert main(["report", "colours", "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "r.png")]) == 0
    assert "hurts   Invert" in capsys.readouterr().out and (tmp_path / "r-ops.png").stat().st_size > 5000
