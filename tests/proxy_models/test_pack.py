"""A pack (proxy_models/pack.py): members trained in lockstep by one process compute what their
solo runs compute -- bit for bit for a pack of one, within float rounding in a stacked pack -- and
do not depend on their pack-mates; they join, leave and resume between epochs."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from autoaug.policies import presets
from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.pack import Pack, PackLearner, train_pack
from autoaug.proxy_models.train import TrainConfig, load_checkpoint, train

POLICIES = ("autoaugment-cifar10", "randaugment:n=2,m=9", "trivialaugment", "autoaugment-svhn")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / (b.norm() + 1e-12))


def _fresh(cfg: TrainConfig, seeds, steps: int = 8) -> list[Learner]:
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(Learner(cfg, num_classes=10, steps_per_epoch=steps))
    return out


def _batch(k: int, seed: int, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k, n, 3, 32, 32, generator=g), torch.randint(0, 10, (k, n), generator=g)


@pytest.fixture(scope="module")
def cfg(cifar_train):
    return TrainConfig.from_preset(
        "smoke", data=str(cifar_train), epochs=2, train_size=256, val_size=128, num_threads=1
    )


def test_a_pack_of_one_is_the_solo_run_bit_for_bit(cfg, tmp_path):
    policy = presets.resolve("autoaugment-cifar10")
    solo_reports, pack_reports = [], []
    solo_seen, pack_seen = [], []  # every validation image's outcome (what calibration's noise reads)

    def seen(into):
        return lambda epoch, stats, val: into.append((epoch, stats.image_correct.tolist(), list(val)))

    solo = train(cfg, policy, report=solo_reports.append, checkpoint_dir=tmp_path / "solo", on_validate=seen(solo_seen))
    (packed,) = train_pack(
        cfg,
        [policy],
        reports=[pack_reports.append],
        checkpoint_dirs=[tmp_path / "pack"],
        on_validate=[seen(pack_seen)],
    )
    assert pack_seen == solo_seen and [e for e, _, _ in pack_seen] == [1, 2] and len(pack_seen[0][1]) == 128
    drop = ("epoch_time_s", "time_total_s", "images_per_sec", "checkpoint_dir")
    assert [{k: v for k, v in r.items() if k not in drop} for r in solo_reports] == [
        {k: v for k, v in r.items() if k not in drop} for r in pack_reports
    ]
    for (name, a), b in zip(solo.model.state_dict().items(), packed.model.state_dict().values()):
        assert torch.equal(a, b), name
    a, b = load_checkpoint(tmp_path / "solo"), load_checkpoint(tmp_path / "pack")
    assert a["loader"] == b["loader"] and torch.equal(a["rng"]["torch"], b["rng"]["torch"])
    for i, s in a["optimizer"]["state"].items():
        assert torch.equal(s["momentum_buffer"], b["optimizer"]["state"][i]["momentum_buffer"])
    assert a["scheduler"] == b["scheduler"] and packed.precision == solo.precision


def test_in_a_pack_of_four_each_members_first_steps_equal_its_solo_runs(cfg):
    """Losses and gradients of the first step, and losses and parameters after three steps with
    momentum, weight decay and the learning-rate schedule, per member against its own solo learner."""
    seeds = (0, 1, 2, 3)
    solos = _fresh(cfg, seeds)
    pack = PackLearner(cfg, num_classes=10, steps_per_epoch=8)
    pack.load(copy.deepcopy([s.state_dict() for s in solos]))
    for step in range(3):
        images, labels = _batch(4, step)
        losses, _, grads = pack.forward_backward(images, labels)
        for k, solo in enumerate(solos):
            loss, _ = solo._forward_backward(images[k], labels[k])
            assert float(losses[k].detach()) == pytest.approx(float(loss.detach()), rel=1e-5, abs=1e-6)
            if step == 0:
                for name, g, p in zip(pack.param_names, grads, solo.model.parameters()):
                    assert _rel(g[k], p.grad) < 1e-2, name  # (a ReLU at 0 may flip: float rounding)
            solo.optimizer.step()
            solo.scheduler.step()
        pack.apply_gradients(grads, pack.lrs())  # the pack's own step over those gradients
        pack.steps = [s + 1 for s in pack.steps]
    for k, state in enumerate(pack.states()):
        for name, p in solos[k].model.named_parameters():
            assert _rel(state["model"][name], p.detach()) < 1e-4, (k, name)
        for name, b in solos[k].model.named_buffers():  # batch norm's running statistics, which evaluation uses
            if b.is_floating_point():
                assert _rel(state["model"][name], b) < 1e-3, (k, name)
            else:
                assert torch.equal(state["model"][name], b), (k, name)
        assert state["scheduler"]["last_epoch"] == solos[k].scheduler.last_epoch
        assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(solos[k].lr)


def test_the_packs_fused_optimizer_step_is_each_members_solo_step_bit_for_bit(cfg):
    """Given the same gradients, the pack's step (one multi-tensor operation over every parameter of
    every member, then one per member for its learning rate) moves each member's parameters and
    momentum exactly as its solo run's optimizer does, step after step, weight decay, Nesterov
    and the schedule included (on the CPU; a GPU's fused kernels may round differently)."""
    seeds = (0, 1, 2)
    solos = _fresh(cfg, seeds)
    pack = PackLearner(cfg, num_classes=10, steps_per_epoch=8)
    pack.load(copy.deepcopy([s.state_dict() for s in solos]))
    pack.steps, pack.base_lrs = [0, 2, 5], [0.1, 0.1, 0.05]  # each member at its own point of its schedule
    for k, solo in enumerate(solos):
        solo.optimizer.param_groups[0]["lr"] = pack.base_lrs[k]
        solo.scheduler.base_lrs = [pack.base_lrs[k]]
        for _ in range(pack.steps[k]):
            solo.scheduler.step()
    gen = torch.Generator().manual_seed(5)
    for _ in range(3):
        grads = [torch.randn(pack.params[n].shape, generator=gen) for n in pack.param_names]
        pack.apply_gradients(grads, pack.lrs())
        pack.steps = [s + 1 for s in pack.steps]
        for k, solo in enumerate(solos):
            for g, p in zip(grads, solo.model.parameters()):
                p.grad = g[k].clone()
            solo.optimizer.step()
            solo.scheduler.step()
    for k, state in enumerate(pack.states()):
        solo_state = solos[k].state_dict()
        for name, p in solos[k].model.named_parameters():
            assert torch.equal(state["model"][name], p.detach()), (k, name)
        for i, held in solo_state["optimizer"]["state"].items():
            assert torch.equal(state["optimizer"]["state"][i]["momentum_buffer"], held["momentum_buffer"]), (k, i)
        assert state["optimizer"]["param_groups"][0]["lr"] == solos[k].lr


def test_a_members_steps_do_not_change_when_its_pack_mates_do(cfg):
    member = _fresh(cfg, (7,))[0].state_dict()
    results = []
    for mates in ((1, 2), (3, 4, 5)):
        pack = PackLearner(cfg, num_classes=10, steps_per_epoch=2)
        mate_states = [s.state_dict() for s in _fresh(cfg, mates)]
        pack.load(copy.deepcopy([member, *mate_states]))
        images, labels = _batch(1 + len(mates), 11 + len(mates))
        mine_images, mine_labels = _batch(1, 99)
        images[0], labels[0] = mine_images[0], mine_labels[0]
        streams = [[(images[k], labels[k])] * 2 for k in range(1 + len(mates))]
        stats = pack.train_epoch(streams)
        results.append((stats[0].loss, pack.states()[0]["model"]))
    (loss_a, model_a), (loss_b, model_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-6)
    for name in model_a:
        if model_a[name].is_floating_point():
            assert _rel(model_a[name], model_b[name]) < 1e-5, name


def test_a_stacked_pack_trains_each_member_as_its_solo_run_up_to_float_rounding(cfg):
    policies = [presets.resolve(p) for p in POLICIES[:3]]
    solo = [train(cfg, p) for p in policies]
    packed = train_pack(cfg, policies)
    for s, p in zip(solo, packed):
        assert [h["epoch"] for h in p.history] == [1, 2]
        for hs, hp in zip(s.history, p.history):
            assert hp["train_loss"] == pytest.approx(hs["train_loss"], abs=0.02)
            assert hp["lr"] == pytest.approx(hs["lr"])
            assert hp["val_accuracy"] is not None


def test_members_join_and_leave_between_epochs_each_at_its_own_epoch(cfg, tmp_path):
    """A member stopped after its first epoch leaves; the next takes its slot and trains its first
    epoch beside the first member's second, at its own learning rate."""
    a, b, c = (presets.resolve(p) for p in POLICIES[:3])
    with Pack(cfg, vmap_single=True) as pack:
        pack.add("a", a, checkpoint_dir=tmp_path / "a")
        pack.add("b", b)
        first = pack.train_epoch()
        assert set(first) == {"a", "b"}
        pack.remove("b")
        pack.add("c", c, checkpoint_dir=tmp_path / "c")
        second = pack.train_epoch()
        assert second["a"]["epoch"] == 2 and second["c"]["epoch"] == 1
        assert pack.members["a"].done and not pack.members["c"].done
        assert pack.train_epoch() and pack.members["c"].done
        assert pack.train_epoch() == {}
    alone_c = train(cfg, c)
    # c's first epoch in a pack beside a's second, then alone: its solo run's, up to rounding
    assert second["c"]["lr"] == pytest.approx(alone_c.history[0]["lr"])
    assert second["c"]["train_loss"] == pytest.approx(alone_c.history[0]["train_loss"], abs=0.02)
    # a member's checkpoint resumes as a solo run, to its end
    assert load_checkpoint(tmp_path / "c")["epoch"] == 2


def test_a_member_resumed_from_its_checkpoint_ends_as_the_uninterrupted_pack(cfg, tmp_path):
    policies = [presets.resolve(p) for p in POLICIES[:2]]
    dirs = [tmp_path / "m0", tmp_path / "m1"]
    whole = train_pack(cfg, policies, checkpoint_dirs=dirs)
    # Interrupted after epoch 1: a pack of the same two members resumed from their checkpoints.
    cut = [tmp_path / "c0", tmp_path / "c1"]
    with Pack(cfg) as pack:
        for i, p in enumerate(policies):
            pack.add(i, p, checkpoint_dir=cut[i])
        pack.train_epoch()  # the first epoch only, then the process "dies"
    resumed = train_pack(cfg, policies, resume_from=cut, checkpoint_dirs=cut)
    for w, r in zip(whole, resumed):
        assert [h["train_loss"] for h in w.history] == [h["train_loss"] for h in r.history]
        assert [h["val_accuracy"] for h in w.history] == [h["val_accuracy"] for h in r.history]
    # and a member's checkpoint after its first epoch finishes as a solo run
    solo = train(cfg, policies[0], resume_from=cut[0])
    assert solo.history[-1]["epoch"] == 2


def test_runs_are_planned_in_packs_in_order_by_configuration_as_evenly_as_the_packs_at_once_allow(cfg):
    """What a search's calibration and re-scoring runs and compare's runs train as (plan_packs)."""
    from autoaug.proxy_models.pack import plan_packs

    runs = [dataclasses.replace(cfg, seed=i) for i in range(7)]
    assert plan_packs(runs, 4) == [[0, 1, 2, 3], [4, 5, 6]]
    assert plan_packs(runs, 8) == [list(range(7))] and plan_packs(runs, 1) == [[i] for i in range(7)]
    # as many packs as train at once, none idle while another trains two runs' work
    assert plan_packs(runs, 4, at_once=4) == [[0, 1], [2, 3], [4, 5], [6]]
    assert plan_packs(runs[:2], 4, at_once=4) == [[0], [1]]
    # runs that differ in more than their seed (a calibration's shorter schedule) never share a pack
    longer = [dataclasses.replace(cfg, seed=i, epochs=cfg.epochs + 1) for i in range(2)]
    assert plan_packs([runs[0], longer[0], runs[1], longer[1]], 4) == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="k 0 and at_once 1 must be 1 or more"):
        plan_packs(runs, 0)


