"""search/records.py: the summary's line of the final candidates' re-scores."""

from __future__ import annotations

from autoaug.search.records import rescored_line


def _candidate(kind: str, n: int, score: float, seeds: list[int], val: int = 5000) -> dict:
    runs = [{"seed": s, "search_score": score} for s in seeds]
    return {"kind": kind, "num_sub_policies": n, "search_score": score, "runs": runs, "val_size": val}


def test_candidates_re_scored_on_the_same_seeds_say_them_once():
    selection = {
        "chosen": "assembled",
        "candidates": [
            _candidate("assembled", 10, 0.5, [1000, 1001], 384),
            _candidate("best_trial", 5, 0.4, [1000, 1001], 384),
        ],
    }
    assert rescored_line(selection) == (
        "re-scored under the proxy (mean over seeds 1000, 1001, 384 validation images): "
        "assembled (10 sub-policies) 0.5000, best_trial (5 sub-policies) 0.4000; stored: assembled"
    )


def test_the_published_policys_calibration_runs_beside_a_fresh_seed_say_each_candidates_seeds():
    # what a search that reused the published policy's two calibration runs printed as "mean over
    # seeds 2000, 2001" for both, though its own candidate ran on one fresh seed
    selection = {
        "chosen": "runner_up",
        "candidates": [_candidate("transfer", 196, 0.59236, [2000, 2001]), _candidate("runner_up", 5, 0.59468, [1000])],
    }
    assert rescored_line(selection) == (
        "re-scored under the proxy (mean over each candidate's seeds, 5000 validation images): "
        "transfer (196 sub-policies) 0.5924 (seeds 2000, 2001), runner_up (5 sub-policies) 0.5947 (seed 1000); "
        "stored: runner_up"
    )


def test_a_candidate_the_time_budget_left_unscored_is_not_listed():
    unscored = {"kind": "survivors", "num_sub_policies": 30, "search_score": None, "runs": []}
    selection = {"chosen": "assembled", "candidates": [_candidate("assembled", 10, 0.5, [1000]), unscored]}
    assert rescored_line(selection) == (
        "re-scored under the proxy (mean over seed 1000, 5000 validation images): "
        "assembled (10 sub-policies) 0.5000; stored: assembled"
    )
