"""Packs in a search (search/tune/pack.py): the pack server's rounds, joins, drops and restarts in
process, then real smoke searches with ``--pack`` -- each candidate still one Tune and one Optuna
trial with its own ASHA fate -- killed at failpoints (the server mid-epoch; the driver) and
resumed to exactly the requested trials."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from pathlib import Path

import optuna
import pytest
import ray

from autoaug.launch.cli import main
from autoaug.policies import presets
from autoaug.proxy_models.train import TrainConfig
from autoaug.search.tune import pack as pack_mod
from autoaug.search.tune.pack import PackServer, pack_plan

SEARCH = [sys.executable, "-m", "autoaug.launch.cli", "search"]


def test_pack_plan_fills_the_concurrency_or_the_cluster():
    assert pack_plan(4, 2, 1, 0, {"CPU": 2}) == (1, 4)  # a pack at least
    assert pack_plan(4, 8, 1, 0, {"CPU": 2}) == (2, 8)
    assert pack_plan(4, 9, 1, 0, {"CPU": 2}) == (2, 8)  # no more servers than the cluster holds
    assert pack_plan(8, None, 2, 1, {"CPU": 16, "GPU": 2}) == (2, 16)  # one server per GPU
    assert pack_plan(8, None, 2, 0, {"CPU": 16}) == (8, 64)
    # a server takes its trials' share of a GPU (0.125 each), at most one GPU
    assert pack_plan(16, None, 2, 0.125, {"CPU": 16, "GPU": 2}) == (2, 32)
    assert pack_plan(2, None, 2, 0.125, {"CPU": 16, "GPU": 1}) == (4, 8)
    assert [pack_mod.server_gpus(k, 0.125) for k in (1, 2, 8, 16)] == [0.125, 0.25, 1.0, 1.0]
    assert pack_mod.server_gpus(4, 0) == 0
    # a server and its trials' processes (0.01 CPU each) take --cpus-per-trial together
    assert [pack_mod.server_cpus(k, 1) for k in (1, 4, 256)] == [0.99, 0.96, 0.01]
    assert pack_plan(2, None, 1, 0, {"CPU": 2}) == (2, 4)
    assert pack_plan(256, None, 1, 0, {"CPU": 8}) == (3, 768)  # 2.57 CPUs a server with its trials


@pytest.mark.parametrize(
    ("method", "all_at_once", "at_once", "server_cpus", "said"),
    [
        ("train", None, 4, 0.98, "up to 2 trials each"),
        ("train", True, 8, 0.96, "4 trials each, trained 2 at a time in step"),
        ("pba", None, 8, 0.96, "4 trials each, trained 2 at a time in step"),  # PBA's pack_trials
        ("pba", False, 4, 0.98, "up to 2 trials each"),
    ],
)
def test_a_population_in_packs_runs_every_member_at_once_and_its_servers_leave_room_for_them(
    tmp_path, monkeypatch, method, all_at_once, at_once, server_cpus, said
):
    """PBA's 8 members in packs of 2 on 2 CPUs: every member's trial runs from the start (a member
    left pending, or paused by an exploit, would wait for a slot while the others trained on), 4 on
    each server, whose rounds train 2; the servers and the 8 trials take the 2 CPUs. A training
    search runs a pack's worth per server. Unless told, ``packed`` asks the method
    (``Method.pack_trials``)."""
    from autoaug.search.config import SearchConfig
    from autoaug.search.tune.experiment import Experiment

    monkeypatch.setattr(pack_mod.ray, "cluster_resources", lambda: {"CPU": 2.0})
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "method": method,
            "name": "p",
            "data": str(tmp_path),
            "storage": str(tmp_path),
            "pack": 2,
            "concurrency": 4,
        }
    )
    exp = Experiment("p", str(tmp_path), None, 8, 4, 0, print, {"train_config": config.train.to_dict()})
    lines: list[str] = []
    exp, servers = pack_mod.packed(config, exp, lines.append, all_at_once=all_at_once)
    assert exp.max_concurrent == at_once and exp.trial_resources == {"cpu": pack_mod.TRIAL_CPUS, "gpu": 0}
    assert len(servers.names) == 2 and servers.cpus == server_cpus
    assert len(servers.names) * servers.cpus + at_once * pack_mod.TRIAL_CPUS == pytest.approx(2.0)
    assert servers.plan() == f"pack servers: 2 of {said} ({at_once} trials at once), 1 CPU + 0 GPU each with its trials"
    assert servers.fill == 2 and servers.pack == 2  # the first round waits for a pack; each round trains one


@pytest.mark.parametrize(
    ("gpus", "task_gpus", "said"),
    [
        (
            0.125,
            1.0,
            ", each pack within its trials' share of a GPU's memory and measured beside the others sharing it "
            "(0.125 a trial)",
        ),
        (1, 1.0, ""),
        (0, 0, ""),
    ],
)
def test_pack_auto_sizes_packs_for_their_trials_share_of_a_gpu(monkeypatch, gpus, task_gpus, said):
    """--pack auto measures on the largest pack server's resources, each size within its trials'
    share of a GPU's memory (gpus_per_trial each), and says so in its line."""
    asked = {}

    class Task:  # what ray.remote(...)(fn) gives: .remote(*args) stands for the call
        def __init__(self, fn):
            self.fn = fn

        def remote(self, *args):
            return (self.fn.__name__, args)

    def remote(**resources):
        asked.update(resources)
        return Task

    def get(call):
        asked["call"] = call
        return 4, [
            {"k": 1, "images_per_s": 10.0, "processes": 8},
            {"k": 4, "images_per_s": 30.0},
            {"k": 8, "error": "out of memory"},
        ]

    monkeypatch.setattr(pack_mod.ray, "remote", remote)
    monkeypatch.setattr(pack_mod.ray, "get", get)
    config = type("Config", (), {"pack": "auto", "cpus_per_trial": 2, "gpus_per_trial": gpus})()
    lines: list[str] = []
    assert pack_mod.pack_size(config, {"epochs": 3}, lines.append) == 4
    assert asked["num_gpus"] == task_gpus and asked["call"] == ("_choose", ({"epochs": 3}, gpus))
    assert lines == [
        f"pack auto: 4 trial(s) per process, the fastest measured{said} "
        "(images/s by pack size: 1: 10 (8 at once), 4: 30, 8: out of memory)"
    ]