def test_runs_that_cannot_share_a_pack_are_refused_in_one_line(cfg):
    with Pack(cfg) as pack:
        with pytest.raises(ValueError, match=r"cannot join the pack: .*batch_size: pack 32 vs member 64"):
            pack.add("x", "trivialaugment", config=dataclasses.replace(cfg, batch_size=64))
    f16 = dataclasses.replace(cfg, amp=True, amp_dtype="float16")
    with pytest.raises(ValueError, match="a pack trains in float32 or bfloat16"):
        PackLearner(f16, num_classes=10, steps_per_epoch=4)


def test_auto_sizing_takes_the_fastest_size_and_stops_where_packs_get_slower_or_fill_the_memory(cfg, monkeypatch):
    from autoaug.proxy_models import pack_sizing as pack_mod

    rates = {1: 100.0, 2: 180.0, 4: 300.0, 8: 310.0, 16: 240.0, 32: 400.0}
    asked = []

    def fake(config, k, processes, *, train_size, seconds=2.0):
        assert processes == 1  # the device not shared out: each size alone on it
        asked.append(k)
        return {"k": k, "images_per_s": rates[k]}

    monkeypatch.setattr(pack_mod, "shared_rate", fake)
    k, measured = pack_mod.choose_pack(cfg, train_size=256, sizes=(1, 2, 4, 8, 16, 32))
    assert k == 8 and asked == [1, 2, 4, 8, 16]  # 16 is a fifth slower than 8: 32 is not tried
    assert [m["k"] for m in measured] == asked


