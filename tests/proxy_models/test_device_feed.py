"""The device feed (proxy_models/device_feed.py, ``loader: device``): a run's training batches made
on its device from images decoded once -- a function of the run's seed and policy alone, the same
whether the run trains alone or in a pack of three, resumed from a checkpoint exactly where the
uninterrupted run would be; ``loader`` refused in one line for a value it does not take."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from autoaug.policies import presets
from autoaug.policies.schedule import Schedule
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.device_feed import DeviceFeed, serve_together
from autoaug.proxy_models.pack import Pack, pack_compatible, train_pack
from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD, DaliLoader
from autoaug.proxy_models.train import TrainConfig, load_checkpoint, train

POLICIES = ("autoaugment-cifar10", "randaugment:n=2,m=9", "trivialaugment")


@pytest.fixture(scope="module")
def cfg(cifar_train):
    return TrainConfig.from_preset(
        "smoke", data=str(cifar_train), epochs=2, train_size=128, val_size=0, num_threads=1, loader="device"
    )


@pytest.fixture(scope="module")
def dataset(cifar_train):
    return open_dataset(str(cifar_train), split="train")


INDICES = np.arange(0, 50_000, 199)[:250]  # every class (rows are sorted by class), 250 images


def _feed(dataset, seed=0, policy="autoaugment-cifar10", batch_size=64) -> DeviceFeed:
    return DeviceFeed(dataset, INDICES, batch_size=batch_size, policy=presets.resolve(policy), seed=seed, image_size=32)


def _epoch(feed) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in feed]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))


def test_a_bad_loader_setting_is_refused_in_one_line(cfg):
    for bad in ("gpu", "DALI", 3):
        with pytest.raises(ValueError, match=r"^TrainConfig.loader must be one of 'dali', 'device', got .+$") as err:
            TrainConfig(loader=bad)
        assert "\n" not in str(err.value) and repr(bad) in str(err.value)
    with pytest.raises(ValueError, match="loader must be one of 'dali', 'device', got 'host'"):
        TrainConfig.from_dict({**cfg.to_dict(), "loader": "host"})
    assert "loader" not in TrainConfig().to_dict()  # the default: records as before the setting
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["loader"] == "device"


def test_batches_are_normalised_decoded_images_in_a_seeded_order_the_last_partial_batch_dropped(dataset):
    feed = DeviceFeed(dataset, INDICES, batch_size=64, policy=None, seed=3, image_size=32)
    dali = DaliLoader(dataset, INDICES, batch_size=64, policy=None, train=True, seed=3, image_size=32)
    assert len(feed) == len(dali) == 3 and feed.num_images == 192
    batches = _epoch(feed)
    assert [tuple(x.shape) for x, _ in batches] == [(64, 3, 32, 32)] * 3
    assert all(x.dtype == torch.float32 and y.dtype == torch.int64 for x, y in batches)
    decoded, _ = dataset.images(INDICES, 32)
    order = torch.randperm(len(INDICES), generator=torch.Generator().manual_seed(3))[:192]
    images = torch.cat([x for x, _ in batches])
    mean, std = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1), torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    raw = (images * std + mean).round().to(torch.uint8)
    assert torch.equal(raw, torch.from_numpy(decoded).permute(0, 3, 1, 2)[order])
    assert torch.equal(torch.cat([y for _, y in batches]), torch.from_numpy(dataset.labels[INDICES])[order])


def test_the_stream_is_a_function_of_the_seed_and_policy(dataset):
    a, b, c = _feed(dataset, seed=1), _feed(dataset, seed=1), _feed(dataset, seed=2)
    first_a, first_b, first_c = _epoch(a), _epoch(b), _epoch(c)
    assert _same(first_a, first_b) and not _same(first_a, first_c)
    assert _same(_epoch(a), _epoch(b)) and not _same(_epoch(a), first_a)  # the next epoch: another draw
    other_policy = _epoch(_feed(dataset, seed=1, policy="trivialaugment"))
    assert not _same(other_policy, first_a)
    assert all(torch.equal(x[1], y[1]) for x, y in zip(other_policy, first_a))  # same order: the same labels


def test_state_dict_resumes_the_stream_and_refuses_another_feeds_state(dataset):
    whole = _feed(dataset, seed=4)
    _epoch(whole)
    state = whole.state_dict()
    second = _epoch(whole)
    resumed = _feed(dataset, seed=4)
    resumed.load_state_dict(state)
    assert resumed.epoch == 1 and _same(_epoch(resumed), second)
    with pytest.raises(ValueError, match="saved with seed 4, this feed has seed 5"):
        _feed(dataset, seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="the checkpoint's training loader is DALI's"):
        _feed(dataset, seed=4).load_state_dict({"epoch": 1, "seed": 4})
    with pytest.raises(ValueError, match="saved on a cuda device, this run is on cpu; resume it on cuda"):
        _feed(dataset, seed=4).load_state_dict({**state, "device": "cuda"})


def test_feeds_served_together_each_serve_their_own_stream(dataset):
    """Three feeds (other seeds, policies, one without any) made in lockstep: each one's batches
    are those it serves alone, epoch after epoch."""
    specs = [(7, "autoaugment-cifar10"), (1, "trivialaugment"), (2, None)]

    def feeds():
        return [
            DeviceFeed(dataset, INDICES, batch_size=64, policy=p and presets.resolve(p), seed=s, image_size=32)
            for s, p in specs
        ]

    alone = [[_epoch(f) for _ in range(2)] for f in feeds()]
    together = feeds()
    for epoch in range(2):
        streams = serve_together(together)
        served = [[] for _ in streams]
        for batches in zip(*streams):
            for out, (x, y) in zip(served, batches):
                out.append((x.clone(), y.clone()))
        for k in range(3):
            assert _same(served[k], alone[k][epoch]), (k, epoch)
    assert [f.epoch for f in together] == [2, 2, 2]


def _recording(monkeypatch) -> list[list[list]]:
    """What the pack's engine is fed, per round: [round][member position] = [(images, labels), ...]."""
    from autoaug.proxy_models import pack as pack_mod

    seen: list[list[list]] = []
    make = pack_mod._streams

    def recorded(loaders):
        streams = make(loaders)
        rounds = [[] for _ in streams]
        seen.append(rounds)

        def wrap(stream, out):
            for x, y in stream:
                out.append((x.clone(), y.clone()))
                yield x, y

        return [wrap(s, r) for s, r in zip(streams, rounds)]

    monkeypatch.setattr(pack_mod, "_streams", recorded)
    return seen


