"""benchmarks/trial_throughput.py and its roof (benchmarks/compute_peak.py): the FLOPs it counts per
image, the peak it divides by, and a ``--quick --levers`` smoke run writing its JSON and Markdown (a
check of the tool, not a timing)."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def tt(load_benchmark):
    return load_benchmark("trial_throughput")


@pytest.fixture(scope="module")
def cp(load_benchmark):
    return load_benchmark("compute_peak")


def test_flops_per_image_of_resnet8_are_its_convolutions_and_matmul(cp):
    """ResNet-8 on 32x32: 2 x MACs of its 7 convolutions and the classifier, 24,478,976 FLOPs
    forward; backward adds twice that except the first convolution's input gradient."""
    from autoaug.proxy_models.train import TrainConfig

    convs = [(3, 16, 32), (16, 16, 32), (16, 16, 32), (16, 32, 16), (32, 32, 16), (32, 64, 8), (64, 64, 8)]
    forward = sum(2 * cin * cout * 9 * size * size for cin, cout, size in convs) + 2 * 64 * 10
    assert forward == 24_478_976
    flops = cp.count_flops(TrainConfig.from_preset("cpu"), num_classes=10, image_size=32)
    assert flops["eval"] == forward
    assert flops["train"] == 3 * forward - 2 * 3 * 16 * 9 * 32 * 32  # no gradient for the images


def test_peak_lookup_and_epoch_cost(tt, cp):
    peak = {
        "float32": {"matmul": {"1": 100.0, "2": 180.0}, "conv": {"1": 150.0, "2": 170.0}},
        "bfloat16": {"matmul": {"1": 400.0}, "conv": {"1": 300.0}},
    }
    assert cp.peak_for(peak, "float32", 1) == 150.0  # the best kernel of the dtype
    assert cp.peak_for(peak, "float32", 2) == 180.0
    assert cp.peak_for(peak, "bfloat16", 2) == 800.0  # one thread's, times the threads
    assert cp.peak_for({}, "float32", 1) is None
    assert tt.epoch_cost(1000, 500, 0.001, 0.0005) == pytest.approx(1.25)
    assert cp.matmul_gflops(64, torch.float32, 1, 1) > 0
    assert cp.conv_gflops(2, 16, 8, torch.bfloat16, 1, 1) > 0


@pytest.mark.slow
def test_a_quick_levers_run_writes_its_table(tt, cifar_small, tmp_path, capsys):
    import torch

    out = tmp_path / "tt"
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    assert (
        tt.main(
            [
                "--data",
                str(cifar_small),
                "--quick",
                "--train-size",  # the table's plumbing: bf16 runs emulated (3.6x) on a CPU without it
                "128",
                "--val-size",
                "64",
                "--num-threads",
                "1",
                "--no-peak",
                "--levers",
                "baseline,bf16,eval_batch_1024",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "[--quick: a smoke run, not a measurement]" in printed
    (json_file,) = out.glob("levers-cpu-*-quick.json")
    result = json.loads(json_file.read_text())
    assert [row["lever"] for row in result["levers"]] == ["baseline", "bf16", "eval_batch_1024"]
    bf16 = result["levers"][1]
    assert bf16["dtype"] == "bfloat16" and bf16["real_images_per_s"] > 0 and bf16["trial_epochs_per_cpu_hour"] > 0
    assert result["levers"][0]["speedup_per_cpu_hour"] == 1.0
    assert result["levers"][2]["eval_batch_size"] == 1024
    assert result["flops_per_image"]["eval"] == 24_478_976 and result["quick"] is True
    md = json_file.with_suffix(".md").read_text()
    assert "| lever | torch+DALI threads |" in md and "| bf16 | 1+1 |" in md
    # run in this process, it leaves torch's process-wide settings as they were (for the tests after it)
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, deterministic)
