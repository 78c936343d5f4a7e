"""The searcher talks to Ray Tune and Optuna through their public interfaces only: no private
attribute of either is used anywhere in the product, so the install bounds are the next major
versions (semantic versioning), not the last minor release someone read the internals of."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import optuna
import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
#: Private attributes of Optuna's and Tune's storage and tuner internals, and any ``._name``
#: reached on a Ray, Tune or Optuna object or module.
_PRIVATE = re.compile(
    r"\._ot_|_completed_trials|\._storage|_study_id|\._trial_id|_local_tuner|_tune_config"
    r"|\bray\._private|\bray\.[a-z_.]*\._[a-z]|\boptuna\.[a-z_.]*\._[a-z]|\b(?:study|trial|frozen|tuner|searcher)\._[a-z]"
)


def test_no_private_attribute_of_ray_tune_or_optuna_is_used():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for folder in ("search", "core", "launch")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _PRIVATE.search(re.sub(r"\"[^\"]*\"", '""', line))  # (a logger's name is no attribute)
    ]
    assert found == []


#: The packages of the product.
_PRODUCT = ("core", "policies", "proxy_models", "search", "launch")
#: The distributions whose private attributes the product does not use.
_EXTERNAL = ("ray", "optuna")


def _self_attributes(tree: ast.AST, store: bool) -> set[str]:
    """The names ``self.NAME`` is assigned (``store``) or read (else) in ``tree``."""
    ctx = ast.Store if store else ast.Load
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
        if isinstance(n.ctx, ctx)
    }


def _defines(cls: type) -> set[str]:
    """What a class defines: its class-level names and the attributes its methods assign on ``self``."""
    names = set(vars(cls))
    try:
        names |= _self_attributes(ast.parse(textwrap.dedent(inspect.getsource(cls))), store=True)
    except (OSError, TypeError):  # no source (a built-in, a compiled extension): its class-level names
        pass
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_a_subclass_of_a_ray_or_optuna_class_reaches_no_private_attribute_of_it():
    """A class of ours that subclasses a Ray or Optuna class (directly or through ours) reads or
    writes ``self._name`` (or calls ``super()._name``) only for a ``_name`` our own classes define
    and no Ray or Optuna class in its ancestry does: an inherited private attribute is the
    library's internals, however it is reached, and one of ours must not overwrite one of theirs."""
    found = []
    for folder in _PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = importlib.import_module(".".join(("autoaug", *(parts[:-1] if parts[-1] == "__init__" else parts))))
            for node in ast.parse(text).body:
                cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
                if not isinstance(cls, type):
                    continue
                external = [c for c in cls.__mro__ if c.__module__.split(".")[0] in _EXTERNAL]
                if not external:
                    continue
                ours = set().union(*(_defines(c) for c in cls.__mro__ if c.__module__.startswith("autoaug.")))
                theirs = set().union(*(_defines(c) for c in external))
                used = _self_attributes(node, store=True) | _self_attributes(node, store=False)
                used |= {
                    n.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Call)
                    and isinstance(n.value.func, ast.Name)
                    and n.value.func.id == "super"
                }
                found += [
                    f"{path.relative_to(ROOT)}: {node.name}.{name} ({'theirs' if name in theirs else 'not defined by ours'})"
                    for name in sorted(used)
                    if _private(name) and (name in theirs or name not in ours)
                ]
    assert found == []


def test_the_install_bounds_of_ray_and_optuna_are_their_next_major_versions():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["search"]  # the search extra
    for dist, lower, upper in (("ray", "2.40", "3"), ("optuna", "4.0", "6")):
        (spec,) = [d for d in deps if re.match(rf"{dist}(\[|>|<|=|$)", d)]
        assert re.search(rf">=\s*{re.escape(lower)}\b", spec), spec
        assert re.search(r"<\s*([\d.]+)", spec).group(1) == upper, f"{spec!r} should end below {upper}"


@pytest.fixture(scope="module")
def module_ray():
    """One embedded Ray of 2 CPUs for this module's in-process Tune experiments (the first test's
    and the kill test's resume): each joins it instead of starting its own (about 10 CPU-s each)."""
    from autoaug.core.ray_session import ray_session

    with ray_session(None, num_cpus=2):
        yield


