"""A fourth search method added as one folder (``tests/search/toy_method/``) and one registration
(``toy_method/cli.py``): offered and checked by the CLI, and run end to end through the real Ray
Tune and Optuna plumbing -- killed at a failpoint, resumed, stored -- with no line of the shared
code changed. Its trials score a policy without training, so a search takes seconds of CPU."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import optuna
import pytest

from autoaug.search.methods.base import METHODS, register_method

HERE = Path(__file__).resolve().parent


@pytest.fixture
def toy(monkeypatch):
    """The toy method registered in this process (its one registration), removed afterwards."""
    monkeypatch.syspath_prepend(str(HERE))
    from toy_method import method, trial

    register_method(method.METHOD)
    try:
        yield method, trial
    finally:
        METHODS.pop(method.METHOD.name)


def test_the_folder_s_method_is_offered_configured_and_checked(toy):
    from autoaug.launch.cli import build_parser
    from autoaug.launch.search_cmd import _describe, build_search_config

    method, _ = toy
    config = build_search_config(
        build_parser().parse_args(["search", "--data", "x", "--preset", "smoke", "--method", "toy", "--name", "t"])
    )
    assert config.search_method is method.METHOD
    assert config.method_settings(method.ToyConfig) == method.ToyConfig(trials=4)  # its smoke preset
    assert "  method: each candidate scored from its policy alone" in _describe(config, None)
    with pytest.raises(ValueError, match=r"SearchConfig\.toy\.trials: 0 is invalid; expected an integer >= 1"):
        build_search_config(
            build_parser().parse_args(["search", "--data", "x", "--method", "toy", "--toy-trials", "0"])
        )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_fourth_method_runs_through_tune_is_killed_and_resumes_to_its_trials(
    tmp_path, cifar_small, kill_driver, toy, monkeypatch, capsys
):
    """kill -9 of the driver when the 2nd trial's end is saved (``search.after_trial_saved``, in
    the shared searcher): the resumed search (``autoaug search --resume`` in this process, where
    the fixture made the one registration) runs exactly the requested trials, none twice, each
    scored as the folder's trial scores its policy, and stores the assembled policy with the
    method's own summary."""
    _, trial = toy
    num_trials = 4
    dirs = ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    base = [sys.executable, "-m", "toy_method.cli", "search"]
    argv = [
        *base,
        "--preset",
        "smoke",
        "--method",
        "toy",
        "--toy-trials",
        str(num_trials),
        "--data",
        str(cifar_small),
        "--name",
        "toy",
        "--concurrency",
        "1",
        *dirs,
    ]
    # The folder is importable by the drivers and by the Ray workers they start (its trial).
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
    run = tmp_path / "runs" / "toy"
    kill_driver(argv, env, "search.after_trial_saved:2", 300)
    assert not (run / "result.json").exists()
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{run}/optuna.db")
    assert len([t for t in study.trials if t.state.is_finished()]) == 2

    from autoaug.launch.cli import main

    monkeypatch.setenv("PYTHONPATH", path)  # for the Ray workers the resume starts (its trial)
    code = main(["search", "--resume", "toy", *dirs])
    resumed = capsys.readouterr()
    assert code == 0, resumed.out[-3000:] + resumed.err[-3000:]
    assert "stored as toy@1" in resumed.out
    assert f"toy: {num_trials} policies scored without training" in resumed.out  # the method's summary

    result = json.loads((run / "result.json").read_text())
    trials = result["provenance"]["trials"]
    ids = [t["trial_id"] for t in trials]
    assert len(ids) == num_trials and len(set(ids)) == num_trials  # exactly the requested, none twice
    from autoaug.policies import Policy
    from autoaug.policies.store import PolicyStore

    for t in trials:  # each score is the folder's trial's, from its own policy
        assert t["status"] == "completed"
        assert t["score"] == pytest.approx(trial.policy_score(Policy.from_dict(t["policy"])))
    assert result["provenance"]["method"] == {"trials": num_trials}
    assert result["provenance"]["optuna"]["consistent_with_tune"] is True
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{run}/optuna.db")
    assert sorted(t.user_attrs["tune_trial_id"] for t in study.trials if t.state.is_finished()) == sorted(ids)
    assert PolicyStore(str(tmp_path / "store")).load("toy@1").content_hash == result["policy_hash"]
