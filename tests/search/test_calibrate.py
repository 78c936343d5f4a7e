"""Calibration before a search: the base and the warm start measured on the user's data."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from autoaug.policies import presets
from autoaug.search.calibrate import (
    CALIBRATION_FILE,
    RUN_NOISE,
    TRANSFER_REFS,
    calibrate,
    calibration_train_config,
    choose_base,
    describe_calibration,
    rank_transfer,
)
from autoaug.search.config import SearchConfig
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC
from autoaug.search.warm_start import warm_start_policies


class _Log:
    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)


def _config(tmp_path, **changes):
    return SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": "cal",
            "data": "unused.parquet",
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
            **changes,
        }
    )


# ----------------------------------------------------------------------------------------------
# Choosing


def test_of_the_bases_within_the_noise_of_the_best_the_one_that_augments_most_is_chosen():
    one = choose_base({"none": [0.70], "crop": [0.76], "standard": [0.755]})
    # One run each: the noise is the stated seed-to-seed spread; 0.5 points apart is not told apart,
    # and then the flip is kept: a weaker base must win beyond the noise.
    assert one["best"] == "crop" and one["within_noise"] == ["standard"] and one["chosen"] == "standard"
    assert list(one["scores"]) == ["crop", "standard", "none"]
    assert one["noise"]["sd"] == RUN_NOISE
    assert one["noise"]["threshold"] == pytest.approx(2 * RUN_NOISE * 2**0.5)
    # A flip that changes labels costs far more than the noise: the best mean is kept.
    signs = choose_base({"none": [0.8666], "crop": [0.963], "standard": [0.9034]})
    assert signs["chosen"] == signs["best"] == "crop" and signs["within_noise"] == []
    # Several runs each: a spread measured larger than the known one is used (pooled over bases)...
    noisy = [0.70, 0.74, 0.66]
    runs = choose_base({"none": noisy, "crop": [0.80, 0.84, 0.76], "standard": [0.60, 0.64, 0.56]})
    assert runs["noise"]["sd"] == pytest.approx(np.std(noisy, ddof=1))
    assert runs["chosen"] == "crop" and runs["within_noise"] == []
    # ... one measured smaller is not: three runs cannot show that bases 2 points apart differ.
    calm = choose_base({"none": [0.50], "crop": [0.780, 0.781, 0.779], "standard": [0.760, 0.761, 0.759]})
    assert calm["noise"]["sd"] == RUN_NOISE and calm["chosen"] == "standard"
    assert calm["noise"]["threshold"] == pytest.approx(2 * RUN_NOISE * (2 / 3) ** 0.5)
    # Bases with fewer runs than the best are held to a wider threshold (one run against three).
    wider = choose_base({"none": [0.752], "crop": [0.78, 0.78, 0.78], "standard": [0.70]})
    assert wider["within_noise"] == ["none"] and wider["chosen"] == "crop"


def test_an_exact_tie_goes_to_the_base_that_augments_most():
    assert choose_base({"none": [0.9], "crop": [0.9], "standard": [0.9]})["chosen"] == "standard"
    assert choose_base({"none": [0.9], "crop": [0.9], "standard": [0.5]})["chosen"] == "crop"
    assert choose_base({"none": [0.9], "crop": [0.5], "standard": [0.5]})["chosen"] == "none"


def test_the_base_line_says_why_in_each_case():
    def line(scores):
        return describe_calibration({"base": choose_base(scores)})[0]

    assert line({"none": [0.70], "crop": [0.76], "standard": [0.765]}).endswith(
        "the best mean; within the noise of it (3.68 points; one run each; a proxy run's seed-to-seed spread is "
        "about 1.3 points): crop, which augments less"
    )
    assert "base: standard (" in line({"none": [0.70], "crop": [0.76], "standard": [0.755]})
    assert "within the noise of the best mean, crop (3.68 points" in line(
        {"none": [0.70], "crop": [0.76], "standard": [0.755]}
    )
    assert line({"none": [0.70], "crop": [0.80], "standard": [0.60]}).endswith(
        "ahead of the others beyond the noise (3.68 points; one run each; a proxy run's seed-to-seed spread is "
        "about 1.3 points)"
    )


def test_the_warm_start_is_the_best_published_policy_that_fits_the_search_space():
    scores = {
        "autoaugment-cifar10": [0.80],
        "autoaugment-svhn": [0.60],
        "autoaugment-imagenet": [0.82],
        "randaugment": [0.85],
        "trivialaugment": [0.79],
    }
    fits = {ref: None for ref in scores} | {"randaugment": "num_magnitude_bins=31", "trivialaugment": "31 bins"}
    ranked = rank_transfer(scores, fits)
    assert ranked["best"] == "randaugment" and ranked["warm_start"] == ["autoaugment-imagenet"]
    assert ranked["scores"]["autoaugment-imagenet"]["margin"] == pytest.approx(0.03)
    assert ranked["scores"]["randaugment"]["unfit"] == "num_magnitude_bins=31"


# ----------------------------------------------------------------------------------------------
# Running it (the proxy runs replaced by a table of scores)


def _fake_runs(monkeypatch, scores, calls):
    import autoaug.search.rescore as rescore

    def train_runs(runs, config, *, cached=None, save=None, task_name="", deadline=None):
        results = dict(cached or {})
        for key, policy, cfg in runs:
            if key in results:
                continue
            # calibration runs are "stage:label/seed=N", re-scoring runs "kind-hash/seed=N/val=M"
            label = key.split(":", 1)[1].split("/", 1)[0] if ":" in key else key.split("-", 1)[0]
            calls.append((key, policy, cfg))
            results[key] = {METRIC: scores[label], "val_accuracy": scores[label], "seed": cfg.seed}
            if save is not None:
                save(results)
        return results

    monkeypatch.setattr(rescore, "train_runs", train_runs)


SCORES = {
    "none": 0.70,
    "crop": 0.78,
    "standard": 0.72,
    "autoaugment-cifar10": 0.79,
    "autoaugment-svhn": 0.55,
    "autoaugment-imagenet": 0.81,
    "randaugment": 0.83,
    "trivialaugment": 0.76,
    # re-scoring, by candidate kind
    "assembled": 0.80,
    "best_trial": 0.79,
    "warm_start+found": 0.80,
    "survivors": 0.78,
    "transfer": 0.84,
}


def test_calibration_chooses_the_base_then_scores_the_published_policies_on_it_and_resumes(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    config = _config(tmp_path, base="auto", warm_start="auto", calibration_seeds=2)
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    log = _Log()
    result = calibrate(config, run, log)
    assert result.base == "crop" and result.warm_start == ("autoaugment-imagenet",)
    # 3 bases + 5 published policies, 2 seeds each, on seeds no trial uses; the published ones on crop.
    assert len(calls) == 16
    assert {cfg.seed for _, _, cfg in calls} == {calibration_train_config(config, i).seed for i in (0, 1)}
    assert {cfg.seed for _, _, cfg in calls}.isdisjoint({config.train.seed, config.rescore_train_config(0).seed})
    moved = {key.split(":")[1].split("/")[0]: p for key, p, _ in calls if key.startswith("transfer:")}
    assert set(moved) == set(TRANSFER_REFS) and all(p.base == "crop" for p in moved.values())
    assert moved["autoaugment-svhn"].sub_policies == presets.resolve("autoaugment-svhn").sub_policies
    # The choice applied: every candidate on crop, the warm start the chosen policy's chunks on crop.
    applied = result.apply(config)
    assert (applied.base, applied.space.base, applied.warm_start) == ("crop", "crop", ("autoaugment-imagenet",))
    assert all(p.base == "crop" for p in warm_start_policies(applied.warm_start, applied.space))
    # What a person reads: the base, why, and which published policy transferred best, by how much.
    text = "\n".join(describe_calibration(result.record))
    assert "base: crop (proxy score %, each base alone, mean of 2 runs: crop 78.00, standard 72.00, none 70.00)" in text
    assert "transferred best: randaugment by 2.00 points over the next" in text
    assert "warm start: autoaugment-imagenet (randaugment: " in text
    assert text in "\n".join(log.lines)
    # Every run saved as it finished; a resumed search trains none again and chooses the same.
    saved = json.loads((tmp_path / "runs" / "cal" / CALIBRATION_FILE).read_text())
    assert len(saved["runs"]) == 16 and saved["record"] == result.record
    calls.clear()
    again = calibrate(config, run, _Log())
    assert calls == [] and again == result


def test_bases_within_the_noise_run_again_and_the_choice_is_made_on_all_their_runs(tmp_path, monkeypatch):
    calls = []
    scores = dict(SCORES, standard=0.775)  # 0.5 points under crop: not told apart by one run each
    _fake_runs(monkeypatch, scores, calls)
    config = _config(tmp_path, base="auto", warm_start=["autoaugment-cifar10"])
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    log = _Log()
    result = calibrate(config, run, log)
    # 3 bases, then 2 more seeds each for crop and standard alone (none is far below), on seeds no
    # other calibration run uses.
    labels = [key.split(":")[1].split("/")[0] for key, _, _ in calls]
    assert labels[:3] == ["none", "crop", "standard"] and sorted(labels[3:]) == ["crop", "crop", "standard", "standard"]
    extra = {calibration_train_config(config, i).seed for i in (1, 2)}
    assert {cfg.seed for _, _, cfg in calls[3:]} == extra and len({cfg.seed for _, _, cfg in calls}) == 3
    base = result.record["base"]
    assert [len(base["scores"][b]["runs"]) for b in ("crop", "standard", "none")] == [3, 3, 1]
    assert sorted(result.record["base_extra_seeds"]) == sorted(extra)
    # Still within the noise after three runs each: the base with the flip is kept, and said why.
    assert base["best"] == "crop" and base["within_noise"] == ["standard"] and result.base == "standard"
    text = "\n".join(describe_calibration(result.record))
    assert (
        "base: standard (proxy score %, each base alone, mean of 1 or 3 runs: crop 78.00, standard 77.50, "
        "none 70.00); within the noise of the best mean, crop" in text
    )
    assert "(first round: standard within 3.68 points of crop, so they ran again)" in text
    assert text in "\n".join(log.lines)
    calls.clear()
    assert calibrate(config, run, _Log()) == result and calls == []  # resumed: nothing trained again
    # base_extra_seeds=0: no second round; the same rule on the first runs.
    calls.clear()
    config = _config(tmp_path / "b", base="auto", warm_start=["autoaugment-cifar10"], base_extra_seeds=0)
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log())
    assert len(calls) == 3 and result.base == "standard" and "base_extra_seeds" not in result.record


def test_a_resumed_search_keeps_the_choice_its_calibration_made_even_under_another_rule(tmp_path, monkeypatch):
    """calibration.json written by a version that kept the best mean (crop, standard within the
    noise): resuming under today's rule keeps crop, as the trials already ran on it."""
    calls = []
    _fake_runs(monkeypatch, dict(SCORES, standard=0.775), calls)
    config = _config(tmp_path, base="auto", warm_start="auto")
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    old = {
        "base": {
            "chosen": "crop",
            "scores": {
                "crop": {"mean": 0.78, "runs": [0.78]},
                "standard": {"mean": 0.775, "runs": [0.775]},
                "none": {"mean": 0.70, "runs": [0.70]},
            },
            "noise": {"sd": 0.007, "threshold": 0.0198, "source": "one run each"},
            "within_noise": ["standard"],
        },
        "transfer": {
            "base": "crop",
            **rank_transfer(
                {"autoaugment-svhn": [0.9], "autoaugment-cifar10": [0.95]},
                {"autoaugment-svhn": None, "autoaugment-cifar10": None},
            ),
        },
    }
    run.write_json(CALIBRATION_FILE, {"runs": {}, "record": old})
    result = calibrate(config, run, _Log())
    assert calls == [] and result.base == "crop" and result.warm_start == ("autoaugment-cifar10",)
    assert result.record["base"] == old["base"]
    assert (
        "base: crop (proxy score %, each base alone: crop 78.00, standard 77.50, none 70.00); the best mean"
        in "\n".join(describe_calibration(result.record))
    )