def test_pack_auto_is_measured_once_before_calibration_for_every_run_of_the_search(tmp_path, monkeypatch):
    """The driver resolves --pack auto before calibration (whose runs, like re-scoring's, train in
    packs of the search's size): on the trials' training configuration, once; a given size is kept."""
    from autoaug.search.config import SearchConfig

    measured = []
    monkeypatch.setattr(pack_mod, "pack_size", lambda config, train, log: measured.append(train) or 3)
    data = {"preset": "smoke", "name": "auto", "data": str(tmp_path / "d"), "storage": str(tmp_path / "runs")}
    auto = SearchConfig.from_dict({**data, "pack": "auto"})
    resolved = pack_mod.resolve_pack(auto, print)
    assert resolved.pack == 3 and measured == [auto.train.to_dict()]
    assert resolved.replace(pack=auto.pack) == auto  # nothing else changed
    given = SearchConfig.from_dict({**data, "pack": 2})
    assert pack_mod.resolve_pack(given, print) is given and len(measured) == 1


@pytest.fixture(scope="module")
def cfg(cifar_train):
    return TrainConfig.from_preset("smoke", data=str(cifar_train), epochs=2, train_size=128, val_size=64, num_threads=1)


@pytest.fixture
def make_server():
    """``make_server(config_dict, capacity, limit=None)``: a pack server in this process, closed after the test
    (its training thread holds torch's process-wide settings for its pack until then)."""
    servers: list[PackServer] = []

    def make(config: dict, capacity: int, limit: int | None = None) -> PackServer:
        servers.append(PackServer(config, capacity=capacity, limit=limit))
        return servers[-1]

    yield make
    for server in reversed(servers):  # last first: each puts back what the process had when it started
        server.close(timeout=60)


def _ask(server: PackServer, key: str, cfg: TrainConfig, policy, done: int, state=None, until=None) -> dict:
    return server.train(key, cfg.to_dict(), policy, done, until, state)


def _last(reply: dict) -> dict:
    """The metrics of the last epoch a server's reply holds."""
    return reply["epochs"][-1]


