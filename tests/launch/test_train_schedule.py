"""``autoaug train --policy`` with a schedule: its stages switch at their epochs, and the run's
files say which policy trained when."""

from __future__ import annotations

import json

import pytest

from autoaug.launch.cli import main
from autoaug.policies import Policy
from autoaug.policies.schedule import Schedule
from autoaug.proxy_models.train import load_checkpoint

PLAIN = Policy("plain", 10, [], base="none")
INVERT = Policy("inverted", 10, [[("Invert", 1.0, 0)]], base="none")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_with_a_schedule_file_records_its_stages(tmp_path, capsys, cifar_small):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").symlink_to(cifar_small)  # no test split next to it: no test pass
    schedule = Schedule("warmup-then-invert", [(0.0, PLAIN), (0.5, INVERT)])
    file = tmp_path / "schedule.json"
    file.write_text(schedule.to_json())
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--data",
            str(data / "train.parquet"),
            "--policy",
            str(file),
            "--preset",
            "smoke",
            "--set",
            "epochs=4",
            "--set",
            "train_size=64",
            "--set",
            "val_size=64",
            "--set",
            "batch_size=32",
            "--out",
            str(out),
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    result = json.loads(captured.out)
    assert result["schedule_hash"] == schedule.content_hash and result["stage_epochs"] == [0, 2]
    assert Schedule.from_dict(result["schedule"]) == schedule
    assert result["policy"] == INVERT.to_dict()  # the last stage
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["schedule_hash"] == schedule.content_hash and len(metrics["history"]) == 4
    assert load_checkpoint(out)["epoch_policy_hashes"] == [PLAIN.content_hash] * 2 + [INVERT.content_hash] * 2
    assert "schedule 'warmup-then-invert': 2 stages, from epochs [1, 3] of 4" in captured.err
