"""The batched policy step and the device feed on a CUDA device: every op batched on the GPU
against torchvision per image on the GPU (the same code as on the CPU, the device the only
difference), a whole policy with given draws, and a device feed whose generator lives on the GPU
resumed from its state exactly. What each op measured goes to ``$AUTOAUG_GPU_REPORT``.

Also what packs do on a CUDA device: a pack trained on device feeds, a step replayed from a CUDA
graph, calibration's and re-scoring's runs in a pack, ``--pack auto``'s processes sharing the GPU.
torch alone (no DALI: ``NEEDS_DALI``): these run on a machine lent with torch only. Skipped with
one line each without CUDA (tests/gpu/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autoaug.policies import ops, presets
from autoaug.policies import torch_apply as ta
from autoaug.policies.torch_batch import OpContext, PolicyPlan, apply_policy_batch, batch_op, draw

#: These tests need CUDA and torch, not DALI (tests/gpu/conftest.py).
NEEDS_DALI = False

#: Grey levels a batched op on the GPU may differ by from torchvision's per-image kernels there
#: (cuDNN may pick another convolution algorithm for a batch than for one image: Sharpness's blur).
GPU_TOLERANCE = 1


@pytest.fixture(scope="module")
def gpu_images(images64) -> torch.Tensor:
    return torch.from_numpy(images64).permute(0, 3, 1, 2).contiguous().cuda()


@pytest.mark.parametrize("name", [n for n in ops.BUILTIN_OPS if n != "Cutout"])
def test_each_op_batched_on_the_gpu_matches_torchvision_per_image_there(name, gpu_images, gpu_report):
    spec, op = ops.get(name), batch_op(name)
    params = [spec.param((i // 2) % 10, 10, image_size=(32, 32), negate=bool(i % 2)) for i in range(len(gpu_images))]
    rows = torch.tensor([list(op.prepare(p, 32, 32)) for p in params], dtype=torch.float64, device="cuda")
    other = gpu_images.roll(1, 0)
    paired = torch.ones(len(gpu_images), dtype=torch.bool, device="cuda")
    ctx = OpContext([128.0] * 3, "nearest", other, paired, torch.zeros(0), tuple({tuple(r) for r in rows.tolist()}))
    got = op.apply(gpu_images, rows, ctx)
    want = torch.stack(
        [
            ta.TORCH_OPS[name].apply(x, p, fill=[128.0] * 3, interpolation=ta._INTERP["nearest"], other=o)
            for x, p, o in zip(gpu_images, params, other)
        ]
    )
    assert got.is_cuda
    diff = (got.int() - want.int()).abs()
    gpu_report.setdefault("batched_ops", {})[name] = {"max": int(diff.max()), "values_differing": int((diff > 0).sum())}
    assert int(diff.max()) <= GPU_TOLERANCE, name


def test_a_policy_batched_on_the_gpu_with_given_draws_matches_torchvision_per_image(gpu_images):
    policy = presets.resolve("autoaugment-cifar10")
    plan = PolicyPlan(policy, 32, 32, "cuda")
    draws = draw(plan, len(gpu_images), torch.Generator("cuda").manual_seed(1))
    got = apply_policy_batch(gpu_images, policy, torch.Generator("cuda"), plan=plan, draws=draws)
    want = []
    for i, x in enumerate(gpu_images):
        for j, op in enumerate(policy.sub_policies[int(draws.sub[i])]):
            if bool(draws.fire[j, i]):
                x = ta.apply_op(x, op.op, op.magnitude_bin, 10, negate=bool(draws.negate[j, i]))
        want.append(x)
    assert int((got.int() - torch.stack(want).int()).abs().max()) <= GPU_TOLERANCE


def test_feeds_served_together_on_the_gpu_each_serve_their_own_stream(cifar_dir):
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.device_feed import DeviceFeed, serve_together

    ds = open_dataset(str(cifar_dir / "train.parquet"))
    indices = np.arange(0, 50_000, 97)[:512]

    def feeds():
        return [
            DeviceFeed(ds, indices, batch_size=128, policy=presets.resolve(p), seed=s, image_size=32, device="cuda")
            for s, p in ((0, "autoaugment-cifar10"), (1, "randaugment:n=2,m=9"), (2, "trivialaugment"))
        ]

    alone = [[(x.clone(), y.clone()) for x, y in f] for f in feeds()]
    together = [[] for _ in range(3)]
    for batches in zip(*serve_together(feeds())):
        for out, (x, y) in zip(together, batches):
            out.append((x.clone(), y.clone()))
    for a, t in zip(alone, together):
        assert len(a) == len(t) == 4 and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, t))


def test_a_device_feed_on_the_gpu_resumes_its_stream_exactly(cifar_dir):
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.device_feed import DeviceFeed

    ds = open_dataset(str(cifar_dir / "train.parquet"))
    indices = np.arange(0, 50_000, 97)[:512]

    def feed():
        return DeviceFeed(
            ds,
            indices,
            batch_size=128,
            policy=presets.resolve("autoaugment-cifar10"),
            seed=3,
            image_size=32,
            device="cuda",
        )

    first = feed()
    for _ in first:
        pass
    state = first.state_dict()
    expected = [(x.clone(), y.clone()) for x, y in first]
    assert expected[0][0].is_cuda and state["device"] == "cuda"
    resumed = feed()
    resumed.load_state_dict(state)
    again = [(x.clone(), y.clone()) for x, y in resumed]
    assert len(again) == 4 and all(torch.equal(a, b) and torch.equal(u, v) for (a, u), (b, v) in zip(expected, again))


def _fed_on_the_gpu(cifar_dir):
    """The smoke preset on the GPU, fed from it (``loader: device``), in bfloat16: what a pack trains."""
    from autoaug.proxy_models.train_config import TrainConfig

    return TrainConfig.from_preset(
        "smoke",
        data=str(cifar_dir / "train.parquet"),
        device="cuda",
        loader="device",
        amp=True,
        amp_dtype="bfloat16",
        train_size=256,
        val_size=128,
    )


def test_a_pack_trains_on_device_feeds_on_the_gpu(cifar_dir):
    from autoaug.proxy_models.pack import train_pack

    cfg = _fed_on_the_gpu(cifar_dir)
    results = train_pack(cfg, ["autoaugment-cifar10", "trivialaugment"], seeds=[0, 1])
    assert all(len(r.history) == cfg.epochs and r.val_accuracy is not None for r in results)
    assert results[1].config.seed == 1 and results[1].config.loader == "device"


@pytest.mark.parametrize("k", [1, 2])
def test_a_training_step_replays_from_a_cuda_graph(k):
    """What ``pack_throughput.py --graphs`` measures: the step (batch gathered, forward, backward,
    SGD) of a solo learner and of a pack captured in a CUDA graph and replayed, training."""
    from autoaug.proxy_models.pack_sizing import pack_rate
    from autoaug.proxy_models.train_config import TrainConfig

    cfg = TrainConfig.from_preset("smoke", data="synthetic", device="cuda", amp=True, amp_dtype="bfloat16")
    row = pack_rate(cfg, k, train_size=256, seconds=0.5, graphs=True)
    assert row["steps"] >= 4 and row["images_per_s"] > 0


def test_calibration_and_rescoring_runs_train_as_a_pack_on_the_gpu(cifar_dir):
    """A search's runs outside Tune with --pack (search.decide.proxy_runs.train_runs' pack task), on the
    GPU: each run scored as its own, with every validation image's outcome."""
    import dataclasses

    from autoaug.policies import Policy
    from autoaug.search.decide.noise import IMAGE_SCORES, decode_image_scores
    from autoaug.search.decide.proxy_runs import train_and_score_pack

    cfg = _fed_on_the_gpu(cifar_dir)
    policies = [presets.resolve("autoaugment-cifar10"), Policy("p", 10, [[("Rotate", 0.5, 3)]])]
    runs = train_and_score_pack(
        [cfg.to_dict(), dataclasses.replace(cfg, seed=1).to_dict()], [p.to_dict() for p in policies], 2
    )
    for run in runs:
        values, _ = decode_image_scores(run[IMAGE_SCORES])
        assert run["pack"] == 2 and run["precision"] == "bfloat16" and len(values) == 128
        assert values.mean() == pytest.approx(run["search_score"])


def test_pack_auto_measures_trials_sharing_the_gpu_as_processes_at_once():
    """--pack auto on a shared GPU: one trial per process measured as that many processes at once."""
    from autoaug.proxy_models.pack_sizing import shared_rate
    from autoaug.proxy_models.train_config import TrainConfig

    cfg = TrainConfig.from_preset("smoke", data="synthetic", device="cuda", amp=True, amp_dtype="bfloat16")
    row = shared_rate(cfg, 1, 2, train_size=256, seconds=0.5)
    assert row["processes"] == 2 and row["images_per_s"] > 0 and row["peak_bytes"] > 0
