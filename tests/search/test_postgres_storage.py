"""The Optuna study in a real PostgreSQL database (``--optuna-storage postgresql://...``, the
``postgres`` extra), on the server ``tests/search/conftest.py`` starts: a search killed at a
failpoint and resumed loses nothing there, and a database that is down, refuses the login or
holds a study of the search's name from another search is one line, before any work
(docs/cluster.md, "A PostgreSQL study database")."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from autoaug.launch.cli import main

SEARCH = [sys.executable, "-m", "autoaug.launch.cli", "search"]
TINY = ["--set", "train.epochs=1", "--set", "train.train_size=256", "--set", "train.val_size=128"]


def _dirs(tmp_path: Path) -> list[str]:
    return ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if the search reaches the data check (decoding: the first work)."""

    def decoded(*args, **kwargs):
        raise AssertionError("the data were checked: the refusal came after work started")

    monkeypatch.setattr("autoaug.launch.preflight.check_data", decoded)


def _refused(tmp_path: Path, capsys, url: str, *extra: str) -> str:
    argv = ["search", "--preset", "smoke", "--data", str(tmp_path / "train.parquet"), "--name", "pg"]
    capsys.readouterr()  # (what the test printed before: Optuna's lines)
    assert main([*argv, "--optuna-storage", url, *_dirs(tmp_path), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autoaug: error: "), err
    assert not (tmp_path / "runs" / "pg").exists()  # nothing started: the name stays free
    return err[0]


def test_a_study_database_that_is_down_is_one_line_before_any_work(tmp_path, capsys, no_work):
    pytest.importorskip("psycopg")
    with socket.socket() as closed:  # bound, not listening: connections to it are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        err = _refused(tmp_path, capsys, f"postgresql://autoaug:pw-not-shown@127.0.0.1:{port}/optuna")
    assert err.startswith(
        f"autoaug: error: cannot open Optuna storage postgresql://autoaug:***@127.0.0.1:{port}/optuna: "
    )
    assert "Connection refused" in err and "Is the server running" in err
    assert "pw-not-shown" not in err


@pytest.mark.parametrize("user,password", [("autoaug", "wrong-password"), ("someone", "autoaug-test-secret")])
def test_a_study_database_that_refuses_the_login_is_one_line_before_any_work(
    tmp_path, capsys, no_work, postgres, user, password
):
    url = postgres.url(user=user, password=password)
    err = _refused(tmp_path, capsys, url)
    assert err.startswith(f"autoaug: error: cannot open Optuna storage postgresql://{user}:***@127.0.0.1:")
    assert f'password authentication failed for user "{user}"' in err
    assert "the server refused the login: check the user and password" in err
    assert password not in err


def test_a_database_that_does_not_exist_is_one_line_before_any_work(tmp_path, capsys, no_work, postgres):
    err = _refused(tmp_path, capsys, postgres.url("no_such_db"))
    assert err.endswith(
        'FATAL: database "no_such_db" does not exist; create the database first (createdb NAME), or name one that exists'
    )


def test_without_the_driver_a_postgresql_url_names_the_extra_before_any_work(tmp_path, capsys, no_work, monkeypatch):
    import autoaug.core.extras

    absent = autoaug.core.extras.missing
    monkeypatch.setattr(
        autoaug.core.extras, "missing", lambda modules: ["psycopg"] if "psycopg" in modules else absent(modules)
    )
    err = _refused(tmp_path, capsys, "postgresql://optuna:secret@db.example/optuna")
    assert err == (
        "autoaug: error: the Optuna storage postgresql://optuna:***@db.example/optuna needs the PostgreSQL driver "
        "psycopg (3), which is not installed; install it with: pip install 'autoaug[postgres]'"
    )


def _study(url: str, name: str, run_dir: str | None) -> None:
    """A study ``name`` as the search whose run directory is ``run_dir`` leaves it (None: one no
    search made), with one finished trial."""
    import optuna

    from autoaug.search.tune.study import SEARCH_ATTR

    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    if run_dir is not None:
        study.set_user_attr(SEARCH_ATTR, {"name": name, "run_dir": run_dir, "space": {}})
    study.add_trial(optuna.trial.create_trial(value=0.5))


def _studies(url: str) -> list[str]:
    import optuna

    return [s.study_name for s in optuna.get_all_study_summaries(url, include_best_trial=False)]


def _trials(url: str, name: str) -> int:
    import optuna

    return len(optuna.load_study(study_name=name, storage=url).trials)


@pytest.mark.parametrize(
    "study,method",
    [
        ("pg", []),
        ("pg.f1-r0", ["--method", "density", "--folds", "2", "--rounds", "2"]),  # one study per fold and round
    ],
)
def test_a_study_of_the_name_from_another_search_is_refused_even_with_overwrite(
    tmp_path, capsys, no_work, postgres, study, method
):
    """Two searches named alike in two run roots share one database: the second is refused before
    any work, and --overwrite (which deletes the search's own studies) leaves the other's alone."""
    url = postgres.create_database(f"another_search_{len(method)}")
    other = f"/elsewhere/runs/{study}"
    _study(url, study, other)
    hidden = url.replace(":autoaug-test-secret@", ":***@")
    for flags in ((), ("--overwrite",)):
        err = _refused(tmp_path, capsys, url, *method, *flags)
        assert err == (
            f"autoaug: error: the Optuna storage {hidden} already holds a study named {study!r}, of another "
            f"search (run directory {other}); choose another --name, or delete that study first (optuna.delete_study)"
        )
    assert _trials(url, study) == 1  # untouched


def test_a_resumed_search_whose_study_another_search_holds_now_is_refused(tmp_path, capsys, postgres):
    from autoaug.search.config import SearchConfig
    from autoaug.search.run_dir import CONFIG_FILE, RunDir, RunState

    url = postgres.create_database("resumed")
    config = SearchConfig.from_preset(
        "smoke", name="pg", data=str(tmp_path / "train.parquet"), storage=str(tmp_path / "runs"), optuna_storage=url
    )
    run = RunDir(config.storage, "pg")
    run.write_json(CONFIG_FILE, RunState.new(config.to_dict(), {}, url, address=None, started=0.0).to_dict())
    _study(url, "pg", "/elsewhere/runs/pg")  # its own study deleted, another search's made since
    capsys.readouterr()
    assert main(["search", "--resume", "pg", *_dirs(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"autoaug: error: cannot resume the search in {run.uri}: the Optuna storage "
        f"{url.replace(':autoaug-test-secret@', ':***@')} holds its study 'pg', but of another search now "
        "(run directory /elsewhere/runs/pg); start it again under another --name"
    )
    assert _trials(url, "pg") == 1


def test_a_study_no_search_recorded_or_a_lost_runs_own_is_refused_and_overwrite_deletes_its_own(
    tmp_path, capsys, no_work, postgres, monkeypatch
):
    from autoaug.search.run_dir import RunDir

    url = postgres.create_database("left_studies")
    _study(url, "pg", None)  # made by hand: nobody's
    err = _refused(tmp_path, capsys, url, "--overwrite")
    assert "already holds a study named 'pg' that no autoaug search recorded as its own" in err
    assert _trials(url, "pg") == 1

    own = postgres.create_database("lost_run")
    run = RunDir(str(tmp_path / "runs"), "pg").uri
    _study(own, "pg", run)  # this search's, from a run whose directory was deleted
    err = _refused(tmp_path, capsys, own)
    assert f"already holds a study named 'pg', of an earlier search in {run} whose run directory is gone" in err
    assert "pass --overwrite to delete it and start again" in err

    # --overwrite: the driver deletes its own study before the search opens a new one.
    from autoaug.search import driver
    from autoaug.search.config import SearchConfig

    class Started(Exception):
        pass

    def started(*args, **kwargs):
        raise Started

    monkeypatch.setattr("autoaug.proxy_models.train_config.resolve_config", lambda train: train)
    monkeypatch.setattr(driver, "describe_data", lambda train: {})
    monkeypatch.setattr(driver, "_search", started)
    config = SearchConfig.from_preset(
        "smoke", name="pg", data=str(tmp_path / "train.parquet"), storage=str(tmp_path / "runs"),
        store=str(tmp_path / "store"), optuna_storage=own,
    )  # fmt: skip
    with pytest.raises(Started):
        driver.run_search(config, overwrite=True)
    assert _studies(own) == []  # its own study deleted (another search's is refused before: above)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_a_search_on_postgresql_killed_and_resumed_keeps_every_trial_in_the_database(
    tmp_path, capsys, cifar_small, kill_driver, postgres
):
    """The driver killed (SIGKILL) right after its first trial's end reached the PostgreSQL study;
    the resume runs exactly the requested trials, the study holds each once, finished, none left
    RUNNING, and the policy is stored, its provenance without the database password."""
    import optuna

    from autoaug.policies.store import PolicyStore

    num_trials = 3
    url = postgres.create_database("kill_and_resume")
    argv = [
        *SEARCH, "--preset", "smoke", "--data", str(cifar_small), "--name", "pg", "--base", "crop",
        "--no-warm-start", "--num-trials", str(num_trials), "--concurrency", "1", *TINY,
        "--optuna-storage", url, *_dirs(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kill_driver(argv, env, "search.after_trial_saved:1", 300)
    run = tmp_path / "runs" / "pg"
    assert not (run / "result.json").exists() and not (run / "optuna.db").exists()  # the study is the server's
    study = optuna.load_study(study_name="pg", storage=url)
    assert [t.state.name for t in study.trials].count("COMPLETE") == 1

    # Resumed in this process (the module's Ray session), as `autoaug search --resume pg` runs.
    code = main(["search", "--resume", "pg", *_dirs(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "stored as pg@1" in out

    result = json.loads((run / "result.json").read_text())
    ids = sorted(t["trial_id"] for t in result["provenance"]["trials"])
    assert len(ids) == num_trials == len(set(ids))
    study = optuna.load_study(study_name="pg", storage=url)
    tagged = [t for t in study.trials if "tune_trial_id" in t.user_attrs]
    assert sorted(t.user_attrs["tune_trial_id"] for t in tagged) == ids  # each once, all of them
    assert all(t.state.name == "COMPLETE" for t in tagged)
    assert not [t.number for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    assert all(t.state.name == "FAIL" for t in study.trials if "tune_trial_id" not in t.user_attrs)
    assert result["provenance"]["optuna"]["problems"] == []

    stored = PolicyStore(str(tmp_path / "store")).get("pg@1")
    assert stored.provenance["search"]["run_dir"] == str(run)
    assert "autoaug-test-secret" not in json.dumps(stored.provenance) + json.dumps(result)
    assert stored.provenance["search"]["config"]["optuna_storage"] == url.replace("autoaug-test-secret", "***")
