"""``autoaug train`` end to end on the smoke preset, and its one-line errors."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from autoaug.launch.cli import main
from autoaug.policies import presets


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small_cifar_test(cifar_test, tmp_path):
    """500 rows of the real CIFAR-10 test Parquet, all classes (the file is sorted by class)."""
    import pyarrow.parquet as pq

    table = pq.read_table(cifar_test)
    path = tmp_path / "test-small.parquet"
    pq.write_table(table.take(list(range(0, table.num_rows, 20))), path)
    return path


@pytest.mark.slow
def test_train_smoke_end_to_end(cifar_small, small_cifar_test, tmp_path, capsys):
    cifar_test = small_cifar_test
    out_dir = tmp_path / "run"
    policy_file = tmp_path / "mine.json"
    policy_file.write_text(presets.resolve("autoaugment-cifar10").to_json())
    code, out, err = run_cli(
        [
            "train",
            "--data",
            str(cifar_small),
            "--test-data",
            str(cifar_test),
            "--preset",
            "smoke",
            "--policy",
            str(policy_file),
            "--epochs",
            "2",
            "--seed",
            "3",
            "--num-threads",
            "1",  # the flag, at this test process's share of the cores (2 threads spin beside the other)
            "--out",
            str(out_dir),
        ],
        capsys,
    )
    assert code == 0, err
    lines = out.splitlines()
    epoch_lines = [line for line in lines if line.startswith("epoch ")]
    assert [line.split()[1] for line in epoch_lines] == ["1/2", "2/2"]
    assert "val_acc" in epoch_lines[0] and "img/s" in epoch_lines[0]
    assert any(line.startswith("done in") and "test_acc" in line for line in lines)

    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["config"]["seed"] == 3 and metrics["config"]["epochs"] == 2
    assert metrics["config"]["model"] == "resnet-8" and metrics["config"]["test_data"] == str(cifar_test)
    assert metrics["policy"]["sub_policies"] == presets.resolve("autoaugment-cifar10").to_dict()["sub_policies"]
    assert [row["epoch"] for row in metrics["history"]] == [1, 2]
    final = metrics["final"]
    assert final["val_accuracy"] == metrics["history"][-1]["val_accuracy"] > 0.15
    assert final["test_accuracy"] > 0.15
    assert f"test_acc {final['test_accuracy']:.4f}" in out
    assert len(final["split_fingerprint"]) == 64

    with open(out_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert float(rows[-1]["val_accuracy"]) == pytest.approx(final["val_accuracy"])
    assert (out_dir / "checkpoint.pt").is_file()

    # A second run into the same directory must not overwrite it silently ...
    code, _, err = run_cli(["train", "--data", str(cifar_small), "--preset", "smoke", "--out", str(out_dir)], capsys)
    assert code == 2 and "already holds a training run; pass --resume" in err
    # ... and --resume of a finished run only re-reads it.
    code, out, err = run_cli(
        [
            "train",
            "--data",
            str(cifar_small),
            "--test-data",
            str(cifar_test),
            "--preset",
            "smoke",
            "--policy",
            str(policy_file),
            "--epochs",
            "2",
            "--seed",
            "3",
            "--out",
            str(out_dir),
            "--resume",
        ],
        capsys,
    )
    assert code == 0, err
    assert "resuming" in out and not [line for line in out.splitlines() if line.startswith("epoch ")]
    assert json.loads((out_dir / "metrics.json").read_text())["final"]["test_accuracy"] == final["test_accuracy"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--policy", "no-such-policy"], "--policy 'no-such-policy': not a preset (autoaugment-cifar10"),
        (["--policy", "missing.json"], "--policy 'missing.json': policy file 'missing.json' does not exist"),
        (
            ["--epochs", "0"],
            "TrainConfig.epochs must be an integer from 1 to 10,000 (5.5x the longest published schedule, AutoAugment's 1,800 epochs), got 0",
        ),
        (
            ["--epochs", "1000000000000"],
            "TrainConfig.epochs must be an integer from 1 to 10,000 (5.5x the longest published schedule, AutoAugment's 1,800 epochs), got 1000000000000",
        ),
        (["--model", "vgg-11"], "unknown model 'vgg-11'"),
        (["--resume"], "--resume: no checkpoint at"),
        (["--train-per-class", "0"], "TrainConfig.train_per_class must be a positive integer or None, got 0"),
        (
            ["--train-per-class", "50", "--train-size", "500"],
            "TrainConfig.train_size=500 and train_per_class=50 both size the training split; set one of them",
        ),
        (
            ["--set", "max_train_size=3000"],
            "TrainConfig.max_train_size=3000 bounds a training split sized per class, but train_per_class is None",
        ),
        (["--image-size", "0"], "TrainConfig.image_size must be a positive integer, or 'auto'/None"),
        (["--base", "flip"], "--base 'flip' is not a base; expected one of none, crop, standard"),
        (["--set", "base=3"], "--base 3 is not a base; expected one of none, crop, standard"),
        # the default policy, standard, is a base alone: it is not quietly trained with a flip
        (
            ["--base", "crop"],
            "--base crop: policy 'standard' has no sub-policies, it is the base 'standard' alone "
            "and keeps it; to train the base 'crop' alone give --policy crop",
        ),
        (["--policy", "none", "--base", "standard"], "give --policy standard"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(extra, message, cifar_train, tmp_path, capsys):
    code, out, err = run_cli(
        [
            "train",
            "--data",
            str(cifar_train),
            "--preset",
            "smoke",
            "--out",
            str(tmp_path / "o"),
            "--store",
            str(tmp_path / "store"),
            *extra,
        ],
        capsys,
    )
    assert code == 2
    assert err.startswith("autoaug: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_policy_from_the_store(cifar_small, tmp_path, capsys):
    from autoaug.policies.store import PolicyStore

    store = PolicyStore(str(tmp_path / "store"))
    store.save(presets.resolve("autoaugment-cifar10"), "mine")
    code, out, err = run_cli(
        [
            "train",
            "--data",
            str(cifar_small),
            "--preset",
            "smoke",
            "--epochs",
            "1",
            "--policy",
            "mine@latest",
            "--store",
            str(tmp_path / "store"),
            "--out",
            str(tmp_path / "o"),
        ],
        capsys,
    )
    assert code == 0, err
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["policy_hash"] == presets.resolve("autoaugment-cifar10").content_hash


@pytest.mark.slow
def test_base_trains_the_policy_on_another_base(cifar_small, small_cifar_test, tmp_path, capsys):
    from autoaug.proxy_models.train import load_checkpoint

    out_dir = tmp_path / "o"
    argv = [
        "train",
        "--data",
        str(cifar_small),
        "--test-data",
        str(small_cifar_test),
        "--preset",
        "smoke",
        "--epochs",
        "1",
        "--train-size",
        "256",
        "--val-size",
        "64",
        "--policy",
        "autoaugment-cifar10",
        "--base",
        "crop",
        "--out",
        str(out_dir),
    ]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "with policy 'autoaugment-cifar10' (25 sub-policies, base crop instead of its standard (--base))" in out
    moved = presets.resolve("autoaugment-cifar10").with_base("crop")
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert (metrics["base"], metrics["rebased_from"]) == ("crop", "standard")
    assert metrics["policy"]["base"] == "crop" and metrics["policy_hash"] == moved.content_hash
    assert load_checkpoint(out_dir)["policy"]["base"] == "crop"  # what the trainer itself was given
    # resuming must name the same base: the run was not trained on the policy's own
    code, _, err = run_cli([a for a in argv if a not in ("--base", "crop")] + ["--resume"], capsys)
    assert code == 2 and "cannot resume: the checkpoint was trained with policy 'autoaugment-cifar10' (base crop" in err


def test_base_comes_from_the_layers(tmp_path):
    from autoaug.launch import cli, train_cmd

    config = tmp_path / "t.yaml"
    config.write_text(f"data: {tmp_path}\nbase: crop\n")
    settings = lambda *argv: train_cmd._settings(cli.build_parser().parse_args(["train", *argv]))[0]  # noqa: E731
    assert settings("--config", str(config))["base"] == "crop"
    assert settings("--config", str(config), "--set", "base=none")["base"] == "none"
    assert settings("--config", str(config), "--base", "standard")["base"] == "standard"
    assert settings("--data", str(tmp_path))["base"] is None


def test_missing_dataset_is_a_user_error(tmp_path, capsys):
    code, _, err = run_cli(
        ["train", "--data", str(tmp_path / "none.parquet"), "--preset", "smoke", "--out", str(tmp_path / "o")], capsys
    )
    assert code == 2
    assert "dataset not found" in err and len(err.strip().splitlines()) == 1


def test_help_lists_the_flags():
    result = subprocess.run(
        [sys.executable, "-m", "autoaug.launch.cli", "train", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0
    for flag in (
        "--policy",
        "--base",
        "--store",
        "--data",
        "--test-data",
        "--model",
        "--epochs",
        "--preset",
        "--seed",
        "--out",
        "--device",
        "--resume",
        "--train-per-class",
        "--image-size",
        "--group-by",
    ):
        assert flag in result.stdout
    # The presets and the per-class regime, with what it gives on CIFAR-10 and GTSRB.
    text = " ".join(result.stdout.split())
    assert (
        "proxy-cpu resnet-8, 120 epochs, 100 training images per class (1,000 to 2,000 in all), 1,000 validation "
        "images, the data's own image size" in text
    )
    assert "smoke resnet-8, 2 epochs, 1,024 training images, 256 validation images, 32x32" in text
    assert (
        "So CIFAR-10 (10 classes of 5,000) trains on 1,000 images and GTSRB (43 classes of 210-2,250) on 2,000." in text
    )


def test_image_size_flag_takes_a_number_or_auto(tmp_path, capsys):
    from autoaug.launch import train_cmd
    from autoaug.launch.cli import build_parser

    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    data = str(tmp_path / "train.parquet")
    for flag, expected in (("48", 48), ("auto", None)):
        _, config = train_cmd._settings(
            build_parser().parse_args(["train", "--data", data, "--preset", "smoke", "--image-size", flag])
        )
        assert config.image_size == expected
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--data", data, "--image-size", "big"])
    assert "--image-size: expected a positive integer or 'auto', got 'big'" in capsys.readouterr().err


def _signs(root, counts, size=(40, 48)):
    """An ImageFolder of random PNGs of ``size`` (width, height), ``counts`` images per class."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, n in enumerate(counts):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(n):
            shape = (size[1], size[0], 3) if not callable(size) else size(i)
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(root / f"class{c}" / f"{i}.png")
    return root