def test_the_best_published_policy_is_a_final_candidate_on_the_chosen_base():
    from autoaug.search.calibrate import transfer_candidate

    record = {
        "transfer": {
            "base": "crop",
            **rank_transfer(
                {"autoaugment-svhn": [0.9], "randaugment": [0.95]}, {"autoaugment-svhn": None, "randaugment": "31 bins"}
            ),
        }
    }
    candidate = transfer_candidate(record, "signs")
    assert candidate.kind == "transfer" and candidate.policy.name == "signs" and candidate.policy.base == "crop"
    assert candidate.policy.sub_policies == presets.resolve("randaugment").sub_policies
    assert transfer_candidate({"base": {}}, "signs") is None and transfer_candidate(None, "signs") is None


def test_nothing_is_measured_when_base_and_warm_start_are_given(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    config = _config(tmp_path, base="crop", warm_start=["autoaugment-svhn"])
    assert calibrate(config, RunDir(config.storage, config.name), _Log()) is None and calls == []
    # The base alone: the warm start kept as given, moved onto the measured base.
    config = _config(tmp_path, base="auto", warm_start=["autoaugment-svhn"])
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log())
    assert (result.base, result.warm_start) == ("crop", None) and len(calls) == 3
    assert result.apply(config).warm_start == ("autoaugment-svhn",)


