"""Do ASHA's rungs rank? (autoaug.search.decide.rungs), measured on a search's own trials."""

from __future__ import annotations

import math

import optuna
import pytest

from autoaug.search.decide.rungs import describe_rungs, ended_at, from_study, rung_epochs, rung_ranking, rung_text


def test_rung_ranking_is_spearmans_rho_between_consecutive_ends():
    # 4 trials stopped at epoch 2, 1 at 6, 3 ran to 9: epoch 2's order reverses at 6, epoch 6's at 9.
    stopped = [{1: 0.1, 2: 0.2 + i / 100} for i in range(4)] + [{2: 0.29, 6: 0.51}]
    full = [{2: 0.30, 6: 0.50, 9: 0.61}, {2: 0.31, 6: 0.49, 9: 0.62}, {2: 0.32, 6: 0.48, 9: 0.63}]
    rows = rung_ranking(stopped + full)
    assert [(r["from"], r["to"], r["n"]) for r in rows] == [(2, 6, 4), (6, 9, 3)]
    assert rows[0]["rho"] == pytest.approx(-1.0) and rows[1]["rho"] == pytest.approx(-1.0)
    assert ended_at(stopped + full) == {2: 4, 6: 1, 9: 3}
    text = rung_text(rows, ended_at(stopped + full))
    assert text.startswith(
        "epoch 2 -> 6: rho -1.00 [-1.00, -1.00] (4 trials, p 0.00); epoch 6 -> 9: rho -1.00 (3 trials"
    )
    assert text.endswith("(trials ended: 4 at epoch 2, 1 at epoch 6, 3 at epoch 9)")
    # too few trials to rank: no rho, said as such
    assert rung_ranking([{2: 0.1, 6: 0.2}, {2: 0.3}])[0]["rho"] is None


def test_at_the_configured_rungs_a_trial_cut_elsewhere_adds_no_rung():
    """A search stopped and resumed cuts a trial that passed a rung while it was stopped at its
    first report after the resume (epoch 26 of a GTSRB search): the epoch where it ended is no
    rung, and the ranking at ASHA's own rungs leaves it out."""
    at = rung_epochs(20, 3, 120)
    assert at == (20, 60, 120) and rung_epochs(20, 3, 120, early_stopping=False) == (120,)
    stopped = [{20: 0.5 + i / 100} for i in range(4)]
    cut = [{20: 0.9, 26: 0.91}]
    reached = [{20: 0.50 + i / 100, 60: 0.70 + i / 100} for i in range(4)] + [
        {20: 0.60 + i / 100, 60: 0.80 + i / 100, 120: 0.90 + i / 100} for i in range(4)
    ]
    trials = stopped + cut + reached
    assert [(r["from"], r["to"]) for r in rung_ranking(trials)] == [(20, 26), (26, 60), (60, 120)]
    rows = rung_ranking(trials, at)
    assert [(r["from"], r["to"], r["n"]) for r in rows] == [(20, 60, 8), (60, 120, 4)]
    assert rows[0]["rho"] == pytest.approx(1.0)


def test_the_interval_is_fishers_z_and_narrows_with_more_trials():
    def rows(n):  # a noisy monotone relation between the two epochs, and one trial stopped at 20
        reached = [{20: i / n, 60: i / n + (0.3 if i % 3 == 0 else -0.3)} for i in range(n)]
        return rung_ranking([*reached, {20: 0.0}])[0]

    few, many = rows(12), rows(120)
    for r in (few, many):
        z, half = math.atanh(r["rho"]), 1.96 / math.sqrt(r["n"] - 3)
        assert r["low"] == pytest.approx(math.tanh(z - half)) and r["high"] == pytest.approx(math.tanh(z + half))
    assert many["high"] - many["low"] < few["high"] - few["low"]


def test_the_summary_says_a_rung_that_ranks_poorly_and_one_too_few_trials_can_judge():
    def record(rho, low, high, n):
        return {
            "pairs": [{"from": 20, "to": 60, "n": n, "rho": rho, "p_value": 0.2, "low": low, "high": high}],
            "ended": {"20": 40, "60": n},
        }

    (poor,) = describe_rungs(record(0.15, -0.10, 0.38, 65))
    assert poor.startswith(
        "early stopping: do ASHA's rungs rank these trials? epoch 20 -> 60: rho +0.15 [-0.10, +0.38]"
    )
    assert "ranked them poorly" in poor and "--grace-period" in poor and "--no-early-stopping" in poor
    (unsure,) = describe_rungs(record(-0.01, -0.52, 0.50, 15))
    assert "too few trials to tell whether the rung at epoch 20 ranks" in unsure and "poorly" not in unsure
    (ranks,) = describe_rungs(record(0.8, 0.6, 0.9, 30))
    assert "poorly" not in ranks and "too few" not in ranks
    assert describe_rungs(None) == [] and describe_rungs({"pairs": []}) == []


def test_the_record_is_read_from_the_studys_reported_scores():
    study = optuna.create_study(direction="maximize")
    for i in range(6):  # 3 stopped at epoch 2, 3 ran to 4; reported every epoch
        trial = study.ask()
        last = 2 if i < 3 else 4
        for step in range(1, last + 1):
            trial.report(0.1 * step + 0.01 * i, step)
        study.tell(trial, 0.1 * last + 0.01 * i)
    record = from_study(study)
    assert record["ended"] == {"2": 3, "4": 3}
    (pair,) = record["pairs"]
    assert (pair["from"], pair["to"], pair["n"]) == (2, 4, 3) and pair["rho"] == pytest.approx(1.0)
    # no early stop: every trial ended at one epoch, nothing to rank
    flat = optuna.create_study(direction="maximize")
    for i in range(3):
        trial = flat.ask()
        trial.report(0.5 + i / 10, 4)
        flat.tell(trial, 0.5 + i / 10)
    assert from_study(flat) is None


def test_the_method_of_a_recorded_configuration_says_where_its_rungs_are():
    """``autoaug report`` and the benchmarks ask the configured method (:meth:`Method.rungs`): the
    training method's ASHA milestones and last epoch; none for a method that stops no trial early,
    or a configuration that does not record them."""
    from autoaug.search.config import SearchConfig
    from autoaug.search.methods.base import method_of

    recorded = SearchConfig.from_preset("cpu", data="x").to_dict()  # as result.json records it
    assert method_of(recorded).rungs(recorded) == (20, 60, 120)
    assert method_of({**recorded, "method": None}).rungs(recorded) == (20, 60, 120)  # the default method
    unstopped = {**recorded, "early_stopping": False}
    assert method_of(unstopped).rungs(unstopped) == (120,)
    assert method_of({}).rungs({}) == ()  # a running search's report: no configuration recorded yet
    for other in ("density-cpu", "pba-cpu"):
        config = SearchConfig.from_preset(other, data="x").to_dict()
        assert method_of(config).rungs(config) == ()
    assert method_of({"method": "not-registered"}) is None