def test_auto_sizing_takes_no_size_that_fails_here_and_says_why(cfg, monkeypatch):
    """A pack that fails on this device (whatever it raises) is not taken: the fastest size before
    it is, its row says the error; one run alone failing is every trial failing: raised."""
    from autoaug.proxy_models import pack_sizing as pack_mod

    def fake(config, k, processes, *, train_size, seconds=2.0):
        if k == 4:
            raise TypeError("boom\nin a kernel")
        return {"k": k, "images_per_s": 100.0 * k}

    monkeypatch.setattr(pack_mod, "shared_rate", fake)
    k, measured = pack_mod.choose_pack(cfg, train_size=256, sizes=(1, 2, 4, 8))
    assert k == 2 and measured[-1] == {"k": 4, "error": "TypeError: boom in a kernel"} and len(measured) == 3

    def broken(config, k, processes, *, train_size, seconds=2.0):
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(pack_mod, "shared_rate", broken)
    with pytest.raises(RuntimeError, match="no kernel image"):
        pack_mod.choose_pack(cfg, train_size=256, sizes=(1, 2))


@pytest.mark.parametrize(
    ("member_share", "tried", "processes", "chosen", "over"),
    [
        # the whole device for any pack, each measured alone on it
        (0.0, [1, 2, 4, 8, 16, 32, 64], [1] * 7, 32, "needs 64.0 GiB, over 32.0"),
        # 16 trials' share: all of it; smaller packs measured as many at once as share the device
        (1 / 16, [1, 2, 4, 8, 16, 32, 64], [16, 8, 4, 2, 1, 1, 1], 32, "needs 64.0 GiB, over 32.0"),
        (1 / 64, [1], [64], 1, "needs 1.0 GiB, over 0.5"),  # a trial's share holds less than a member
    ],
)
def test_auto_sizing_keeps_a_pack_within_its_trials_share_of_the_device_memory(
    cfg, monkeypatch, member_share, tried, processes, chosen, over
):
    """A pack of K trials takes K trials' share of the device (a search's gpus_per_trial), at most
    all of it: each size must fit its share of the memory; the first over it is not taken,
    however fast, and no larger one is tried. Each size is measured as the search runs it: as
    many packs at once as share the device."""
    from autoaug.proxy_models import pack_sizing as pack_mod

    gib = 2**30
    asked = []

    def fake(config, k, copies, *, train_size, seconds=2.0):
        asked.append((k, copies))
        return {"k": k, "images_per_s": 100.0 * k, "peak_bytes": k * gib}  # faster and larger with k

    monkeypatch.setattr(pack_mod, "shared_rate", fake)
    monkeypatch.setattr(pack_mod, "_device_memory", lambda dev: 40 * gib)  # a pack may take 0.8 of it
    sizes = (1, 2, 4, 8, 16, 32, 64)
    k, measured = pack_mod.choose_pack(cfg, train_size=256, sizes=sizes, member_share=member_share)
    assert (k, asked) == (chosen, list(zip(tried, processes))) and measured[-1]["error"] == over
    with pytest.raises(ValueError, match=r"member_share -0.5: expected a fraction of the device, 0 or more"):
        pack_mod.choose_pack(cfg, train_size=256, member_share=-0.5)


