"""The PBA method (Population Based Augmentation on Ray Tune's PBT): its settings and bad input,
explore inside the search space, exploit carrying weights and policy history together, and a
search whose driver is killed with SIGKILL, resumes and stores a schedule."""

from __future__ import annotations

import json
import os
import random
import re
import sys
from pathlib import Path

import pytest

from autoaug.launch.cli import build_parser, main
from autoaug.launch.search_cmd import build_search_config
from autoaug.policies.schedule import Schedule
from autoaug.search.config import SearchConfig
from autoaug.search.methods.pba.method import PbaConfig, explore_params, initial_population
from autoaug.search.space import SearchSpace

# Four members of 256 images, 4 epochs, perturbed after every epoch, half the population cloning.
TINY = [
    "--method",
    "pba",
    "--set",
    "pba.population=4",
    "--set",
    "pba.perturbation_interval=1",
    "--set",
    "pba.quantile=0.5",
    "--set",
    "train.epochs=4",
    "--set",
    "train.train_size=256",
    "--set",
    "train.batch_size=32",
]


def _config(argv):
    return build_search_config(build_parser().parse_args(["search", *argv]))


def _dirs(tmp_path):
    return ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]


# ------------------------------------------------------------------------------------------------
# Settings
def test_pba_settings_come_from_the_preset_and_set():
    preset = _config(["--data", "x.parquet", "--preset", "pba-cpu"])
    assert preset.method == "pba" and preset.method_config == PbaConfig(population=8, perturbation_interval=4)
    assert preset.train.epochs == 120 and not preset.rescore and preset.base == "auto" and not preset.warm_start
    c = _config(["--data", "x.parquet", *TINY, "--set", "pba.resample_probability=0.5", "--set", "pba.init=zero"])
    assert c.method_settings(PbaConfig) == PbaConfig(
        population=4, perturbation_interval=1, quantile=0.5, resample_probability=0.5, init="zero"
    )
    assert SearchConfig.from_dict(c.to_dict()) == c
    assert c.search_method.num_trials(c) == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "pba.population=1"], "SearchConfig.pba.population: 1 is invalid; expected an integer >= 2"),
        (["--set", "pba.quantile=0.7"], "SearchConfig.pba.quantile: 0.7 is invalid; expected a number in (0, 0.5]"),
        (["--set", "pba.resample_probability=2"], "SearchConfig.pba.resample_probability: 2 is invalid"),
        (["--set", "pba.bogus=1"], "unknown pba setting(s) ['bogus']"),
        (["--set", "pba.perturbation_interval=4"], "pba.perturbation_interval 4 is not below train.epochs 4"),
        (["--set", "train.val_size=0"], "train.val_size is 0: PBA ranks the population"),
        (
            ["--set", "train.eval_epochs=[2]"],
            "train.eval_epochs is (2,): PBA ranks the population on the validation "
            "accuracy after every epoch; set eval_epochs to null",
        ),
        (["--set", "rescore=true"], "use --preset pba-cpu, or --set rescore=false"),
    ],
)
def test_bad_pba_settings_exit_2_with_one_line_before_work(tmp_path, capsys, cifar_small, argv, message):
    code = main(
        ["search", "--data", str(cifar_small), "--preset", "smoke", "--name", "bad", *TINY, *argv, *_dirs(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "bad").exists()


# ------------------------------------------------------------------------------------------------
# Explore
@pytest.mark.parametrize("resample, shift", [(0.0, 0), (0.0, 3), (0.2, 3), (1.0, 3), (0.5, 9)])
def test_explore_stays_inside_the_space(resample, shift):
    space = SearchSpace(
        num_sub_policies=3, exclude_ops=("SamplePairing", "Invert"), num_magnitude_bins=7, num_probabilities=6
    )
    config = SearchConfig(name="x", train={"preset": "smoke"}, space=space, method="pba")
    rng = random.Random(7)
    params = initial_population(config)[0]
    steps = space.num_probabilities - 1
    for _ in range(300):
        new, ops = explore_params(params, space, rng, resample, shift)
        space.to_policy(new)  # on the grid, candidate operations, bins in range: else ValueError
        assert set(new) == set(params) == set(ops)
        for name, value in new.items():
            if name.endswith("_type"):
                assert value in space.op_choices and (ops[name] == "resample" or value == params[name])
            elif ops[name] != "resample":  # a shift: at most `shift` grid steps, clipped
                old_i = round(params[name] * steps) if name.endswith("_prob") else params[name]
                new_i = round(value * steps) if name.endswith("_prob") else value
                assert abs(new_i - old_i) <= shift and int(ops[name]) == new_i - old_i
        if resample == 0 and shift == 0:
            assert new == params
        params = new
    # Resampling with probability 1 visits the whole grid of a magnitude.
    if resample == 1.0:
        seen = {explore_params(params, space, rng, 1.0, 0)[0]["sp0_op0_mag"] for _ in range(200)}
        assert seen == set(range(space.num_magnitude_bins))


def test_zero_init_starts_unaugmented_and_warm_start_comes_first():
    config = SearchConfig(
        name="x",
        train={"preset": "smoke"},
        method="pba",
        method_config={"population": 3, "init": "zero"},
        warm_start=("autoaugment-cifar10",),
        space={"num_sub_policies": 25},
    )
    members = initial_population(config)
    assert len(members) == 3
    assert (
        config.space.to_policy(members[0]).sub_policies
        == config.space.to_policy(config.space.to_params(config.space.to_policy(members[0]))).sub_policies
    )
    assert all(m[k] == 0 for m in members[1:] for k in m if k.endswith(("_prob", "_mag")))


# ------------------------------------------------------------------------------------------------
# Exploit: weights and policy history travel together
class _FakeTune:
    """The parts of ``ray.tune`` a function trainable calls, for one member outside Tune."""

    def __init__(self, trial_id, checkpoint=None):
        from ray import tune

        self.trial_id, self.checkpoint, self.reports = trial_id, checkpoint, []
        self.Checkpoint = tune.Checkpoint
        self.saved = []

    def install(self, monkeypatch):
        from ray import tune

        monkeypatch.setattr(tune, "get_checkpoint", lambda: self.checkpoint)
        monkeypatch.setattr(tune, "get_context", lambda: type("C", (), {"get_trial_id": lambda _: self.trial_id})())
        monkeypatch.setattr(tune, "report", self.report)

    def report(self, metrics, checkpoint=None):
        self.reports.append(dict(metrics))
        if checkpoint is not None:  # keep a copy, as Tune persists it
            import shutil
            import tempfile

            dest = tempfile.mkdtemp(prefix="fake-tune-")
            shutil.copytree(checkpoint.path, dest, dirs_exist_ok=True)
            self.saved.append(dest)


def _run_member(monkeypatch, trial_id, params, space, train_config, checkpoint=None, explore=None):
    from ray import tune

    from autoaug.search.methods.pba.trial import run_pba_trial

    fake = _FakeTune(trial_id, None if checkpoint is None else tune.Checkpoint.from_directory(checkpoint))
    with monkeypatch.context() as m:
        fake.install(m)
        run_pba_trial(
            {"policy": params, "explore": explore or {}},
            train_config=train_config.to_dict(),
            space=space.to_dict(),
            policy_prefix="t",
            perturbation_interval=2,
        )
    return fake


def test_a_member_that_clones_another_continues_its_weights_with_its_policy_history(monkeypatch, cifar_small):
    from autoaug.proxy_models.train import TrainConfig, load_checkpoint, train

    space = SearchSpace(num_sub_policies=2)
    cfg = TrainConfig.from_preset(
        "smoke", data=str(cifar_small), train_size=128, val_size=64, epochs=4, batch_size=32, num_threads=1
    )
    rng = random.Random(3)
    config = SearchConfig(
        name="x", train={"preset": "smoke"}, space=space, method="pba", method_config={"population": 2}
    )
    params_a, params_b = initial_population(config)
    params_b, ops = explore_params(params_a, space, rng, 0.5, 3)
    a = _run_member(monkeypatch, "A", params_a, space, cfg)
    # A checkpoints at its perturbation boundaries (epochs 2 and 4): B clones A's epoch-2 checkpoint.
    assert [r["epoch"] for r in a.reports] == [1, 2, 3, 4] and len(a.saved) == 2
    b = _run_member(monkeypatch, "B", params_b, space, cfg, checkpoint=a.saved[0], explore=ops)
    assert [r["epoch"] for r in b.reports] == [3, 4]  # continues after A's epoch 2, not from scratch
    (event,) = json.loads(b.reports[0]["pba_events"])
    assert event["epoch"] == 2 and event["member"] == "B" and event["cloned"] == "A"
    assert event["changes"] and all(v[2] == ops[k] for k, v in event["changes"].items())
    final = load_checkpoint(b.saved[-1])
    pa, pb = space.to_policy(params_a), space.to_policy(params_b)
    schedule = Schedule.from_dict(final["schedule"])
    assert [s.start for s in schedule.stages] == [0.0, 0.5]
    assert [s.policy.content_hash for s in schedule.stages] == [pa.content_hash, pb.content_hash]
    assert final["epoch_policy_hashes"] == [pa.content_hash] * 2 + [pb.content_hash] * 2
    assert json.loads(Path(b.saved[-1], "pba.json").read_text())["lineage"] == [event]
    # B's epochs 3-4 are exactly those of one uninterrupted run of A's policy then B's: B started from
    # A's weights, optimizer, learning-rate schedule and data position, and trained with its own policy.
    reference = train(cfg, Schedule("r", [(0.0, pa), (0.5, pb)]))
    keys = ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr")
    assert [{k: r[k] for k in keys} for r in b.reports] == [{k: r[k] for k in keys} for r in reference.history[2:]]
    assert [{k: r[k] for k in keys} for r in a.reports[:2]] == [{k: r[k] for k in keys} for r in reference.history[:2]]
    # Restarted from its own checkpoint (a pause, a failure, a driver restart), a member continues
    # as it was: no event, the same schedule.
    again = _run_member(monkeypatch, "A", params_a, space, cfg, checkpoint=a.saved[0])
    assert [r["epoch"] for r in again.reports] == [3, 4] and "pba_events" not in again.reports[0]
    assert [{k: r[k] for k in keys} for r in again.reports] == [{k: r[k] for k in keys} for r in a.reports[2:]]
    assert [s.policy.content_hash for s in Schedule.from_dict(load_checkpoint(again.saved[-1])["schedule"]).stages] == [
        pa.content_hash
    ]


# ------------------------------------------------------------------------------------------------
# End to end
def _stored_schedule(store_dir, ref):
    from autoaug.policies.store import PolicyStore

    stored = PolicyStore(str(store_dir))
    return stored.load(ref), stored.get(ref).provenance


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")
def test_a_killed_pba_search_in_packs_resumes_its_population_and_stores_a_schedule_with_its_events(
    tmp_path, capsys, cifar_small, kill_driver
):
    """One PBA search in packs of 2 (the base measured first, its runs in packs too, then 4
    members over 4 epochs, trained two at a time by a pack server, an exploit restarting a
    member there from another's checkpoint): a calibration pack's process killed at its third step
    (Ray runs the task again), then the driver killed with SIGKILL once Tune has recorded the
    population's 6th checkpoint save, then resumed: the same members finish from their checkpoints
    (each sent to the resumed driver's server), and the search stores a schedule with its
    population, its events (each said as it happened, by one driver or the other) and its lineage."""
    dirs = _dirs(tmp_path)
    argv = [
        sys.executable,
        "-m",
        "autoaug.launch.cli",
        "search",
        "--data",
        str(cifar_small),
        "--preset",
        "smoke",
        "--name",
        "pb",
        *TINY,
        "--base",
        "auto",
        "--set",
        "base_extra_seeds=0",  # one run per base (the race has tests of its own)
        "--pack",
        "2",
        *dirs,
    ]
    run = tmp_path / "runs" / "pb"
    # A calibration pack's process killed at its 3rd step (the bases' 3 runs: packs of 2 and 1 on 2
    # CPUs); the driver once Tune has recorded the population's 6th save (4 x 4 epochs: mid-search; a save is
    # a member's report with its checkpoint, or PBT saving a top member to clone at its boundary: in packs the
    # members reach their boundaries together, and the 6th save may come with the 4th checkpoint folder).
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = kill_driver(argv, env, "pba.after_member_checkpoint:6", 300, also="pack.mid_epoch:3=kill")
    assert kill_driver.fired("pack.mid_epoch")
    assert (
        "in packs of up to 2" in killed
        and "pack servers: 1 of 4 trials each, trained 2 at a time in step (4 trials at once)" in killed
    )
    calibrated = json.loads((run / "calibration.json").read_text())
    assert sorted(r.get("pack", 1) for r in calibrated["runs"].values()) == [1, 2, 2], calibrated["runs"]
    assert not (run / "result.json").exists()
    before = {t.name: sorted(c.name for c in t.glob("checkpoint_*")) for t in run.glob("trial_*")}
    assert len(before) == 4 and all(before.values())  # each member's first checkpoint, at least

    # Resumed in this process (the module's Ray session), as `autoaug search --resume pb` runs.
    code = main(["search", "--resume", "pb", *dirs])
    resumed = capsys.readouterr().out
    assert code == 0, resumed[-3000:]
    assert "stored as pb@1" in resumed and "pba: best member" in resumed and "schedule: " in resumed
    assert "pack servers: " in resumed and " trial-epochs (" in resumed  # what the resumed driver's servers did
    # The same four members finished (no new population), keeping what the killed driver had saved.
    after = {t.name: sorted(c.name for c in t.glob("checkpoint_*")) for t in run.glob("trial_*")}
    assert set(after) == set(before) and all(set(before[t]) <= set(after[t]) for t in before)

    policy, prov = _stored_schedule(tmp_path / "store", "pb@1")
    assert len(prov["search"]["config"]) and prov["time"]
    # The base was measured before the population started, and every stage trains on it.
    chosen = prov["calibration"]["base"]["chosen"]
    assert set(prov["calibration"]["base"]["scores"]) == {"none", "crop", "standard"}
    assert "transfer" not in prov["calibration"] and policy.base == chosen
    method = prov["method"]
    assert method["name"] == "pba" and method["population"] == 4 and method["perturbation_interval"] == 1
    assert method["packs"]["member_epochs"] >= method["packs"]["rounds"] >= 1
    rows = [json.loads(line) for t in run.glob("trial_*") for line in (t / "result.json").read_text().splitlines()]
    assert max(r["pack_size"] for r in rows) == 2  # members trained together, never more than a pack
    schedule = Schedule.from_dict(prov["schedule"])  # the schedule a user trains with; its content hash checked
    assert schedule.final.content_hash == policy.content_hash  # the stored policy is the last stage
    assert schedule.name == "pb" and method["schedule_hash"] == schedule.content_hash
    members = {m["trial_id"] for m in method["members"]}
    assert len(members) == 4 and method["best_member"] in members
    assert all(m["status"] == "completed" and m["score"] is not None for m in method["members"])
    assert prov["best"]["trial_id"] == method["best_member"]
    assert prov["best"]["score"] == max(m["score"] for m in method["members"])
    events = method["events"]
    assert events, "half the population clones the other half after every epoch: some member must have"
    for e in events:
        assert e["member"] in members and e["cloned"] in members and e["member"] != e["cloned"]
        assert 1 <= e["epoch"] < 4
        # said as it happened: the only sign of the evolution in a log before the members finish
        assert f"epoch {e['epoch']}: member {e['member']} continues from {e['cloned']}" in killed + resumed
    # ... and every event the resumed driver said is recorded: Tune's restore had copied the event
    # log the killed driver left, and would have uploaded that copy over it at its last snapshot.
    said = set(re.findall(r"^epoch (\d+): member (\S+) continues from (\S+) ", resumed, re.MULTILINE))
    assert said <= {(str(e["epoch"]), e["member"], e["cloned"]) for e in events}, (said, events)
    # The best member's lineage is among the population's events, and makes its schedule's stages.
    key = lambda e: (e["epoch"], e["member"], e["policy_hash"])  # noqa: E731
    assert {key(e) for e in method["lineage"]} <= {key(e) for e in events}
    assert len(schedule.stages) <= 1 + len(method["lineage"])
    assert all(stage.policy.base == chosen for stage in schedule.stages)
    result = json.loads((run / "result.json").read_text())
    assert result["policy_hash"] == policy.content_hash


def test_a_config_file_sets_the_pba_section(tmp_path):
    file = tmp_path / "search.yaml"
    file.write_text("method: pba\npba:\n  population: 6\n  perturbation_interval: 2\n  init: zero\n")
    c = _config(["--data", "x.parquet", "--preset", "smoke", "--config", str(file), "--set", "train.epochs=8"])
    assert c.method == "pba" and c.method_config == PbaConfig(population=6, perturbation_interval=2, init="zero")


def test_report_of_a_pba_search_says_where_its_record_is_in_one_line(tmp_path, capsys):
    run = tmp_path / "runs" / "p"
    run.mkdir(parents=True)
    (run / "search_config.json").write_text(json.dumps({"config": {"method": "pba", "name": "p"}}))
    code = main(["report", "p", "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "r.png")])
    err = capsys.readouterr().err
    assert code == 2 and "is a PBA search: no Optuna study" in err and "autoaug policies show p" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")
def test_a_time_budget_stops_the_population_at_its_checkpoints_and_stores_the_best_schedule(
    tmp_path, capsys, cifar_small
):
    """Under a budget of seconds, members end at their next perturbation boundary (their checkpoint
    holds the schedule they were scored under), members not started are not run, and the best
    member's schedule so far is stored."""
    argv = [
        "search",
        "--data",
        str(cifar_small),
        "--preset",
        "smoke",
        "--name",
        "pbudget",
        *TINY,
        "--set",
        "train.epochs=6",
        "--set",
        "pba.perturbation_interval=2",
        "--time-budget",
        "3s",
        *_dirs(tmp_path),
    ]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "the time budget (3s) ended the search after " in out and " of 4 members" in out
    policy, prov = _stored_schedule(tmp_path / "store", "pbudget@1")
    scored = [t for t in prov["trials"] if t["score"] is not None]
    assert scored and all(t["status"] == "budget_stopped" and t["epochs"] == 2 for t in scored)  # at a boundary
    assert all(t["status"] == "budget_stopped" for t in prov["trials"])
    method = prov["method"]
    assert method["best_member"] == max(scored, key=lambda t: t["score"])["trial_id"]
    assert Schedule.from_dict(prov["schedule"]).final.content_hash == policy.content_hash
    assert prov["budget"]["trials"]["scored"] == len(scored)


def test_an_event_is_said_in_one_line_with_what_explore_changed():
    from autoaug.search.methods.pba.scheduler import describe_event

    event = {
        "epoch": 16,
        "member": "a_00004",
        "cloned": "a_00007",
        "changes": {
            "sp0_op0_mag": [6, 9, "+3"],
            "sp1_op1_prob": [0.2, 0.6, "resample"],
            "sp2_op0_type": ["Rotate", "Color", "resample"],
        },
    }
    line = describe_event(event, 0.5612)
    assert line == (
        "epoch 16: member a_00004 continues from a_00007 (search_score 0.5612), weights and "
        "policy; explore: 3 value(s) changed: 2 resampled, 1 shifted"
    )
    assert "no value changed" in describe_event({**event, "changes": {}}) and "(search_score" not in describe_event(
        event
    )


class _Member:
    """What PBT reads and writes of a Tune trial: id, status, config, tag, resume checkpoint."""

    def __init__(self, i: int) -> None:
        from types import SimpleNamespace

        self.trial_id, self.status, self.config, self.experiment_tag = f"m{i}", "PENDING", {"policy": {}}, str(i)
        self.epoch = 0  # epochs trained
        manager = SimpleNamespace(checkpoint_config=SimpleNamespace(num_to_keep=None), _latest_checkpoint_result=None)
        self.run_metadata = SimpleNamespace(checkpoint_manager=manager)
        self.temporary_state = SimpleNamespace(saving_to=None)

    def set_experiment_tag(self, tag: str) -> None:
        self.experiment_tag = tag

    def set_config(self, config: dict) -> None:
        self.config = config

    @property
    def latest_checkpoint_result(self):
        return self.run_metadata.checkpoint_manager._latest_checkpoint_result

    def is_finished(self) -> bool:
        return self.status == "TERMINATED"


class _TwoSlots:
    """Tune's controller as PBT sees it, training 2 members at a time: a checkpoint is the epoch
    a member had trained; an exploited member restarts from its donor's."""

    search_alg = None

    def __init__(self, members: list) -> None:
        self.members = members

    def get_trials(self) -> list:
        return self.members

    def pause_trial(self, trial, should_checkpoint: bool = True) -> None:
        trial.status = "PAUSED"

    def _schedule_trial_save(self, trial, result=None) -> dict:
        return {"epoch": trial.epoch}

    def start(self, trial) -> None:
        latest = trial.run_metadata.checkpoint_manager
        if latest._latest_checkpoint_result is not None:  # set by an exploit
            trial.epoch = latest._latest_checkpoint_result.checkpoint["epoch"]
            latest._latest_checkpoint_result = None
        trial.status = "RUNNING"


def test_every_member_trains_on_when_two_keep_losing_to_the_paused_ones():
    # 4 members on 2 slots, perturbed after every epoch, half cloning the other half: members 0
    # and 1 always score below the others. Each clones a paused member's checkpoint and so goes
    # back to that member's epoch; the next to train must then be the paused members, which have
    # waited longer, or members 0 and 1 take the slots back and clone the same checkpoints forever.
    from autoaug.search.methods.pba.scheduler import EpochPBT
    from autoaug.search.score import METRIC

    last = 4
    members = [_Member(i) for i in range(4)]
    slots = _TwoSlots(members)
    explored = []  # the configurations PBT explored: one per exploit
    pbt = EpochPBT(
        last_epoch=last,
        metric=METRIC,
        mode="max",
        time_attr="epoch",
        perturbation_interval=1,
        quantile_fraction=0.5,
        hyperparam_mutations={},
        custom_explore_fn=lambda config: explored.append(config) or config,
        log_config=False,  # the search's logs each step into the trial's directory
        synch=False,
    )
    for m in members:
        pbt.on_trial_add(slots, m)
    running: list = []
    for _ in range(100):
        while len(running) < 2 and (chosen := pbt.choose_trial_to_run(slots)) is not None:
            slots.start(chosen)
            running.append(chosen)
        if not running:
            break
        member = running.pop(0)
        member.epoch += 1
        score = 0.1 if member in members[:2] else 0.5
        config = member.config
        decision = pbt.on_trial_result(slots, member, {"epoch": member.epoch, METRIC: score})
        if member.config is not config:  # exploited: it is as far as the checkpoint it restarts from
            assert pbt._trained[member.trial_id] == member.latest_checkpoint_result.checkpoint["epoch"]
        if member.epoch >= last:
            member.status = "TERMINATED"
            pbt.on_trial_complete(slots, member, {"epoch": member.epoch, METRIC: score})
        elif decision == pbt.PAUSE:
            member.status = "PAUSED"
        elif decision == pbt.CONTINUE:
            running.append(member)
    assert [m.status for m in members] == ["TERMINATED"] * 4, [(m.trial_id, m.status, m.epoch) for m in members]
    assert explored  # members 0 and 1 did clone the others


@pytest.mark.parametrize("rotate", [True, False])
def test_a_population_in_packs_pauses_a_member_only_to_restart_it_after_an_exploit(rotate):
    # Every member running at once, as in packs (their processes only wait on the pack servers),
    # half cloning the other half. PBT's rule pauses a member at its boundary whenever another is
    # paused -- as an exploited member is until Tune restarts it -- which in packs only restarts
    # its process for nothing; rotate=False (packs) pauses only the exploited.
    from autoaug.search.methods.pba.scheduler import EpochPBT
    from autoaug.search.score import METRIC

    members = [_Member(i) for i in range(4)]
    tune_ = _TwoSlots(members)  # (what PBT sees of Tune; here no slot limit: every member runs)
    pbt = EpochPBT(
        last_epoch=6,
        metric=METRIC,
        mode="max",
        perturbation_interval=1,
        quantile_fraction=0.5,
        hyperparam_mutations={},
        custom_explore_fn=lambda config: {**config},
        log_config=False,
        rotate=rotate,
    )
    for m in members:
        pbt.on_trial_add(tune_, m)
        tune_.start(m)
    exploits = pauses = 0
    for _ in range(5):
        for i, member in enumerate(members):
            if member.status == "PAUSED":
                tune_.start(member)  # Tune restarts it (an exploited one: from its donor's checkpoint)
            member.epoch += 1
            config = member.config
            decision = pbt.on_trial_result(tune_, member, {"epoch": member.epoch, METRIC: 0.1 if i < 2 else 0.5})
            exploits += member.config is not config
            if decision == pbt.PAUSE:
                pauses += 1
                member.status = "PAUSED"
    assert exploits >= 2
    assert pauses > 0 if rotate else pauses == 0


def test_a_scheduler_saved_before_the_report_order_was_kept_resumes_in_tunes_order():
    import pickle

    from autoaug.search.methods.pba.scheduler import EpochPBT
    from autoaug.search.score import METRIC

    pbt = EpochPBT(last_epoch=4, metric=METRIC, mode="max", time_attr="epoch", hyperparam_mutations={"x": [1, 2]})
    del pbt._reports, pbt._last_report, pbt.rotate  # as pickled by the version before them
    old = pickle.loads(pickle.dumps(pbt))
    assert (old._reports, old._last_report, old.rotate) == (0, {}, True)
    pbt = EpochPBT(last_epoch=4, metric=METRIC, mode="max", time_attr="epoch", hyperparam_mutations={"x": [1, 2]})
    pbt._reports, pbt._last_report = 3, {"a": 3}
    assert pickle.loads(pickle.dumps(pbt))._last_report == {"a": 3}  # a newer one keeps its order
