"""The search's time budget without Ray: durations, the clock across driver sessions, what it keeps
for re-scoring, and how the scheduler and the searcher apply it (fake Tune controllers)."""

from __future__ import annotations

import dataclasses
import math
import pickle

import optuna
import pytest

from autoaug.search.budget import (
    BUDGET_FILE,
    RUN_OVERHEAD_S,
    STORE_RESERVE_S,
    Budget,
    describe_budget,
    format_duration,
    measured_run_s,
    parse_duration,
)
from autoaug.search.config import METRIC, SearchConfig
from autoaug.search.decide import proxy_runs
from autoaug.search.decide.assemble import TrialRecord
from autoaug.search.run_dir import RunDir
from autoaug.search.space import SearchSpace
from autoaug.search.tune.schedulers import GuardedASHAScheduler, GuardedFIFOScheduler
from autoaug.search.tune.searcher import StudySearcher
from autoaug.search.tune.study import check_study

optuna.logging.set_verbosity(optuna.logging.WARNING)
SPACE = SearchSpace(num_sub_policies=2)


# ----------------------------------------------------------------------------------------------
# Durations and the configuration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30m", 1800),
        ("1h30m", 5400),
        ("90s", 90),
        ("45", 45),
        (45, 45),
        (2.5, 2.5),
        ("1.5h", 5400),
        (" 2M ", 120),
        ("1h", 3600),
        ("1m30s", 90),
        ("0.5s", 0.5),
    ],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad", ["", "m", "3x", "30 minutes", "-5", "0", 0, -1, "1h-5m", True, None, "nan", float("inf")]
)
def test_bad_durations_are_refused(bad):
    with pytest.raises(ValueError, match="expected a duration such as 30m, 1h30m, 90s or 45 \\(seconds\\)"):
        parse_duration(bad)


def test_durations_format_as_they_are_written():
    assert [format_duration(s) for s in (1800, 5400, 90, 2, 2.5, 3600, 0, 59.6)] == [
        "30m",
        "1h30m",
        "1m30s",
        "2s",
        "2.5s",
        "1h",
        "0s",
        "1m",
    ]


def test_the_budget_is_a_config_field_parsed_from_durations(tmp_path):
    config = SearchConfig.from_preset("smoke", name="b", time_budget_s="1h30m", storage=str(tmp_path))
    assert config.time_budget_s == 5400.0
    assert SearchConfig.from_dict(config.to_dict()) == config
    assert SearchConfig.from_preset("smoke", name="b").time_budget_s is None
    # the cpu preset keeps its 1 CPU-hour promise on 2 cores; time_budget_s=None lifts it
    assert SearchConfig.from_preset("cpu", name="b").time_budget_s == 1800.0
    assert SearchConfig.from_preset("cpu", name="b", time_budget_s=None).time_budget_s is None
    # a search_config.json written before budgets existed loads (and resumes) without one
    old = config.to_dict()
    del old["time_budget_s"]
    assert SearchConfig.from_dict(old).time_budget_s is None
    with pytest.raises(
        ValueError,
        match=r"^SearchConfig.time_budget_s: '3x' is invalid; expected a duration such as "
        r"30m, 1h30m, 90s or 45 \(seconds\) \(--time-budget\), above zero",
    ):
        SearchConfig.from_preset("smoke", name="b", time_budget_s="3x")


