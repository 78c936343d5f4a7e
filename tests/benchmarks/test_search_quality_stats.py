"""The statistics benchmarks/search_quality.py reports: which ``--also`` searches count as the same
search with another seed, and what the found policies of several seeds give together."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "search_quality.py"


@pytest.fixture(scope="module")
def sq():
    spec = importlib.util.spec_from_file_location("search_quality_under_test", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(seed: int, name: str, fingerprint: str = "bf23", **changes) -> dict:
    config = {"name": name, "seed": seed, "storage": f"/w/{name}/runs", "store": f"/w/{name}/store",
              "num_trials": 28, "grace_period": 20, "concurrency": 2, "warm_start": ["autoaugment-cifar10"],
              "train": {"model": "resnet-8", "seed": seed, "data": "/data", "epochs": 120}}
    for key, value in changes.items():
        if key.startswith("train_"):
            config["train"][key[6:]] = value
        else:
            config[key] = value
    return {"provenance": {"search": {"config": config}, "dataset": {"fingerprint": fingerprint}}}


def test_a_search_with_another_seed_name_and_place_is_the_same_recipe(sq):
    a = sq.search_recipe(_result(0, "sq-a"))
    assert sq.same_recipe(a, sq.search_recipe(_result(1, "sq-b")))


@pytest.mark.parametrize("change", [{"num_trials": 16}, {"grace_period": 40}, {"train_epochs": 60},
                                    {"warm_start": []}, {"concurrency": 1}])
def test_a_search_that_differs_in_what_it_does_is_another_recipe(sq, change):
    a = sq.search_recipe(_result(0, "sq-a"))
    assert not sq.same_recipe(a, sq.search_recipe(_result(0, "sq-b", **change)))


def test_a_search_on_other_data_is_another_recipe_wherever_the_data_lies(sq):
    a = sq.search_recipe(_result(0, "sq-a"))
    assert not sq.same_recipe(a, sq.search_recipe(_result(1, "sq-b", fingerprint="9e11")))


def test_a_key_only_a_newer_version_records_does_not_make_searches_differ(sq):
    old = sq.search_recipe(_result(0, "sq-a"))
    new = sq.search_recipe(_result(1, "sq-b", startup_trials=None, train_eval_from=1))
    assert sq.same_recipe(old, new) and sq.same_recipe(new, old)


def test_over_search_seeds_averages_paired_differences_and_gives_both_intervals(sq):
    runs = []
    base = {0: 0.50, 1: 0.52, 2: 0.51}
    found_a = {0: 0.52, 1: 0.53, 2: 0.54}   # +0.02, +0.01, +0.03: mean +0.02
    found_b = {0: 0.49, 1: 0.52, 2: 0.50}   # -0.01, 0, -0.01: mean -0.0067
    for label, accs in {"base": base, "a": found_a, "b": found_b}.items():
        runs += [{"policy": label, "seed": s, "test_accuracy": v} for s, v in accs.items()]
    summary = sq.summarize(runs)
    over = sq.over_search_seeds(summary, ["a", "b"], ["base"])
    d = over["vs"]["base"]
    assert d["per_search"] == pytest.approx([0.02, -0.02 / 3])
    assert over["mean"] == pytest.approx((0.53 + 0.5033333) / 2, abs=1e-6)
    # Over evaluation seeds: each seed's difference averaged over the searches, then a t interval over 3 seeds.
    per_seed = [(0.02 - 0.01) / 2, (0.01 + 0.0) / 2, (0.03 - 0.01) / 2]
    assert d["over_eval_seeds"]["diffs"] == pytest.approx(per_seed)
    assert d["over_eval_seeds"]["mean"] == pytest.approx(sum(per_seed) / 3)
    # Over searches: a t interval with 1 degree of freedom over the two per-search means: much wider.
    s = d["over_searches"]
    assert s["mean"] == pytest.approx(d["over_eval_seeds"]["mean"])
    half = 12.706 * abs(0.02 + 0.02 / 3) / 2  # t(0.975, 1) * std / sqrt(2), std = |x1 - x2| / sqrt(2)
    assert s["high"] - s["mean"] == pytest.approx(half, rel=1e-3)
    assert s["high"] - s["low"] > d["over_eval_seeds"]["high"] - d["over_eval_seeds"]["low"]


def test_over_search_seeds_pairs_only_the_evaluation_seeds_every_search_has(sq):
    runs = [{"policy": "base", "seed": s, "test_accuracy": 0.5} for s in (0, 1, 2)]
    runs += [{"policy": "a", "seed": s, "test_accuracy": 0.6} for s in (0, 1, 2)]
    runs += [{"policy": "b", "seed": s, "test_accuracy": 0.4} for s in (0, 1)]
    over = sq.over_search_seeds(sq.summarize(runs), ["a", "b"], ["base"])
    assert over["seeds"] == [0, 1]
    assert over["vs"]["base"]["over_eval_seeds"]["seeds"] == [0, 1]
    assert over["vs"]["base"]["over_eval_seeds"]["mean"] == pytest.approx(0.0)
