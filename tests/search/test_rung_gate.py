"""A rung cuts only while it is measured to rank (search.decide.rungs.RungGate, applied inside Tune
by search.tune.schedulers.RankedRungs): synthetic scores, the scheduler driven directly with fake
trials and results, a real Optuna study for its record."""

from __future__ import annotations

import pickle
import random

import optuna
import pytest

from autoaug.search.decide.rungs import (
    MIN_PAIRS,
    RUNG_GATE_ATTR,
    RungGate,
    calibration_scores,
    describe_rungs,
    from_study,
    gate_line,
)
from autoaug.search.score import METRIC
from autoaug.search.tune.schedulers import make_scheduler
from autoaug.search.tune.session import DriverSession, StoppedTrials, attach_session, running

optuna.logging.set_verbosity(optuna.logging.WARNING)


class _Trial:
    def __init__(self, trial_id):
        self.trial_id, self.status, self.last_result, self.num_failures = trial_id, "RUNNING", {}, 0


class _Display:
    def __init__(self):
        self.lines = []

    def log(self, text):
        self.lines.append(text)


def _scores(n: int, ranks: bool, seed: int = 0) -> list[dict[int, float]]:
    """``n`` trials' scores at epochs 20, 60 and 120. ``ranks``: the epoch-60 score follows the
    epoch-20 one (small noise); else it is drawn afresh (epoch 20 says nothing of it). Epoch 120
    follows epoch 60 in both."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s20 = rng.uniform(0.3, 0.5)
        s60 = s20 + 0.2 + rng.gauss(0, 0.005) if ranks else rng.uniform(0.5, 0.7)
        out.append({20: s20, 60: s60, 120: s60 + 0.1 + rng.gauss(0, 0.005)})
    return out


def _search(tmp_path, trials, calibration=()):
    """Run ``trials`` through a gated ASHA scheduler (rungs at 20 and 60 of 120 epochs), one after
    the other, as Tune would: each reports at every rung it reaches, and ends (``on_trial_complete``)
    where the scheduler stopped it or at epoch 120. Returns ``(scheduler, display, actions, url)``:
    ``actions[i]``, the decisions trial ``i`` got."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{tmp_path}/study.db"
    optuna.create_study(study_name="exp", storage=url, direction="maximize")
    scheduler = make_scheduler((20, 3), 120, url, "exp", 0, StoppedTrials(), calibration)
    scheduler.set_search_properties(METRIC, "max")
    display, actions = _Display(), []

    class Tuner:
        pass

    tuner = Tuner()
    attach_session(tuner, DriverSession("exp", display=display, max_steps=120))
    with running(tuner):
        for i, scores in enumerate(trials):
            trial = _Trial(f"t{i:03d}")
            scheduler.on_trial_add(None, trial)
            got = []
            result = None
            for step in (20, 60):
                result = {METRIC: scores[step], "epoch": step, "training_iteration": step, "val_accuracy": scores[step]}
                got.append(scheduler.on_trial_result(None, trial, result))
                if got[-1] == "STOP":
                    break
            else:
                result = {METRIC: scores[120], "epoch": 120, "training_iteration": 120, "val_accuracy": scores[120]}
            scheduler.on_trial_complete(None, trial, result)
            actions.append(got)
    return scheduler, display, actions, url