def test_a_pack_takes_its_trials_share_of_a_device_up_to_all_of_it():
    from autoaug.proxy_models.pack_sizing import pack_device_share

    assert [pack_device_share(k, 0.125) for k in (1, 4, 8, 16)] == [0.125, 0.5, 1.0, 1.0]
    assert pack_device_share(16, 0.0) == 1.0 and pack_device_share(2, 2.0) == 1.0


def test_auto_sizing_measures_real_packs_on_this_device(cfg):
    from autoaug.proxy_models.pack_sizing import choose_pack

    k, measured = choose_pack(cfg, train_size=128, sizes=(1, 2), seconds=0.2)
    assert k in (1, 2) and [m["k"] for m in measured][:1] == [1]
    assert all(m["images_per_s"] > 0 for m in measured)


def test_on_a_shared_device_auto_sizing_measures_the_trials_as_processes_at_once(cfg):
    """Trials taking half the device each: one per process is two processes at once (what the
    search would run instead of a pack), measured together and their rates added; a pack of 2
    takes the whole device alone."""
    from autoaug.proxy_models.pack_sizing import choose_pack, device_copies

    assert [device_copies(k, 0.125) for k in (1, 2, 3, 4, 8, 16)] == [8, 4, 2, 2, 1, 1]
    assert device_copies(1, 0.0) == 1 and device_copies(1, 1.0) == 1
    k, measured = choose_pack(cfg, train_size=128, sizes=(1, 2), seconds=0.3, member_share=0.5)
    assert [(m["k"], m.get("processes", 1)) for m in measured] == [(1, 2), (2, 1)]
    assert all(m["images_per_s"] > 0 for m in measured) and measured[0]["steps"] >= 2