def _together(*calls):
    """Run the calls in threads at once; their replies in order."""
    out: list = [None] * len(calls)

    def run(i, fn):
        out[i] = fn()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_a_server_trains_the_members_asking_together_in_one_round_and_drops_one_that_stops(
    cfg, monkeypatch, make_server
):
    import torch

    monkeypatch.setattr(pack_mod, "PACK_WINDOW_MAX_S", 1.0)
    a, b = presets.resolve("autoaugment-cifar10"), presets.resolve("trivialaugment")
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    server = make_server(cfg.to_dict(), 2)
    first_a, first_b = _together(lambda: _ask(server, "a", cfg, a, 0), lambda: _ask(server, "b", cfg, b, 0))
    assert _last(first_a)["pack_size"] == 2 and _last(first_b)["pack_size"] == 2
    assert _last(first_a)["epoch"] == 1 and first_a["checkpoint"][:2] == b"PK"  # the trainer's file (zip)
    # b's trial was stopped (ASHA): a's next epoch trains without it, after the window
    second_a = _ask(server, "a", cfg, a, 1)
    assert _last(second_a)["epoch"] == 2 and _last(second_a)["pack_size"] == 1
    # ... a round that waited the whole window for b, and says so
    stats = server.stats()
    assert (stats["rounds"], stats["member_epochs"], stats["short_rounds"]) == (2, 3, 1)
    assert stats["wait_s"] >= stats["short_wait_s"] >= pack_mod.PACK_WINDOW_S
    # a finished and left; b's trial comes back with its checkpoint (a restarted trial) and trains on
    resumed = _ask(server, "b", cfg, b, 1, first_b["checkpoint"])
    assert _last(resumed)["epoch"] == 2
    # closed, the server puts back what its pack set for the process, and answers no more
    assert torch.are_deterministic_algorithms_enabled() == cfg.deterministic  # the pack's, while it serves
    server.close(timeout=60)
    assert (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()) == (deterministic, threads)
    assert _ask(server, "a", cfg, a, 2) == {"error": "the pack server was closed"}


def test_a_round_trains_each_member_up_to_the_epoch_its_trial_asked_for(cfg, make_server):
    """A trial that reports every few epochs asks for them at once: one round trains them, its
    pack-mates' one epoch beside its first, and it gets what asking epoch by epoch gives."""
    a, b = presets.resolve("autoaugment-cifar10"), presets.resolve("trivialaugment")
    server = make_server(cfg.to_dict(), 2)
    block_a, one_b = _together(
        lambda: _ask(server, "a", cfg, a, 0, until=2), lambda: _ask(server, "b", cfg, b, 0, until=1)
    )
    assert [e["epoch"] for e in block_a["epochs"]] == [1, 2] and [e["pack_size"] for e in block_a["epochs"]] == [2, 1]
    assert [e["epoch"] for e in one_b["epochs"]] == [1] and _last(one_b)["pack_size"] == 2
    stats = server.stats()
    assert (stats["rounds"], stats["member_epochs"]) == (1, 3)
    # the same epochs asked one at a time, on another server
    other = make_server(cfg.to_dict(), 2)
    first_a, _ = _together(lambda: _ask(other, "a", cfg, a, 0), lambda: _ask(other, "b", cfg, b, 0))
    other.leave("b")
    second_a = _ask(other, "a", cfg, a, 1)
    keep = ("train_loss", "val_accuracy", "lr", "epoch", "pack_size")
    assert [{k: e.get(k) for k in keep} for e in block_a["epochs"]] == [
        {k: _last(r).get(k) for k in keep} for r in (first_a, second_a)
    ]
    assert _ask(server, "a", cfg, a, 2) == {"need_state": True}  # done: the server let it go


def test_a_member_whose_trial_ended_is_not_waited_for(cfg, monkeypatch, make_server):
    # A window long enough that a round waiting for b would stand out in the server's accounting.
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_S", 600.0)
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_MAX_S", 600.0)
    a, b = presets.resolve("autoaugment-cifar10"), presets.resolve("trivialaugment")
    server = make_server(cfg.to_dict(), 2)
    _together(lambda: _ask(server, "a", cfg, a, 0), lambda: _ask(server, "b", cfg, b, 0))
    server.leave("b")  # Tune ended b's trial (ASHA): the driver's callback says so
    second_a = _ask(server, "a", cfg, a, 1)
    assert _last(second_a)["epoch"] == 2 and _last(second_a)["pack_size"] == 1
    assert server.stats()["short_rounds"] == 0  # no round waited out its window


