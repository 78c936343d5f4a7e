"""``autoaug report NAME``: what it prints besides the picture, read from the search's study (so
also while the search runs)."""

from __future__ import annotations

import json

import pytest

from autoaug.launch.cli import main


def _search_with_trials(tmp_path, curves: list[dict[int, float]], pruned_after: int) -> str:
    """A run directory ``runs/s`` with its configuration and an Optuna study whose trials reported
    ``curves`` (score by epoch); trials with no epoch past ``pruned_after`` were pruned."""
    import optuna

    from autoaug.search.config import SearchConfig

    run = tmp_path / "runs" / "s"
    run.mkdir(parents=True)
    config = SearchConfig.from_preset("smoke", name="s", data=str(tmp_path / "data"))
    (run / "search_config.json").write_text(json.dumps({"config": config.to_dict()}))
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{run / 'optuna.db'}", direction="maximize")
    for curve in curves:
        trial = study.ask({"sp0_op0_type": optuna.distributions.CategoricalDistribution(["Identity", "Rotate"])})
        for epoch, score in curve.items():
            trial.report(score, epoch)
        last = curve[max(curve)]
        if max(curve) > pruned_after:
            study.tell(trial, last)
        else:  # a trial ASHA stopped: pruned (Optuna gives it its last reported score)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return str(tmp_path / "runs")


@pytest.mark.parametrize("json_out", [False, True])
def test_report_says_whether_ashas_rungs_ranked_the_trials(tmp_path, capsys, json_out):
    # 12 trials stopped at epoch 2, 8 ran to epoch 6: their epoch-2 scores rank them backwards
    curves = [{2: 0.30 + 0.01 * i} for i in range(12)]
    curves += [{2: 0.50 - 0.01 * i, 6: 0.60 + 0.01 * i} for i in range(8)]
    storage = _search_with_trials(tmp_path, curves, pruned_after=2)
    argv = ["report", "s", "--storage", storage, "--out", str(tmp_path / "r.png"), *(["--json"] if json_out else [])]
    assert main(argv) == 0
    out = capsys.readouterr().out
    if json_out:
        rungs = json.loads(out)["rungs"]
        assert rungs["ended"] == {"2": 12, "6": 8}
        assert rungs["pairs"][0]["n"] == 8 and rungs["pairs"][0]["rho"] == pytest.approx(-1.0)
    else:
        line = next(x for x in out.splitlines() if x.startswith("early stopping:"))
        assert "epoch 2 -> 6: rho -1.00" in line and "(8 trials" in line and "ranked them poorly" in line


def test_report_of_a_search_without_stops_says_nothing_of_rungs(tmp_path, capsys):
    storage = _search_with_trials(tmp_path, [{2: 0.3, 6: 0.5 + 0.01 * i} for i in range(4)], pruned_after=6)
    assert main(["report", "s", "--storage", storage, "--out", str(tmp_path / "r.png")]) == 0
    assert "early stopping" not in capsys.readouterr().out
