"""Tuner pieces that need no Ray cluster: the Optuna searcher's crash reconciliation, the study
consistency check, samplers, the run directory, error formatting."""

from __future__ import annotations

import pickle

import optuna
import pytest

from autoaug.core.errors import SearchError
from autoaug.search.config import METRIC
from autoaug.search.decide.assemble import TrialRecord
from autoaug.search.run_dir import RunDir
from autoaug.search.space import SearchSpace
from autoaug.search.tune.progress import format_exception
from autoaug.search.tune.schedulers import GuardedFIFOScheduler
from autoaug.search.tune.searcher import StudySearcher
from autoaug.search.tune.study import (
    FINAL_STEP_ATTR,
    REPLACES_ATTR,
    RETRY_ATTR,
    TUNE_TRIAL_ATTR,
    check_study,
    make_sampler,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
SPACE = SearchSpace(num_sub_policies=2)


def _searcher(url: str, max_steps: int | None = None) -> StudySearcher:
    return StudySearcher(
        SPACE.distributions(), metric=METRIC, mode="max", study_name="s", storage_url=url, max_steps=max_steps
    )


def _result(value: float, step: int) -> dict:
    return {METRIC: value, "training_iteration": step}


def _record(search: StudySearcher, trial_id: str, config: dict, score, status="completed") -> TrialRecord:
    return TrialRecord(
        trial_id=trial_id, index=0, status=status, params=config, policy=SPACE.to_policy(config), score=score, epochs=2
    )


def test_driver_crash_between_snapshot_and_study_writes_is_reconciled(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    first = _searcher(url)
    c1, c2 = first.suggest("t1"), first.suggest("t2")
    first.on_trial_result("t1", _result(0.3, 1))
    first.on_trial_complete("t1", _result(0.5, 2))
    snapshot = tmp_path / "searcher.pkl"
    first.save(str(snapshot))  # what Tune's experiment snapshot holds: t1 done, t2 running
    # After the snapshot, before the kill: t2 finishes (the study is told), t3 is asked.
    first.on_trial_result("t2", _result(0.4, 1))
    first.on_trial_complete("t2", _result(0.6, 2))
    c3 = first.suggest("t3")
    study = optuna.load_study(study_name="s", storage=url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "RUNNING"]
    del first  # kill -9

    # Restore as Tune does: a searcher object, then restore() from the snapshot.
    second = _searcher(url)
    second.restore(str(snapshot))
    # Tune resumes t2 from its last checkpoint; it reports and completes again: not told twice.
    second.on_trial_result("t2", _result(0.6, 2))
    second.on_trial_complete("t2", _result(0.6, 2))
    # Tune creates new trials for the rest: the proposal asked for t3 (which Tune's snapshot never
    # knew) is asked again and goes to the first of them; t3's Optuna trial is FAIL.
    c4 = second.suggest("t4")
    assert c4 == c3
    second.on_trial_result("t4", _result(0.7, 1))
    second.on_trial_complete("t4", _result(0.8, 2))
    c5 = second.suggest("t5")
    # The sampler's random state came back from the snapshot; it must not replay the proposal
    # made after it (t3's, now t4's): no candidate is trained twice.
    assert c5 not in (c1, c2, c3)
    second.on_trial_complete("t5", _result(0.1, 2))

    study = optuna.load_study(study_name="s", storage=url)
    states = [
        (t.number, t.state.name, t.value, t.user_attrs.get(TUNE_TRIAL_ATTR), t.user_attrs.get(REPLACES_ATTR))
        for t in study.trials
    ]
    assert states == [
        (0, "COMPLETE", 0.5, "t1", None),
        (1, "COMPLETE", 0.6, "t2", None),
        (2, "FAIL", None, "t3", None),  # asked for t3, lost with the driver...
        (3, "COMPLETE", 0.8, "t4", 2),  # ... asked again in its place, run as t4
        (4, "COMPLETE", 0.1, "t5", None),
    ]
    records = [
        _record(second, "t1", c1, 0.5),
        _record(second, "t2", c2, 0.6),
        _record(second, "t4", c4, 0.8),
        _record(second, "t5", c5, 0.1),
    ]
    assert check_study(study, records, SPACE) == []


def test_an_orphan_with_incomplete_parameters_is_asked_again_and_completed_by_the_sampler(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    first = _searcher(url)
    first.suggest("t1")
    snapshot = tmp_path / "searcher.pkl"
    first.save(str(snapshot))
    # The driver died inside ask(): a trial exists with only some of its parameters.
    partial = first.study.ask()
    mag = partial.suggest_int("sp0_op0_mag", 0, 9)
    second = _searcher(url)
    second.restore(str(snapshot))
    fresh = second.suggest("t2")  # the parameters it had, the others proposed now
    assert set(fresh) == set(SPACE.param_names()) and fresh["sp0_op0_mag"] == mag
    study = optuna.load_study(study_name="s", storage=url)
    assert study.trials[partial.number].state.name == "FAIL"
    (taken,) = [t for t in study.trials if t.user_attrs.get(TUNE_TRIAL_ATTR) == "t2"]
    assert taken.user_attrs[REPLACES_ATTR] == partial.number and taken.state.name == "RUNNING"
    second.on_trial_complete("t1", _result(0.5, 2))  # t1 went on in the trial asked again for it
    second.on_trial_complete("t2", _result(0.4, 2))
    study = optuna.load_study(study_name="s", storage=url)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"]
    records = [_record(second, "t1", study.trials[2].params, 0.5), _record(second, "t2", fresh, 0.4)]
    assert check_study(study, records, SPACE) == []


def test_a_trial_tune_resumes_continues_in_a_new_optuna_trial_with_its_earlier_epochs(tmp_path):
    """Optuna hands a live trial only to the process that asked for it: a Tune trial that Tune
    resumes from its checkpoint after a driver crash goes on in an Optuna trial asked again in
    its place, which holds every epoch's score; a warm-start point still waiting before it goes to
    the next new Tune trial, not lost."""
    url = f"sqlite:///{tmp_path}/study.db"
    first = _searcher(url, max_steps=3)
    config = first.suggest("t1")
    first.on_trial_result("t1", _result(0.3, 1))
    point = dict(config, sp0_op0_mag=(config["sp0_op0_mag"] + 1) % 10)
    first.study.enqueue_trial(point)  # a warm-start point not proposed yet
    snapshot = tmp_path / "searcher.pkl"
    first.save(str(snapshot))
    del first  # kill -9
    second = _searcher(url, max_steps=3)
    second.restore(str(snapshot))
    second.on_trial_result("t1", _result(0.4, 2))  # Tune resumes t1 from its checkpoint
    second.on_trial_complete("t1", _result(0.5, 3))
    assert second.suggest("t2") == point
    study = optuna.load_study(study_name="s", storage=url)
    old, waiting, new = study.trials[0], study.trials[1], study.trials[2]
    assert (old.state.name, old.intermediate_values) == ("FAIL", {1: 0.3})
    assert (new.state.name, new.value, new.params) == ("COMPLETE", 0.5, config)
    assert new.intermediate_values == {1: 0.3, 2: 0.4, 3: 0.5}
    assert new.user_attrs[TUNE_TRIAL_ATTR] == "t1" and new.user_attrs[REPLACES_ATTR] == 0
    assert waiting.user_attrs[TUNE_TRIAL_ATTR] == "t2" and waiting.params == point
    second.on_trial_complete("t2", _result(0.6, 3))
    study = optuna.load_study(study_name="s", storage=url)
    records = [_record(second, "t1", config, 0.5), _record(second, "t2", point, 0.6)]
    assert check_study(study, records, SPACE) == []


def test_searcher_state_pickles_with_its_sqlite_study(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url)
    search.suggest("t1")
    clone = pickle.loads(pickle.dumps(search))
    assert clone.study.trials[0].user_attrs[TUNE_TRIAL_ATTR] == "t1"


def test_check_study_reports_each_kind_of_mismatch(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url)
    configs = {tid: search.suggest(tid) for tid in ("a", "b", "c", "d")}
    search.on_trial_complete("a", _result(0.5, 2))
    search.on_trial_complete("b", _result(0.4, 2))
    search.on_trial_complete("c", None, error=True)
    # "d" is left RUNNING
    study = optuna.load_study(study_name="s", storage=url)
    other = dict(configs["a"], sp0_op0_mag=(configs["a"]["sp0_op0_mag"] + 1) % 10)
    records = [
        _record(search, "a", configs["a"], 0.5),
        _record(search, "b", configs["b"], 0.45),  # Tune and Optuna disagree on the score
        _record(search, "c", other, 0.2),  # Tune says completed, Optuna FAIL; params differ too
        _record(search, "e", configs["a"], 0.3),  # no Optuna trial
    ]
    problems = check_study(study, records, SPACE)
    text = "\n".join(problems)
    assert "Tune trial b scored 0.45 but Optuna trial 1 holds 0.4" in text
    assert "Tune trial c completed but Optuna trial 2 is FAIL (expected COMPLETE)" in text
    assert "Tune trial c and Optuna trial 2 have different parameters" in text
    assert "Tune trial e has no Optuna trial" in text
    assert "Optuna trial 3 is still RUNNING" in text
    assert "names Tune trial d, which does not exist" in text
    assert not any("trial a" in p for p in problems)


def test_warm_start_points_the_time_budget_never_reached_are_not_a_problem(tmp_path):
    """Enqueued warm-start points stay WAITING when the budget ends the search before a trial
    asks for them: a problem of the study otherwise, expected when the budget ended it."""
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url)
    config = search.suggest("a")
    search.on_trial_complete("a", _result(0.5, 2))
    study = optuna.load_study(study_name="s", storage=url)
    study.enqueue_trial(dict(config))
    study.enqueue_trial(dict(config))
    records = [_record(search, "a", config, 0.5)]
    assert check_study(study, records, SPACE, budget_ended=True) == []
    assert check_study(study, records, SPACE) == [
        "Optuna trial 1 is still WAITING",
        "Optuna trial 1 belongs to no Tune trial",
        "Optuna trial 2 is still WAITING",
        "Optuna trial 2 belongs to no Tune trial",
    ]


@pytest.mark.parametrize(
    "name, cls",
    [
        ("tpe", "TPESampler"),
        ("random", "RandomSampler"),
        ("qmc", "QMCSampler"),
        ("cmaes", "CmaEsSampler"),
        ("gp", "GPSampler"),
        ("local", "LocalSampler"),
    ],
)
def test_samplers_by_name_are_seeded(name, cls):
    a, b = make_sampler(name, 7), make_sampler(name, 7)
    assert type(a).__name__ == cls
    sa = optuna.create_study(sampler=a)
    sb = optuna.create_study(sampler=b)
    ta = sa.ask(SPACE.distributions())
    tb = sb.ask(SPACE.distributions())
    assert ta.params == tb.params


def _proposals(sampler, n):
    study = optuna.create_study(sampler=sampler, direction="maximize")
    out = []
    for i in range(n):
        trial = study.ask(SPACE.distributions())
        out.append(trial.params)
        study.tell(trial, float(i % 3))
    return out


def test_startup_trials_is_where_tpe_stops_proposing_at_random():
    random = _proposals(make_sampler("random", 3), 6)
    assert _proposals(make_sampler("tpe", 3), 6) == random  # Optuna's default: 10 random trials
    early = _proposals(make_sampler("tpe", 3, startup_trials=3), 6)
    assert early[:3] == random[:3]
    assert all(a != b for a, b in zip(early[3:], random[3:]))  # from the 4th on, TPE's model decides


def test_startup_trials_needs_a_sampler_with_a_model():
    with pytest.raises(ValueError, match=r"startup_trials is 3 but sampler 'random' proposes without a model"):
        make_sampler("random", 0, startup_trials=3)


def test_unknown_sampler():
    with pytest.raises(ValueError, match="unknown sampler 'hyperband'"):
        make_sampler("hyperband", 0)


def test_run_dir_json_round_trip_and_uri_forms(tmp_path):
    run = RunDir(str(tmp_path / "runs"), "exp")
    assert not run.exists()
    run.write_json("state.json", {"a": 1, "t": (1, 2)})
    assert run.exists() and run.exists("state.json") and not run.exists("nope.json")
    assert run.read_json("state.json") == {"a": 1, "t": [1, 2]}
    assert run.local_path == str(tmp_path / "runs" / "exp")
    same = RunDir(f"file://{tmp_path}/runs", "exp")
    assert same.read_json("state.json") == {"a": 1, "t": [1, 2]}
    mem = RunDir("mock://bucket/runs", "exp")
    assert mem.local_path is None and mem.uri == "mock://bucket/runs/exp"
    run.delete()
    assert not run.exists()


def test_exceptions_are_shown_as_one_line_root_cause():
    try:
        try:
            raise ValueError("bad\n  value")
        except ValueError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as exc:
        assert format_exception(exc) == "ValueError: bad value"


# ----------------------------------------------------------------------------------------------
# StudyGuard: restored trials the study already finished are stopped, not run again


class _FakeTrial:
    def __init__(self, trial_id, status="PENDING", num_failures=0):
        self.trial_id, self.status, self.num_failures = trial_id, status, num_failures


class _FakeController:
    def __init__(self, trials):
        self.trials, self.stopped = trials, []

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):
        self.stopped.append(trial.trial_id)
        trial.status = "TERMINATED"


def test_guard_stops_pending_trials_that_the_study_finished(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url)
    for tid in ("done", "failed", "retry", "running"):
        search.suggest(tid)
    search.on_trial_complete("done", _result(0.5, 2))
    search.on_trial_complete("failed", None, error=True)
    search.on_trial_complete("retry", None, error=True)
    guard = GuardedFIFOScheduler()
    guard._setup_guard(url, "s", max_failures=1)
    trials = [
        _FakeTrial("done"),  # Tune's snapshot predates its end
        _FakeTrial("failed"),  # same, for a failure
        _FakeTrial("retry", num_failures=2),  # ERROR in Tune, resumed on purpose (resume_errored)
        _FakeTrial("running"),  # really unfinished: resumes
        _FakeTrial("new"),  # created after the restore
    ]
    controller = _FakeController(trials)
    chosen = guard.choose_trial_to_run(controller)
    assert controller.stopped == ["done", "failed"]
    assert chosen.trial_id == "retry"
    guard.choose_trial_to_run(controller)  # the study is read once per driver session
    assert controller.stopped == ["done", "failed"]
    assert "_guard_done" not in pickle.loads(pickle.dumps(guard)).__dict__


def test_final_step_is_kept_with_the_trial(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url)
    search.suggest("t1")
    search.on_trial_result("t1", _result(0.2, 1))
    search.on_trial_complete("t1", _result(0.4, 3))  # Tune hands the last result to on_trial_complete only
    frozen = optuna.load_study(study_name="s", storage=url).trials[0]
    assert frozen.user_attrs[FINAL_STEP_ATTR] == 3 and frozen.intermediate_values == {1: 0.2, 3: 0.4}


def test_every_epoch_is_an_intermediate_value_and_early_stopped_trials_are_pruned(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url, max_steps=3)
    for tid in ("full", "stopped", "broken"):
        search.suggest(tid)
    for step, value in ((1, 0.2), (2, 0.3)):
        search.on_trial_result("full", _result(value, step))
    search.on_trial_complete("full", _result(0.5, 3))
    search.on_trial_complete("stopped", _result(0.25, 1))  # ASHA stopped it at its first rung
    search.on_trial_complete("broken", None, error=True)
    study = optuna.load_study(study_name="s", storage=url)
    full, stopped, broken = study.trials
    assert (full.state.name, full.value, full.intermediate_values) == ("COMPLETE", 0.5, {1: 0.2, 2: 0.3, 3: 0.5})
    assert (stopped.state.name, stopped.value, stopped.intermediate_values) == ("PRUNED", 0.25, {1: 0.25})
    assert broken.state.name == "FAIL"
    # The study is what optuna.visualization / optuna-dashboard read: learning curves and states.
    assert [t.number for t in study.get_trials(states=[optuna.trial.TrialState.PRUNED])] == [stopped.number]
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    from optuna.visualization.matplotlib import plot_intermediate_values

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ax = plot_intermediate_values(study)
    curves = sorted(len(line.get_xdata()) for line in ax.get_lines())
    assert curves == [1, 3]  # the learning curves: 1 epoch (pruned), 3 epochs (complete)
    rec_full = _record(search, "full", full.params, 0.5)
    rec_stopped = _record(search, "stopped", stopped.params, 0.25, status="early_stopped")
    rec_broken = _record(search, "broken", broken.params, None, status="failed")
    assert check_study(study, [rec_full, rec_stopped, rec_broken], SPACE) == []


def test_epochs_a_trial_did_not_validate_are_not_intermediate_values(tmp_path):
    """A trial validates only the epochs its score is read from: before the first it reports no
    score, between windows the last window's, which the study already holds at its own epoch."""
    url = f"sqlite:///{tmp_path}/study.db"
    search = _searcher(url, max_steps=4)
    search.suggest("t")
    for step, score, val in ((1, None, None), (2, 0.3, 0.3), (3, 0.3, None)):
        search.on_trial_result("t", {**_result(score, step), "val_accuracy": val})
    search.on_trial_complete("t", {**_result(0.5, 4), "val_accuracy": 0.5})
    (trial,) = optuna.load_study(study_name="s", storage=url).trials
    assert (trial.state.name, trial.value, trial.intermediate_values) == ("COMPLETE", 0.5, {2: 0.3, 4: 0.5})


def test_asha_waits_for_a_trials_first_score_and_cuts_on_real_ones():
    from ray.tune.schedulers import TrialScheduler

    from autoaug.search.tune.schedulers import GuardedASHAScheduler

    class _Trial:
        def __init__(self, trial_id):
            self.trial_id = trial_id

    scheduler = GuardedASHAScheduler(
        time_attr="training_iteration", max_t=4, grace_period=2, reduction_factor=2, metric=METRIC, mode="max"
    )
    strong, weak = _Trial("strong"), _Trial("weak")
    for t in (strong, weak):
        scheduler.on_trial_add(None, t)
        # epoch 1 is not validated: no score, no decision (and no TypeError from None)
        assert scheduler.on_trial_result(None, t, {"training_iteration": 1, METRIC: None}) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, strong, {"training_iteration": 2, METRIC: 0.6}) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, weak, {"training_iteration": 2, METRIC: 0.2}) == TrialScheduler.STOP


