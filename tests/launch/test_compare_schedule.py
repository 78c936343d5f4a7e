"""``autoaug compare --policy`` with a schedule: its runs train the schedule (stages switched at their
epochs) and are recorded under the schedule's hash."""

from __future__ import annotations

import json

import pytest

from autoaug.launch.cli import main
from autoaug.policies import Policy
from autoaug.policies.schedule import Schedule

PLAIN = Policy("plain", 10, [], base="crop")
INVERT = Policy("inverted", 10, [[("Invert", 1.0, 0)]], base="crop")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")
def test_compare_trains_a_schedule_against_a_baseline(tmp_path, capsys, cifar_small, small_test_split):
    schedule = Schedule("warmup-then-invert", [(0.0, PLAIN), (0.5, INVERT)])
    file = tmp_path / "schedule.json"
    file.write_text(schedule.to_json())
    out = tmp_path / "cmp"
    args = [
        "compare",
        "--data",
        str(cifar_small),
        "--test-data",
        str(small_test_split),
        "--policy",
        str(file),
        "--baselines",
        "crop",
        "--seeds",
        "1",
        "--preset",
        "smoke",
        "--set",
        "epochs=2",
        "--set",
        "train_size=128",
        "--set",
        "val_size=64",
        "--out",
        str(out),
    ]
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:] + captured.out[-3000:]
    runs = {json.loads(p.read_text())["policy"]: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert set(runs) == {"schedule.json", "crop"}
    run = runs["schedule.json"]
    assert run["policy_hash"] == schedule.content_hash and Schedule.from_dict(run["schedule_json"]) == schedule
    assert run["policy_json"] == INVERT.to_dict()  # the last stage
    assert "schedule_json" not in runs["crop"] and runs["crop"]["policy_hash"] == PLAIN.content_hash
    assert run["test_accuracy"] is not None and len(run["history"]) == 2
    # A second compare in the same folder reuses the finished runs (keyed by the schedule's hash).
    assert main(args) == 0
    assert "trained 0 run(s), reused 2" in capsys.readouterr().out
