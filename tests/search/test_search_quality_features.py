"""A real (tiny) search on CIFAR-10: honest Optuna bookkeeping, warm start, re-scoring and
reproducibility at concurrency 1 (issue: search quality)."""

from __future__ import annotations

import json

import optuna
import pytest

from autoaug.policies import Policy
from autoaug.search.config import METRIC, SearchConfig
from autoaug.search.driver import run_search
from autoaug.search.tune.study import open_study

WARM = Policy(
    "warm",
    10,
    [
        [("Rotate", 0.7, 2), ("Invert", 0.1, 0)],
        [("Color", 0.4, 9), ("Equalize", 1.0, 3)],
        [("Cutout", 0.5, 5), ("Posterize", 0.3, 4)],
        [("ShearX", 0.2, 7), ("Solarize", 0.6, 1)],
    ],
)


def _config(tmp_path, name, cifar_train):
    (tmp_path / "warm.json").write_text(WARM.to_json())
    return SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": name,
            "data": str(cifar_train),
            "seed": 3,
            "num_trials": 5,
            "concurrency": 1,
            "grace_period": 1,
            "reduction_factor": 2,
            "top_n": 2,
            "score_window": 2,
            "train": {"preset": "smoke", "epochs": 2, "train_size": 256, "val_size": 128},
            "space": {"num_sub_policies": 2},
            "warm_start": [str(tmp_path / "warm.json")],
            "rescore": True,
            "rescore_seeds": 1,
            "rescore_max_seeds": 2,
            "rescore_val_size": 384,
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
            "verbose": 0,
        }
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")  # the second search's tasks reuse the first one's workers
def test_seeded_search_at_concurrency_1_is_reproducible_and_its_study_is_honest(tmp_path, cifar_small):
    first = run_search(_config(tmp_path, "repro-a", cifar_small))
    second = run_search(_config(tmp_path, "repro-b", cifar_small))
    # Same seed, one trial at a time: the same proposals, the same ASHA stops, the same policy.
    assert first.policy.content_hash == second.policy.content_hash

    study = open_study("repro-a", runs_root=str(tmp_path / "runs"))
    trials = sorted(study.trials, key=lambda t: t.number)
    space = _config(tmp_path, "x", cifar_small).space
    # Warm start: the first two proposals are exactly the known sub-policies, two per candidate.
    assert [space.to_policy(t.params).sub_policies for t in trials[:2]] == [
        WARM.sub_policies[:2],
        WARM.sub_policies[2:],
    ]

    states = [t.state for t in trials]
    assert set(states) <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    assert optuna.trial.TrialState.PRUNED in states, "ASHA (grace 1, factor 2) stopped no trial of 5"
    for t in trials:
        if t.state == optuna.trial.TrialState.COMPLETE:  # every epoch, the last included
            assert sorted(t.intermediate_values) == [1, 2] and t.value == t.intermediate_values[2]
        else:  # stopped at the first rung: PRUNED with the score it reached
            assert sorted(t.intermediate_values) == [1] and t.value == t.intermediate_values[1]

    prov = first.provenance
    assert prov["optuna"]["consistent_with_tune"], prov["optuna"]["problems"]
    by_id = {r["trial_id"]: r for r in prov["trials"]}
    pruned = sum(1 for r in by_id.values() if r["status"] == "early_stopped")
    assert pruned == states.count(optuna.trial.TrialState.PRUNED)
    # The search score every trial reported is the mean validation accuracy of its last 2 epochs.
    reported = 0
    run_root = tmp_path / "runs" / "repro-a"
    for path in run_root.rglob("result.json"):
        if path.parent == run_root:  # the search's own result, not a trial's (JSON lines)
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for i, row in enumerate(rows):
            window = [r["val_accuracy"] for r in rows[max(0, i - 1) : i + 1]]
            assert row[METRIC] == pytest.approx(sum(window) / len(window))
            reported += 1
    assert reported >= 5
    # Re-scoring: the assembled policy, the best trial and (when the search found a trial that made
    # the top 2) the warm start extended by it were trained again (seed 1000), validated on 384
    # images; those within the noise of the leader raced (seed 1001); the best mean was stored.
    selection = prov["selection"]
    kinds = [c["kind"] for c in selection["candidates"]]
    assert kinds[:2] == ["assembled", "best_trial"] and set(kinds[2:]) <= {"warm_start+found", "survivors"}
    if "warm_start+found" in kinds:
        cand = selection["candidates"][kinds.index("warm_start+found")]
        extended = Policy.from_dict(next(r for r in prov["trials"] if r["trial_id"] == cand["trial_ids"][0])["policy"])
        assert cand["num_sub_policies"] > len(WARM.sub_policies)
        assert extended.sub_policies  # a found trial's policy, recorded with the trials
    scores = {c["kind"]: c[METRIC] for c in selection["candidates"]}
    assert all(0.0 <= v <= 1.0 for v in scores.values())
    for c in selection["candidates"]:
        assert [r["seed"] for r in c["runs"]] in ([1000], [1000, 1001]) and c["val_size"] == 384
        assert c[METRIC] == pytest.approx(sum(r[METRIC] for r in c["runs"]) / len(c["runs"]))
    race = selection["race"]
    assert race["max_seeds"] == 2 and len(race["rounds"]) <= 1 and race["ended"] in ("decided", "max_seeds")
    raced = sorted(c["kind"] for c in selection["candidates"] if len(c["runs"]) == 2)
    assert raced == sorted(kind for r in race["rounds"] for kind in r["trained"])  # only the race's own runs
    assert race == second.provenance["selection"]["race"]  # the race is reproducible too
    saved = json.loads((tmp_path / "runs" / "repro-a" / "rescore.json").read_text())
    # one entry per run: a resumed search trains only what is missing
    assert len(saved) == sum(len(c["runs"]) for c in selection["candidates"])
    chosen = next(c for c in selection["candidates"] if c["kind"] == selection["chosen"])
    assert chosen["policy_hash"] == first.policy.content_hash
    assert scores[selection["chosen"]] == max(scores.values())
    # What the user reads at the end: every re-score, and which candidate was stored.
    summary = first.summary()
    assert f"stored: {selection['chosen']}" in summary
    # The assembled policy's own size, even when another candidate was stored.
    assert f"trials, {prov['assembly']['num_sub_policies']} sub-policies" in summary
    assert "re-scored under the proxy (mean over " in summary and "384 validation images)" in summary
    assert "(race up to 2 runs each: " in summary
    assert all(f"{kind} (" in summary for kind in kinds)