def test_a_rung_whose_score_does_not_rank_the_next_stops_cutting_once_measured_and_says_so(tmp_path):
    scheduler, display, actions, url = _search(tmp_path, _scores(60, ranks=False, seed=1))
    gate = scheduler.rung_gate
    # ASHA cut at epoch 20 until MIN_PAIRS trials that passed it had an epoch-60 score ...
    (event,) = [e for e in gate.events if e["rung"] == 20]
    assert not event["cuts"] and event["source"] == "trials" and event["n"] == MIN_PAIRS
    assert event["low"] <= 0  # its interval reaches 0: not measured to rank
    first = event["trials"]
    assert any(a == ["STOP"] for a in actions[:first])
    # ... then no trial was stopped at epoch 20: those ASHA would have stopped went on to 60
    assert all(a[0] == "CONTINUE" for a in actions[first:])
    assert gate.kept[20] > 10 and not gate.cuts(20)
    # epoch 60 ranks epoch 120 (it follows it): that rung kept cutting
    assert gate.cuts(60) and gate.kept[60] == 0 and any(a == ["CONTINUE", "STOP"] for a in actions[first:])
    # the progress line says which rung stopped cutting and why
    (line,) = [x for x in display.lines if "stops cutting" in x]
    assert line == gate_line(event)
    assert line.startswith(
        f"early stopping: the rung at epoch 20 stops cutting (after {first} trials): over 8 trials, "
    )
    assert f"rho {event['rho']:+.2f} [{event['low']:+.2f}, {event['high']:+.2f}]" in line
    assert "its trials go on to epoch 60" in line
    # the record in the study, where the search's result reads it (provenance: method.rungs.gate)
    study = optuna.load_study(study_name="exp", storage=url)
    record = study.user_attrs[RUNG_GATE_ATTR]
    assert record["rungs"]["20"]["kept"] == gate.kept[20] and not record["rungs"]["20"]["cuts"]
    assert record["rule"] == {"min_pairs": MIN_PAIRS, "ranks_above": 0.0, "interval": 0.95}
    rungs = from_study(study, (20, 60, 120))
    assert rungs["gate"] == record
    lines = describe_rungs(rungs)
    said = next(x for x in lines if x.startswith("early stopping at epoch 20:"))
    assert f"stopped cutting after {first} trials (rho {event['rho']:+.2f}" in said
    assert f"{gate.kept[20]} trials it would have cut went on; not cutting at the end" in said
    assert any(x.startswith("early stopping at epoch 60: cut throughout") for x in lines)


def test_a_rung_whose_score_ranks_the_next_keeps_cutting(tmp_path):
    scheduler, display, actions, url = _search(tmp_path, _scores(60, ranks=True))
    gate = scheduler.rung_gate
    assert gate.events == [] and gate.cuts(20) and gate.cuts(60) and gate.kept == {20: 0, 60: 0}
    assert gate.state[20]["source"] == "trials" and gate.state[20]["low"] > 0
    assert sum(a == ["STOP"] for a in actions) > 30  # most trials cut at epoch 20, as ASHA does
    assert not [x for x in display.lines if "stops cutting" in x]
    lines = describe_rungs(from_study(optuna.load_study(study_name="exp", storage=url), (20, 60, 120)))

    def said(rung):
        m = gate.state[rung]
        return (
            f"early stopping at epoch {rung}: cut throughout (over {m['n']} trials, the epoch-{rung} score ranks the "
            f"epoch-{m['to']} one at rho {m['rho']:+.2f} [{m['low']:+.2f}, {m['high']:+.2f}])"
        )

    assert lines[1:] == [said(20), said(60)]


def test_before_any_trial_calibrations_full_length_runs_decide(tmp_path):
    """Calibration's runs (the score at the rung against the final one) decide before any trial:
    a rung they measure not to rank lets its trials go on from the first; one they measure to rank
    cuts, and the search says so in one line."""
    flat = [{20: s[20], 120: s[120]} for s in _scores(10, ranks=False, seed=3)]
    scheduler, display, actions, _ = _search(tmp_path / "flat", _scores(6, ranks=True, seed=1), flat)
    gate = scheduler.rung_gate
    (event, *_) = gate.events
    assert (event["rung"], event["cuts"], event["source"], event["n"], event["trials"]) == (
        20,
        False,
        "calibration",
        10,
        0,
    )
    assert display.lines[0] == gate_line(event)
    assert display.lines[0].startswith(
        "early stopping: the rung at epoch 20 stops cutting (before any trial): calibration's 10 full-length runs "
        "rank their final score by their epoch-20 score at rho"
    )
    assert all(a[0] == "CONTINUE" for a in actions)  # nothing was cut at epoch 20
    ranked = [{20: s[20], 120: s[120]} for s in _scores(10, ranks=True, seed=3)]
    scheduler, display, _, _ = _search(tmp_path / "ranked", _scores(6, ranks=True, seed=1), ranked)
    assert scheduler.rung_gate.events == [] and scheduler.rung_gate.cuts(20)
    assert display.lines[0].startswith(
        "early stopping: the rung at epoch 20 cuts: calibration's 10 full-length runs rank their final score by "
        "their epoch-20 score at rho +0.99 [+0.95, +1.00], above 0 at 95%"
    )