def test_processes_measuring_at_once_say_what_one_of_them_met(cfg):
    """A failure in one of the processes is one line naming it (a pack of float16 members: as the
    pack refuses it in this process), not a wait or a traceback of another process."""
    from autoaug.proxy_models.pack_sizing import shared_rate

    f16 = dataclasses.replace(cfg, amp=True, amp_dtype="float16")
    with pytest.raises(ValueError, match=r"^2 processes of a pack of 2 at once: .*float32 or bfloat16") as info:
        shared_rate(f16, 2, 2, train_size=128, seconds=0.2)
    assert "\n" not in str(info.value)
    if not torch.cuda.is_available():  # a device the processes do not have
        with pytest.raises(ValueError, match=r"^2 processes of a pack of 1 at once: .*CUDA is not available") as info:
            shared_rate(dataclasses.replace(cfg, device="cuda"), 1, 2, train_size=128, seconds=0.2)
        assert "\n" not in str(info.value)


def test_a_pack_in_bfloat16_computes_in_bfloat16_as_its_solo_run_does(cfg):
    """torch.autocast does not reach the operations of a vmap: the pack casts as autocast would, so a
    member's gradients are as far from float32's as its solo run's are (not float32's own)."""
    bf16 = dataclasses.replace(cfg, amp=True, amp_dtype="bfloat16")
    f32 = dataclasses.replace(cfg, amp=False)
    images, labels = _batch(2, 5, n=32)
    grads = {}
    for name, c in (("bf16", bf16), ("f32", f32)):
        (solo,) = _fresh(c, (0,))
        pack = PackLearner(c, num_classes=10, steps_per_epoch=4)
        pack.load(copy.deepcopy([solo.state_dict(), solo.state_dict()]))
        _, logits, g = pack.forward_backward(images, labels)
        assert logits.dtype == (torch.bfloat16 if name == "bf16" else torch.float32)
        solo._forward_backward(images[0], labels[0])
        grads[name] = (g, [p.grad for p in solo.model.parameters()])
    (pack_bf, solo_bf), (pack_32, solo_32) = grads["bf16"], grads["f32"]
    solo_gap = max(_rel(a, b) for a, b in zip(solo_bf, solo_32))
    pack_gap = max(_rel(a[0], b) for a, b in zip(pack_bf, solo_32))
    assert solo_gap > 1e-3 and pack_gap > solo_gap / 10  # both rounded to bfloat16, not float32
    assert max(_rel(a[0], b) for a, b in zip(pack_32, solo_32)) < 1e-3


def test_in_bfloat16_every_layer_of_a_member_outputs_the_precision_its_solo_run_outputs(cfg):
    """The pack casts as autocast does, layer by layer: convolutions and linear layers in bfloat16,
    batch norm computed in float32 and returned in bfloat16 (the mixed-precision kernel), so the
    ReLUs and residual additions after it are in bfloat16 in both."""
    bf16 = dataclasses.replace(cfg, amp=True, amp_dtype="bfloat16")
    (solo,) = _fresh(bf16, (0,))
    pack = PackLearner(bf16, num_classes=10, steps_per_epoch=4)
    pack.load(copy.deepcopy([solo.state_dict(), solo.state_dict()]))
    seen: dict[str, dict[str, torch.dtype]] = {"solo": {}, "pack": {}}

    def record(where, name):
        return lambda module, args, out: seen[where].__setitem__(name, out.dtype)

    for where, model in (("solo", solo.model), ("pack", pack.template)):
        for name, module in model.named_modules():
            if name and not list(module.children()):
                module.register_forward_hook(record(where, name))
    images, labels = _batch(2, 3)
    pack.forward_backward(images, labels)
    solo._forward_backward(images[0], labels[0])
    assert seen["pack"] and seen["pack"] == seen["solo"]
    assert {seen["pack"][n] for n, m in pack.template.named_modules() if isinstance(m, torch.nn.BatchNorm2d)} == {
        torch.bfloat16
    }
