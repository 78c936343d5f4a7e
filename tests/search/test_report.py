"""autoaug report: the PNG of a search, drawn from its Optuna study and run directory."""

from __future__ import annotations

import json

import optuna
import pytest

from autoaug.core.errors import UserInputError
from autoaug.launch.cli import main
from autoaug.search.report import importances, load_report_data, op_frequencies


def _run_dir(tmp_path, name="s", n=8):
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    url = f"sqlite:///{run / 'optuna.db'}"
    (run / "search_config.json").write_text(
        json.dumps({"config": {"train": {"epochs": 3}}, "optuna": {"storage": url, "study_name": name}})
    )
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    ops = ["Rotate", "Equalize", "Cutout", "ShearX"]
    for i in range(n):
        t = study.ask(
            {
                "sp0_op0_type": optuna.distributions.CategoricalDistribution(ops),
                "sp0_op0_prob": optuna.distributions.FloatDistribution(0, 1, step=0.1),
                "sp0_op0_mag": optuna.distributions.IntDistribution(0, 9),
            }
        )
        score = 0.2 + 0.05 * (t.params["sp0_op0_type"] == "Rotate") + 0.01 * i
        for epoch in (1, 2, 3):
            t.report(score * epoch / 3, epoch)
        state = optuna.trial.TrialState.PRUNED if i == 2 else optuna.trial.TrialState.COMPLETE
        study.tell(t, score if state == optuna.trial.TrialState.COMPLETE else None, state=state)
    return tmp_path / "runs", study


def test_report_png_and_json(tmp_path, capsys):
    from PIL import Image

    runs, study = _run_dir(tmp_path)
    out = tmp_path / "r.png"
    assert main(["report", "s", "--storage", str(runs), "--out", str(out), "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["png"] == str(out) and Image.open(out).size[0] > 1000
    best = max((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    assert doc["best"] == {"number": best.number, "value": best.value}
    assert sum(v["count"] for v in doc["top_ops"].values()) <= 3
    assert doc["importances"] and abs(sum(doc["importances"].values()) - 1.0) < 1e-6


def test_top_op_counts_ignore_zero_probability(tmp_path):
    runs, _ = _run_dir(tmp_path)
    data = load_report_data("s", str(runs))
    counts, mags = op_frequencies(data.trials, top=len(data.trials))
    expected = sum(1 for t in data.trials if t.params["sp0_op0_prob"] > 0)
    assert sum(counts.values()) == expected
    assert all(0 <= m <= 9 for m in mags.values())


def test_importances_need_two_completed_trials(tmp_path):
    runs, _ = _run_dir(tmp_path, n=1)
    data = load_report_data("s", str(runs))
    imp, reason = importances(data.study, data.trials)
    assert imp == {} and "at least 2" in reason


def test_unknown_search_is_one_line(tmp_path, capsys):
    assert main(["report", "nope", "--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autoaug: error: no search named 'nope'") and err.count("\n") == 1


def test_no_finished_trial(tmp_path):
    from autoaug.search.report import write_report

    runs, _ = _run_dir(tmp_path, n=0)
    with pytest.raises(UserInputError, match="no finished trial"):
        write_report(load_report_data("s", str(runs)), str(tmp_path / "x.png"))


@pytest.mark.parametrize("family", ["randaugment", "trivialaugment"])
def test_report_of_a_family_search_counts_the_ops_chosen(tmp_path, capsys, family):
    from autoaug.search.space import SearchSpace

    space = SearchSpace(family=family, ops=("Rotate", "Color", "Equalize"))
    name = "fam"
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    url = f"sqlite:///{run / 'optuna.db'}"
    (run / "search_config.json").write_text(
        json.dumps(
            {
                "config": {"train": {"epochs": 1}, "space": space.to_dict()},
                "optuna": {"storage": url, "study_name": name},
            }
        )
    )
    study = optuna.create_study(
        study_name=name, storage=url, direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1)
    )
    for i in range(6):
        t = study.ask(space.distributions())
        t.report(0.1 * i, 1)
        study.tell(t, 0.5 + 0.1 * t.params["use_Rotate"] + 0.01 * i)
    out = tmp_path / "r.png"
    assert main(["report", name, "--storage", str(tmp_path / "runs"), "--out", str(out), "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["family"] == family and out.exists()
    best3 = sorted(study.trials, key=lambda t: t.value, reverse=True)[:3]
    for op in ("Rotate", "Color", "Equalize"):
        chosen = [t for t in best3 if t.params[f"use_{op}"]]
        assert doc["top_ops"].get(op, {}).get("count", 0) == len(chosen)
        if chosen:
            mags = [t.params["m"] if family == "randaugment" else t.params["max_bin"] / 2 for t in chosen]
            assert doc["top_ops"][op]["mean_magnitude_bin"] == pytest.approx(sum(mags) / len(mags))
    rows = doc["top_trials"]
    assert [r["number"] for r in rows] == [t.number for t in best3]
    for row, t in zip(rows, best3):
        assert row["ops"] == [op for op in space.op_choices if t.params[f"use_{op}"]]
        assert row["point"] == space.describe_point(t.params)
        assert (row.get("n"), row.get("m"), row.get("max_bin")) == (
            t.params.get("n"),
            t.params.get("m"),
            t.params.get("max_bin"),
        )
    labels = set(doc["importances"])
    assert labels <= {"Rotate in", "Color in", "Equalize in", "N (ops per image)", "M (magnitude)", "max bin"}


def test_report_of_a_search_with_no_trial_started_says_so_in_one_line(tmp_path, capsys):
    """A search stopped in calibration (its run directory, no Optuna study yet): one line, no traceback."""
    from autoaug.launch.cli import main

    run = tmp_path / "runs" / "early"
    run.mkdir(parents=True)
    (run / "search_config.json").write_text(json.dumps({"config": {"method": "train", "name": "early"}}))
    code = main(["report", "early", "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "r.png")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "has no Optuna study yet" in err and "autoaug search --resume early" in err


def test_report_of_a_finished_search_says_its_gain_over_the_starting_policy_with_its_interval(tmp_path, capsys):
    """What the trials bought: the stored policy's re-scored margin over the best published policy,
    as ``+x [lo, hi] points`` after how many trials, and whether it is beyond the noise."""
    runs, _ = _run_dir(tmp_path)
    noise = {"source": "a run's spread 0.30 points measured on these runs"}
    versus = {"own": "assembled", "margin": 0.0009, "threshold": 0.0064, "beyond": False, "noise": noise}
    provenance = {
        "counts": {"trials": 8},
        "search": {"config": {"method": "train"}},
        "selection": {"chosen": "assembled", "candidates": [], "versus_transfer": versus},
    }
    (runs / "s" / "result.json").write_text(json.dumps({"provenance": provenance}))
    assert main(["report", "s", "--storage", str(runs), "--out", str(tmp_path / "r.png")]) == 0
    out = capsys.readouterr().out
    assert (
        "stored policy vs the best published policy: +0.09 [-0.55, +0.73] points after 8 trials "
        "(95% interval, twice the standard error; a run's spread 0.30 points measured on these runs), within the "
        "noise: the search found nothing measurably better than the published policy"
    ) in out
    assert main(["report", "s", "--storage", str(runs), "--out", str(tmp_path / "r.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["selection"]["versus_transfer"] == versus