def test_a_members_batches_are_the_same_in_a_pack_of_one_and_of_three(cfg, monkeypatch):
    seen = _recording(monkeypatch)
    mine = presets.resolve("autoaugment-cifar10")
    fed = []
    for mates in ((), ((1, "randaugment:n=2,m=9"), (2, "trivialaugment"))):
        seen.clear()
        with Pack(cfg) as pack:
            pack.add("me", mine, config=dataclasses.replace(cfg, seed=5))  # the first: position 0
            for seed, policy in mates:
                pack.add(seed, policy, config=dataclasses.replace(cfg, seed=seed))
            reports = [pack.train_epoch(), pack.train_epoch()]
        assert all(r["me"]["epoch"] == e + 1 for e, r in enumerate(reports))
        assert [len(r) for r in seen] == [1 + len(mates)] * 2 and len(seen[0][0]) == 4
        fed.append([rounds[0] for rounds in seen])  # the member's two epochs
    alone, packed = fed
    assert all(_same(a, b) for a, b in zip(alone, packed))
    assert not _same(alone[0], alone[1])


def test_a_member_resumed_from_its_checkpoint_continues_the_uninterrupted_stream(cfg, tmp_path):
    policies = [presets.resolve(p) for p in POLICIES[:2]]
    whole = train_pack(cfg, policies, seeds=[0, 1], checkpoint_dirs=[tmp_path / "w0", tmp_path / "w1"])
    cut = [tmp_path / "c0", tmp_path / "c1"]
    with Pack(cfg) as pack:
        for i, p in enumerate(policies):
            pack.add(i, p, config=dataclasses.replace(cfg, seed=i), checkpoint_dir=cut[i])
        pack.train_epoch()  # the first epoch only, then the process "dies"
    state = load_checkpoint(cut[0])["loader"]
    assert state["kind"] == "device" and state["epoch"] == 1 and state["generator"].dtype == torch.uint8
    resumed = train_pack(cfg, policies, seeds=[0, 1], resume_from=cut, checkpoint_dirs=cut)
    for w, r in zip(whole, resumed):
        assert [h["train_loss"] for h in w.history] == [h["train_loss"] for h in r.history]
        assert [h["train_accuracy"] for h in w.history] == [h["train_accuracy"] for h in r.history]
        for (name, a), b in zip(w.model.state_dict().items(), r.model.state_dict().values()):
            assert torch.equal(a, b), name
    assert load_checkpoint(cut[1])["loader"]["generator"].equal(load_checkpoint(tmp_path / "w1")["loader"]["generator"])


def test_a_solo_run_on_the_device_feed_resumes_exactly_and_not_as_a_dali_run(cfg, tmp_path):
    policy = presets.resolve("autoaugment-cifar10")
    whole = train(cfg, policy)
    first = train(dataclasses.replace(cfg, epochs=2), policy, checkpoint_dir=tmp_path / "a")
    assert [h["train_loss"] for h in whole.history] == [h["train_loss"] for h in first.history]
    # a run cut after its first epoch: its checkpoint resumed, the same history and weights
    with Pack(cfg) as pack:
        pack.add("x", policy, checkpoint_dir=tmp_path / "cut")
        pack.train_epoch()
    resumed = train(cfg, policy, resume_from=tmp_path / "cut")
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in whole.history]
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    dali = dataclasses.replace(cfg, loader="dali")
    with pytest.raises(
        ValueError, match=r"cannot resume: the config differs .*loader: checkpoint 'device' vs now 'dali'"
    ):
        train(dali, policy, resume_from=tmp_path / "cut")
    assert pack_compatible(cfg, dali) == [("loader", "device", "dali")]


def test_a_schedule_switches_the_feeds_policy_at_its_stage(cfg):
    first, second = presets.resolve("autoaugment-cifar10"), presets.resolve("autoaugment-svhn")
    with Pack(cfg) as pack:
        feed = pack.add("s", Schedule("s", [(0.0, first), (0.5, second)])).run.train_loader
        assert isinstance(feed, DeviceFeed)
        pack.train_epoch()
        assert feed.policy == first
        pack.train_epoch()
        assert feed.policy == second and feed.epoch == 2