def test_a_failure_retried_after_restore_is_recorded_as_a_linked_new_trial(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    first = _searcher(url)
    config = first.suggest("t1")
    first.on_trial_complete("t1", None, error=True)
    snapshot = tmp_path / "searcher.pkl"
    first.save(str(snapshot))
    # Restored with resume_errored: Tune runs t1 again and it succeeds this time.
    second = _searcher(url)
    second.restore(str(snapshot))
    second.on_trial_result("t1", _result(0.5, 1))
    second.on_trial_complete("t1", _result(0.7, 2))
    study = optuna.load_study(study_name="s", storage=url)
    assert [(t.state.name, t.value) for t in study.trials] == [("FAIL", None), ("COMPLETE", 0.7)]
    assert study.trials[1].user_attrs == {TUNE_TRIAL_ATTR: "t1", RETRY_ATTR: 0}
    record = _record(second, "t1", config, 0.7)
    assert check_study(study, [record], SPACE) == []


def test_proposals_after_a_restore_are_reproducible(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    first = _searcher(url)
    first.suggest("t1")
    snapshot = tmp_path / "searcher.pkl"
    first.save(str(snapshot))
    orphaned = first.suggest("t2")  # asked after the snapshot: lost with the crash
    crashed = (tmp_path / "study.db").read_bytes()
    proposals = []
    for _ in range(2):
        (tmp_path / "study.db").write_bytes(crashed)
        again = _searcher(url)
        again.restore(str(snapshot))
        proposals.append((again.suggest("new1"), again.suggest("new2")))
    assert proposals[0] == proposals[1]
    assert proposals[0][0] == orphaned  # the proposal lost with the crash, asked again
    assert proposals[0][1] != orphaned  # then the sampler's new ones, not a replay


def test_a_snapshot_of_another_searcher_is_refused_in_one_line(tmp_path):
    snapshot = tmp_path / "searcher.pkl"
    snapshot.write_bytes(pickle.dumps({"_ot_trials": {}, "_completed_trials": set()}))  # OptunaSearch's
    with pytest.raises(SearchError, match=r"is not a snapshot of autoaug's StudySearcher .*--overwrite$"):
        _searcher(f"sqlite:///{tmp_path}/study.db").restore(str(snapshot))
