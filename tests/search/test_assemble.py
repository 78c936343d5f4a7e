"""Assembly of the final policy from the best trials, and the provenance pieces."""

from __future__ import annotations

import json

import pytest

from autoaug.policies import Policy, presets
from autoaug.search.decide.assemble import (
    TrialRecord,
    assemble_policy,
    build_provenance,
    git_info,
    library_versions,
    rank_trials,
)


def _trial(i, score, subs, *, status="completed", epochs=2, bins=10):
    policy = None if subs is None else Policy(f"t{i}", bins, subs)
    return TrialRecord(trial_id=f"t{i}", index=i, status=status, params={}, policy=policy, score=score, epochs=epochs)


A = [("Rotate", 0.5, 3), ("Color", 0.2, 7)]
B = [("Invert", 0.1, 0), ("Contrast", 0.9, 2)]
C = [("ShearX", 1.0, 9), ("Equalize", 0.4, 1)]
D = [("Cutout", 0.6, 4), ("Solarize", 0.3, 5)]


def test_best_n_concatenated_in_rank_order():
    trials = [_trial(0, 0.30, [A, B]), _trial(1, 0.50, [C]), _trial(2, 0.40, [D]), _trial(3, 0.10, [A])]
    out = assemble_policy(trials, name="final", top_n=2)
    assert [t.trial_id for t in out.selected] == ["t1", "t2"]
    assert out.policy == Policy("final", 10, [C, D])
    assert out.sources == ("t1", "t2")
    assert out.duplicates_removed == 0


def test_duplicate_sub_policies_are_removed_keeping_the_better_trials_copy():
    # B' differs from B only in the bin of Invert, which has no magnitude: the same augmentation.
    b_prime = [("Invert", 0.1, 8), ("Contrast", 0.9, 2)]
    trials = [_trial(0, 0.9, [A, B]), _trial(1, 0.8, [b_prime, C]), _trial(2, 0.7, [A, A])]
    out = assemble_policy(trials, name="final", top_n=3)
    assert out.policy.sub_policies == Policy("x", 10, [A, B, C]).sub_policies
    assert out.duplicates_removed == 3
    assert out.sources == ("t0", "t0", "t1")


def test_ranking_prefers_full_length_trials_over_early_stopped_ones():
    trials = [
        _trial(0, 0.70, [A], status="early_stopped", epochs=1),  # high score, but after 1 epoch
        _trial(1, 0.40, [B]),
        _trial(2, 0.60, [C]),
        _trial(3, None, None, status="failed", epochs=0),
        _trial(4, 0.80, [D], status="running", epochs=1),  # unfinished: not ranked
    ]
    assert [t.trial_id for t in rank_trials(trials)] == ["t2", "t1", "t0"]
    assert assemble_policy(trials, name="f", top_n=5).policy.sub_policies == Policy("x", 10, [C, B, A]).sub_policies


def test_ties_are_broken_by_creation_order():
    trials = [_trial(2, 0.5, [C]), _trial(0, 0.5, [A]), _trial(1, 0.5, [B])]
    assert [t.trial_id for t in rank_trials(trials)] == ["t0", "t1", "t2"]


def test_nothing_to_assemble_and_bad_arguments():
    with pytest.raises(ValueError, match="no trial finished with a score"):
        assemble_policy([_trial(0, None, None, status="failed")], name="f")
    with pytest.raises(ValueError, match="top_n must be an integer >= 1"):
        assemble_policy([_trial(0, 0.5, [A])], name="f", top_n=0)
    with pytest.raises(ValueError, match="num_magnitude_bins=31"):
        assemble_policy([_trial(0, 0.5, [A]), _trial(1, 0.4, [B], bins=31)], name="f")


def test_provenance_is_json_and_complete():
    trials = [_trial(0, 0.5, [A]), _trial(1, None, None, status="failed", epochs=0)]
    trials[1] = TrialRecord(**{**trials[1].__dict__, "error": "ValueError: boom"})
    assembled = assemble_policy(trials, name="final")
    prov = build_provenance(
        search_config={"name": "final", "num_trials": 2},
        data={"dataset": {"fingerprint": "d" * 64}, "split": {"fingerprint": "s" * 64}},
        trials=trials,
        assembled=assembled,
        metric="val_accuracy",
        mode="max",
        run_dir="/runs/final",
        optuna={"storage": "sqlite:///x"},
        timing={"elapsed_s": 1.0},
    )
    json.dumps(prov)  # stored as canonical JSON: must serialize
    assert prov["dataset"]["fingerprint"] == "d" * 64 and prov["split"]["fingerprint"] == "s" * 64
    assert prov["counts"] == {"trials": 2, "completed": 1, "early_stopped": 0, "budget_stopped": 0, "failed": 1}
    assert prov["trials"][1]["error"] == "ValueError: boom" and prov["trials"][1]["policy"] is None
    assert prov["trials"][0]["policy"]["sub_policies"][0][0]["op"] == "Rotate"
    assert prov["best"]["trial_id"] == "t0"
    for lib in ("torch", "torchvision", "ray", "optuna", "pyarrow", "nvidia-dali"):
        assert prov["versions"][lib], lib


def test_library_versions_and_git_info(tmp_path):
    versions = library_versions()
    assert versions["ray"].startswith("2.") and versions["optuna"]
    assert git_info(tmp_path) is None  # not a checkout
    info = git_info()
    if info is not None:  # running from a git checkout
        assert len(info["commit"]) == 40 and isinstance(info["dirty"], bool)


# ----------------------------------------------------------------------------------------------
# Space families: the final policy is the best point itself