# ----------------------------------------------------------------------------------------------
# On data whose labels a flip changes


def _arrows(path, per_class=320, seed=0):
    """32x32 PNGs of an arrow pointing left (class 0) or right (class 1), shifted by a few pixels,
    random colours on a noisy background: a horizontal flip turns one class into the other."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    images, labels = [], []
    for label in (0, 1):
        for _ in range(per_class):
            back = rng.integers(0, 80, 3)
            img = Image.fromarray(np.clip(rng.normal(back, 12, (32, 32, 3)), 0, 255).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            dx, dy = rng.integers(-4, 5, 2)
            colour = tuple(int(c) for c in rng.integers(150, 256, 3))
            draw.rectangle([9 + dx, 14 + dy, 23 + dx, 17 + dy], fill=colour)  # the shaft
            tip = [(5, 15.5), (12, 8), (12, 23)] if label == 0 else [(27, 15.5), (20, 8), (20, 23)]
            draw.polygon([(x + dx, y + dy) for x, y in tip], fill=colour)  # the head
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            images.append(buf.getvalue())
            labels.append(label)
    table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())})
    pq.write_table(table.replace_schema_metadata({"classes": "left,right"}), path)
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_base_auto_picks_crop_over_standard_when_a_flip_changes_the_label(tmp_path, capsys):
    from autoaug.launch.cli import main

    data = _arrows(tmp_path / "arrows.parquet")
    argv = [
        "search",
        "--data",
        str(data),
        "--preset",
        "smoke",
        "--name",
        "arrows",
        "--base",
        "auto",
        "--no-warm-start",
        "--num-trials",
        "2",
        "--no-rescore",
        "--set",
        "train.train_size=512",
        "--set",
        "train.val_size=128",
        "--set",
        "train.epochs=6",
        "--storage",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "runs" / "arrows" / "result.json").read_text())
    base = result["provenance"]["calibration"]["base"]
    assert base["chosen"] == "crop", base
    # The flip makes half the labels wrong: the standard base stays near chance, far below crop.
    assert base["scores"]["standard"]["mean"] < 0.7 < base["scores"]["crop"]["mean"]
    assert result["policy"]["base"] == "crop"
    assert "base: crop (proxy score %, each base alone" in printed
    # the trials trained on crop too
    assert result["provenance"]["search"]["config"]["base"] == "crop"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_transfer_warm_start_enqueues_the_best_published_policys_sub_policies(tmp_path, monkeypatch, capsys):
    """The proxy runs of the calibration replaced by a table (autoaugment-imagenet transfers best on
    crop); the trials are real: the first five are its 25 sub-policies on crop, in order."""
    from autoaug.search.study import open_study
    from autoaug.search.driver import run_search

    data = _arrows(tmp_path / "arrows.parquet", per_class=96)
    _fake_runs(monkeypatch, SCORES, [])
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": "transfer",
            "data": str(data),
            "base": "auto",
            "warm_start": "auto",
            "num_trials": 5,
            "concurrency": 1,
            "early_stopping": False,
            "rescore": True,
            "train": {"preset": "smoke", "epochs": 1, "train_size": 64, "val_size": 32},
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
            "verbose": 0,
        }
    )
    outcome = run_search(config)
    study = open_study("transfer", runs_root=str(tmp_path / "runs"))
    space = config.replace(base="crop").space
    enqueued = [space.to_policy(t.params) for t in sorted(study.trials, key=lambda t: t.number)]
    expected = warm_start_policies(["autoaugment-imagenet"], space)
    assert [p.sub_policies for p in enqueued] == [p.sub_policies for p in expected]
    assert all(p.base == "crop" for p in enqueued) and outcome.policy.base == "crop"
    calibration = outcome.provenance["calibration"]
    assert calibration["transfer"]["warm_start"] == ["autoaugment-imagenet"]
    assert "transferred best: randaugment by 2.00 points" in outcome.summary()
    # The published policy that transferred best competes in re-scoring, and won here: the search
    # stores RandAugment on crop and says so, rather than a policy that re-scored lower.
    assert outcome.provenance["selection"]["chosen"] == "transfer"
    assert outcome.policy.sub_policies == presets.resolve("randaugment").sub_policies
    assert (outcome.policy.base, outcome.policy.name) == ("crop", "transfer")
    assert "stored: transfer" in outcome.summary()
