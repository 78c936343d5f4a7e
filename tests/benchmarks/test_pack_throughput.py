"""benchmarks/pack_throughput.py: a short CPU run measures a pack and a separate process and writes
its JSON with the machine and the command; another measures the input side (DALI loaders and
device feeds, served and trained). Checks of the tool, not timings."""

from __future__ import annotations

import json

import pytest


def test_a_short_run_writes_each_measurement_with_the_machine(load_benchmark, tmp_path):
    pt = load_benchmark("pack_throughput")
    out = tmp_path / "cpu.json"
    argv = ["--device", "cpu", "--proxies", "proxy-cpu", "--packs", "1,2", "--processes", "1", "--seconds", "0.3"]
    assert pt.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    rows = record["rows"]
    assert [r.get("processes", r.get("k")) for r in rows] == [1, 1, 2]
    for r in rows:
        assert r["images_per_s"] > 0
        # 120-epoch trials per hour of 1,000-image epochs
        assert abs(r["trials_per_hour"] - r["images_per_s"] * 3600 / (1000 * 120)) < 0.1
    assert record["machine"]["cpu"] and record["command"].startswith(
        "python benchmarks/pack_throughput.py --device cpu"
    )


@pytest.mark.slow  # two DALI pipelines built, two packs trained, torchvision imported: 10-15 s on a quiet core
def test_the_input_side_measures_dali_loaders_and_device_feeds_and_a_pack_fed_each_way(
    load_benchmark, cifar_dir, tmp_path
):
    pt = load_benchmark("pack_throughput")
    out = tmp_path / "cpu-input-train.json"
    argv = ["--device", "cpu", "--measure", "input,train", "--data", str(cifar_dir), "--proxies", "proxy-cpu"]
    argv += ["--packs", "1", "--seconds", "0.1", "--epochs", "1", "--train-size", "256", "--out", str(out)]
    assert pt.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["measure"], r["loader"]) for r in rows] == [
        ("input", "dali"),
        ("input", "device"),
        ("train", "dali"),
        ("train", "device"),
    ]
    for r in rows:
        assert "error" not in r and r["images_per_s"] > 0 and r["k"] == 1
    assert all(r["train_images"] == 256 for r in rows if r["measure"] == "train")


def test_churn_trains_the_same_candidates_refilling_stopped_members_slots_or_shrinking_the_pack(
    load_benchmark, cifar_dir, tmp_path
):
    pt = load_benchmark("pack_throughput")
    out = tmp_path / "cpu-churn.json"
    argv = ["--device", "cpu", "--measure", "churn", "--data", str(cifar_dir), "--proxies", "proxy-cpu"]
    argv += ["--packs", "2", "--epochs", "4", "--trials", "5", "--lengths", "0.25,1", "--train-size", "64"]
    assert pt.main([*argv, "--out", str(out)]) == 0
    refill, shrink = json.loads(out.read_text())["rows"]
    assert (refill["mode"], shrink["mode"]) == ("refill", "shrink")
    for row in (refill, shrink):
        assert "error" not in row
        assert row["lengths"] == [1, 4, 1, 4, 1] and row["trial_epochs"] == 11
        assert row["trial_epochs_per_hour"] > 0
    # refill: a stopped member's slot is taken at the next round; shrink: the survivor trains alone
    assert (refill["rounds"], shrink["rounds"]) == (6, 9)
    assert refill["mean_size"] == round(11 / 6, 2) and shrink["mean_size"] == round(11 / 9, 2)


@pytest.mark.parametrize("lengths", ["0,1", "1.5", "half"])
def test_churn_refuses_lengths_that_are_not_shares_of_the_epochs(load_benchmark, cifar_dir, lengths, capsys):
    pt = load_benchmark("pack_throughput")
    with pytest.raises(SystemExit) as exit_:
        pt.main(["--device", "cpu", "--measure", "churn", "--data", str(cifar_dir), "--lengths", lengths])
    assert exit_.value.code == 2
    assert f"--lengths {lengths!r}: expected shares of --epochs in (0, 1]" in capsys.readouterr().err


def test_cuda_graphs_are_refused_on_a_cpu_in_one_line_and_a_step_that_cannot_be_captured_is_its_rows_error(
    load_benchmark, capsys
):
    pt = load_benchmark("pack_throughput")
    with pytest.raises(SystemExit) as exit_:
        pt.main(["--device", "cpu", "--graphs"])
    assert exit_.value.code == 2
    assert "--graphs: CUDA graphs need --device cuda, not 'cpu'" in capsys.readouterr().err
    # what the gpu_check step records where capture fails (here: no CUDA device)
    row = pt.graphed_steps("proxy-cpu", 2, "cpu", "preset", 0.1)
    assert row == {
        "proxy": "proxy-cpu",
        "k": 2,
        "graphs": True,
        "error": "ValueError: CUDA graphs need a CUDA device, not cpu",
    }