def test_a_bad_time_budget_flag_is_one_line_exit_2(tmp_path, capsys):
    from autoaug.launch.cli import main

    assert (
        main(
            [
                "search",
                "--data",
                str(tmp_path / "d.parquet"),
                "--time-budget",
                "soon",
                "--storage",
                str(tmp_path / "runs"),
                "--store",
                str(tmp_path / "store"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(
        "autoaug: error: invalid search config: SearchConfig.time_budget_s: 'soon' is invalid; "
        "expected a duration such as 30m"
    )


def test_the_budget_cannot_change_on_resume(tmp_path, capsys):
    from autoaug.launch.cli import main

    assert main(["search", "--resume", "x", "--time-budget", "1h", "--storage", str(tmp_path)]) == 2
    assert "cannot be combined with --time-budget" in capsys.readouterr().err


def test_the_time_budget_flag_and_its_help():
    from autoaug.launch.cli import build_parser
    from autoaug.launch.search_cmd import build_search_config

    args = build_parser().parse_args(["search", "--data", "d", "--time-budget", "45m"])
    assert build_search_config(args).time_budget_s == 2700.0
    args = build_parser().parse_args(["search", "--data", "d", "--set", "time_budget_s=2h"])
    assert build_search_config(args).time_budget_s == 7200.0
    args = build_parser().parse_args(["search", "--data", "d", "--set", "time_budget_s=null"])
    assert build_search_config(args).time_budget_s is None


# ----------------------------------------------------------------------------------------------
# The clock across driver sessions


class _Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_spent_time_is_summed_over_sessions_and_a_resume_gets_what_is_left(tmp_path):
    run = RunDir(str(tmp_path), "r")
    clock = _Clock()
    first = Budget.open(run, 600, session="start 1", started=clock.now - 10, clock=clock)  # 10 s before it opened
    assert first.remaining_s() == 590 and first.remaining_at_start_s == 600
    clock.now += 100
    first.save()  # what the heartbeat writes (kill -9 after it: 110 s counted)
    saved = run.read_json(BUDGET_FILE)
    assert saved["sessions"][0]["spent_s"] == 110 and saved["remaining_s"] == 490

    clock.now += 5000  # no driver runs: not counted
    second = Budget.open(run, 600, session="resume 2", started=clock.now, clock=clock)
    assert second.spent_before_s == 110 and second.remaining_at_start_s == 490
    assert second.describe_start() == "time budget: 8m10s left of 10m (1m50s spent in earlier driver sessions)"
    clock.now += 40
    with second.running():
        pass  # saved when the block ends
    saved = run.read_json(BUDGET_FILE)
    assert [s["session"] for s in saved["sessions"]] == ["start 1", "resume 2"]
    assert saved["sessions"][1]["remaining_at_start_s"] == 490 and saved["sessions"][1]["spent_s"] == 40
    assert saved["spent_s"] == 150


def test_the_heartbeat_saves_the_spent_time_while_the_search_runs(tmp_path, monkeypatch):
    import threading

    from autoaug.search import budget as module

    monkeypatch.setattr(module, "HEARTBEAT_S", 0.05)
    run = RunDir(str(tmp_path), "r")
    clock = _Clock()
    budget = Budget.open(run, 600, session="start 1", clock=clock)
    clock.now += 42
    beats = threading.Event()
    save = budget.save

    def saved() -> None:
        save()
        if threading.current_thread().name == "autoaug-budget":
            beats.set()

    monkeypatch.setattr(budget, "save", saved)
    with budget.running():
        assert beats.wait(timeout=60)  # the heartbeat thread saved (an event, not a sleep)
        assert run.read_json(BUDGET_FILE)["sessions"][0]["spent_s"] == 42  # the time spent so far


def test_a_trials_first_report_counts_its_start_up_once_per_run_not_per_epoch():
    """What the H200 showed: 16 trials at once, each first report 12 s (process, data, DALI
    pipeline, CUDA warm-up) and 1 s an epoch after it; averaged in, the first reports made a
    120-epoch run's estimate 3m23s instead of about 2m12s."""
    budget = Budget(1000)
    budget.plan_rescore(runs=1, slots=1, run_s=None, epochs=120)
    for _ in range(3):
        budget.observe_epoch(12.0, first=True)
    assert budget.run_s() == pytest.approx(12.0 * 120 + RUN_OVERHEAD_S)  # only first reports: as before
    for _ in range(3):
        budget.observe_epoch(12.0, first=True)
        for _ in range(15):
            budget.observe_epoch(1.0)
    assert budget.run_s() == pytest.approx(1.0 * 120 + 11.0)  # 120 epochs + the start-up, measured once
    # start-up measured below the generous floor: the floor (a Ray task starting, the data opened)
    cpu = Budget(1000)
    cpu.plan_rescore(runs=1, slots=1, run_s=None, epochs=120)
    cpu.observe_epoch(2.5, first=True)
    cpu.observe_epoch(2.0)
    assert cpu.run_s() == pytest.approx(2.0 * 120 + RUN_OVERHEAD_S)


def test_a_trial_reporting_every_few_epochs_counts_each_epoch_once():
    """A report of 4 epochs is 4 epochs of the run's estimate (its first, the start-up and 4
    epochs), and a running trial may take a whole report's time to end."""
    every, few = Budget(1000), Budget(1000)
    for budget in (every, few):
        budget.plan_rescore(runs=1, slots=1, run_s=None, epochs=120)
    every.observe_epoch(14.0, first=True)  # start-up 12 s, an epoch of 2 s
    few.observe_epoch(20.0, first=True, epochs=4)  # start-up 12 s, 4 epochs of 2 s
    assert few.run_s() == pytest.approx(5.0 * 120 + RUN_OVERHEAD_S)  # only first reports: 20 s / 4 epochs each
    for _ in range(5):
        every.observe_epoch(2.0)
        few.observe_epoch(8.0, epochs=4)
    assert few.run_s() == pytest.approx(every.run_s()) == pytest.approx(2.0 * 120 + 12.0)
    later = Budget(1000)
    later.plan_rescore(runs=1, slots=1, run_s=None, epochs=120)
    later.observe_epoch(8.0, epochs=4)
    assert later.handover_s() == pytest.approx(8.0 + RUN_OVERHEAD_S)  # a report's time, not an epoch's


def test_what_is_kept_for_rescoring_and_storing():
    clock = _Clock()
    budget = Budget(1000, started=clock.now, clock=clock)
    assert budget.reserve_s() == STORE_RESERVE_S  # nothing to re-score yet
    budget.plan_rescore(runs=5, slots=2, run_s=None, epochs=10)
    assert budget.reserve_s() == STORE_RESERVE_S  # no run measured yet
    for seconds in (2.0, 4.0, None, "x", -1):
        budget.observe_epoch(seconds)
    assert budget.run_s() == pytest.approx(3.0 * 10 + 10.0)  # mean epoch x epochs + a run's set-up
    assert budget.reserve_s() == pytest.approx(STORE_RESERVE_S + 3 * 40.0)  # 5 runs, 2 at once: 3 waves
    budget.plan_rescore(runs=5, slots=2, run_s=100.0, epochs=10)  # measured calibration runs win
    assert budget.reserve_s() == STORE_RESERVE_S + 300.0
    assert measured_run_s({"a": {"train_time_s": 80.0}, "b": {"train_time_s": 100.0}, "c": {}}) == 100.0
    assert measured_run_s({}) is None
    # Runs of another length (calibration's shorter schedule) count by their time per epoch.
    short = {"a": {"train_time_s": 30.0, "epochs": 30}, "b": {"train_time_s": 50.0, "epochs": 30}}
    assert measured_run_s(short) == 40.0 + RUN_OVERHEAD_S
    assert measured_run_s(short, epochs=120) == pytest.approx(160.0 + RUN_OVERHEAD_S)
    # A run's start-up (its wall time beyond its epochs) counts once, not scaled by the epochs;
    # below the floor (a Ray task starting is not in it), the floor.
    timed = {
        "a": {"train_time_s": 30.0, "wall_s": 55.0, "epochs": 30},
        "b": {"train_time_s": 30.0, "wall_s": 33.0, "epochs": 30},
    }
    assert measured_run_s(timed, epochs=120) == pytest.approx(120.0 + (25.0 + RUN_OVERHEAD_S) / 2)

    # The trials end early enough for the reserve: a running trial ends at its next report (an
    # epoch here, 3 s), then hands over to re-scoring.
    assert budget.handover_s() == pytest.approx(3.0 + RUN_OVERHEAD_S)
    assert not budget.expired()
    clock.now += 1000 - 315 - budget.handover_s() - 1
    assert not budget.expired()
    clock.now += 2
    assert budget.expired() and not budget.stop_now()  # no trial has a score yet: not stopped
    budget.has_result = True
    assert budget.stop_now()
    budget.plan_rescore(runs=0, slots=1, run_s=None, epochs=10)
    assert budget.expired()  # decisions do not change with estimates


def test_an_earlier_sessions_end_stands(tmp_path):
    run = RunDir(str(tmp_path), "r")
    first = Budget.open(run, 600, session="start 1")
    first.has_result = True
    first.stop("exp", "t1")
    assert first.ended["stage"] == "trials" and first.stopped("exp") == {"t1"}
    again = Budget.open(run, 600, session="resume 2")
    assert again.expired() and again.stop_now() and again.stopped("exp") == {"t1"}
    assert pickle.loads(pickle.dumps(again)).stopped("exp") == {"t1"}  # picklable, without where it writes


def test_the_summary_says_what_the_budget_did():
    record = {
        "time_budget_s": 1800.0,
        "spent_s": 1790.0,
        "ended": {"stage": "trials"},
        "trials": {"unit": "trials", "planned": 28, "scored": 12, "stopped": 2, "not_started": 1},
        "rescore": {"note": "re-scored the first 2 of 4 candidates (assembled, best_trial): ..."},
    }
    assert describe_budget(record) == [
        "the time budget (30m) ended the search after 12 of 28 trials; 2 stopped by it, scored on what they had "
        "reported; 1 stopped by it before a first score (29m50s spent)",
        "re-scoring under the time budget: re-scored the first 2 of 4 candidates (assembled, best_trial): ...",
    ]
    assert describe_budget({"time_budget_s": 1800.0, "spent_s": 600.0, "ended": None}) == [
        "time budget: 30m, 10m spent; it did not end the search"
    ]
    assert describe_budget(None) == []


# ----------------------------------------------------------------------------------------------
# The scheduler and the searcher (fake Tune controllers, a real Optuna study)


class _Trial:
    def __init__(self, trial_id, status="RUNNING", last_result=None):
        self.trial_id, self.status, self.last_result, self.num_failures = trial_id, status, last_result or {}, 0


class _SearchAlg:
    def __init__(self):
        self.finished = False

    def is_finished(self):
        return self.finished

    def set_finished(self):
        self.finished = True


class _Controller:
    def __init__(self, trials):
        self.trials, self.stopped, self.search_alg = trials, [], _SearchAlg()

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):
        self.stopped.append(trial.trial_id)
        trial.status = "TERMINATED"


def _expired_budget(tmp_path) -> tuple[Budget, _Clock]:
    clock = _Clock()
    budget = Budget.open(RunDir(str(tmp_path), "r"), 100, session="start 1", clock=clock)
    clock.now += 200
    return budget, clock


def _result(step, value=0.5):
    return {METRIC: value, "training_iteration": step, "time_this_iter_s": 1.0}


def test_the_scheduler_stops_running_trials_at_their_next_report_once_a_trial_has_a_score(tmp_path):
    budget, _ = _expired_budget(tmp_path)
    scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(f"sqlite:///{tmp_path}/none.db", "s", max_failures=1)
    scheduler.set_budget(budget, "s", max_steps=3)
    controller = _Controller([])
    running = _Trial("a")
    # a result without a score does not count: the search would be left without any
    assert scheduler.on_trial_result(controller, running, {"training_iteration": 1}) == "CONTINUE"
    assert scheduler.on_trial_result(controller, running, _result(1)) == "STOP"
    assert budget.stopped("s") == {"a"} and budget.ended["stage"] == "trials"
    # a trial's last report is left alone: it completes
    assert scheduler.on_trial_result(controller, _Trial("b"), _result(3)) == "CONTINUE"
    assert "_budget" not in pickle.loads(pickle.dumps(scheduler)).__dict__  # one driver session's


def test_trials_not_started_are_stopped_and_nothing_more_is_proposed(tmp_path):
    budget, _ = _expired_budget(tmp_path)
    scheduler = GuardedASHAScheduler(time_attr="training_iteration", max_t=3, grace_period=1)
    scheduler._setup_guard(f"sqlite:///{tmp_path}/none.db", "s", max_failures=1)
    scheduler.set_budget(budget, "s", max_steps=3)
    trials = [_Trial("done", "TERMINATED", _result(3)), _Trial("waiting", "PENDING"), _Trial("paused", "PAUSED")]
    controller = _Controller(trials)
    scheduler._guard_done = True  # (the study guard's own check is another test's)
    assert scheduler.choose_trial_to_run(controller) is None
    assert budget.has_result  # from a trial of an earlier session
    assert controller.stopped == ["waiting", "paused"] and controller.search_alg.finished
    assert budget.stopped("s") == {"waiting", "paused"}


def test_nothing_is_stopped_while_the_budget_lasts(tmp_path):
    budget = Budget.open(RunDir(str(tmp_path), "r"), 3600, session="start 1")
    scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(f"sqlite:///{tmp_path}/none.db", "s", max_failures=1)
    scheduler.set_budget(budget, "s", max_steps=3)
    scheduler._guard_done = True
    controller = _Controller([_Trial("waiting", "PENDING")])
    assert scheduler.on_trial_result(controller, _Trial("a"), _result(1)) == "CONTINUE"
    assert scheduler.choose_trial_to_run(controller).trial_id == "waiting"
    assert budget.ended is None and not controller.search_alg.finished


def _searcher(url: str) -> StudySearcher:
    return StudySearcher(SPACE.distributions(), metric=METRIC, mode="max", study_name="s", storage_url=url, max_steps=3)


def test_the_searcher_proposes_nothing_once_trials_must_end_and_the_study_stays_consistent(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    budget, clock = _expired_budget(tmp_path)
    search = _searcher(url)
    search.set_budget(budget)
    config = search.suggest("t1")  # expired, but no trial has a score: the search needs one
    assert isinstance(config, dict)
    budget.has_result = True
    assert search.suggest("t2") == "FINISHED" and budget.ended["stage"] == "trials"
    # t1 was stopped by the budget after one epoch: PRUNED with its score, as an ASHA stop
    search.on_trial_result("t1", _result(1, 0.3))
    search.on_trial_complete("t1", _result(2, 0.4))
    study = optuna.load_study(study_name="s", storage=url)
    assert [(t.state.name, t.value) for t in study.trials] == [("PRUNED", 0.4)]
    record = TrialRecord(
        trial_id="t1",
        index=0,
        status="budget_stopped",
        params=config,
        policy=SPACE.to_policy(config),
        score=0.4,
        epochs=2,
    )
    assert record.succeeded and check_study(study, [record], SPACE) == []


def test_the_searchers_budget_is_one_sessions_and_survives_its_restore(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    budget, _ = _expired_budget(tmp_path)
    search = _searcher(url)
    search.set_budget(budget)
    search.suggest("t1")
    assert isinstance(pickle.loads(pickle.dumps(search)).suggest("t2"), dict)  # pickled without the budget
    snapshot = str(tmp_path / "searcher.pkl")
    search.save(snapshot)
    assert search._budget is budget
    restored = _searcher(url)
    mine = Budget.open(RunDir(str(tmp_path), "r2"), 3600, session="resume 2")
    restored.set_budget(mine)  # set before Tune restores the searcher's state
    restored.restore(snapshot)
    assert restored._budget is mine


# ----------------------------------------------------------------------------------------------
# Re-scoring under the budget (Ray replaced: the runs' results are given)


def _candidates(n: int):
    from autoaug.policies import Policy
    from autoaug.search.decide.rescore import Candidate

    kinds = ["assembled", "best_trial", "warm_start+found", "survivors"]
    return [Candidate(kinds[i], Policy("r", 10, [[("Rotate", 0.1 * (i + 1), 3)]]), (), None) for i in range(n)]


def _found(candidates):
    from autoaug.search.decide.assemble import AssembledPolicy
    from autoaug.search.methods.base import MethodResult

    return MethodResult(
        trials=[], assembled=AssembledPolicy(candidates[0].policy, (), 0), candidates=candidates, optuna={}
    )


class _Display:
    def __init__(self):
        self.lines = []

    def log(self, text):
        self.lines.append(text)


@pytest.fixture
def rescoring(tmp_path, monkeypatch):
    """``(config, run, budget, clock, calls)``: a re-scoring search whose runs take 100 s, two at
    once; ``calls`` receives the candidates each re-scoring was asked for."""
    from autoaug.search import driver
    from autoaug.search.decide import rescore

    config = SearchConfig.from_preset("smoke", name="r", rescore=True, storage=str(tmp_path))
    run = RunDir(str(tmp_path), "r")
    clock = _Clock()
    budget = Budget.open(run, 1000, session="start 1", clock=clock)
    budget.plan_rescore(runs=4, slots=2, run_s=100.0, epochs=config.epochs)
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    calls = []

    def fake(candidates, config, *, cached=None, save=None, deadline=None):
        calls.append([c.kind for c in candidates])
        return {
            rescore.run_key(c, config.rescore_train_config(0)): {
                METRIC: 0.5 + 0.01 * i,
                "val_accuracy": 0.5,
                "seed": 1000,
            }
            for i, c in enumerate(candidates)
        }

    monkeypatch.setattr(driver, "rescore_candidates", fake)
    return config, run, budget, clock, calls


def test_rescoring_with_time_for_every_candidate_is_unchanged(rescoring):
    from autoaug.search.driver import _rescore

    config, run, budget, clock, calls = rescoring
    scores, _ = _rescore(config, run, _found(_candidates(4)), _Display(), budget)
    assert calls == [["assembled", "best_trial", "warm_start+found", "survivors"]] and len(scores) == 4
    assert budget.rescore is None and budget.ended is None


def test_rescoring_keeps_the_first_candidates_the_time_left_has_room_for(rescoring):
    from autoaug.search.driver import _rescore

    config, run, budget, clock, calls = rescoring
    clock.now += 1000 - STORE_RESERVE_S - 150  # 150 s left: one wave of 2 runs of 100 s
    display = _Display()
    scores, _ = _rescore(config, run, _found(_candidates(4)), display, budget)
    assert calls == [["assembled", "best_trial"]] and len(scores) == 2
    assert budget.rescore["rescored"] == 2 and budget.ended["stage"] == "rescore"
    assert budget.rescore["note"].startswith(
        "re-scored the first 2 of 4 candidates (assembled, best_trial): 2m30s "
        "left for re-scoring runs of about 1m40s (2 at once)"
    )
    assert display.lines[0] == "time budget: " + budget.rescore["note"]


def test_no_time_for_two_candidates_stores_the_methods_first(rescoring):
    from autoaug.search.driver import _rescore

    config, run, budget, clock, calls = rescoring
    clock.now += 1000 - STORE_RESERVE_S - 50
    assert _rescore(config, run, _found(_candidates(4)), _Display(), budget) == (None, None)
    assert calls == [] and budget.rescore["rescored"] == 0
    assert "stored the method's first candidate, assembled" in budget.rescore["note"]


def _measured_transfer(score=0.7):
    """The published policy that transferred best, with its two calibration runs."""
    from autoaug.policies import Policy
    from autoaug.search.decide.rescore import Candidate

    runs = ({METRIC: score, "val_accuracy": score, "seed": 2000}, {METRIC: score, "val_accuracy": score, "seed": 2001})
    return Candidate("transfer", Policy("r", 10, [[("Invert", 0.5, 0)]]), (), None, runs)


def test_no_time_to_rescore_the_searchs_own_candidates_stores_the_transfer_as_calibration_measured_it(rescoring):
    """What the trials scored (after 20 of 120 epochs, say) is not compared with a whole run: the
    published policy that transferred best, measured by calibration's whole runs, is stored."""
    from autoaug.search.decide.rescore import choose, describe_selection
    from autoaug.search.driver import _rescore

    config, run, budget, clock, calls = rescoring
    clock.now += 1000 - STORE_RESERVE_S - 50
    candidates = [*_candidates(2), _measured_transfer()]
    display = _Display()
    scores, _ = _rescore(config, run, _found(candidates), display, budget)
    assert list(scores) == [candidates[2].key] and scores[candidates[2].key][METRIC] == pytest.approx(0.7)
    assert all(kinds == ["transfer"] for kinds in calls)  # nothing trained for it (the real one trains no run)
    assert budget.rescore["rescored"] == 0
    assert "stored transfer, the best published policy, as measured in calibration" in budget.rescore["note"]
    chosen, record = choose(candidates, scores)
    assert chosen.kind == "transfer" and record["candidates"][2]["runs_from"] == "calibration"
    assert describe_selection(record) == [
        "none of the search's own candidates was re-scored: stored the best published policy, as measured in calibration"
    ]


def test_a_transfer_measured_in_calibration_competes_beside_the_candidates_the_time_left_has_room_for(rescoring):
    from autoaug.search.driver import _rescore

    config, run, budget, clock, calls = rescoring
    clock.now += 1000 - STORE_RESERVE_S - 150  # one wave of 2 runs: the transfer needs none
    candidates = [*_candidates(4), _measured_transfer()]
    scores, _ = _rescore(config, run, _found(candidates), _Display(), budget)
    assert calls == [["assembled", "best_trial", "transfer"]] and len(scores) == 3
    assert budget.rescore["rescored"] == 3
    assert budget.rescore["note"].startswith(
        "re-scored the first 2 of 4 candidates (assembled, best_trial) and transfer (measured in calibration): "
    )


def test_the_time_planned_for_rescoring_leaves_out_a_transfer_calibration_measured(tmp_path, monkeypatch):
    from autoaug.search import driver

    config = SearchConfig.from_preset("smoke", name="r", rescore=True, storage=str(tmp_path))
    run = RunDir(str(tmp_path), "r")
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    planned = {}
    measured = _measured_transfer()
    for label, transfer in [("measured", measured), ("to train", dataclasses.replace(measured, runs=()))]:
        budget = Budget.open(run, 1000, session="start 1", clock=_Clock())
        monkeypatch.setattr(budget, "plan_rescore", lambda runs, *a, _l=label, **k: planned.__setitem__(_l, runs))
        driver._plan_rescore(config, run, budget, transfer=transfer)
    own = config.search_method.max_candidates(config) * config.rescore_seeds
    assert planned == {"measured": own, "to train": own + config.rescore_seeds}


def test_a_deadline_reached_during_rescoring_compares_the_candidates_rescored(rescoring, monkeypatch):
    from autoaug.search import driver
    from autoaug.search.decide import rescore

    config, run, budget, clock, _ = rescoring
    candidates = _candidates(4)

    def slow(candidates, config, *, cached=None, save=None, deadline=None):  # 3 runs done, then the deadline
        clock.now += 1000
        return {
            rescore.run_key(c, config.rescore_train_config(0)): {METRIC: 0.6 - 0.1 * i, "seed": 1000}
            for i, c in enumerate(candidates[:3])
        }

    monkeypatch.setattr(driver, "rescore_candidates", slow)
    monkeypatch.setattr(budget, "run_s", lambda: None)  # nothing measured: all are tried
    scores, _ = driver._rescore(config, run, _found(candidates), _Display(), budget)
    assert sorted(scores) == sorted(c.key for c in candidates[:3])
    assert budget.rescore["rescored"] == 3 and budget.ended["stage"] == "rescore"
    assert budget.rescore["note"].startswith("the budget ran out during re-scoring: 3 of 4 candidates re-scored")


def test_a_tuner_the_budget_cannot_reach_is_said_in_one_warning(monkeypatch):
    """Through Ray Client the Tune loop runs on the cluster, without this driver's budget."""
    import warnings

    from autoaug.core.errors import AutoaugWarning
    from autoaug.search.tune import session
    from autoaug.search.tune.session import DriverSession, attach_session

    class Tuner:
        pass

    monkeypatch.setattr(session, "ray_client", lambda: True)
    with pytest.warns(
        AutoaugWarning,
        match=r"^Ray Client \(--address ray://...\) runs the Tune experiment x on the "
        r"cluster, where the time budget cannot stop its trials",
    ):
        attach_session(Tuner(), DriverSession("x", budget=Budget(60), max_steps=3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attach_session(Tuner(), DriverSession("x", max_steps=3))  # no budget: nothing to say


def test_a_restored_scheduler_and_searcher_take_the_budget_of_the_driver_session_running_them(tmp_path):
    """Tune's restore unpickles them without a budget: the one of the driver session that runs the
    tuner (attach_session, running) is theirs while it runs, and only then."""
    from autoaug.search.tune.session import DriverSession, attach_session, running

    budget, _ = _expired_budget(tmp_path)
    budget.has_result = True
    scheduler = pickle.loads(pickle.dumps(GuardedFIFOScheduler()))
    search = pickle.loads(pickle.dumps(_searcher(f"sqlite:///{tmp_path}/study.db")))

    class Tuner:
        pass

    tuner = Tuner()
    attach_session(tuner, DriverSession("exp", budget=budget, max_steps=3))
    assert scheduler.on_trial_result(_Controller([]), _Trial("a"), _result(1)) == "CONTINUE"  # not running yet
    with running(tuner):
        assert scheduler.on_trial_result(_Controller([]), _Trial("b"), _result(1)) == "STOP"
        assert search.suggest("c") == "FINISHED"
    assert budget.stopped("exp") == {"b"}
    assert isinstance(search.suggest("d"), dict)


def test_the_end_of_the_trials_is_said_once(tmp_path):
    said = []
    clock = _Clock()
    budget = Budget.open(RunDir(str(tmp_path), "r"), 100, session="start 1", clock=clock, say=said.append)
    clock.now += 90
    budget.stop("exp", "t1")
    budget.stop("exp", "t2")
    budget.end("rounds")
    assert said == [
        "time budget: 10s left of 1m40s, what re-scoring and storing need (about 15s): nothing new "
        "starts, running trials end at their next report"
    ]


def test_a_trial_the_budget_stops_before_its_first_score_goes_through_every_scheduler_callback(tmp_path):
    """A trial stopped by the budget before its first validation ends with a result whose score is
    None: ASHA's on_trial_complete (``metric_op * None``) must not see it; the searcher records it."""
    budget, _ = _expired_budget(tmp_path)
    budget.has_result = True  # another trial has a score
    scheduler = GuardedASHAScheduler(time_attr="training_iteration", max_t=3, grace_period=1, metric=METRIC, mode="max")
    scheduler._setup_guard(f"sqlite:///{tmp_path}/none.db", "s", max_failures=1)
    scheduler.set_budget(budget, "s", max_steps=3)
    controller, trial = _Controller([]), _Trial("early")
    scheduler.on_trial_add(controller, trial)
    unscored = {METRIC: None, "training_iteration": 1, "time_this_iter_s": 1.0}
    assert scheduler.on_trial_result(controller, trial, dict(unscored)) == "STOP"
    scheduler.on_trial_complete(controller, trial, dict(unscored))  # Tune's stop_trial: no TypeError
    assert budget.stopped("s") == {"early"}
    assert scheduler.debug_string().endswith("Iter 1.000: None")  # kept out of the rungs
    # a scored trial still reaches ASHA's bracket
    scored = _Trial("scored")
    scheduler.on_trial_add(controller, scored)
    scheduler.on_trial_complete(controller, scored, _result(1, 0.7))
    assert scheduler.debug_string().endswith("Iter 1.000: 0.7")
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url)
    search.suggest("early")
    search.on_trial_complete("early", result=dict(unscored))  # the searcher takes it too


def test_before_calibration_the_budget_plans_the_re_scoring_calibration_will_leave(tmp_path, monkeypatch):
    """Planned before calibration (for its forecast), re-scoring counts the published policy that
    will transfer best as a competitor measured by calibration's runs, as the plan after it does;
    without ``--warm-start auto`` calibration measures none, and only the method's own compete."""
    from types import SimpleNamespace

    from autoaug.search import driver

    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    monkeypatch.setattr(driver, "measured_run_s", lambda runs, epochs=None: 100.0)
    run = RunDir(str(tmp_path), "p")
    config = SearchConfig.from_preset("cpu", name="p", data="x", storage=str(tmp_path))
    assert config.warm_start == "auto" and config.rescore
    before, after = Budget(1800, clock=_Clock()), Budget(1800, clock=_Clock())
    driver._plan_rescore(config, run, before, before_calibration=True)
    measured = SimpleNamespace(runs=({"seed": 2000},))  # the transfer candidate, with its calibration run
    # (--space auto: the family is not chosen yet; the forecast takes the one needing fewest runs,
    # the randaugment family's, whose warm start competes as the transfer)
    driver._plan_rescore(config.replace(family="randaugment"), run, after, transfer=measured)
    assert before.reserve_s() == after.reserve_s() > STORE_RESERVE_S + 100.0
    aa = Budget(1800, clock=_Clock())
    driver._plan_rescore(config.replace(family="aa"), run, aa, transfer=measured)
    assert aa.reserve_s() > after.reserve_s()
    # ... which calibration's forecast asks with the run time it measured itself
    assert before.reserve_s(50.0) - STORE_RESERVE_S == pytest.approx((before.reserve_s() - STORE_RESERVE_S) / 2)
    # With a warm start given (no published policy measured), one own candidate alone is not re-scored.
    single = config.replace(warm_start="autoaugment-cifar10")
    monkeypatch.setattr(type(config.search_method), "max_candidates", lambda self, config: 1)
    driver._plan_rescore(single, run, before, before_calibration=True)
    assert before.reserve_s() == STORE_RESERVE_S
    driver._plan_rescore(config.replace(family="aa"), run, before, before_calibration=True)
    # one candidate and the transfer: its run (1 wave), then the race's 2 reserved rounds
    assert before.reserve_s() == STORE_RESERVE_S + 3 * 100.0


def test_a_family_search_keeps_no_run_for_a_warm_start_calibration_measured(tmp_path, monkeypatch):
    """In the randaugment family the warm start's candidate is its published point, which
    competes as the transfer with its calibration runs (:func:`autoaug.search.driver.with_transfer`):
    the budget keeps time for the best point and the runner-up only. Unmeasured (a warm start
    given), it is trained, and its run is kept for."""
    from types import SimpleNamespace

    from autoaug.search import driver

    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 1)
    monkeypatch.setattr(driver, "measured_run_s", lambda runs, epochs=None: 100.0)
    run = RunDir(str(tmp_path), "f")
    config = SearchConfig.from_preset(
        "cpu", name="f", data="x", storage=str(tmp_path), family="randaugment", warm_start=["randaugment"]
    )
    # The race's two reserved rounds, one run at a time: each a run for the leader and its nearest
    # challenger, whichever two of the candidates (the two trained and the transfer, or the three
    # trained) they are.
    race = 2 * 100.0
    measured, given = Budget(1800, clock=_Clock()), Budget(1800, clock=_Clock())
    driver._plan_rescore(config, run, measured, transfer=SimpleNamespace(runs=({"seed": 2000},)))
    driver._plan_rescore(config, run, given)
    assert measured.reserve_s() == pytest.approx(STORE_RESERVE_S + 2 * 100.0 + 2 * race)
    assert given.reserve_s() == pytest.approx(STORE_RESERVE_S + 3 * 100.0 + 2 * race)
    assert measured.race == {"reserved_rounds": 2, "contenders": 2, "reserved_waves": 4}
    # In the aa family the warm start is extended by what the search found: a new policy, trained.
    aa = config.replace(family="aa")
    driver._plan_rescore(aa, run, measured, transfer=SimpleNamespace(runs=({"seed": 2000},)))
    driver._plan_rescore(aa, run, given)
    # (its first round the same; the measured transfer races too, in the rounds of the leader and
    # its nearest challenger)
    assert measured.reserve_s() == given.reserve_s()


def test_the_race_has_its_rounds_kept_for_it_and_stops_where_the_time_left_ends(tmp_path, monkeypatch):
    """``rescore_max_seeds 3``: trials stop early enough for two more rounds of runs, each a wave
    of runs for the leader and its nearest challenger (of the smoke preset's three candidates: one
    wave on two slots); the race runs the rounds that fit and says where it stopped."""
    from autoaug.search import driver
    from autoaug.search.decide import rescore

    config = SearchConfig.from_preset("smoke", name="r", rescore=True, rescore_max_seeds=3, storage=str(tmp_path))
    run = RunDir(str(tmp_path), "r")
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    clock = _Clock()
    budget = Budget.open(run, 2000, session="start 1", clock=clock)
    own = config.search_method.max_candidates(config)
    budget.plan_rescore(runs=own, slots=2, run_s=100.0, epochs=config.epochs)  # as without a race
    without = budget.reserve_s()
    monkeypatch.setattr(driver, "measured_run_s", lambda runs, epochs=None: 100.0)
    driver._plan_rescore(config, run, budget)
    assert own == 3 and budget.reserve_s() == pytest.approx(without + 2 * 100.0)  # two rounds of a wave
    # A longer race (up to 10 runs each) takes no more time from the trials: its rounds past
    # RACE_RESERVED_SEEDS (3) run on the time they leave.
    driver._plan_rescore(config.replace(rescore_max_seeds=10), run, budget)
    assert budget.reserve_s() == pytest.approx(without + 2 * 100.0)
    driver._plan_rescore(config.replace(rescore_max_seeds=2), run, budget)
    assert budget.reserve_s() == pytest.approx(without + 100.0)  # a shorter one keeps only its own round
    # On one slot a round is two waves: the leader's run and its nearest challenger's.
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 1)
    driver._plan_rescore(config, run, budget)
    assert budget.race["contenders"] == 2 and budget.race["reserved_waves"] == 2 * 2
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    driver._plan_rescore(config, run, budget)

    trained = []

    def fake(candidates, config, *, cached=None, save=None, deadline=None, counts=None):
        out = dict(cached or {})
        for c in candidates:
            n = (counts or {}).get(c.key, config.rescore_seeds)
            for i in range(n):
                cfg = config.rescore_train_config(i)
                if rescore.run_key(c, cfg) not in out:
                    trained.append((c.kind, cfg.seed))
                    out[rescore.run_key(c, cfg)] = {METRIC: 0.6, "val_accuracy": 0.6, "seed": cfg.seed}
        clock.now += 100  # one wave
        return out

    monkeypatch.setattr(driver, "rescore_candidates", fake)
    clock.now += 2000 - STORE_RESERVE_S - 250  # the first round and one race round fit, not two
    display = _Display()
    scores, race = driver._rescore(config, run, _found(_candidates(2)), display, budget)
    assert trained == [("assembled", 1000), ("best_trial", 1000), ("assembled", 1001), ("best_trial", 1001)]
    assert race["ended"] == "budget" and len(race["rounds"]) == 1
    assert [len(s["runs"]) for s in scores.values()] == [2, 2]
    assert (
        "time budget: the re-scoring race stopped after 1 round(s) (2 kept from the trials): the next did not fit "
        "in the time left" in display.lines
    )
    assert budget.race == {**budget.race, "reserved_rounds": 2, "rounds": 1, "ended": "budget"}
    assert display.lines[-1].startswith("re-scored (search_score, mean of each candidate's runs): assembled 0.6000 (2)")


def test_trials_that_could_run_past_the_end_stop_in_time_for_the_reserved_race_rounds(tmp_path, monkeypatch):
    """A search that ran out of room for its race: the trials stopped, re-scoring ran its first
    round, and the race got no round -- every candidate was within the noise, and a round for all
    of them did not fit. Here, with given run times (trials' epochs of 20 s, their first report
    30 s, proxy runs of 100 s, 2 at once) and trials that would run far past the end, the trials
    stop early enough, and the race runs the RACE_RESERVED_SEEDS rounds the budget kept (a wave
    each: with all 4 candidates within the noise, the leader and its nearest challenger to 3
    runs), and the summary says so."""
    from autoaug.search import driver
    from autoaug.search.decide import rescore
    from autoaug.search.decide.rescore import RACE_RESERVED_SEEDS

    config = SearchConfig.from_preset("smoke", name="r", rescore=True, rescore_max_seeds=10, storage=str(tmp_path))
    run = RunDir(str(tmp_path), "r")
    monkeypatch.setattr(proxy_runs, "parallel_runs", lambda config: 2)
    monkeypatch.setattr(driver, "measured_run_s", lambda runs, epochs=None: 100.0)
    clock = _Clock()
    budget = Budget.open(run, 3000, session="start 1", clock=clock)
    transfer = _measured_transfer(0.6)  # the published policy, 2 calibration runs
    candidates = [*_candidates(3), transfer]
    driver._plan_rescore(config, run, budget, transfer=transfer)
    reserved = RACE_RESERVED_SEEDS - config.rescore_seeds
    assert budget.race == {"reserved_rounds": reserved, "contenders": 2, "reserved_waves": reserved}
    assert budget.reserve_s() == STORE_RESERVE_S + (2 + reserved) * 100.0  # 3 trained at once 2, then the race

    # The trials: two at a time, 100 epochs of 20 s each (28 trials: 28,000 s): far past the end.
    scheduler = GuardedFIFOScheduler()
    scheduler._setup_guard(f"sqlite:///{tmp_path}/none.db", "r", max_failures=1)
    scheduler.set_budget(budget, "r", max_steps=100)
    running, started, ended = {}, 0, []
    while not budget.stop_now() or running:
        while len(running) < 2 and not budget.stop_now():
            running[f"t{started}"], started = 0, started + 1
        clock.now += 20
        for tid in list(running):
            running[tid] += 1
            first = running[tid] == 1
            result = {METRIC: 0.5, "training_iteration": running[tid], "time_this_iter_s": 30.0 if first else 20.0}
            if scheduler.on_trial_result(_Controller([]), _Trial(tid), result) == "STOP" or running[tid] == 100:
                ended.append(running.pop(tid))
    clock.now += 5  # Tune's teardown, the trial records
    assert budget.ended["stage"] == "trials" and started < 28
    assert budget.remaining_s() >= budget.reserve_s()  # the trials left re-scoring all it keeps

    trained = []

    def fake(candidates, config, *, cached=None, save=None, deadline=None, counts=None):
        out, new = dict(cached or {}), 0
        for c, cfg in rescore._runs(candidates, config, counts):
            if rescore.run_key(c, cfg) not in out:
                trained.append((c.kind, cfg.seed))
                out[rescore.run_key(c, cfg)] = {METRIC: 0.6, "val_accuracy": 0.6, "seed": cfg.seed}
                new += 1
        clock.now += math.ceil(new / 2) * 100.0  # its waves of runs, 2 at once
        return out

    monkeypatch.setattr(driver, "rescore_candidates", fake)
    display = _Display()
    scores, race = driver._rescore(config, run, _found(candidates), display, budget)
    assert len(race["rounds"]) >= reserved
    assert sorted(len(s["runs"]) for s in scores.values())[-2:] == [RACE_RESERVED_SEEDS] * 2  # leader, nearest
    assert budget.race == {**budget.race, "rounds": len(race["rounds"]), "ended": race["ended"]}
    (line,) = [x for x in describe_budget(budget.record()) if x.startswith("re-scoring race")]
    assert line.startswith(
        f"re-scoring race under the time budget: 2 rounds kept from the trials (a run for the leader and its "
        f"nearest challenger, 2 waves of runs), {len(race['rounds'])} ran"
    )
