"""benchmarks/gpu_check.py where no GPU is: its arguments checked in one line before anything runs,
the absence of a GPU said in one line, and its table of the churn step (what it prints on a GPU)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        *(("--churn-packs", v, "expected PROXY:K pairs") for v in ("paper16", "paper:x", "resnet:4", "paper:0")),
        *(("--graph-packs", v, "expected pack sizes >= 1") for v in ("1,x", "0", "16;32")),
    ],
)
def test_a_malformed_pack_list_is_refused_in_one_line(load_benchmark, cifar_dir, flag, value, said, capsys):
    gc = load_benchmark("gpu_check")
    with pytest.raises(SystemExit) as exit_:
        gc.main(["--data", str(cifar_dir), "--only", "churn,pack", flag, value])
    assert exit_.value.code == 2
    assert f"{flag} {value!r}: {said}" in capsys.readouterr().err


def test_without_a_gpu_it_says_so_and_exits_2(load_benchmark, cifar_dir, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: gpu_check would run its step")
    gc = load_benchmark("gpu_check")
    assert gc.main(["--data", str(cifar_dir), "--only", "churn"]) == 2
    assert "no CUDA GPU on this machine" in capsys.readouterr().out


def test_the_churn_table_shows_each_way_per_proxy_and_pack(load_benchmark):
    gc = load_benchmark("gpu_check")
    assert gc.packs_by_proxy("paper:16, proxy-cpu:32") == [("paper", 16), ("proxy-cpu", 32)]
    row = {"proxy": "paper", "k": 16, "trial_epochs_per_hour": 12345, "mean_size": 14.2}
    text = gc.table(
        {
            "gpu": {"name": "GPU", "torch": "2", "dali": None},
            "churn": {"epochs": 4, "rows": [{**row, "mode": "refill"}, {**row, "mode": "shrink", "error": "OOM"}]},
        }
    )
    assert "paper K=16 refill" in text and "12,345" in text and "paper K=16 shrink" in text and "OOM" in text


def test_the_preset_line_says_what_the_pack_servers_did(load_benchmark):
    gc = load_benchmark("gpu_check")
    packs = {"rounds": 4, "member_epochs": 30, "train_s": 8.0, "wait_s": 1.0, "short_rounds": 0, "short_wait_s": 0.0}
    preset = {
        "command": "autoaug search --name gpu-preset",
        "exit": 0,
        "wall_s": 60.0,
        "stored": "gpu-preset@1",
        "chosen": "assembled",
        "counts": {"completed": 3},
        "trial_epochs_per_hour": 1800,
        "full_length_trials_per_hour": 15.0,
        "gpu_utilisation_pct": {"median": 90},
        "packs": packs,
    }
    text = gc.table({"gpu": {"name": "GPU", "torch": "2", "dali": None}, "preset": preset})
    assert "  pack servers: 4 rounds trained 30 trial-epochs (7.5 a round) in 8 s" in text