def test_images_of_several_sizes_with_an_automatic_size_are_one_line_before_anything_is_created(tmp_path, capsys):
    data = _signs(tmp_path / "mixed", [6, 6], size=lambda i: (32, 32, 3) if i % 2 else (40, 40, 3))
    code, _, err = run_cli(["train", "--data", str(data), "--preset", "cpu", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "the images come in 2 sizes (width x height 32x32: 6 images, 40x40: 6 images); give one: --image-size N" in err
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_per_class_run_on_the_datas_own_size_records_what_it_resolved_to(tmp_path, capsys):
    """Three classes of 12, 30 and 6 images of 40x48: 8 per class resolves to 8 + 8 + 6 = 22 training
    images, the image size to 40 (the shorter side); metrics.json keeps the resolved config and
    what was asked."""
    data = _signs(tmp_path / "signs", [12, 30, 6])
    out = tmp_path / "run"
    code, printed, err = run_cli(
        [
            "train",
            "--data",
            str(data),
            "--preset",
            "smoke",
            "--train-per-class",
            "8",
            "--image-size",
            "auto",
            "--val-size",
            "6",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--num-threads",
            "1",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    assert (
        "split: 22 training images, 6 validation images, 40x40 (asked: 8 training images per class; image size auto)"
    ) in printed
    metrics = json.loads((out / "metrics.json").read_text())
    config = metrics["config"]
    assert (config["train_size"], config["val_size"], config["image_size"]) == (22, 6, 40)
    assert "train_per_class" not in config  # the record of what was computed: a total
    assert metrics["sizing"] == {
        "requested": {
            "train_size": None,
            "val_size": 6,
            "train_per_class": 8,
            "min_train_size": None,
            "max_train_size": None,
            "image_size": None,
        },
        "resolved": {"train_size": 22, "val_size": 6, "image_size": 40},
    }
    assert metrics["status"] == "finished" and len(metrics["history"]) == 1
    # Resuming with the same request is the same run (the checkpoint holds the resolved config).
    code, printed, err = run_cli(
        [
            "train",
            "--data",
            str(data),
            "--preset",
            "smoke",
            "--train-per-class",
            "8",
            "--image-size",
            "auto",
            "--val-size",
            "6",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--out",
            str(out),
            "--resume",
        ],
        capsys,
    )
    assert code == 0, err
    assert "resuming" in printed


def test_data_of_one_class_is_refused_before_training_in_one_line(tmp_path):
    """A dataset whose labels are all one class is refused (exit 2, one line with the counts) before
    --out is created, as a real process."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    def png(value):
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(buf, format="PNG")
        return buf.getvalue()

    data = tmp_path / "one.parquet"
    pq.write_table(
        pa.table(
            {"image": pa.array([png(i) for i in range(80)], pa.binary()), "label": pa.array([3] * 80)}
        ).replace_schema_metadata({"classes": "a,b,c,d"}),
        data,
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoaug.launch.cli",
            "train",
            "--data",
            str(data),
            "--preset",
            "smoke",
            "--train-size",
            "64",
            "--val-size",
            "16",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert (
        proc.stderr.startswith(f"autoaug: error: {data}: all ")
        and "training images are of one class, 'd' (80 "
        "images in the data); the data hold 1 class (4 declared); expected at least 2 classes in training"
        in proc.stderr
    )
    assert not (tmp_path / "out").exists()