@pytest.mark.slow
@pytest.mark.usefixtures("module_ray")
def test_a_finished_trial_is_in_the_saved_experiment_state_before_the_progress_line_says_so(tmp_path, monkeypatch):
    # After kill -9, the search resumes from the experiment state in the run directory. A trial
    # that the progress line already reported finished must be in it; else it is lost and
    # another trial is trained in its place. Tune's periodic snapshot is switched off here, and
    # each trial is proposed only after the previous ended (so it is created after the first
    # snapshot): only the guard's own snapshot at the trial's end can put it there.
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "100000")
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter

    from autoaug.core.ray_session import ray_session
    from autoaug.search.tune.schedulers import GuardedFIFOScheduler
    from autoaug.search.tune.searcher import StudySearcher

    seen: dict[str, bool] = {}

    class ReadsTheSavedState(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            saved = "".join(p.read_text() for p in (tmp_path / "exp").glob("experiment_state-*.json"))
            seen[trial.trial_id] = trial.trial_id in saved

    def trainable(config):
        tune.report({"score": config["x"]})

    url = f"sqlite:///{tmp_path}/study.db"
    scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(url, "exp", max_failures=0)
    searcher = StudySearcher(
        {"x": optuna.distributions.FloatDistribution(0, 1)},
        metric="score",
        mode="max",
        study_name="exp",
        storage_url=url,
    )
    with ray_session(None):  # (the module's)
        tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                metric="score",
                mode="max",
                num_samples=3,
                scheduler=scheduler,
                search_alg=ConcurrencyLimiter(searcher, max_concurrent=1),
            ),
            run_config=tune.RunConfig(
                name="exp", storage_path=str(tmp_path), verbose=0, callbacks=[ReadsTheSavedState()]
            ),
        ).fit()
    assert len(seen) == 3
    assert all(seen.values()), seen
    # Through Tune, the searcher told the study each trial's end, tagged with its Tune trial id.
    study = optuna.load_study(study_name="exp", storage=url)
    assert sorted(t.user_attrs["tune_trial_id"] for t in study.trials) == sorted(seen)
    assert all(t.state.name == "COMPLETE" and t.value == t.params["x"] for t in study.trials)


