"""The search score and the epochs a trial validates: only those its score is read from (the
windows before ASHA's rungs and before the end), computed as Ray's ASHA computes its rungs, so
ASHA and the final ranking see what a trial validated every epoch would have reported."""

from __future__ import annotations

import dataclasses
import json

import optuna
import pytest

from autoaug.search.config import SearchConfig
from autoaug.search.methods.train.method import trial_train_config
from autoaug.search.score import asha_milestones, score_epochs, search_score


@pytest.mark.parametrize(
    "grace, rf, max_t",
    [(20, 3, 120), (1, 2, 4), (2, 2, 4), (15, 3, 120), (5, 2.5, 100), (1, 3, 1), (10, 4, 10), (3, 3, 27), (7, 1.5, 50)],
)
def test_milestones_are_the_rungs_ray_asha_compares_at(grace, rf, max_t):
    from ray.tune.schedulers import ASHAScheduler

    scheduler = ASHAScheduler(
        time_attr="training_iteration", metric="m", mode="max", max_t=max_t, grace_period=grace, reduction_factor=rf
    )
    (bracket,) = scheduler._brackets
    # ASHA reads a trial's first result at or past a rung; the rung at max_t is the trial's end.
    ray_epochs = {
        e
        for e in range(1, max_t + 1)
        for milestone, _ in bracket._rungs
        if e >= milestone and e - 1 < milestone and e < max_t
    }
    assert set(asha_milestones(grace, rf, max_t)) == ray_epochs


def test_score_epochs_are_the_windows_before_each_rung_and_the_end():
    # The cpu preset: 120 epochs, rungs at 20 and 60, a window of 5: 15 of 120 epochs.
    assert score_epochs(120, 5, (20, 60)) == (*range(16, 21), *range(56, 61), *range(116, 121))
    assert score_epochs(120, 5) == tuple(range(116, 121))  # no early stopping: the last window
    assert score_epochs(4, 1, (2,)) == (2, 4)
    assert score_epochs(6, 5, (3,)) == (1, 2, 3, 4, 5, 6)  # windows longer than a rung overlap
    assert score_epochs(3, 1, (3, 5)) == (3,)  # rungs at or past the end add nothing


def test_a_score_read_at_a_rung_is_the_one_every_epoch_validation_gives():
    accuracies = [0.1 * (e % 7) + 0.01 * e for e in range(1, 121)]
    epochs = set(score_epochs(120, 5, (20, 60)))
    sparse = [a if e in epochs else None for e, a in enumerate(accuracies, 1)]
    for read in (20, 60, 120):
        assert search_score(sparse[:read], 5) == pytest.approx(search_score(accuracies[:read], 5))
    assert search_score(sparse[:15], 5) is None  # before the first window: no score yet
    assert search_score(sparse[:45], 5) == search_score(sparse[:20], 5)  # between windows: the last one's


def test_trials_of_the_cpu_preset_validate_15_of_120_epochs_and_nothing_else_changes():
    config = SearchConfig.from_preset("cpu", name="n", data="x")
    trial = trial_train_config(config)
    assert trial.eval_epochs == score_epochs(120, 5, (20, 60)) and len(trial.eval_epochs) == 15
    assert dataclasses.replace(trial, eval_epochs=None) == config.train
    # Without early stopping only the last window is read.
    no_asha = SearchConfig.from_preset("cpu", name="n", data="x", early_stopping=False)
    assert trial_train_config(no_asha).eval_epochs == tuple(range(116, 121))


def test_a_search_config_that_sets_the_validated_epochs_itself_is_refused():
    config = SearchConfig.from_dict({"preset": "smoke", "name": "n", "data": "x", "train": {"eval_epochs": [1]}})
    with pytest.raises(
        ValueError,
        match=r"train.eval_epochs is \(1,\): the search chooses the epochs its trials "
        r"validate .*; set eval_epochs to null",
    ):
        config.check_runnable()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_a_search_validates_only_the_epochs_asha_and_the_ranking_read(tmp_path, capsys, cifar_small):
    """4 epochs, ASHA's rung at epoch 2, a window of 1: trials validate epochs 2 and 4 only; ASHA
    cuts at epoch 2 on real scores, the study holds the scores of the validated epochs, and the
    stored policy's trials are scored as before. Reporting every 3 epochs (``--report-every``), a
    trial reports at the rung, at epoch 3 and at its end (the pack's side:
    tests/search/test_pack_search.py)."""
    from autoaug.launch.cli import main

    code = main(
        [
            "search",
            "--preset",
            "smoke",
            "--data",
            str(cifar_small),
            "--name",
            "sparse",
            "--num-trials",
            "4",
            "--concurrency",
            "1",
            "--grace-period",
            "2",
            "--reduction-factor",
            "2",
            "--report-every",
            "3",
            "--set",
            "score_window=1",
            "--set",
            "train.epochs=4",
            "--set",
            "train.train_size=256",
            "--set",
            "train.val_size=128",
            "--storage",
            str(tmp_path / "runs"),
            "--store",
            str(tmp_path / "store"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    run = tmp_path / "runs" / "sparse"
    rows = {}
    for path in run.glob("trial_*/result.json"):
        rows[path.parent.name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) == 4
    for history in rows.values():
        assert [(r["epoch"], r["epochs_this_report"]) for r in history] in ([(2, 2)], [(2, 2), (3, 1), (4, 1)])
        for r in history:
            validated = r["epoch"] in (2, 4)
            assert (r["val_accuracy"] is not None) == validated, r
            # the score of the last validated epoch (window 1)
            last = max(h["epoch"] for h in history if h["epoch"] <= r["epoch"] and h["val_accuracy"] is not None)
            assert r["search_score"] == next(h["val_accuracy"] for h in history if h["epoch"] == last)
    study = optuna.load_study(study_name="sparse", storage=f"sqlite:///{run}/optuna.db")
    for t in study.trials:
        assert set(t.intermediate_values) <= {2, 4} and t.intermediate_values, t.intermediate_values
        assert t.state.name in ("COMPLETE", "PRUNED")
        assert t.value == t.intermediate_values[max(t.intermediate_values)]
    result = json.loads((run / "result.json").read_text())
    prov = result["provenance"]
    assert prov["optuna"]["consistent_with_tune"] is True
    assert {t["epochs"] for t in prov["trials"]} <= {2, 4}
    assert all(t["score"] is not None for t in prov["trials"])