def test_a_new_member_whose_trial_ended_during_its_first_round_is_not_waited_for(cfg, monkeypatch, make_server):
    """Tune ends b's trial while b's first round trains (b new: not held before it): the next
    round does not wait for b (the old rule waited out a window for it, twice, then dropped it)."""
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_S", 5.0)
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_MAX_S", 5.0)
    a, b = presets.resolve("autoaugment-cifar10"), presets.resolve("trivialaugment")
    server = make_server(cfg.to_dict(), 2)
    join = server._join

    def join_then_end(pack, request):  # b joins its first round; then the driver says its trial ended
        joined = join(pack, request)
        if request.key == "b":
            server.leave("b")
        return joined

    server._join = join_then_end
    first = _together(lambda: _ask(server, "a", cfg, a, 0), lambda: _ask(server, "b", cfg, b, 0))
    assert [_last(r)["pack_size"] for r in first] == [2, 2]
    second_a = _ask(server, "a", cfg, a, 1)
    assert _last(second_a)["epoch"] == 2 and _last(second_a)["pack_size"] == 1
    assert server.stats()["short_rounds"] == 0  # no round waited out its window for b
    assert not server.load("b")[0]  # b's member dropped


def test_the_driver_tells_the_servers_when_tune_ends_a_trial(monkeypatch):
    told: list[tuple[str, str]] = []

    class Handle:
        def __init__(self, name):
            self.leave = type("Method", (), {"remote": lambda _self, key: told.append((name, key))})()

    def get_actor(name):
        if name == "gone":
            raise ValueError(f"Failed to look up actor with name {name!r}")
        return Handle(name)

    monkeypatch.setattr(pack_mod.ray, "get_actor", get_actor)
    callback = pack_mod.PackDepartures(["s0", "gone", "s1"])
    callback.on_trial_complete(3, [], type("Trial", (), {"trial_id": "t1"})())
    callback.on_trial_error(4, [], type("Trial", (), {"trial_id": "t2"})())  # (a retry resends its checkpoint)
    assert told == [("s0", "t1"), ("s1", "t1"), ("s0", "t2"), ("s1", "t2")]


def test_the_servers_line_says_how_long_rounds_waited_for_members_that_never_came():
    line = pack_mod.describe_stats(
        {"rounds": 10, "member_epochs": 35, "train_s": 100.4, "wait_s": 12.2, "short_rounds": 2, "short_wait_s": 8.0}
    )
    assert line == (
        "pack servers: 10 rounds trained 35 trial-epochs (3.5 a round) in 100 s; rounds waited 12 s for trials "
        "to come back, 8 s of it in 2 rounds for members whose trials did not come back"
    )


def test_a_member_that_cannot_join_fails_alone(cfg, make_server):
    server = make_server(cfg.to_dict(), 2)
    wrong = cfg.to_dict() | {"batch_size": 64}
    good, bad = _together(
        lambda: _ask(server, "good", cfg, "crop", 0),
        lambda: server.train("bad", wrong, presets.resolve("crop"), 0),
    )
    assert "cannot join the pack" in bad["error"] and "batch_size" in bad["error"]
    assert _last(good)["epoch"] == 1


def test_a_restarted_servers_member_is_resumed_from_the_state_its_trial_sends(cfg, make_server):
    policy = presets.resolve("autoaugment-cifar10")
    server = make_server(cfg.to_dict(), 1)
    first = _ask(server, "m", cfg, policy, 0)
    whole = _ask(server, "m", cfg, policy, 1)
    fresh = make_server(cfg.to_dict(), 1)  # the server died; Ray started a new one
    assert _ask(fresh, "m", cfg, policy, 1) == {"need_state": True}
    again = _ask(fresh, "m", cfg, policy, 1, first["checkpoint"])
    keep = ("train_loss", "val_accuracy", "lr", "epoch")
    assert {k: _last(again)[k] for k in keep} == {k: _last(whole)[k] for k in keep}