_DRIVER = """
import os, sys
from pathlib import Path

from ray import tune
from ray.tune.search import ConcurrencyLimiter
import optuna

from autoaug.core.ray_session import ray_session
from autoaug.search.score import METRIC
from autoaug.search.tune.schedulers import make_scheduler
from autoaug.search.tune.searcher import StudySearcher
from autoaug.search.tune.session import StoppedTrials

root, mode = Path(os.environ["DRIVER_ROOT"]), os.environ["DRIVER_MODE"]
url = f"sqlite:///{root}/study.db"


def trainable(config):
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = int(Path(d, "step").read_text())
    for step in range(start + 1, 4):
        folder = root / "ckpt" / f"{config['x']}-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "step").write_text(str(step))
        tune.report({METRIC: config["x"] + step / 10}, checkpoint=tune.Checkpoint.from_directory(str(folder)))
        if step == 1 and config["x"] == 1.0 and not (root / "b-waited").exists():
            (root / "b-waited").touch()
            open(root / "meet", "w").close()  # meets the other trial (it opens the pipe to read)...
            open(root / "never").read()  # ... then blocks here until the driver is killed
        if step == 1 and config["x"] == 0.0 and mode == "start":
            open(root / "meet").read()  # ends only once the other trial reported its first step


scheduler = make_scheduler(None, 3, url, "exp", 0, StoppedTrials())
with ray_session(None, num_cpus=2):  # (the test's own, when it resumes in its process)
    if mode == "start":
        searcher = StudySearcher(
            {"x": optuna.distributions.FloatDistribution(0, 1)},
            metric=METRIC, mode="max", study_name="exp", storage_url=url, max_steps=3,
        )
        searcher.study.enqueue_trial({"x": 0.0})
        searcher.study.enqueue_trial({"x": 1.0})
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                metric=METRIC, mode="max", num_samples=2, scheduler=scheduler,
                search_alg=ConcurrencyLimiter(searcher, max_concurrent=2),
            ),
            run_config=tune.RunConfig(name="exp", storage_path=str(root / "runs"), verbose=0),
        )
    else:
        tuner = tune.Tuner.restore(str(root / "runs" / "exp"), trainable=trainable, resume_unfinished=True)
    grid = tuner.fit()
    print("errors:", len(grid.errors), "results:", len(grid))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("module_ray")
def test_a_trial_running_when_the_driver_is_killed_goes_on_in_an_optuna_trial_asked_again(
    tmp_path, kill_driver, monkeypatch, capsys
):
    """Through Ray Tune, kill -9: the driver dies as one trial ends while the other is running
    (both meet on a named pipe first: no race). The resume (the same driver's code, run in this
    process on the module's Ray) trains the running one on from its checkpoint, in an Optuna
    trial asked again in its place that holds all its epochs; the one the dead driver left
    RUNNING is FAIL; nothing is trained twice, nothing is left RUNNING."""
    import os
    import runpy
    import sys

    from autoaug.search.tune.study import REPLACES_ATTR, TUNE_TRIAL_ATTR

    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    os.mkfifo(tmp_path / "meet")
    os.mkfifo(tmp_path / "never")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own Ray, not the module's
    env |= {"PYTHONUNBUFFERED": "1", "DRIVER_ROOT": str(tmp_path), "DRIVER_MODE": "start"}
    kill_driver([sys.executable, str(script)], env, "search.after_trial_saved:1", 300)
    url = f"sqlite:///{tmp_path}/study.db"
    killed = optuna.load_study(study_name="exp", storage=url).trials
    assert [(t.params["x"], t.state.name) for t in killed] == [(0.0, "COMPLETE"), (1.0, "RUNNING")]

    monkeypatch.setenv("DRIVER_ROOT", str(tmp_path))
    monkeypatch.setenv("DRIVER_MODE", "resume")
    runpy.run_path(str(script), run_name="__main__")  # (its trainable then travels by value)
    printed = capsys.readouterr()
    assert "errors: 0 results: 2" in printed.out, printed.out[-3000:] + printed.err[-3000:]
    first, old, new = optuna.load_study(study_name="exp", storage=url).trials
    assert (first.state.name, first.value, first.intermediate_values) == ("COMPLETE", 0.3, {1: 0.1, 2: 0.2, 3: 0.3})
    assert (old.state.name, old.params) == ("FAIL", {"x": 1.0})
    assert (new.state.name, new.params, new.value) == ("COMPLETE", {"x": 1.0}, pytest.approx(1.3))
    assert new.intermediate_values == pytest.approx({1: 1.1, 2: 1.2, 3: 1.3})
    assert new.user_attrs[REPLACES_ATTR] == old.number
    assert new.user_attrs[TUNE_TRIAL_ATTR] == old.user_attrs[TUNE_TRIAL_ATTR] != first.user_attrs[TUNE_TRIAL_ATTR]
    # Trained on from its checkpoint (or from the start, if Tune's snapshot predates it) to its last step.
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "0.0-1",
        "0.0-2",
        "0.0-3",
        "1.0-1",
        "1.0-2",
        "1.0-3",
    ]


def test_a_scheduler_saved_when_it_lived_in_the_searcher_module_restores():
    """A ``tuner.pkl`` saved before the schedulers and the driver session's parts had modules of
    their own refers to them in ``autoaug.search.tune.searcher``: it restores."""
    import pickle

    from autoaug.search.tune.schedulers import GuardedFIFOScheduler
    from autoaug.search.tune.session import StoppedTrials

    scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard("sqlite:///study.db", "s", 1, StoppedTrials())
    saved = pickle.dumps(scheduler, protocol=0)
    old = saved.replace(b"autoaug.search.tune.schedulers", b"autoaug.search.tune.searcher")
    old = old.replace(b"autoaug.search.tune.session", b"autoaug.search.tune.searcher")
    assert old != saved and b"tune.schedulers" not in old and b"tune.session" not in old
    restored = pickle.loads(old)
    assert type(restored) is GuardedFIFOScheduler and type(restored.stopped_trials) is StoppedTrials
    assert restored._guard_study_name == "s"
