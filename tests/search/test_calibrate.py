"""Calibration before a search: the base and the warm start measured on the user's data."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import numpy as np
import pytest

from autoaug.policies import presets
from autoaug.search.config import SearchConfig
from autoaug.search.decide import proxy_runs
from autoaug.search.decide.calibrate import (
    CALIBRATION_FILE,
    CALIBRATION_SEED_OFFSET,
    calibrate,
    calibration_train_config,
)
from autoaug.search.decide.calibration_choices import TRANSFER_REFS, choose_base, describe_calibration, rank_transfer
from autoaug.search.decide.noise import IMAGE_SCORES, decode_image_scores, encode_image_scores, measure
from autoaug.search.decide.warm_start import warm_start_policies
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC


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


def _run(score, seed=0, n=1000, churn=0.0, window=5, val="val-a"):
    """A run's result as :func:`autoaug.search.decide.proxy_runs.train_and_score` returns it: the first
    ``score * n`` images right in every epoch of the window, then ``churn * n`` right images and as
    many wrong ones exchanged at random (by ``seed``): two runs disagree on about ``2 * churn``
    of the images beyond their gap, as two seeds do."""
    counts = np.zeros(n, dtype=np.uint8)
    k = round(score * n)
    counts[:k] = window
    m = min(round(churn * n), k, n - k)
    if m:
        rng = np.random.default_rng(seed)
        counts[rng.choice(k, m, replace=False)] = 0
        counts[k + rng.choice(n - k, m, replace=False)] = window
    return {
        METRIC: k / n,
        "val_accuracy": k / n,
        "train_time_s": 100.0,
        "val_size": n,
        "seed": seed,
        IMAGE_SCORES: encode_image_scores(counts, window, val),
    }


def test_the_noise_is_measured_per_image_and_from_repeated_runs():
    runs = {"a": [_run(0.70, 0, churn=0.1), _run(0.72, 1, churn=0.1)], "b": [_run(0.75, 2, churn=0.1)]}
    noise = measure(runs)
    # Per image: half the variance of the paired per-image difference over n, over the pairs of
    # runs of different labels, computed here by hand.
    v = {k: [decode_image_scores(r[IMAGE_SCORES])[0] for r in rs] for k, rs in runs.items()}
    pairs = [np.var(x - v["b"][0], ddof=1) / 1000 for x in v["a"]]
    assert noise.sampling == pytest.approx((np.mean(pairs) / 2) ** 0.5)
    # Per run: the repeats' spread beyond their own per-image variance (one pair), pooled with
    # the per-image part as one more degree of freedom.
    own = np.var(v["a"][0] - v["a"][1], ddof=1) / 1000 / 2
    measured = max(0.0, np.var([0.70, 0.72], ddof=1) - own) ** 0.5
    assert noise.df == 1 and noise.paired and noise.measured_training == pytest.approx(measured)
    assert noise.training == pytest.approx(((measured**2 + noise.sampling**2) / 2) ** 0.5)
    assert noise.sd == pytest.approx((noise.sampling**2 + noise.training**2) ** 0.5)
    # No repeats: the per-run part is taken equal to the per-image part, and said so.
    single = measure({"a": [runs["a"][0]], "b": runs["b"]})
    assert single.df == 0 and single.training == pytest.approx(single.sampling)
    assert "no run repeated yet" in single.source()
    # Without per-image scores (an earlier version's runs): the binomial variance of each score.
    bare = measure({"a": [0.8], "b": [0.9]})
    assert not bare.paired and bare.sampling == pytest.approx(((0.8 * 0.2 + 0.9 * 0.1) / 1000 / 2) ** 0.5)
    # Runs on other images are not paired.
    assert not measure({"a": [_run(0.7)], "b": [_run(0.8, val="val-b")]}).paired
    # The per-image part follows the data: on a dataset scored near 98%, runs disagree on fewer
    # images and the noise is smaller than at 60%.
    high = measure({"a": [_run(0.98, 0, churn=0.01)], "b": [_run(0.975, 1, churn=0.01)]})
    low = measure({"a": [_run(0.60, 0, churn=0.12)], "b": [_run(0.595, 1, churn=0.12)]})
    assert high.sd < low.sd / 2


def test_of_the_bases_within_the_noise_of_the_best_the_one_that_augments_most_is_chosen():
    # Runs that disagree on a fifth of the images: 0.5 points apart is not told apart, and then the
    # flip is kept: a weaker base must win beyond the noise.
    one = choose_base(
        {
            "none": [_run(0.70, 0, churn=0.1)],
            "crop": [_run(0.76, 1, churn=0.1)],
            "standard": [_run(0.755, 2, churn=0.1)],
        }
    )
    assert one["best"] == "crop" and one["within_noise"] == ["standard"] and one["chosen"] == "standard"
    assert list(one["scores"]) == ["crop", "standard", "none"]
    assert one["noise"]["threshold"] == pytest.approx(2 * one["noise"]["sd"] * 2**0.5)
    assert one["noise"]["df"] == 0 and "no run repeated yet" in one["noise"]["source"]
    # A flip that changes labels costs far more than the noise: the best mean is kept.
    signs = choose_base({"none": [_run(0.8666, 0)], "crop": [_run(0.963, 1)], "standard": [_run(0.9034, 2)]})
    assert signs["chosen"] == signs["best"] == "crop" and signs["within_noise"] == []
    # Bases with fewer runs than the best are held to a wider threshold (one run against three).
    three = [_run(0.78, s, churn=0.05) for s in (3, 4, 5)]
    wider = choose_base({"none": [_run(0.758, 0, churn=0.05)], "crop": three, "standard": [_run(0.70, 1, churn=0.05)]})
    assert wider["within_noise"] == ["none"] and wider["chosen"] == "crop"
    # (the threshold recorded is for as many runs as the best's: none's 2.2 points are beyond it)
    assert wider["noise"]["threshold"] == pytest.approx(2 * wider["noise"]["sd"] * (2 / 3) ** 0.5)
    assert 0.78 - 0.758 > wider["noise"]["threshold"]


def test_an_exact_tie_goes_to_the_base_that_augments_most():
    assert choose_base({"none": [0.9], "crop": [0.9], "standard": [0.9]})["chosen"] == "standard"
    assert choose_base({"none": [0.9], "crop": [0.9], "standard": [0.5]})["chosen"] == "crop"
    assert choose_base({"none": [0.9], "crop": [0.5], "standard": [0.5]})["chosen"] == "none"


def test_the_base_line_says_why_in_each_case():
    def line(scores):
        runs = {b: [_run(v, i, churn=0.1)] for i, (b, v) in enumerate(scores.items())}
        return describe_calibration({"base": choose_base(runs)})[0]

    measured = (
        "a run's spread 1.75 points measured on these runs: per image 1.24, per run 1.24 taken equal to it, "
        "no run repeated yet"
    )
    assert line({"none": 0.70, "crop": 0.76, "standard": 0.765}).endswith(
        f"the best mean; within the noise of it (4.95 points; {measured}): crop, which augments less"
    )
    assert "base: standard (" in line({"none": 0.70, "crop": 0.76, "standard": 0.755})
    assert "within the noise (5.0" in line({"none": 0.70, "crop": 0.76, "standard": 0.755})
    assert ") of the best mean, crop's, and augments more" in line({"none": 0.70, "crop": 0.76, "standard": 0.755})
    assert "); ahead of the others beyond the noise (5.2" in line({"none": 0.70, "crop": 0.80, "standard": 0.60})


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


def _fake_runs(monkeypatch, scores, calls, spread=0.002, churn=0.1):
    """The proxy runs replaced by a table: run ``i`` of a label scores its table entry plus
    ``spread * SHIFTS[i]`` (two seeds ``spread * sqrt(2)`` apart: a per-run spread of ``spread``),
    with per-image scores (:func:`_run`) disagreeing on about ``2 * churn`` of 1,000 images."""

    def train_runs(runs, config, *, cached=None, save=None, task_name="", deadline=None):
        results = dict(cached or {})
        for key, policy, cfg in runs:
            if key in results:
                continue
            # calibration runs are "stage:label/seed=N", re-scoring runs "kind-hash/seed=N/val=M"
            label = key.split(":", 1)[1].split("/", 1)[0] if ":" in key else key.split("-", 1)[0]
            calls.append((key, policy, cfg))
            i = (cfg.seed - config.train.seed - CALIBRATION_SEED_OFFSET) % 1000
            score = scores[label] + spread * SHIFTS[i % len(SHIFTS)]
            results[key] = {**_run(score, cfg.seed, churn=churn), "seed": cfg.seed}
            if save is not None:
                save(results)
        return results

    monkeypatch.setattr(proxy_runs, "train_runs", train_runs)


SHIFTS = (0.0, 2**0.5, -(2**0.5), 0.5)


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
    # 3 bases + 5 published policies, 2 seeds each, on seeds no trial uses; the published ones on
    # crop. The bases are apart beyond the noise; randaugment and autoaugment-imagenet, 2 points
    # apart, are not: one more round for those two alone (transfer_extra_seeds=1).
    assert len(calls) == 18
    third = calibration_train_config(config, 2).seed
    assert sorted(key for key, _, cfg in calls if cfg.seed == third) == [
        f"transfer:autoaugment-imagenet/seed={third}",
        f"transfer:randaugment/seed={third}",
    ]
    assert {cfg.seed for _, _, cfg in calls} == {calibration_train_config(config, i).seed for i in (0, 1, 2)}
    assert {cfg.seed for _, _, cfg in calls}.isdisjoint({config.train.seed, config.rescore_train_config(0).seed})
    moved = {key.split(":")[1].split("/")[0]: p for key, p, _ in calls if key.startswith("transfer:")}
    assert set(moved) == set(TRANSFER_REFS) and all(p.base == "crop" for p in moved.values())
    assert moved["autoaugment-svhn"].sub_policies == presets.resolve("autoaugment-svhn").sub_policies
    # The choice applied: every candidate on crop, the warm start the chosen policy's chunks on crop.
    applied = result.apply(config)
    assert (applied.base, applied.space.base, applied.warm_start) == ("crop", "crop", ("autoaugment-imagenet",))
    assert all(p.base == "crop" for p in warm_start_policies(applied.warm_start, applied.space))
    # What a person reads: the base, why, and which published policy transferred best, by how much
    # and whether that is beyond the noise.
    text = "\n".join(describe_calibration(result.record))
    assert "base: crop (proxy score %, each base alone, mean of 2 runs: crop 78.15, standard 72.15, none 70.15)" in text
    assert "; ahead of the others beyond the noise (" in text
    transfer = result.record["transfer"]
    assert transfer["rounds"][0]["within_noise"] == transfer["within_noise"] == ["autoaugment-imagenet"]
    assert "transferred best: randaugment by 2.00 points over the next; within the noise of it (" in text
    assert "(ran again: autoaugment-imagenet within " in text and " points of randaugment)" in text
    assert "warm start: autoaugment-imagenet (randaugment: " in text
    assert text in "\n".join(log.lines)
    # Every run saved as it finished; a resumed search trains none again and chooses the same.
    saved = json.loads((tmp_path / "runs" / "cal" / CALIBRATION_FILE).read_text())
    assert len(saved["runs"]) == 18 and saved["record"] == result.record
    calls.clear()
    again = calibrate(config, run, _Log())
    assert calls == [] and again == result


def test_space_auto_searches_the_family_of_the_published_policy_that_transfers_best(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    config = _config(tmp_path, base="auto", warm_start="auto", family="auto")
    assert config.space.family == "aa"  # until calibration has measured
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log())
    # randaugment transfers best (on crop): its family is searched, from randaugment itself.
    assert (result.family, result.warm_start) == ("randaugment", ("randaugment",))
    assert "unfit" not in result.record["transfer"]["scores"]["randaugment"]
    applied = result.apply(config)
    assert (applied.space.family, applied.space.base, applied.space.num_magnitude_bins) == ("randaugment", "crop", 31)
    (warm,) = warm_start_policies(applied.warm_start, applied.space)
    assert warm.content_hash == presets.resolve("randaugment:n=2,m=9").with_base("crop").content_hash
    text = "\n".join(describe_calibration(result.record))
    assert "warm start: randaugment\n" in text + "\n" and "space family: randaugment (--space auto" in text
    # Resumed: the same family, nothing trained again.
    calls.clear()
    again = calibrate(config, run, _Log())
    assert calls == [] and again == result
    # A method that searches the aa family only (PBA): auto stays there.
    pba = calibrate(
        _config(tmp_path / "pba", base="auto", warm_start="auto", family="auto", method="pba"),
        _mkrun(tmp_path / "pba"),
        _Log(),
    )
    assert (pba.family, pba.warm_start) == ("aa", ("autoaugment-imagenet",))
    assert pba.record["transfer"]["scores"]["randaugment"]["unfit"] == (
        "its family, randaugment, is not one search method pba searches"
    )
    # Without --space auto the aa space stays, warm-started from the best AutoAugment policy.
    aa = calibrate(_config(tmp_path / "aa", base="auto", warm_start="auto"), _mkrun(tmp_path / "aa"), _Log())
    assert (aa.family, aa.warm_start) == (None, ("autoaugment-imagenet",))


def _mkrun(root):
    root.mkdir()
    config = _config(root)
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    return run


def test_calibration_runs_a_whole_shorter_schedule_when_asked(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    config = _config(tmp_path, base="auto", warm_start="auto", score_window=2, calibration_epochs=6)
    cfg = calibration_train_config(config, 0)
    # Its own whole schedule (warm-up and decay over 6 epochs), scored over its last 2 epochs.
    assert (cfg.epochs, cfg.eval_from, cfg.eval_epochs) == (6, 5, None)
    assert cfg.warmup_epochs <= 6 and config.train.epochs != 6
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    log = _Log()
    result = calibrate(config, run, log)
    assert calls and all(c.epochs == 6 for _, _, c in calls)
    # Saved under keys that say their schedule, so that no search reads them as the trials'.
    assert all(key.endswith("/epochs=6") for key, _, _ in calls)
    assert result.record["epochs"] == 6
    assert any("proxy run(s) of 6 epochs" in line for line in log.lines)
    # Without calibration_epochs: the trials' schedule, under the keys it always had.
    assert calibration_train_config(_config(tmp_path), 0).epochs == config.train.epochs
    with pytest.raises(
        ValueError, match=r"calibration_epochs: 1 is invalid; expected an integer from score_window \(2\) to 10,000"
    ):
        _config(tmp_path, score_window=2, calibration_epochs=1)
    with pytest.raises(ValueError, match=r"calibration_epochs: 10001 is invalid; .* to 10,000 \(the longest run\)"):
        _config(tmp_path, score_window=2, calibration_epochs=10_001)


def test_bases_within_the_noise_run_again_and_the_choice_is_made_on_all_their_runs(tmp_path, monkeypatch):
    calls = []
    scores = dict(SCORES, standard=0.775)  # 0.5 points under crop: not told apart
    _fake_runs(monkeypatch, scores, calls)
    config = _config(tmp_path, base="auto", warm_start=["autoaugment-cifar10"])
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    log = _Log()
    result = calibrate(config, run, log)
    # The 3 bases and standard again (the first round measures the per-run noise), then one more
    # run per round for crop and standard alone (none is far below), on seeds no other
    # calibration run uses, until each has 1 + base_extra_seeds.
    labels = [key.split(":")[1].split("/")[0] for key, _, _ in calls]
    assert labels[:4] == ["standard", "crop", "none", "standard"] and sorted(labels[4:]) == ["crop", "crop", "standard"]
    extra = {calibration_train_config(config, i).seed for i in (1, 2)}
    assert {cfg.seed for _, _, cfg in calls[3:]} == extra and len({cfg.seed for _, _, cfg in calls}) == 3
    base = result.record["base"]
    assert [len(base["scores"][b]["runs"]) for b in ("crop", "standard", "none")] == [3, 3, 1]
    assert sorted(result.record["base_extra_seeds"]) == sorted(extra)
    assert [r["within_noise"] for r in base["rounds"]] == [["standard"], ["standard"]]
    # Still within the noise after three runs each: the base with the flip is kept, and said why,
    # with the noise as measured on these runs.
    assert base["best"] == "crop" and base["within_noise"] == ["standard"] and result.base == "standard"
    assert base["noise"]["df"] == 4 and base["noise"]["measured_training"] < 0.005
    text = "\n".join(describe_calibration(result.record))
    assert (
        "base: standard (proxy score %, each base alone, mean of 1 or 3 runs: crop 78.00, standard 77.50, "
        "none 70.00); within the noise ("
        in text
        and ") of the best mean, crop's, and augments more" in text
    )
    assert "over 4 repeated pairs pooled with the per-image part" in text
    assert "(ran again: standard within " in text and "; then standard within " in text
    assert text in "\n".join(log.lines)
    calls.clear()
    assert calibrate(config, run, _Log()) == result and calls == []  # resumed: nothing trained again
    # base_extra_seeds=0: no second round and no repeat; the same rule on the first runs.
    calls.clear()
    config = _config(tmp_path / "b", base="auto", warm_start=["autoaugment-cifar10"], base_extra_seeds=0)
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log())
    assert len(calls) == 3 and result.base == "standard" and "base_extra_seeds" not in result.record


def test_a_race_runs_another_round_only_while_it_fits_in_its_share_of_the_time_budget(tmp_path, monkeypatch):
    from autoaug.search.decide.calibrate import CALIBRATION_SHARE

    class Clock:  # a budget whose spent time the test sets; no re-scoring planned
        total_s = 900.0
        spent = 0.0

        def spent_s(self):
            return self.spent

        def reserve_s(self, run_s=None):
            return 0.0

    calls = []
    _fake_runs(monkeypatch, dict(SCORES, standard=0.775), calls)
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    budget = Clock()
    # A run takes about 100 s (measured on the first round); one more round of 1 wave fits while
    # the calibration has spent less than its share (300 s of 900) minus that.
    budget.spent = CALIBRATION_SHARE * budget.total_s - 50
    config = _config(tmp_path, base="auto", warm_start=["autoaugment-cifar10"])
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log(), budget)
    base = result.record["base"]
    assert len(calls) == 4 and base["rounds"] == [{**base["rounds"][0], "stopped": "time"}]
    assert result.base == "standard" and base["within_noise"] == ["standard"]
    text = describe_calibration(result.record)[0]
    assert "(standard within " in text and "another round did not fit in the calibration's share of the time" in text
    # With time to spare, the same race runs its rounds.
    calls.clear()
    budget.spent = 0.0
    config = _config(tmp_path / "b", base="auto", warm_start=["autoaugment-cifar10"])
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log(), budget)
    assert len(calls) == 7 and "stopped" not in result.record["base"]["rounds"][-1]


def test_a_round_of_the_bases_race_leaves_room_for_the_published_policies_first_round(tmp_path, monkeypatch):
    """Runs of about 100 s, 2 at once, and 300 s of calibration share (900 s budget): one more
    round of the bases (1 wave) would fit alone, but not with the published policies' 6 runs
    after it (3 waves), so it is not run; with a larger budget it is, and the choice is the same."""

    class Clock:
        total_s = 900.0

        def spent_s(self):
            return 0.0

        def reserve_s(self, run_s=None):
            return 0.0

    calls = []
    _fake_runs(monkeypatch, dict(SCORES, standard=0.775), calls)
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    config = _config(tmp_path, base="auto", warm_start="auto")
    result = calibrate(config, _mkrun(tmp_path / "a"), _Log(), Clock())
    base = result.record["base"]
    assert base["rounds"][-1].get("stopped") == "time" and len(base["rounds"]) == 1
    bases_trained = [key for key, _, _ in calls if key.startswith("base:")]
    assert len(bases_trained) == 4  # the first round and standard's repeat only
    assert result.record["transfer"]["base"] == result.base
    calls.clear()
    roomy = Clock()
    roomy.total_s = 9000.0
    again = calibrate(config, _mkrun(tmp_path / "b"), _Log(), roomy)
    assert len([key for key, _, _ in calls if key.startswith("base:")]) > 4  # the race ran its rounds
    assert (again.base, again.warm_start) == (result.base, result.warm_start)


def test_a_calibration_that_will_outlast_the_budget_says_so_before_its_published_policies_run(tmp_path, monkeypatch):
    """Runs of about 110 s (100 s measured + the overhead), 2 at once: the published policies' 6
    runs are 3 waves, 330 s. With 300 s spent of 900 and no re-scoring planned they fit (nothing
    said); with 600 s spent the search says, before they start, when calibration will end and that
    the trials get no time; and with 300 s spent but re-scoring planned (3 runs and 2 race waves:
    4 waves of 110 s and storing's 15 s, 455 s), calibration ends within the budget but leaves
    less than that: it says that no trial will run, and what to do instead."""
    from autoaug.search.budget import Budget

    _fake_runs(monkeypatch, SCORES, [])
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    lines = {}
    for spent, planned in ((300.0, False), (600.0, False), (300.0, True)):
        budget = Budget(900.0, started=-spent, clock=lambda: 0.0)
        if planned:
            budget.plan_rescore(3, 2, None, 1, race_waves=2)
        label = f"{int(spent)}{'-planned' if planned else ''}"
        config = _config(tmp_path / label, base="crop", warm_start="auto")
        run = RunDir(config.storage, config.name)
        run.location.mkdir()
        # the base's runs measured already (a resumed search): their time is the forecast's
        run.write_json(CALIBRATION_FILE, {"runs": {"base:crop/seed=2000": _run(0.78, 2000)}})
        log = _Log()
        calibrate(config, run, log, budget)
        lines[label] = [line for line in log.lines if "runs of about" in line and "time budget" in line]
    assert lines["300"] == []
    # ... and what to do about it: a budget of which calibration is a third, or reusing these runs.
    advice = (
        "for trials, give this data --time-budget {} (calibration a third of it), or start the next search "
        "with --calibration-from {} (it reuses these runs)"
    )
    (line,) = lines["600"]
    assert line == (
        "calibration: 6 runs of about 1m50s, 2 at once: it will end at about 15m30s of the 15m time budget "
        "(which does not cut calibration), leaving the trials little or no time; " + advice.format("50m", "cal")
    )
    (line,) = lines["300-planned"]
    assert line == (
        "calibration: 6 runs of about 1m50s, 2 at once: it will end at about 10m30s of the 15m time budget, leaving "
        "4m30s, less than trials and re-scoring need (about 7m35s): no trial will run, the published policy that "
        "transferred best will be stored; " + advice.format("40m", "cal")
    )


def _clocked_budget(monkeypatch, now):
    """Every :class:`Budget` the driver opens reads the clock ``now[0]`` (seconds), not the wall."""
    from autoaug.search.budget import Budget

    real_open = Budget.open.__func__

    def open_(cls, run, total_s, *, session, started=None, clock=None, say=None):
        return real_open(cls, run, total_s, session=session, started=now[0], clock=lambda: now[0], say=say)

    monkeypatch.setattr(Budget, "open", classmethod(open_))


def _runs_that_take(monkeypatch, now, seconds):
    """Each faked proxy run (:func:`_fake_runs`) moves the clock ``now`` on by ``seconds``."""

    fake = proxy_runs.train_runs

    def train_runs(runs, config, *, cached=None, save=None, **kw):
        def saved(results):
            now[0] += seconds
            if save is not None:
                save(results)

        return fake(runs, config, cached=cached, save=saved, **kw)

    monkeypatch.setattr(proxy_runs, "train_runs", train_runs)


def test_a_calibration_that_used_the_budget_runs_no_trial_and_stores_the_transfer_as_it_measured_it(
    tmp_path, monkeypatch, capsys, write_images
):
    """10 calibration runs of 400 s against a 30-minute budget: no trial starts (it would be
    stopped at its first report with no time to re-score it); the published policy that
    transferred best is stored with its calibration runs, and the summary says why."""
    from autoaug.policies.store import PolicyStore
    from autoaug.search.driver import run_search
    from autoaug.search.methods.train.method import TrainMethod

    data = _arrows(write_images, tmp_path / "arrows.parquet", per_class=48)
    calls, now = [], [0.0]
    _fake_runs(monkeypatch, SCORES, calls)
    _runs_that_take(monkeypatch, now, 400.0)
    _clocked_budget(monkeypatch, now)
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)  # (no Ray: nothing trains)

    def no_trials(self, search):
        raise AssertionError("the method ran trials after calibration used the budget")

    monkeypatch.setattr(TrainMethod, "run", no_trials)
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": "spent",
            "data": str(data),
            "num_trials": 5,
            "base": "auto",
            "warm_start": "auto",
            "rescore": True,
            "time_budget_s": 1800,
            "train": {"preset": "smoke", "epochs": 1, "train_size": 32, "val_size": 32},
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
            "verbose": 1,
        }
    )
    outcome = run_search(config, session=contextlib.nullcontext)
    printed = capsys.readouterr().out
    assert len(calls) == 10 and all(":" in key for key, _, _ in calls)  # calibration's runs, no re-scoring run
    assert outcome.trials == () and outcome.best_trial is None
    assert outcome.policy.sub_policies == presets.resolve("randaugment").sub_policies
    assert (outcome.policy.base, outcome.policy.name) == ("crop", "spent")
    note = (
        "calibration ended at 1h6m40s of the 30m budget, leaving 0s, less than trials and re-scoring need "
        f"(about {{}}): none of the {config.method_config.num_trials} trials ran; stored randaugment on crop, the "
        "published policy that transferred best, as calibration measured it (83.00% over 1 run); for trials, "
        "give this data --time-budget 3h20m (calibration a third of it), or start the next search with "
        "--calibration-from spent (it reuses these runs)"
    )
    (line,) = [line for line in printed.splitlines() if "none of the" in line and "trials ran" in line]
    reserve = line.split("(about ", 1)[1].split(")", 1)[0]
    assert line.strip() == "time budget: " + note.format(reserve)
    prov = PolicyStore(str(tmp_path / "store")).get("spent@1").provenance
    assert prov["budget"]["ended"]["stage"] == "calibration" and prov["best"] is None
    assert prov["assembly"]["rule"] == "transfer" and prov["counts"]["trials"] == 0
    assert "selection" not in prov  # nothing was re-scored
    summary = outcome.summary()
    assert (
        "no trial ran; final policy = randaugment on crop, the published policy that transferred best, as "
        "calibration measured it" in summary
    )
    assert "re-scored" not in summary
    assert "the time budget (30m) ended the search with calibration: " + note.format(reserve) in summary
    # what the next search of this data can do instead of measuring it all again
    assert "proxy runs instead of training them again: --calibration-from spent" in summary
    # What the finished search gives back later: the same summary, --json, `policies show`.
    from autoaug.launch.cli import main
    from autoaug.launch.search_run import outcome_json
    from autoaug.search.driver import resume_search

    again = resume_search("spent", str(tmp_path / "runs"))
    assert again.summary() == summary and outcome_json(again)["best_trial"] is None
    capsys.readouterr()
    assert main(["policies", "show", "spent@1", "--store", str(tmp_path / "store")]) == 0
    shown = capsys.readouterr().out
    assert "  time budget   the time budget (30m) ended the search with calibration: calibration ended at" in shown
    # `autoaug report` has no study to draw: one line saying why and where to look, no traceback.
    code = main(["report", "spent", "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "r.png")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "ran no trial (the time budget went to calibration)" in err and "autoaug policies show spent@1" in err


def test_trials_are_skipped_only_before_any_ran_and_only_with_the_transfer_measured(tmp_path, monkeypatch):
    """The rule :func:`autoaug.search.driver._no_time_for_trials` applies, case by case."""
    from autoaug.search import driver
    from autoaug.search.budget import Budget
    from autoaug.search.decide.rescore import Candidate
    from autoaug.search.methods.train.method import TrainMethod

    config = _config(tmp_path, time_budget_s=1800)
    run = RunDir(config.storage, config.name)
    measured = Candidate("transfer", presets.resolve("randaugment"), (), None, (_run(0.8, 1), _run(0.8, 2)))
    unmeasured = Candidate("transfer", presets.resolve("randaugment"), (), None)
    started = {"yes": False}
    monkeypatch.setattr(TrainMethod, "can_resume", lambda self, run: started["yes"])

    def budget(spent):
        b = Budget(1800, started=0.0, clock=lambda: spent)
        b.plan_rescore(4, 2, 400.0, 1)
        return b

    assert driver._no_time_for_trials(config, run, budget(1700.0), measured)  # 100 s left, 815 s reserved
    assert not driver._no_time_for_trials(config, run, budget(600.0), measured)  # time for trials
    assert not driver._no_time_for_trials(config, run, budget(1700.0), unmeasured)  # nothing to store yet
    assert not driver._no_time_for_trials(config, run, budget(1700.0), None)
    assert not driver._no_time_for_trials(config, run, None, measured)
    started["yes"] = True  # an earlier driver session's trials: they go on
    assert not driver._no_time_for_trials(config, run, budget(1700.0), measured)
    decided = budget(600.0)  # an earlier session decided it: the decision stands
    decided.ended = {"stage": "calibration"}
    assert driver._no_time_for_trials(config, run, decided, measured)


def test_a_race_killed_between_rounds_resumes_to_the_same_decisions(tmp_path, monkeypatch):
    """calibration.json as a driver killed in the second round leaves it (the runs saved so far,
    no record): the resumed race trains only the runs it lacks and decides as the whole one did."""
    calls = []
    _fake_runs(monkeypatch, dict(SCORES, standard=0.775), calls)
    config = _config(tmp_path, base="auto", warm_start="auto")
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    whole = calibrate(config, run, _Log())
    order = [key for key, _, _ in calls]
    saved = json.loads((tmp_path / "runs" / "cal" / CALIBRATION_FILE).read_text())["runs"]
    kept = order[:5]  # the first round (4 runs) and one run of the second
    run.write_json(CALIBRATION_FILE, {"runs": {key: saved[key] for key in kept}})
    calls.clear()
    resumed = calibrate(config, run, _Log())
    assert [key for key, _, _ in calls] == order[5:]
    assert resumed == whole


@pytest.mark.parametrize("spread, rounds", [(0.003, 0), (0.02, 2)])
def test_the_noise_a_decision_uses_is_the_spread_the_runs_show(tmp_path, monkeypatch, spread, rounds):
    """crop 2 points above standard, runs that agree on all but their gap per image: when two
    seeds of a base are 0.3 points apart, crop is chosen after the first round; when they are 2
    points apart, the gap is within the noise and the race runs its rounds."""
    calls = []
    _fake_runs(monkeypatch, dict(SCORES, crop=0.78, standard=0.76), calls, spread=spread, churn=0.0)
    config = _config(tmp_path, base="auto", warm_start=["autoaugment-cifar10"])
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    result = calibrate(config, run, _Log())
    base = result.record["base"]
    # (with three runs, SHIFTS spread them by sqrt(2) times as much)
    assert base["noise"]["measured_training"] == pytest.approx(spread * (2**0.5 if rounds else 1), rel=0.2)
    assert len(base.get("rounds", [])) == rounds
    # The first round: the 3 bases and standard again; then only crop and standard (none is far
    # behind even at this noise: dropped) until each has 3 runs.
    labels = [key.split(":")[1].split("/")[0] for key, _, _ in calls]
    assert labels[:4] == ["standard", "crop", "none", "standard"]
    assert sorted(labels[4:]) == ([] if not rounds else ["crop", "crop", "standard"])
    assert result.base == ("crop" if not rounds else "standard")


def test_the_first_rounds_repeat_runs_in_the_same_batch_as_the_first_round(tmp_path, monkeypatch):
    """The repeat that measures the per-run noise goes with the first round's runs, last: on 2
    slots, 3 bases and the repeat are 2 waves (not 3 runs, then the repeat alone on one slot while
    the other idles), 5 published policies and theirs 3 waves (not 4)."""

    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    fake, batches = proxy_runs.train_runs, []

    def batched(runs, config, *, cached=None, **kwargs):
        batches.append([key.split("/")[0] for key, _, _ in runs if key not in (cached or {})])
        return fake(runs, config, cached=cached, **kwargs)

    monkeypatch.setattr(proxy_runs, "train_runs", batched)
    config = _config(tmp_path, base="auto", warm_start="auto")
    run = RunDir(config.storage, config.name)
    run.location.mkdir()
    calibrate(config, run, _Log())
    assert batches[0] == ["base:standard", "base:crop", "base:none", "base:standard"]
    assert batches[1] == [f"transfer:{ref}" for ref in TRANSFER_REFS] + ["transfer:autoaugment-cifar10"]


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
    from autoaug.search.decide.calibrate import transfer_candidate

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


def test_the_transfer_candidate_brings_its_calibration_runs_when_they_are_rescoring_runs(tmp_path):
    """A calibration run of the trials' schedule, validated on the trials' images, is a re-scoring
    run with another seed: re-scoring does not train the transfer again. A shorter calibration
    schedule, or re-scoring on another validation size, is not."""
    from autoaug.search.decide.calibrate import transfer_candidate

    config = _config(tmp_path, rescore=True)
    record = {
        "epochs": config.train.epochs,
        "transfer": {"base": "crop", **rank_transfer({"randaugment": [0.95], "autoaugment-svhn": [0.9]}, {})},
    }
    runs = {
        "transfer:randaugment/seed=2000": _run(0.95, 2000),
        "transfer:randaugment/seed=2001": _run(0.94, 2001),
        f"transfer:randaugment/seed=2000/epochs={config.train.epochs + 1}": _run(0.5, 2000),
        "transfer:autoaugment-svhn/seed=2000": _run(0.9, 2000),
        "base:crop/seed=2000": _run(0.8, 2000),
    }
    candidate = transfer_candidate(record, "signs", runs, config)
    assert candidate.runs == (runs["transfer:randaugment/seed=2000"], runs["transfer:randaugment/seed=2001"])
    assert transfer_candidate(record, "signs").runs == ()  # no runs given: re-scoring trains it
    shorter = {**record, "epochs": config.train.epochs - 1}
    assert transfer_candidate(shorter, "signs", runs, config).runs == ()
    assert transfer_candidate(record, "signs", runs, config.replace(rescore_val_size=64)).runs == ()


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
    assert (result.base, result.warm_start) == ("crop", None) and len(calls) == 4
    assert result.apply(config).warm_start == ("autoaugment-svhn",)


# ----------------------------------------------------------------------------------------------
# On data whose labels a flip changes


def _arrows(write_images, path, per_class=320, seed=0):
    """32x32 PNGs of an arrow pointing left (class 0) or right (class 1), shifted by a few pixels,
    random colours on a noisy background: a horizontal flip turns one class into the other."""
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
            images.append(img)
            labels.append(label)
    return write_images(path, images, labels, ["left", "right"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_base_auto_picks_crop_over_standard_when_a_flip_changes_the_label(tmp_path, capsys, write_images):
    from autoaug.launch.cli import main

    data = _arrows(write_images, tmp_path / "arrows.parquet")
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
        "1",  # the trial only shows it trained on the chosen base
        "--concurrency",
        "1",
        "--no-rescore",
        "--set",
        "base_extra_seeds=0",  # one run per base: the flip puts standard far below crop
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
@pytest.mark.usefixtures("shared_ray")
def test_the_transfer_warm_start_enqueues_the_best_published_policys_sub_policies(
    tmp_path, monkeypatch, capsys, write_images
):
    """The proxy runs of the calibration replaced by a table (autoaugment-imagenet transfers best on
    crop); the trials are real: the first five are its 25 sub-policies on crop, in order."""
    from autoaug.search.driver import run_search
    from autoaug.search.tune.study import open_study

    data = _arrows(write_images, tmp_path / "arrows.parquet", per_class=96)
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
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
    # Its calibration runs were its re-scoring runs: re-scoring trained the search's own candidates only.
    (transfer,) = [c for c in outcome.provenance["selection"]["candidates"] if c["kind"] == "transfer"]
    assert transfer["runs_from"] == "calibration" and len(transfer["runs"]) >= 2
    rescored = [key for key, _, _ in calls if ":" not in key]
    assert rescored and not any(key.startswith("transfer-") for key in rescored)


# ----------------------------------------------------------------------------------------------
# Reusing another search's calibration

DATA = {"dataset": {"fingerprint": "d-1"}, "split": {"fingerprint": "s-1"}}


def _started(config, data=DATA):
    """The run directory of ``config`` as ``run_search`` leaves it before calibrating."""
    from autoaug.search.run_dir import CONFIG_FILE, RunState

    run = RunDir(config.storage, config.name)
    run.write_json(CONFIG_FILE, RunState.new(config.to_dict(), data, "sqlite://", address=None, started=0.0).to_dict())
    return run


def test_a_search_reuses_another_searchs_calibration_seed_for_seed_and_chooses_the_same(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    first = _config(tmp_path, base="auto", warm_start="auto", calibration_seeds=2)
    measured = calibrate(first, _started(first), _Log())
    trained = len(calls)
    assert trained == 18
    calls.clear()
    # Another search on the same data and proxy, with another seed: its calibration seeds differ,
    # run i of the first search stands for its run i.
    second = _config(tmp_path, name="cal-2", seed=7, base="auto", warm_start="auto", calibration_seeds=2)
    second = second.replace(train=dataclasses.replace(second.train, seed=7), calibration_from="cal")
    run = _started(second)
    log = _Log()
    reused = calibrate(second, run, log)
    assert calls == []  # nothing trained again
    assert (
        (reused.base, reused.warm_start) == (measured.base, measured.warm_start) == ("crop", ("autoaugment-imagenet",))
    )
    assert reused.record["reused"] == {"search": "cal", "runs": trained}
    own = {calibration_train_config(second, i).seed for i in range(3)}
    assert {int(k.split("seed=")[1]) for k in reused.runs} == own  # keyed by this search's seeds
    text = "\n".join(describe_calibration(reused.record))
    assert "calibration: measured by search 'cal' (18 proxy runs on the same data, split and proxy, reused)" in text
    assert "reusing the runs of search 'cal'" in log.lines[0]
    # Its own file holds them: a resumed search trains nothing and keeps the choice.
    again = calibrate(second, run, _Log())
    assert calls == [] and (again.base, again.warm_start) == (reused.base, reused.warm_start)
    assert again.record["reused"] == {"search": "cal", "runs": trained}  # and still says whose they were


def test_the_published_policies_runs_are_reused_only_on_the_base_they_ran_on(tmp_path, monkeypatch):
    calls = []
    _fake_runs(monkeypatch, SCORES, calls)
    first = _config(tmp_path, base="auto", warm_start="auto")
    calibrate(first, _started(first), _Log())  # chooses crop; the published policies ran on crop
    calls.clear()
    second = _config(tmp_path, name="cal-2", base="standard", warm_start="auto", calibration_from="cal")
    log = _Log()
    result = calibrate(second, _started(second), log)
    assert result.record["transfer"]["base"] == "standard"
    trained = {key.split("/")[0] for key, _, _ in calls}
    assert trained == {f"transfer:{ref}" for ref in TRANSFER_REFS}  # on standard: measured here
    assert all(policy.base == "standard" for _, policy, _ in calls)
    assert "reused" not in result.record  # nothing of theirs was used
    assert (
        "calibration: search 'cal' ran the published policies on base crop, not standard: they are measured here"
        in (log.lines)
    )


@pytest.mark.parametrize(
    "change, says",
    [
        ({"train": {"epochs": 3}}, "the proxy's epochs ("),
        ({"data": {"dataset": {"fingerprint": "d-1"}, "split": {"fingerprint": "s-2"}}}, "the reduced split"),
        ({"data": {"dataset": {"fingerprint": "d-2"}, "split": {"fingerprint": "s-1"}}}, "the data (another dataset"),
    ],
)
def test_a_calibration_of_another_protocol_is_refused_in_one_line(tmp_path, monkeypatch, change, says):
    from autoaug.core.errors import UserInputError
    from autoaug.search.decide.calibrate import calibration_source

    _fake_runs(monkeypatch, SCORES, [])
    first = _config(tmp_path, base="auto", warm_start="auto")
    calibrate(first, _started(first), _Log())
    second = _config(tmp_path, name="cal-2", base="auto", warm_start="auto", calibration_from="cal")
    if "train" in change:
        second = second.replace(train=dataclasses.replace(second.train, **change["train"]))
    with pytest.raises(UserInputError) as err:
        calibration_source(second, change.get("data", DATA))
    message = str(err.value)
    assert (
        message.startswith("--calibration-from cal: the search 'cal' calibrated another protocol: ") and says in message
    )
    assert "\n" not in message
    # speed settings are not the protocol: another thread count reuses it
    faster = second.replace(train=dataclasses.replace(_config(tmp_path).train, num_threads=2))
    assert calibration_source(faster, DATA).name == "cal"


def test_a_calibration_that_cannot_be_reused_is_refused_by_what_is_missing(tmp_path, monkeypatch):
    from autoaug.core.errors import UserInputError
    from autoaug.search.decide.calibrate import calibration_source

    def refused(config):
        with pytest.raises(UserInputError) as err:
            calibration_source(config, DATA)
        return str(err.value)

    auto = {"base": "auto", "warm_start": "auto"}
    assert "no search named 'gone'" in refused(_config(tmp_path, calibration_from="gone", **auto))
    assert "this search's own name" in refused(_config(tmp_path, calibration_from="cal", **auto))
    given = _config(tmp_path, name="cal-2", calibration_from="cal", base="crop", warm_start=[])
    assert "measures nothing before its trials" in refused(given)
    unmeasured = _config(tmp_path, name="plain")
    _started(unmeasured)  # a search that calibrated nothing
    assert "the search 'plain' has no finished calibration" in refused(
        _config(tmp_path, name="cal-2", calibration_from="plain", **auto)
    )
    assert calibration_source(_config(tmp_path, **auto), DATA) is None  # none named: nothing to check