def test_a_member_restarted_from_another_members_checkpoint_trains_on_from_that_checkpoint(cfg, tmp_path, make_server):
    """A PBA exploit through a pack server: member b's trial restarts from a's checkpoint at the
    epoch the server holds b at, with its schedule -- a's policy so far, then its own. The server
    trains b on from what was sent (not from the b it holds), as a solo run resumed from it would."""
    from autoaug.policies.schedule import Schedule
    from autoaug.proxy_models.train import CHECKPOINT_NAME, train

    pa, pb = presets.resolve("autoaugment-cifar10"), presets.resolve("trivialaugment")
    own_a, own_b = Schedule("a", [(0.0, pa)]), Schedule("b", [(0.0, pb)])
    server = make_server(cfg.to_dict(), 2)
    first_a, _ = _together(lambda: _ask(server, "a", cfg, own_a, 0), lambda: _ask(server, "b", cfg, own_b, 0))
    server.leave("a")  # (a's trial reported its last epoch: no round waits for it)
    exploit = own_a.then(0.5, pb)  # a's policy for epoch 1, b's own from epoch 2
    cloned = _ask(server, "b", cfg, exploit, 1, first_a["checkpoint"])
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / CHECKPOINT_NAME).write_bytes(first_a["checkpoint"])
    solo = train(cfg, exploit, resume_from=tmp_path / "a")
    keep = ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr", "epoch")
    assert {k: _last(cloned)[k] for k in keep} == {k: solo.history[-1][k] for k in keep}


