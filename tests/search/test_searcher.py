"""The searcher talks to Ray Tune and Optuna through their public interfaces only: no private
attribute of either is used anywhere in the product, so the install bounds are the next major
versions (semantic versioning), not the last minor release someone read the internals of."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import optuna
import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
#: Private attributes the crash reconciliation once used (issue 51's check), and any ``._name``
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


def test_the_install_bounds_of_ray_and_optuna_are_their_next_major_versions():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["search"]  # the search extra
    for dist, lower, upper in (("ray", "2.40", "3"), ("optuna", "4.0", "6")):
        (spec,) = [d for d in deps if re.match(rf"{dist}(\[|>|<|=|$)", d)]
        assert re.search(rf">=\s*{re.escape(lower)}\b", spec), spec
        assert re.search(r"<\s*([\d.]+)", spec).group(1) == upper, f"{spec!r} should end below {upper}"


@pytest.mark.slow
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
    from autoaug.search.searcher import GuardedFIFOScheduler, StudySearcher

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
    with ray_session(None):
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
