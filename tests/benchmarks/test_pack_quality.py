"""benchmarks/pack_quality.py: each member of a pack paired with its own solo run, by seed; with
``--mates same`` a pack of the policy at consecutive seeds gives a pair per member."""

from __future__ import annotations

import csv
import json

import pytest


@pytest.mark.slow  # three one-epoch smoke runs (two alone, one pack of two)
def test_a_pack_of_the_policy_at_two_seeds_pairs_each_member_with_its_own_solo_run(load_benchmark, cifar_dir, tmp_path):
    pq = load_benchmark("pack_quality")
    argv = ["--data", str(cifar_dir), "--preset", "smoke", "--epochs", "1", "--window", "1"]
    assert pq.main([*argv, "--seeds", "2", "--pack", "2", "--mates", "same", "--out", str(tmp_path)]) == 0
    with (tmp_path / "runs.csv").open() as f:
        rows = [(int(r["seed"]), r["mode"]) for r in csv.DictReader(f)]
    assert rows == [(0, "solo"), (1, "solo"), (0, "pack2-same"), (1, "pack2-same")]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pairs"] == 2 and len(summary["differences"]) == 2
    # a rerun trains nothing that is there
    assert pq.main([*argv, "--seeds", "2", "--pack", "2", "--mates", "same", "--out", str(tmp_path)]) == 0
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 5


def test_same_mates_need_whole_packs_of_seeds(load_benchmark, cifar_dir, tmp_path, capsys):
    pq = load_benchmark("pack_quality")
    with pytest.raises(SystemExit):
        pq.main(["--data", str(cifar_dir), "--seeds", "3", "--pack", "2", "--mates", "same", "--out", str(tmp_path)])
    assert "--seeds a multiple of it, got --pack 2 --seeds 3" in capsys.readouterr().err


def _runs(path, rows):
    path.write_text(
        "seed,mode,score,pack,seconds,precision,cpu\n" + "".join(f"{s},{m},{v},1,1.0,bfloat16,x\n" for s, m, v in rows)
    )
    return path


def test_recorded_runs_are_paired_across_files_without_training(load_benchmark, tmp_path, capsys):
    pq = load_benchmark("pack_quality")
    a = _runs(
        tmp_path / "a.csv", [(0, "solo", 0.60), (0, "pack2-same", 0.61), (1, "solo", 0.58), (1, "pack2-same", 0.57)]
    )
    b = _runs(tmp_path / "b.csv", [(2, "pack2", 0.62), (3, "pack2", 0.55), (9, "pack2", 0.5)])  # 9: no solo run
    lend = _runs(
        tmp_path / "old.csv", [(2, "solo", 0.60), (3, "solo", 0.56), (2, "pack2", 0.1)]
    )  # its pack run: left out
    assert pq.main(["--pairs", str(a), str(b), "--solo", str(lend), "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "s" / "summary.json").read_text())["rows"]
    assert [(r["file"].rsplit("/", 1)[-1], r["pairs"]) for r in rows] == [("a.csv", 2), ("b.csv", 2), ("all", 4)]
    assert rows[0]["differences"] == pytest.approx([1.0, -1.0]) and rows[1]["differences"] == pytest.approx([2.0, -1.0])
    assert rows[2]["mean_points"] == pytest.approx(0.25) and rows[2]["modes"] == ["pack2", "pack2-same"]
    assert out.splitlines()[-1].split()[:3] == ["all", "4", "+0.25"]


def test_recorded_runs_that_disagree_or_are_not_runs_are_refused_in_one_line(load_benchmark, tmp_path, capsys):
    pq = load_benchmark("pack_quality")
    a = _runs(tmp_path / "a.csv", [(0, "solo", 0.60), (0, "pack2", 0.61)])
    b = _runs(tmp_path / "b.csv", [(0, "solo", 0.59), (0, "pack2", 0.62)])
    with pytest.raises(SystemExit):
        pq.main(["--pairs", str(a), str(b)])
    assert "seed 0's solo run scored 0.590000, another file has 0.600000" in capsys.readouterr().err
    (tmp_path / "c.csv").write_text("name,value\nx,1\n")
    for bad, said in (
        (tmp_path / "c.csv", "not a runs.csv of this benchmark"),
        (tmp_path / "none.csv", "cannot read it"),
    ):
        with pytest.raises(SystemExit):
            pq.main(["--pairs", str(bad)])
        assert f"{bad}: {said}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pq.main(["--seeds", "2"])
    assert "--data and --out are needed to train" in capsys.readouterr().err
