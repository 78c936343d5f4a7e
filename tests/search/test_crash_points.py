"""Crashes at the failpoints no other test arms (docs/failpoints.md, the crash matrix): the driver
killed in calibration and while re-scoring, and a trial killed mid-epoch under ASHA. Small real
searches on CIFAR-10 (smoke preset). (The store's disk filling while a search stores is armed in
tests/launch/test_search_cmd.py's smoke search.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set", "train.epochs=1", "--set", "train.train_size=256", "--set", "train.val_size=128"]
SEARCH = [sys.executable, "-m", "autoaug.launch.cli", "search"]


def _dirs(tmp_path: Path) -> list[str]:
    return ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]


def _resume(name: str, tmp_path: Path) -> subprocess.CompletedProcess:
    resumed = subprocess.run(
        [*SEARCH, "--resume", name, *_dirs(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=400,
        start_new_session=True,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"stored as {name}@1" in resumed.stdout
    return resumed


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_driver_killed_in_calibration_then_while_rescoring_resumes_each_time_with_the_runs_it_saved(
    tmp_path, cifar_small, kill_driver
):
    """One search, killed twice: in calibration once its first base run is saved, then (resumed)
    in re-scoring once its first run is saved. Each resume trains only what was not saved, and
    the last one stores. (One search for both points: each driver pair costs the suite about
    20 CPU-s.)"""
    argv = [
        *SEARCH,
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "cal",
        "--base",
        "auto",
        "--no-warm-start",
        "--num-trials",
        "2",  # re-scoring's candidates: the two trials assembled, and the best one
        "--concurrency",
        "1",
        "--set",
        "base_extra_seeds=0",  # one run per base: the resume path does not need the race's rounds
        "--set",
        "rescore=true",
        *TINY,
        *_dirs(tmp_path),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kill_driver(argv, env, "calibrate.after_run_saved:1", 300)
    run = tmp_path / "runs" / "cal"
    saved = json.loads((run / "calibration.json").read_text())["runs"]
    assert len(saved) == 1 and not (run / "result.json").exists()  # the first base run, nothing after it
    ((key, first),) = saved.items()

    out = kill_driver([*SEARCH, "--resume", "cal", *_dirs(tmp_path)], env, "rescore.after_run_saved:1", 400)
    assert f"calibration: {key}:" not in out  # not trained again
    runs = json.loads((run / "calibration.json").read_text())["runs"]
    assert runs[key] == first and len(runs) >= 3  # every base measured, the saved run as it was
    rescored = json.loads((run / "rescore.json").read_text())
    assert len(rescored) == 1 and not (run / "result.json").exists()
    ((rescore_key, rescore_first),) = rescored.items()

    resumed = _resume("cal", tmp_path)
    assert "calibration: base:" not in resumed.stdout  # calibration ended before: nothing trained again
    assert json.loads((run / "calibration.json").read_text())["runs"] == runs
    rescored = json.loads((run / "rescore.json").read_text())
    assert rescored[rescore_key] == rescore_first and len(rescored) >= 2  # the saved run kept, the others trained
    prov = json.loads((run / "result.json").read_text())["provenance"]
    assert set(prov["calibration"]["base"]["scores"]) == {"none", "crop", "standard"}
    selection = prov["selection"]
    assert len(selection["candidates"]) == len(rescored) and all(c["runs"] for c in selection["candidates"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_trial_killed_mid_epoch_under_asha_is_retried_and_the_search_completes(
    tmp_path, cifar_small, failpoints_armed
):
    argv = [
        *SEARCH,
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "mid",
        "--base",
        "crop",
        "--no-warm-start",
        "--num-trials",
        "4",
        "--concurrency",
        "1",
        "--set",
        "train.epochs=2",
        "--set",
        "train.train_size=256",
        "--set",
        "train.val_size=128",
        "--grace-period",
        "1",
        "--max-failures",
        "1",
        *_dirs(tmp_path),
    ]
    # The first process to reach its 2nd training step (a trial's Ray worker) is killed, once.
    done = subprocess.run(
        argv,
        cwd=REPO,
        env=failpoints_armed("train.mid_epoch:2=kill"),
        capture_output=True,
        text=True,
        timeout=500,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert failpoints_armed.fired("train.mid_epoch")
    assert "stored as mid@1" in done.stdout  # (the driver ended 0: the process killed was a trial's)
    trials = json.loads((tmp_path / "runs" / "mid" / "result.json").read_text())["provenance"]["trials"]
    assert len(trials) == 4 and all(t["status"] in ("completed", "early_stopped") for t in trials)
