"""What helps and hurts on the user's data: each operation's effect measured from a search's runs."""

from __future__ import annotations

import random

import pytest

from autoaug.policies import Policy, presets
from autoaug.policies.ops import RANDAUGMENT_OPS
from autoaug.search.decide.op_effects import describe_effects, estimate, observations, plot_effects, usage
from autoaug.search.space import SearchSpace


def test_usage_is_how_often_an_operation_is_applied_to_one_image():
    ra = usage(presets.resolve("randaugment:n=2,m=9"))
    assert set(ra) == set(RANDAUGMENT_OPS) - {"Identity"}
    assert all(u == pytest.approx(2 / 14) for u in ra.values())
    aa = usage(Policy("p", 10, [[("Invert", 0.5, 0), ("Rotate", 1.0, 3)], [("Invert", 0.3, 0), ("Identity", 1.0, 0)]]))
    assert aa == pytest.approx({"Invert": 0.4, "Rotate": 0.5})
    assert usage(presets.resolve("crop")) == {}
    assert usage(presets.resolve("trivialaugment").to_dict())["Rotate"] == pytest.approx(1 / 14)


def _runs(effects, k=24, sd=0.004, seed=0):
    """``k`` randaugment-family points drawn at random, each scored 0.90 plus the operations'
    ``effects`` times their usage, plus noise of ``sd``."""
    rng = random.Random(seed)
    space = SearchSpace(family="randaugment")
    out = []
    for i in range(k):
        used = usage(space.to_policy(space.random_params(rng)))
        score = 0.90 + sum(effects.get(op, 0.0) * u for op, u in used.items()) + rng.gauss(0, sd)
        out.append({"label": f"trial {i}", "usage": used, "score": score})
    return out


def test_an_operation_that_destroys_the_label_is_reported_as_hurting_and_the_others_are_not():
    record = estimate(_runs({"Solarize": -0.30}), noise_sd=0.004, source="measured")
    by_op = {r["op"]: r for r in record["ops"]}
    assert by_op["Solarize"]["verdict"] == "hurts" and by_op["Solarize"]["effect"] < -0.2
    assert record["ops"][0]["op"] == "Solarize"  # the most harmful first
    # The 12 operations with no effect are not called harmful or helpful (95% intervals).
    assert [r["op"] for r in record["ops"] if r["verdict"] != "unclear"] == ["Solarize"]
    text = "\n".join(describe_effects(record))
    assert text.startswith("what helps and hurts on this data (proxy score change per application per image")
    assert "24 runs on the chosen base; measured)" in text
    assert "  hurts   Solarize" in text and "... and 9 more within the noise" in text
    # One that helps as much, the same.
    helped = estimate(_runs({"Rotate": +0.30}, seed=1), noise_sd=0.004)
    assert [(r["op"], r["verdict"]) for r in helped["ops"] if r["verdict"] != "unclear"] == [("Rotate", "helps")]


def test_the_gap_between_the_base_alone_and_every_policy_is_no_operations_effect():
    """What a default search on CIFAR-10 reported: the base alone scored 6 points below the
    published policies, every one of which applies Solarize, and Solarize "helped" by +41 points
    per application. With whether a run augments at all held in the model, an operation every
    policy uses is judged by how much of it the policies use, not by the base alone."""
    rng = random.Random(3)
    space = SearchSpace(family="randaugment")
    runs = [{"label": "base", "usage": {}, "score": 0.53 + rng.gauss(0, 0.004)} for _ in range(2)]
    for i in range(10):  # every policy uses Solarize, in different amounts; no operation matters
        used = usage(space.to_policy(space.random_params(rng)))
        used["Solarize"] = 0.05 + 0.02 * (i % 4)
        runs.append({"label": f"policy {i}", "usage": used, "score": 0.59 + rng.gauss(0, 0.004)})
    record = estimate(runs, noise_sd=0.004)
    assert [r["op"] for r in record["ops"] if r["verdict"] != "unclear"] == []
    # ... and an operation that does matter among the policies is still found beside the gap
    for r in runs[2:]:
        r["score"] -= 0.30 * r["usage"].get("Rotate", 0.0)
    hurt = estimate(runs, noise_sd=0.004)
    assert [(r["op"], r["verdict"]) for r in hurt["ops"] if r["verdict"] != "unclear"] == [("Rotate", "hurts")]


def test_with_much_noise_nothing_is_claimed():
    record = estimate(_runs({"Solarize": -0.02}, k=8, sd=0.02), noise_sd=0.02)
    assert all(r["verdict"] == "unclear" for r in record["ops"])
    assert "no operation helps or hurts beyond the noise" in "\n".join(describe_effects(record))


def test_too_few_runs_say_so():
    record = estimate(_runs({}, k=3), noise_sd=0.01)
    assert record["ops"] == [] and describe_effects(record) == [
        "what helps and hurts on this data: no estimate (3 run(s) on the chosen base over the whole schedule: too few)"
    ]
    # Runs that all applied the operations alike tell nothing about them.
    alike = [{"label": str(i), "usage": {"Rotate": 0.5}, "score": 0.8 + 0.01 * i} for i in range(5)]
    assert estimate(alike)["why_not"] == "every one of the 5 runs applied the operations alike"
    # A perfect fit with no measured noise: no division by a zero-width interval.
    exact = [{"label": str(i), "usage": {"Rotate": i / 4}, "score": 0.9 - 0.1 * i / 4} for i in range(5)]
    assert estimate(exact)["ops"][0]["op"] == "Rotate"
    # Without a measured noise, the runs' own spread around each line.
    assert estimate(_runs({"Solarize": -0.3}, k=10))["noise_source"] == "the runs' spread around each line"


def test_the_runs_are_those_on_the_chosen_base_over_the_whole_schedule():
    provenance = {
        "calibration": {
            "epochs": 120,
            "base": {"scores": {"crop": {"runs": [0.80, 0.81]}, "standard": {"runs": [0.70]}}},
            "transfer": {
                "base": "crop",
                "scores": {"autoaugment-svhn": {"runs": [0.75]}, "randaugment": {"runs": [0.84, 0.83]}},
                "noise": {"sd": 0.006},
            },
        },
        "trials": [
            {
                "trial_id": "a",
                "status": "completed",
                "epochs": 120,
                "score": 0.82,
                "policy": presets.resolve("crop").to_dict(),
            },
            {
                "trial_id": "b",
                "status": "stopped",
                "epochs": 20,
                "score": 0.5,
                "policy": presets.resolve("crop").to_dict(),
            },
        ],
    }
    obs = observations(provenance, 120)
    assert sorted(o["label"] for o in obs) == [
        "autoaugment-svhn",
        "crop",
        "crop",
        "randaugment",
        "randaugment",
        "trial a",
    ]
    assert next(o for o in obs if o["label"] == "autoaugment-svhn")["usage"]["Invert"] > 0
    # Calibration runs of another schedule are not comparable with the trials': left out.
    assert [
        o["label"]
        for o in observations({**provenance, "calibration": {**provenance["calibration"], "epochs": 30}}, 120)
    ] == ["trial a"]


def test_the_plot_is_written(tmp_path):
    record = estimate(_runs({"Solarize": -0.30}), noise_sd=0.004)
    out = plot_effects(record, str(tmp_path / "ops.png"))
    assert out and (tmp_path / "ops.png").stat().st_size > 5000
    assert plot_effects({"ops": []}, str(tmp_path / "none.png")) is None