def test_too_few_calibration_runs_leave_the_rung_cutting_until_the_trials_measure_it(tmp_path):
    few = [{20: s[20], 120: s[120]} for s in _scores(MIN_PAIRS - 1, ranks=False)]
    scheduler, display, actions, _ = _search(tmp_path, _scores(3, ranks=False), few)
    assert scheduler.rung_gate.cuts(20) and scheduler.rung_gate.state[20]["source"] is None
    assert display.lines[0].startswith(
        f"early stopping: calibration's {MIN_PAIRS - 1} full-length run(s) with a score at epoch 20 are too few"
    )


def test_the_gate_rests_on_the_trials_once_they_have_enough_pairs_and_restores_from_the_study():
    calibration = [{20: s[20], 120: s[120]} for s in _scores(10, ranks=True)]
    gate = RungGate((20, 60), 120, calibration)
    assert gate.state[20]["source"] == "calibration" and gate.cuts(20)
    # the trials' own pairs replace calibration's once there are MIN_PAIRS of them
    changed = []
    for i, s in enumerate(_scores(MIN_PAIRS, ranks=False, seed=5)):
        gate.observe(f"t{i}", 20, s[20])
        changed += gate.observe(f"t{i}", 60, s[60])
        gate.observe(f"t{i}", 33, 0.9)  # not a rung: not kept
    assert [e["source"] for e in changed] == ["trials"] and not gate.cuts(20)
    assert all(set(s) == {20, 60} for s in gate.scores.values())
    gate.let_go(20)
    # Tune does not save the scheduler: a restored driver rebuilds the gate from the study
    again = pickle.loads(pickle.dumps(RungGate((20, 60), 120, calibration)))
    assert again.restore(gate.to_dict(), gate.scores) == []  # the same decisions as before the restart
    assert again.to_dict() == gate.to_dict()


def test_calibration_scores_are_the_published_policies_whole_runs_on_the_searchs_base():
    saved = {
        "record": {"transfer": {"base": "crop"}},
        "runs": {
            "transfer:randaugment/seed=2000": {METRIC: 0.6, "scores": {"20": 0.3, "60": 0.5, "120": 0.6}},
            "transfer:trivialaugment/seed=2000": {METRIC: 0.6, "scores": {"20": 0.2, "120": 0.6}},
            "transfer:randaugment/seed=2000/epochs=30": {"scores": {"30": 0.5}},  # another schedule
            "base:crop/seed=2000": {"scores": {"20": 0.4, "120": 0.5}},  # a base alone
            "transfer:autoaugment-svhn/seed=2000": {METRIC: 0.6},  # saved before runs kept their scores
        },
    }
    assert calibration_scores(saved, "crop") == [{20: 0.3, 60: 0.5, 120: 0.6}, {20: 0.2, 120: 0.6}]
    assert calibration_scores(saved, "standard") == [] and calibration_scores({}, "crop") == []


def test_calibration_runs_validate_where_the_rungs_read_and_reuse_ignores_it(tmp_path):
    from autoaug.search.config import SearchConfig
    from autoaug.search.decide.calibrate import calibration_protocol, calibration_train_config

    config = SearchConfig.from_preset("cpu", name="c", data="x", storage=str(tmp_path))
    cfg = calibration_train_config(config, 0)
    assert cfg.eval_epochs == (*range(16, 21), *range(56, 61), *range(116, 121))  # rungs 20, 60 and the end
    unstopped = SearchConfig.from_preset("cpu", name="c", data="x", storage=str(tmp_path), early_stopping=False)
    assert calibration_train_config(unstopped, 0).eval_epochs is None
    # which epochs a run validated besides its last window changes nothing it trains or scores
    assert calibration_protocol(config, {}) == calibration_protocol(unstopped, {})
    shorter = config.replace(calibration_epochs=30)  # another schedule than the trials': no rung
    assert calibration_train_config(shorter, 0).eval_epochs is None


@pytest.mark.parametrize("ranks", [False, True])
def test_a_scheduler_pickled_as_tune_does_keeps_calibrations_measurement_not_the_session(tmp_path, ranks):
    calibration = [{20: s[20], 120: s[120]} for s in _scores(10, ranks=ranks)]
    scheduler = make_scheduler((20, 3), 120, f"sqlite:///{tmp_path}/s.db", "s", 0, StoppedTrials(), calibration)
    scheduler._rungs_ready = True
    again = pickle.loads(pickle.dumps(scheduler))
    assert "_rungs_ready" not in again.__dict__
    assert again.rung_gate.cuts(20) is ranks and again.rung_gate.calibration[20]["n"] == 10
