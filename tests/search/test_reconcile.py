"""The reconciliation of Optuna and Tune uses private attributes of both: it must run only on the
Ray and Optuna versions it was written against, and the install pins must say so."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from autoaug.core.errors import SearchError
from autoaug.search.tune.reconcile import WRITTEN_AGAINST, check_versions

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_installed_ray_and_optuna_are_versions_the_reconciliation_was_written_against():
    # Fails loudly (with the versions and what to do) after an upgrade of Ray or Optuna.
    check_versions()


@pytest.mark.parametrize(
    "installed, named",
    [({"ray": "2.70.1"}, "ray 2.70.1"), ({"optuna": "6.0.0"}, "optuna 6.0.0"), ({"ray": "2.39.0"}, "ray 2.39.0")],
)
def test_an_unknown_version_is_refused_with_a_clear_message(installed, named):
    with pytest.raises(SearchError, match=re.escape(named) + r" \(known: .*\).*widen WRITTEN_AGAINST"):
        check_versions(installed)


def test_pyproject_pins_the_versions_as_upper_bounds():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["search"]  # the search extra
    for dist, (_, newest) in WRITTEN_AGAINST.items():
        (spec,) = [d for d in deps if re.match(rf"{dist}(\[|>|<|=|$)", d)]
        upper = re.search(r"<\s*([\d.]+)", spec)
        assert upper, f"{spec!r} has no upper bound"
        major, minor = (int(x) for x in newest.split("."))
        assert upper.group(1) == f"{major}.{minor + 1}", f"{spec!r} should end below {major}.{minor + 1}"


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
    from ray.tune.search.optuna import OptunaSearch

    from autoaug.core.ray_session import ray_session
    from autoaug.search.tune.reconcile import GuardedFIFOScheduler

    seen: dict[str, bool] = {}

    class ReadsTheSavedState(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            saved = "".join(p.read_text() for p in (tmp_path / "exp").glob("experiment_state-*.json"))
            seen[trial.trial_id] = trial.trial_id in saved

    def trainable(config):
        tune.report({"score": config["x"]})

    scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(f"sqlite:///{tmp_path}/unused.db", "unused", max_failures=0)
    with ray_session(None):
        tune.Tuner(
            trainable,
            param_space={"x": tune.uniform(0, 1)},
            tune_config=tune.TuneConfig(
                metric="score",
                mode="max",
                num_samples=3,
                scheduler=scheduler,
                search_alg=ConcurrencyLimiter(OptunaSearch(seed=0), max_concurrent=1),
            ),
            run_config=tune.RunConfig(
                name="exp", storage_path=str(tmp_path), verbose=0, callbacks=[ReadsTheSavedState()]
            ),
        ).fit()
    assert len(seen) == 3
    assert all(seen.values()), seen
