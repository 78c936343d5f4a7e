"""benchmarks/density_noise.py's analysis: each source of noise is attributed to itself (runs
written with one known source at a time) and the rank correlations read the right policies."""

from __future__ import annotations

import json

import numpy as np
import pytest

POLICIES = ["p0", "p1", "p2", "p3", "p4", "p5"]
HASHES = [f"h{i}" for i in range(len(POLICIES))]
SEEDS, FOLDS, DRAWS, HELD, POOL = (0, 1), (0, 1, 2), 4, 40, 160


def _write(folder, *, train=0.0, draw=0.0, image=0.0):
    """Runs whose per-image loss is the policy's effect (0.1 per rank) plus a model's offset per
    policy (sd ``train``), a draw's offset per policy and image (sd ``draw``, the same for every
    model, as the benchmark's draws are) and an image's difficulty per policy (sd ``image``)."""
    rng = np.random.default_rng(0)
    effect = 0.1 * np.arange(len(POLICIES))[:, None, None]
    draw_noise = rng.normal(0, draw, (len(POLICIES), DRAWS, HELD + POOL)) if draw else 0.0
    image_noise = rng.normal(0, image, (len(POLICIES), 1, HELD + POOL)) if image else 0.0
    (folder / "runs").mkdir(parents=True)
    for s in SEEDS:
        for k in FOLDS:
            model = rng.normal(0, train, (len(POLICIES), 1, 1)) if train else 0.0
            _save(folder, s, k, (1.0 + effect + model + draw_noise + image_noise) * np.ones((1, DRAWS, HELD + POOL)))


def _save(folder, seed, fold, loss, held=HELD, **meta):
    """One scoring run as ``density_noise.py run`` writes it: ``loss[policy, draw, image]``, the
    fold's ``held`` held-out images first, the pool's after."""
    np.savez_compressed(
        folder / "runs" / f"seed{seed}-fold{fold}.npz",
        correct=loss < 1.25,
        loss=loss.astype(np.float32),
        n_heldout=held,
        images=np.arange(loss.shape[2]),
        cpu_per_image_pass=0.001,
        meta=json.dumps({"seed": seed, "fold": fold, "policies": POLICIES, "hashes": HASHES, **meta}),
    )


def _analyse(load_benchmark, tmp_path, **noise):
    _write(tmp_path, **noise)
    evaluation = tmp_path / "runs.csv"
    # training with p0 is best, p5 worst: the opposite of the loss order, so density ranks them right
    evaluation.write_text("policy_hash,test_accuracy\n" + "".join(f"h{i},{0.6 - 0.01 * i}\n" for i in range(6)))
    out = tmp_path / "out"
    load_benchmark("density_noise").main(["analyse", str(tmp_path), "--eval", str(evaluation), "--out", str(out)])
    return json.loads((out / "noise.json").read_text())["nll"]


def test_without_noise_every_spread_is_zero_and_the_ranks_agree(load_benchmark, tmp_path):
    report = _analyse(load_benchmark, tmp_path)
    assert all(v == pytest.approx(0, abs=1e-6) for v in report["parts"].values())
    for row in report["table"]:
        assert row["spread"] == pytest.approx(0, abs=1e-6)
        assert row["between"] == pytest.approx(np.std(0.1 * np.arange(6), ddof=1), rel=1e-4)
        assert row["rho_replicates"] == pytest.approx(1) and row["rho_eval_mean"] == pytest.approx(1)


def test_draw_noise_is_attributed_to_the_draws_only(load_benchmark, tmp_path):
    parts = _analyse(load_benchmark, tmp_path, draw=0.5)["parts"]
    assert parts["draw (same model, same images)"] > 0.01
    assert parts["training (same images and draw, other seed)"] == pytest.approx(0, abs=1e-6)


def test_training_noise_is_attributed_to_the_training_only(load_benchmark, tmp_path):
    report = _analyse(load_benchmark, tmp_path, train=0.05)
    parts = report["parts"]
    assert parts["training (same images and draw, other seed)"] > 0.01
    assert parts["draw (same model, same images)"] == pytest.approx(0, abs=1e-6)
    images = next(v for k, v in parts.items() if k.startswith("images"))
    assert images == pytest.approx(0, abs=1e-6)
    shipped, _, _, _, folds = report["table"]
    # the mean of 3 fold models averages 3 models' offsets: a smaller spread than one model's
    assert folds["spread"] < shipped["spread"]


