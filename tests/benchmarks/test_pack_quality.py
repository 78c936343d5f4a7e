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
