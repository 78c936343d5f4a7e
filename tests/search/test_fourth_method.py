"""A fourth search method, installed from a package of its own: ``tests/search/toy_method/`` (its
settings, its method and its trial) built here into a distribution whose one registration is an
entry point of the ``autoaug.methods`` group, installed into a throwaway folder (``pip install
--no-deps --target``) and put on the path. Without a line of this project changed or a
registration call, it is offered and checked by the CLI and run end to end through the real Ray
Tune and Optuna plumbing -- killed at a failpoint, resumed, stored. Its trials score a policy
without training, so a search takes seconds of CPU."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autoaug.search.methods.base import ENTRY_POINT_GROUP, METHODS

HERE = Path(__file__).resolve().parent

#: The toy package's own build file: one entry point names its method.
PYPROJECT = f"""\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "autoaug-toy-method"
version = "0.1"

[tool.setuptools]
packages = ["toy_method"]

[project.entry-points."{ENTRY_POINT_GROUP}"]
toy = "toy_method.method:METHOD"
"""


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory) -> Path:
    """The toy method's distribution, built from its sources and installed into a folder of its own
    (once per module): the folder to put on the path."""
    src = tmp_path_factory.mktemp("toy-src")
    shutil.copytree(HERE / "toy_method", src / "toy_method", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "pyproject.toml").write_text(PYPROJECT)
    site = tmp_path_factory.mktemp("toy-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--target", str(site), str(src)],
        check=True,
        capture_output=True,
    )
    assert (site / "toy_method" / "method.py").is_file() and list(site.glob("autoaug_toy_method-*.dist-info"))
    return site


@pytest.fixture
def toy(toy_site, monkeypatch):
    """The installed toy method, found by the registry through its entry point (no registration
    call); forgotten afterwards."""
    monkeypatch.syspath_prepend(str(toy_site))
    importlib.invalidate_caches()
    # (what a process that starts with the package installed does when it first reads the registry)
    METHODS.load_entry_points()
    try:
        method = importlib.import_module("toy_method.method")
        assert METHODS["toy"] is method.METHOD
        yield method, importlib.import_module("toy_method.trial")
    finally:
        METHODS.pop("toy", None)
        for name in [m for m in sys.modules if m == "toy_method" or m.startswith("toy_method.")]:
            del sys.modules[name]


def test_an_installed_method_is_offered_configured_and_checked(toy):
    from autoaug.launch.cli import build_parser
    from autoaug.launch.search_cmd import _describe, build_search_config

    method, _ = toy
    assert Path(method.__file__).parent.parent != HERE  # the installed copy, not the test's folder
    config = build_search_config(
        build_parser().parse_args(["search", "--data", "x", "--preset", "smoke", "--method", "toy", "--name", "t"])
    )
    assert config.search_method is method.METHOD and list(METHODS)[0] == "train"  # the default still first
    assert config.method_settings(method.ToyConfig) == method.ToyConfig(trials=4)  # its smoke preset
    assert "  method: each candidate scored from its policy alone" in _describe(config, None)
    with pytest.raises(ValueError, match=r"SearchConfig\.toy\.trials: 0 is invalid; expected an integer >= 1"):
        build_search_config(
            build_parser().parse_args(["search", "--data", "x", "--method", "toy", "--toy-trials", "0"])
        )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_installed_method_runs_through_tune_is_killed_and_resumes_to_its_trials(
    tmp_path, cifar_small, kill_driver, toy, toy_site, monkeypatch, capsys
):
    """``autoaug search --method toy`` in a driver whose path holds the installed package: kill -9
    of the driver when the 2nd trial's end is saved (``search.after_trial_saved``, in the shared
    searcher); the resumed search (``autoaug search --resume`` in this process, which found the
    method through its entry point) runs exactly the requested trials, none twice, each scored as
    the package's trial scores its policy, and stores the assembled policy with the method's own
    summary."""
    _, trial = toy
    num_trials = 4
    dirs = ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    argv = [sys.executable, "-m", "autoaug.launch.cli", "search", "--preset", "smoke", "--method", "toy"]
    argv += ["--toy-trials", str(num_trials), "--data", str(cifar_small), "--name", "toy", "--concurrency", "1", *dirs]
    # The package is importable by the drivers and by the Ray workers they start (its trial).
    path = os.pathsep.join(p for p in (str(toy_site), os.environ.get("PYTHONPATH")) if p)
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

    for t in trials:  # each score is the package's trial's, from its own policy
        assert t["status"] == "completed"
        assert t["score"] == pytest.approx(trial.policy_score(Policy.from_dict(t["policy"])))
    assert result["provenance"]["method"] == {"trials": num_trials}
    assert result["provenance"]["optuna"]["consistent_with_tune"] is True
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{run}/optuna.db")
    assert sorted(t.user_attrs["tune_trial_id"] for t in study.trials if t.state.is_finished()) == sorted(ids)
    assert PolicyStore(str(tmp_path / "store")).load("toy@1").content_hash == result["policy_hash"]