def test_image_noise_is_attributed_to_the_images_and_shrinks_with_more_of_them(load_benchmark, tmp_path):
    report = _analyse(load_benchmark, tmp_path, image=1.0)
    parts = report["parts"]
    assert next(v for k, v in parts.items() if k.startswith("images")) > 0.01
    assert parts["draw (same model, same images)"] == pytest.approx(0, abs=1e-6)
    rows = {r["score"]: r for r in report["table"]}
    small = rows[f"1 fold model, {HELD} pool images, 1 draw"]
    large = rows[f"1 fold model, {POOL // 2} pool images, 1 draw"]
    assert large["spread"] < small["spread"]


def test_a_study_with_one_seed_is_refused_by_name(load_benchmark, tmp_path):
    _write(tmp_path)
    for path in (tmp_path / "runs").glob("seed1-*.npz"):
        path.unlink()
    with pytest.raises(SystemExit, match="2 training seeds"):
        load_benchmark("density_noise").main(["analyse", str(tmp_path)])


def test_folds_of_different_sizes_are_each_scored_on_their_own_held_out_images(load_benchmark, tmp_path):
    """Grouped folds differ in size: each run's first ``n_heldout`` images are its fold's, the
    rest the pool's, and no score mixes them."""
    (tmp_path / "runs").mkdir()
    effect = 0.1 * np.arange(len(POLICIES))[:, None, None]
    for s in SEEDS:
        for k in FOLDS:
            held = HELD - 5 * k
            loss = np.concatenate(
                [np.broadcast_to(1.0 + effect, (6, DRAWS, held)), np.broadcast_to(5.0 + effect, (6, DRAWS, POOL))],
                axis=2,
            )
            _save(tmp_path, s, k, loss, held)
    out = tmp_path / "out"
    load_benchmark("density_noise").main(["analyse", str(tmp_path), "--out", str(out)])
    report = json.loads((out / "noise.json").read_text())
    assert report["heldout"] == [HELD - 10, HELD - 5, HELD]
    assert [p["loss"] for p in report["policy_scores"]] == pytest.approx(1.0 + 0.1 * np.arange(6), abs=1e-6)
    rows = {r["score"]: r for r in report["nll"]["table"]}
    pool = rows[f"1 fold model, {POOL // 2} pool images, 1 draw"]
    shipped = rows["shipped: 1 fold model, its held-out fold, 1 draw"]
    assert pool["spread"] == pytest.approx(0, abs=1e-6) and shipped["spread"] == pytest.approx(0, abs=1e-6)


def test_the_ranking_within_each_base_is_reported_apart(load_benchmark, tmp_path):
    """Density matching never sees the base: the policies of each base are ranked against the
    evaluation among themselves (here base a agrees with it, base b is reversed)."""
    (tmp_path / "runs").mkdir()
    rng = np.random.default_rng(1)
    effect = 0.1 * np.arange(len(POLICIES))[:, None, None]
    for s in SEEDS:
        for k in FOLDS:
            loss = 1.0 + effect + rng.normal(0, 0.01, (len(POLICIES), DRAWS, HELD + POOL))
            _save(tmp_path, s, k, loss, bases=["a"] * 3 + ["b"] * 3)
    evaluation = tmp_path / "runs.csv"
    accuracy = [0.6, 0.5, 0.4, 0.1, 0.2, 0.3]  # a: lower loss trains better; b: the opposite
    evaluation.write_text("policy_hash,test_accuracy\n" + "".join(f"h{i},{v}\n" for i, v in enumerate(accuracy)))
    out = tmp_path / "out"
    load_benchmark("density_noise").main(["analyse", str(tmp_path), "--eval", str(evaluation), "--out", str(out)])
    by_base = json.loads((out / "noise.json").read_text())["by_base"]
    assert by_base == {
        "a": {"policies": 3, "rho_loss_vs_eval": pytest.approx(1.0)},
        "b": {"policies": 3, "rho_loss_vs_eval": pytest.approx(-1.0)},
    }
    assert (
        "Policies that augment on base b: 3; their density score (loss) vs eval: rho -1.00"
        in (out / "noise.txt").read_text()
    )