class _Arrivals(dict):
    """A server's pending requests that say (an event) when one arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Event()

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.arrived.set()


def test_a_request_superseded_by_a_later_one_of_its_trial_is_answered_and_the_later_one_trains(
    cfg, monkeypatch, make_server
):
    """Tune replaced a trial's process (PBT restarted it) while its request waited: the old
    request is answered at once (its thread does not wait for ever in the server), the new one trains."""
    monkeypatch.setattr(pack_mod, "PACK_START_WINDOW_S", 600.0)  # the first round waits for two members
    server = make_server(cfg.to_dict(), 2)
    server._pending = pending = _Arrivals()
    replies: dict[str, dict] = {}
    old = threading.Thread(target=lambda: replies.update(old=_ask(server, "a", cfg, "crop", 0)))
    old.start()
    assert pending.arrived.wait(60)
    new = threading.Thread(target=lambda: replies.update(new=_ask(server, "a", cfg, "crop", 0)))
    new.start()
    old.join(60)
    assert replies == {"old": {"error": "superseded by a later request of the same trial"}}
    b = _ask(server, "b", cfg, "crop", 0)
    new.join(60)
    assert _last(replies["new"])["epoch"] == 1 and _last(replies["new"])["pack_size"] == 2 == _last(b)["pack_size"]


def test_a_restarted_trial_goes_back_to_the_server_holding_its_member_else_to_the_least_loaded(
    cfg, monkeypatch, make_server
):
    server = make_server(cfg.to_dict(), 2)
    _together(lambda: _ask(server, "a", cfg, "crop", 0), lambda: _ask(server, "b", cfg, "crop", 0))
    assert server.load("a") == (True, 2) and server.load("z") == (False, 2)
    server.leave("a")  # (its trial ended: the next round drops it)
    assert server.load("a") == (True, 1)  # (held until then)

    # a server that holds the member, else the least loaded with room in a pack, else in two, ...
    loads = {"s0": (False, 1), "s1": (True, 3), "s2": (False, 0)}
    room = {"s0": 1, "s1": 1, "s2": 2}  # the packs' worth of members a server would take it within

    def method(fn):
        return type("Method", (), {"remote": lambda _self, *args: fn(*args)})()

    class Handle:
        def __init__(self, name):
            self.name = name
            self.load = method(lambda key: loads[name])
            self.claim = method(lambda key, turns=1: room[name] <= turns or loads[name][0])

    monkeypatch.setattr(pack_mod.ray, "get_actor", Handle)
    monkeypatch.setattr(pack_mod.ray, "get", lambda refs: refs)
    servers = ["s0", "s1", "s2"]
    assert pack_mod._server(servers, "m").name == "s1"  # it holds m, however loaded
    loads["s1"] = (False, 3)
    assert pack_mod._server(servers, "m").name == "s0"  # s2, less loaded, has no room in one pack
    room["s0"] = room["s1"] = 3
    assert pack_mod._server(servers, "m").name == "s2"  # in two packs: s2 first


def test_trials_starting_at_once_each_find_a_server_with_room_and_a_population_spreads_evenly(cfg, make_server):
    server = make_server(cfg.to_dict(), 2)
    assert server.claim("a") and server.claim("b") and server.claim("a")  # (a's room kept, once)
    assert not server.claim("c") and server.load("c") == (False, 2)
    server.leave("b")  # (b's trial ended before it asked: its room is free)
    assert server.claim("c") and server.load("a") == (True, 2)
    # a population larger than the packs: two more members each on two servers of a pack of 2,
    # taken in turns (the second pack's worth), none on one while the other has fewer
    other = make_server(cfg.to_dict(), 2)
    assert other.claim("d") and other.claim("e")
    for key in "fghi":  # (as _server asks them: the least loaded first; a pack's worth taken)
        assert not any(s.claim(key) for s in (server, other))
        assert next(s for s in sorted((server, other), key=lambda s: s.load()[1]) if s.claim(key, 2))
    assert [server.load()[1], other.load()[1]] == [4, 4]
    assert not server.claim("j", 2) and server.claim("j", 3)  # (a third turn: a fifth member)


def test_a_round_trains_at_most_a_pack_and_the_members_asking_beyond_it_take_turns(cfg, monkeypatch, make_server):
    assert pack_mod.round_members({"a": 3, "b": 1, "c": 1, "d": 0}, 2) == ["d", "b"]  # fewest epochs, first to ask
    assert pack_mod.round_members({"a": 0, "b": 0}, 4) == ["a", "b"]
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_MAX_S", 1.0)
    server = make_server(cfg.to_dict(), 2, limit=2)
    replies = _together(*(lambda k=k: _ask(server, k, cfg, "crop", 0) for k in "abc"))
    assert sorted(_last(r)["pack_size"] for r in replies) == [1, 2, 2]  # two together, the third after them
    assert (server.stats()["rounds"], server.stats()["member_epochs"]) == (2, 3)


def test_a_round_waits_for_the_member_furthest_behind_not_for_a_packs_worth_of_others(cfg, monkeypatch, make_server):
    """A population larger than its pack moves in step: with a (2 epochs) and c (new) asking, the
    round waits for b (1 epoch, held by the server, its trial not back yet) rather than train a,
    further on; a waits for c to come back. A member whose trial Tune ended is not waited for."""
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_S", 600.0)  # a round that waited for a member out of time would hang
    monkeypatch.setattr(pack_mod, "PACK_WINDOW_MAX_S", 600.0)
    six = dataclasses.replace(cfg, epochs=6)
    server = make_server(six.to_dict(), 2, limit=2)
    replies: dict[str, dict] = {}

    def ask(key, done, until=None):
        thread = threading.Thread(
            target=lambda: replies.update({key: _ask(server, key, six, "crop", done, until=until)})
        )
        thread.start()
        return thread

    for thread in [ask("a", 0, until=2), ask("b", 0, until=1)]:  # the first round: a to epoch 2, b to 1
        thread.join()
    asking_a = ask("a", 2, until=3)
    asking_c = ask("c", 0)
    with server._lock:  # the server's own condition, notified as each request arrives
        assert server._lock.wait_for(lambda: {"a", "c"} <= set(server._pending) or server._rounds > 1, timeout=120)
        assert server._rounds == 1  # a pack's worth asking, and no round started without b
    for thread in [ask("b", 1), asking_c]:
        thread.join()
    assert [_last(replies[k])["pack_size"] for k in "bc"] == [2, 2]  # b and c together
    assert asking_a.is_alive()  # a, ahead, waits for c (1 epoch) to come back
    ask("c", 1).join()
    asking_a.join()
    assert (_last(replies["a"])["epoch"], _last(replies["a"])["pack_size"]) == (3, 2)  # a and c together
    # b (2 epochs, behind a) is held but its trial was ended: a and c do not wait for it
    server.leave("b")
    again = _together(lambda: _ask(server, "a", six, "crop", 3), lambda: _ask(server, "c", six, "crop", 2))
    assert [_last(r)["pack_size"] for r in again] == [2, 2]
    assert (server.stats()["rounds"], server.stats()["short_rounds"]) == (4, 0)


# ------------------------------------------------------------------------------------------------
# Real searches
# ------------------------------------------------------------------------------------------------
def _argv(name: str, data: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        *SEARCH,
        "--preset",
        "smoke",
        "--data",
        str(data),
        "--name",
        name,
        "--base",
        "crop",
        "--no-warm-start",
        "--pack",
        "4",
        "--set",
        "train.train_size=256",
        "--set",
        "train.val_size=128",
        "--storage",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
        *extra,
    ]


def _trial_rows(run: Path) -> dict[str, list[dict]]:
    """Each trial's rows in Tune's log (none yet: a trial the driver was killed before it reported)."""
    logs = {t.name: t / "result.json" for t in sorted(run.glob("trial_*"))}
    return {
        name: [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
        for name, log in logs.items()
    }


def _each_epoch_once(rows: dict[str, list[dict]]) -> None:
    for name, epochs in rows.items():
        seen = [r["epoch"] for r in epochs]
        assert seen == list(range(1, len(seen) + 1)), (name, seen)  # nothing reported twice


def _continued_from_a_checkpoint(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> None:
    """What a trial's Tune log gained on resume: consecutive epochs from the one after a checkpoint
    it had reported (Tune restores a trial from the checkpoint its last saved state names, which
    a driver killed with SIGKILL may have written an epoch or two before the trial's last report;
    Tune's log repeats those epochs, the study keeps each once)."""
    for name, epochs in after.items():
        old = [r["epoch"] for r in before.get(name, [])]
        seen = [r["epoch"] for r in epochs]
        assert seen[: len(old)] == old, (name, old, seen)  # the log before the kill is kept as it was
        new = seen[len(old) :]
        if new:
            assert 1 <= new[0] <= len(old) + 1 and new == list(range(new[0], new[0] + len(new))), (name, old, new)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")  # the resume runs in this process
def test_a_pack_search_survives_its_server_then_its_driver_killed_and_asha_stops_members_while_mates_train_on(
    tmp_path, capsys, cifar_small, kill_driver
):
    """One search for all of it: the pack server is killed in a round of 4 (Ray restarts it, each
    trial resends its checkpoint), then the driver is killed once 3 trials are saved; ``--resume``
    (in this process: new servers in the module's Ray) finishes exactly the 6 requested trials,
    each reporting each epoch once, ASHA stopping some at its rung while their pack-mates train on,
    and stores the policy."""
    argv = _argv("packed", cifar_small, tmp_path, "--num-trials", "6", "--set", "train.epochs=3", "--grace-period", "1")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # the server: the only process training in a pack; then the driver
    first = kill_driver(argv, env, "search.after_trial_saved:3", 500, also="pack.mid_epoch:3=kill")
    assert kill_driver.fired("pack.mid_epoch")
    run = tmp_path / "runs" / "packed"
    before = _trial_rows(run)
    _each_epoch_once(before)  # the server's kill: each trial resent its checkpoint, no epoch twice
    # Resumed in this process (the module's Ray session), as `autoaug search --resume packed` runs.
    capsys.readouterr()
    code = main(
        ["search", "--resume", "packed", "--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    )
    resumed = capsys.readouterr()
    assert code == 0, resumed.out[-3000:] + resumed.err[-3000:]
    assert "stored as packed@1" in resumed.out
    assert "packs of 4 trials per process" in first
    assert (
        "pack servers: 1 of up to 4 trials each (4 trials at once), 1 CPU + 0 GPU each with its trials" in first
    )  # what runs
    assert "pack servers: " in resumed.out and " trial-epochs (" in resumed.out  # what the servers did
    result = json.loads((run / "result.json").read_text())
    trials = result["provenance"]["trials"]
    assert len(trials) == 6 and len({t["trial_id"] for t in trials}) == 6  # exactly the requested
    assert all(t["status"] in ("completed", "early_stopped") for t in trials)
    assert result["provenance"]["optuna"]["consistent_with_tune"]
    packs = result["provenance"]["method"]["packs"]  # what the resumed driver's servers did
    assert packs["rounds"] >= 1 and packs["member_epochs"] >= packs["rounds"] and packs["train_s"] > 0
    rows = _trial_rows(run)
    _continued_from_a_checkpoint(before, rows)
    study = optuna.load_study(study_name="packed", storage=f"sqlite:///{run}/optuna.db")
    for trial in study.trials:  # the study: each epoch's score once, whatever Tune's log repeats
        assert sorted(trial.intermediate_values) == list(range(1, len(trial.intermediate_values) + 1))
    assert max(r["pack_size"] for epochs in rows.values() for r in epochs) >= 2  # trained together
    stopped = [t for t in trials if t["status"] == "early_stopped"]
    assert stopped, trials
    # a member stopped at a rung had pack-mates in that round that trained on after it
    # the epoch each trial reached (its log may repeat one)
    reached = {name: max((r["epoch"] for r in epochs), default=0) for name, epochs in rows.items()}
    for t in stopped:
        last = rows[f"trial_{t['trial_id']}"][-1]
        assert last["pack_size"] >= 2 or any(e > last["epoch"] for e in reached.values())
    assert 3 in reached.values()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_packed_trials_that_report_every_few_epochs_report_at_those_at_asha_rungs_and_at_the_end(
    tmp_path, capsys, cifar_small
):
    """``--report-every 4`` over 6 epochs, ASHA's rung at epoch 3: each trial reports at epochs 3, 4
    and 6 (asking its pack server for the epochs up to each), or ASHA cut it at the rung,
    the study holds the scores measured (at the rung and the end), the candidates are re-scored
    in packs, and the policy is stored.
    With no concurrency limit the servers fill the CPUs, each leaving its trials' processes room
    to start (they reserve a little CPU each)."""
    argv = _argv(
        "every",
        cifar_small,
        tmp_path,
        "--concurrency",
        "0",
        "--num-trials",
        "4",
        "--grace-period",
        "3",
        "--report-every",
        "4",
        "--set",
        "train.epochs=6",
        "--set",
        "score_window=1",
        "--rescore-seeds",
        "2",
    )
    capsys.readouterr()
    code = main(argv[3:])  # (in this process: the module's Ray session)
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    run = tmp_path / "runs" / "every"
    rows = _trial_rows(run)
    assert len(rows) == 4
    for name, epochs in rows.items():
        seen = [r["epoch"] for r in epochs]
        assert seen in ([3], [3, 4, 6]), (name, seen)  # stopped at the rung, or to the end
        assert [r["epochs_this_report"] for r in epochs] == [3, 1, 2][: len(seen)]
        # validated at the rung and the end only (what the score is read from); epoch 4 says epoch 3's score
        assert [r["val_accuracy"] is not None for r in epochs] == [True, False, True][: len(seen)]
        assert all(r["search_score"] is not None for r in epochs)
        assert all(r["pack_size"] >= 1 for r in epochs)
    assert any(len(e) == 3 for e in rows.values())
    study = optuna.load_study(study_name="every", storage=f"sqlite:///{run}/optuna.db")
    for trial in study.trials:
        assert sorted(trial.intermediate_values) in ([3], [3, 6])  # the scores measured
    result = json.loads((run / "result.json").read_text())
    assert result["provenance"]["optuna"]["consistent_with_tune"]
    status = {f"trial_{t['trial_id']}": t["status"] for t in result["provenance"]["trials"]}
    assert status == {n: "completed" if len(e) == 3 else "early_stopped" for n, e in rows.items()}  # (at the rung)
    assert "stored as every@1" in out and "4 trials, each reporting every 4 epochs, early stopping" in out
    # re-scoring's runs trained in packs too, each scored as its own run
    rescored = json.loads((run / "rescore.json").read_text())
    assert len(rescored) >= 2 and all(r["epochs"] == 6 and r["search_score"] is not None for r in rescored.values())
    assert max(r["pack"] for r in rescored.values()) >= 2
    n = int(ray.cluster_resources()["CPU"])  # a server a CPU (--cpus-per-trial 1), its trials' processes within it
    assert (
        f"pack servers: {n} of up to 4 trials each ({4 * n} trials at once), 1 CPU + 0 GPU each with its trials" in out
    )
