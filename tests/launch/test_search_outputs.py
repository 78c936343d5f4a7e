"""What a real search leaves for the researcher's tools: --json on stdout, TensorBoard event
files in the run directory, MLflow runs (file store), a valid Optuna study (what
optuna-dashboard opens), the report PNG. (What -q prints, only the result: the quiet search of
tests/launch/test_preflight.py.)"""

from __future__ import annotations

import json
import os
import struct

import pytest

from autoaug.launch.cli import main

SMALL = ["--set", "train.epochs=2", "--set", "train.train_size=256", "--set", "train.val_size=128"]


def _dirs(tmp_path):
    return ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]


def read_events(path):
    """The ``Event`` protos of a TensorBoard event file (TFRecord framing: length, crc, data, crc),
    read with tensorboardX's protobufs (tensorboardX comes with ray[tune]; tensorboard need not be
    installed)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    with open(path, "rb") as f:
        while True:
            head = f.read(12)
            if len(head) < 12:
                break
            (length,) = struct.unpack("<Q", head[:8])
            data = f.read(length)
            f.read(4)
            event = Event()
            event.ParseFromString(data)
            events.append(event)
    return events


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")
def test_json_tensorboard_mlflow_study_and_report(tmp_path, capfd, cifar_small):
    import optuna

    from autoaug.search.tune.loggers import event_files
    from autoaug.search.tune.study import open_study

    mlruns = tmp_path / "mlruns"
    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "out1",
        "--num-trials",
        "2",
        "--concurrency",
        "1",
        *SMALL,
        *_dirs(tmp_path),
        "--json",
        "--mlflow-uri",
        str(mlruns),
    ]
    assert main(argv) == 0
    out, err = capfd.readouterr()
    doc = json.loads(out)  # stdout is exactly one JSON document
    assert doc["ref"] == "out1@1" and len(doc["trials"]) == 2 and doc["run_dir"].endswith("out1")
    assert "[2/2] trial" in err  # the progress went to stderr

    # TensorBoard: `tensorboard --logdir RUN_DIR` finds one event file per trial with the metrics
    run_dir = str(tmp_path / "runs" / "out1")
    files = event_files(run_dir)
    assert len({os.path.dirname(f) for f in files}) == 2
    tags = {v.tag for f in files for e in read_events(f) for v in e.summary.value}
    assert "ray/tune/val_accuracy" in tags and "ray/tune/train_loss" in tags

    # MLflow (local file store): one run per trial, val_accuracy per epoch, the policy's parameters
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri="file://" + str(mlruns))
    experiment = client.get_experiment_by_name("out1")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    for r in runs:
        assert "sp0_op0_type" in r.data.params
        history = client.get_metric_history(r.info.run_id, "val_accuracy")
        assert 1 <= len(history) <= 2 and all(0 <= m.value <= 1 for m in history)

    # The study optuna-dashboard would open (docs/search.md): finished trials with values and curves
    study = open_study("out1", runs_root=str(tmp_path / "runs"))
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len(study.trials) == 2 and all(t.state in finished for t in study.trials)
    for t in study.trials:
        assert 0 <= t.value <= 1 and set(t.intermediate_values) <= {1, 2} and t.intermediate_values
    assert study.best_value == max(t["score"] for t in doc["trials"])

    png = tmp_path / "report.png"
    assert main(["report", "out1", "--storage", str(tmp_path / "runs"), "--out", str(png)]) == 0
    assert png.stat().st_size > 10_000
