"""benchmarks/pba_population.py: how far apart a PBA population's members trained, read from Tune's logs."""

from __future__ import annotations

import json


def _log(run, member, rows):
    folder = run / f"trial_{member}"
    folder.mkdir(parents=True)
    lines = [json.dumps({"timestamp": t, "epoch": e, "search_score": 0.1 * e}) for t, e in rows]
    (folder / "result.json").write_text("\n".join(lines) + "\n")


def test_the_lag_is_the_member_furthest_on_less_the_one_furthest_behind_still_training(load_benchmark, tmp_path):
    bench = load_benchmark("pba_population")
    _log(tmp_path, "a", [(1, 1), (3, 2), (4, 3)])  # a runs ahead and finishes (3 epochs)
    _log(tmp_path, "b", [(2, 1), (5, 2), (6, 3)])
    # t1: a alone (0); t2: a 1, b 1 (0); t3: a 2, b 1 (1); t4: a 3 finished, b 1 (2); t5: b 2 (1); t6: nothing trains
    assert bench.epoch_lags(tmp_path, 3) == [0, 0, 1, 2, 1]
    assert bench.member_scores(tmp_path)["b"] == {1: 0.1, 2: 0.2, 3: 0.30000000000000004}


def test_the_outcome_is_what_the_searchs_result_records(load_benchmark, tmp_path):
    bench = load_benchmark("pba_population")
    members = [{"trial_id": "a", "score": 0.5}, {"trial_id": "b", "score": 0.6}, {"trial_id": "c", "score": None}]
    provenance = {
        "method": {"events": [{}, {}], "members": members, "best_member": "b", "stage_starts": [0, 0.5], "packs": None},
        "time": {"elapsed_s": 100.04, "population_wall_s": 90.0},
    }
    (tmp_path / "result.json").write_text(json.dumps({"provenance": provenance}))
    out = bench.outcome(tmp_path)
    assert out["events"] == 2 and out["best"] == 0.6 and out["best_member"] == "b" and out["stages"] == 2
    assert out["mean_member"] == 0.55 and out["search_s"] == 100.0 and out["packs"] is None