def _family_trials(space, points):
    return [
        TrialRecord(f"t{i}", i, "completed", params, space.to_policy(params, name=f"p{i}"), score, epochs=2)
        for i, (params, score) in enumerate(points)
    ]


@pytest.mark.parametrize("family", ["randaugment", "trivialaugment"])
def test_a_family_search_keeps_the_best_point_itself(tmp_path, family):
    import random

    from autoaug.search.config import SearchConfig
    from autoaug.search.decide.assemble import assembly_rule
    from autoaug.search.methods.train.method import TrainMethod, final_candidates
    from autoaug.search.records import SearchOutcome

    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": "fam",
            "data": "unused.parquet",
            "space": {"family": family},
            "warm_start": ["trivialaugment" if family == "trivialaugment" else "randaugment"],
            "rescore": True,
            "storage": str(tmp_path / "runs"),
        }
    )
    rng = random.Random(0)
    points = [(config.space.random_params(rng), score) for score in (0.3, 0.6, 0.5)]
    trials = _family_trials(config.space, points)
    assert assembly_rule(family) == "best"
    out = assemble_policy(
        trials, name="fam", top_n=5, num_magnitude_bins=31, base="standard", ranges=config.space.ranges, rule="best"
    )
    best = trials[1].policy
    if family == "trivialaugment":  # the case below: AutoContrast (no magnitude) at bins 0..6
        assert points[1][0]["use_AutoContrast"] and points[1][0]["max_bin"] > 0
    # TrivialAugment's magnitude-free ops at every bin are not "duplicates": the point is kept as it is
    assert out.policy.content_hash == best.content_hash and out.duplicates_removed == 0
    assert [t.trial_id for t in out.selected] == ["t1"] and out.rule == "best"
    assert out.to_dict()["rule"] == "best" and "best-ranked trial's policy itself" in out.to_dict()["rule_is"]
    candidates = final_candidates(config, trials, out)
    # Re-scored with fresh seeds: the best point, the next best (its score is one noisy run too)
    # and the published point the search started from.
    # (The warm start before the runner-up: a budget that cuts re-scoring keeps what is to beat.)
    assert [c.kind for c in candidates] == ["assembled", "warm_start", "runner_up"]
    assert candidates[0].policy.content_hash == best.content_hash
    assert candidates[2].policy.sub_policies == trials[2].policy.sub_policies
    published = presets.resolve(config.warm_start[0]).with_base(config.space.base)
    assert candidates[1].policy.content_hash == published.content_hash
    assert {c.policy.name for c in candidates} == {"fam"}
    assert TrainMethod().max_candidates(config) == 3
    # The warm start is the published policy calibration found: it competes once, as the transfer.
    from autoaug.search.decide.rescore import Candidate
    from autoaug.search.driver import with_transfer

    transfer = Candidate("transfer", published.with_name("fam"), (), None)
    assert [c.kind for c in with_transfer(candidates, transfer)] == ["assembled", "transfer", "runner_up"]
    # Another transfer policy is one more candidate, the last.
    other = Candidate("transfer", presets.resolve("autoaugment-svhn").with_name("fam"), (), None)
    assert [c.kind for c in with_transfer(candidates, other)] == ["assembled", "warm_start", "runner_up", "transfer"]
    # the summary line says which rule made the policy and describes the point
    prov = {
        "counts": {"completed": 3, "early_stopped": 0, "failed": 0},
        "assembly": out.to_dict(),
        "search": {"config": config.to_dict()},
    }
    outcome = SearchOutcome(out.policy, 0.6, trials[1], tuple(trials), out, "store", 1, "run", prov)
    line = next(x for x in outcome.summary().splitlines() if x.startswith("trials:"))
    assert f"final policy = the best trial's ({family} family point: " in line
    assert config.space.describe_point(points[1][0]) in line


def test_the_aa_rule_is_recorded_and_an_unknown_rule_refused():
    trials = [_trial(0, 0.30, [A, B]), _trial(1, 0.50, [C])]
    assert assemble_policy(trials, name="f").to_dict()["rule"] == "concatenate"
    with pytest.raises(ValueError, match="unknown assembly rule 'mix'"):
        assemble_policy(trials, name="f", rule="mix")


def test_the_summary_counts_trials_the_budget_stopped_before_a_score_apart_from_those_it_ranked():
    from autoaug.search.records import SearchOutcome

    trials = [
        _trial(0, 0.50, [A]),
        _trial(1, 0.40, [B], status="budget_stopped", epochs=16),  # ranked on what it reported
        _trial(2, None, [C], status="budget_stopped", epochs=0),  # stopped before its first report
        _trial(3, 0.30, [D], status="early_stopped"),
    ]
    out = assemble_policy(trials, name="f", top_n=2)
    prov = {
        "counts": {"completed": 1, "early_stopped": 1, "budget_stopped": 2, "failed": 0},
        "assembly": out.to_dict(),
    }
    outcome = SearchOutcome(out.policy, 0.5, trials[0], tuple(trials), out, "store", 1, "run", prov)
    line = next(x for x in outcome.summary().splitlines() if x.startswith("trials:"))
    assert line.startswith(
        "trials: 1 completed, 1 stopped early, 1 stopped by the time budget, "
        "1 stopped by it before a first score, 0 failed; "
    )
    # Without trials stopped by the budget, the line says nothing of it.
    prov["counts"]["budget_stopped"] = 0
    plain = SearchOutcome(out.policy, 0.5, trials[0], (trials[0], trials[3]), out, "store", 1, "run", prov)
    assert "budget" not in next(x for x in plain.summary().splitlines() if x.startswith("trials:"))
