"""A damaged run-directory file, or one another version of autoaug wrote, is one line naming the
file, the version that started the search when ``search_config.json`` records it, and what to do
(``RunFileError``, exit 2): ``search_config.json`` cut short (before: "Expecting value: line 1
column 12 (char 11)", naming no file), Tune's ``tuner.pkl`` corrupted (before: "unregistered
extension code 35551"), cut short, naming a class renamed or a module gone (before: a traceback).
The same cases on the run directory of a real search stopped by SIGTERM, through ``autoaug search
--resume`` and ``autoaug report``: ``tests/launch/test_sigterm.py``."""

from __future__ import annotations

import importlib
import pickle
import sys
from pathlib import Path

import pytest

from autoaug.core.errors import RunFileError
from autoaug.search.run_dir import CONFIG_FILE, RunDir, RunState, autoaug_version
from autoaug.search.tune.tune_storage import tuner_state_error


def _run(tmp_path: Path, made_by: str | None = "0.0.9") -> RunDir:
    run = RunDir(str(tmp_path / "runs"), "old")
    state = RunState.new({"name": "old"}, {}, "sqlite://", address=None, started=0.0).to_dict()
    if made_by is None:
        del state["autoaug"]
    else:
        state["autoaug"] = made_by
    run.write_json(CONFIG_FILE, state)
    return run


def test_a_state_file_cut_short_is_one_line_naming_it_and_what_to_do(tmp_path):
    run = _run(tmp_path)
    text = (Path(run.local_path) / CONFIG_FILE).read_text()
    (Path(run.local_path) / CONFIG_FILE).write_text(text[:11])
    with pytest.raises(RunFileError) as caught:
        run.read_json(CONFIG_FILE)
    message = str(caught.value)
    assert message.startswith(f"{run.uri}/{CONFIG_FILE} is damaged (not JSON: ")
    assert "restore the file from a copy" in message and "autoaug search --name old --overwrite" in message
    (Path(run.local_path) / CONFIG_FILE).write_bytes(b"\xff\xfe{")
    with pytest.raises(RunFileError, match=r"is damaged \(not UTF-8 text"):
        run.read_json(CONFIG_FILE)


@pytest.mark.parametrize("content", [[1, 2], {"optuna": {}}, "text"])
def test_a_state_that_is_json_but_not_a_search_s_is_one_line(content):
    with pytest.raises(RunFileError, match=f"{CONFIG_FILE} holds no search's state"):
        RunState.from_dict(content)


def test_the_state_records_the_version_that_started_the_search_and_each_session_s():
    state = RunState.new({"name": "x"}, {}, "sqlite://", address=None, started=0.0)
    assert state.made_by == autoaug_version() == state.to_dict()["autoaug"]
    again = RunState.from_dict(state.resumed(None).to_dict())
    assert again.made_by == autoaug_version() and [s["autoaug"] for s in again.sessions] == [autoaug_version()] * 2
    older = state.to_dict()
    del older["autoaug"]
    assert RunState.from_dict(older).made_by is None  # a search started before it was recorded


def _temporary_class(tmp_path: Path, module: str, source: str):
    (tmp_path / f"{module}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(tmp_path))


def test_a_tuner_pkl_whose_module_is_gone_names_it_and_the_version_that_made_it(tmp_path):
    run = _run(tmp_path)
    module = _temporary_class(tmp_path, "autoaug_gone_module", "class Searcher:\n    pass\n")
    (Path(run.local_path) / "tuner.pkl").write_bytes(pickle.dumps({"searcher": module.Searcher()}))
    del sys.modules["autoaug_gone_module"]
    (tmp_path / "autoaug_gone_module.py").unlink()
    error = tuner_state_error(run, run.uri)
    assert isinstance(error, RunFileError)
    assert str(error) == (
        f"{run.uri}/tuner.pkl was written by autoaug 0.0.9 (this is {autoaug_version()}): it names the module "
        "autoaug_gone_module, which this version does not have; finish the search with autoaug 0.0.9 "
        "(`pip install autoaug==0.0.9`), or start it again with `autoaug search --name old --overwrite ...`"
    )


def test_a_tuner_pkl_whose_class_was_renamed_names_it(tmp_path):
    run = _run(tmp_path, made_by=None)
    module = _temporary_class(tmp_path, "autoaug_renamed_module", "class Searcher:\n    pass\n")
    stage = Path(run.local_path) / "stages" / "old.f0-r0"  # an experiment of the run (density's stages)
    stage.mkdir(parents=True)
    (stage / "tuner.pkl").write_bytes(pickle.dumps([module.Searcher()]))
    module.StudySearcher = module.Searcher  # the class renamed
    del module.Searcher
    try:
        error = str(tuner_state_error(run, str(stage)))
    finally:
        del sys.modules["autoaug_renamed_module"]
    assert error.startswith(f"{run.uri}/stages/old.f0-r0/tuner.pkl was written by another version of autoaug")
    assert "does not record which started the search" in error
    assert "it names autoaug_renamed_module.Searcher, which this one does not have" in error


@pytest.mark.parametrize("damage", ["cut", "corrupt"])
def test_a_tuner_pkl_cut_short_or_corrupted_is_damaged(tmp_path, damage):
    run = _run(tmp_path)
    data = pickle.dumps({"trials": list(range(100)), "name": "x" * 200}, protocol=5)
    if damage == "cut":
        data = data[: len(data) // 2]
    else:
        data = data[:2] + bytes((b * 7 + 3) % 256 for b in data[2:40]) + data[40:]
    (Path(run.local_path) / "tuner.pkl").write_bytes(data)
    error = str(tuner_state_error(run, run.uri))
    assert error.startswith(f"{run.uri}/tuner.pkl is damaged (not a pickle Ray Tune can read: "), error
    assert error.endswith("or start the search again with `autoaug search --name old --overwrite ...`")


def test_a_tuner_pkl_that_reads_is_not_blamed(tmp_path):
    run = _run(tmp_path)
    (Path(run.local_path) / "tuner.pkl").write_bytes(pickle.dumps({"fine": True}))
    assert tuner_state_error(run, run.uri) is None
    assert tuner_state_error(run, str(tmp_path / "nowhere")) is None
