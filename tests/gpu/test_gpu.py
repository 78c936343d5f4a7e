"""Every GPU path of the project, on a CUDA device: each op through DALI on the GPU against DALI on
the CPU and torchvision, the bases, a policy's trace, the input pipeline's checkpoint, the learner
(bf16 / fp16 autocast, channels-last, ``torch.compile``), a reproducible training run and its
resume, a search of trials sharing one GPU, and ``compare`` with GPU runs.

Skipped with one line each without CUDA (tests/gpu/conftest.py), and as a whole, in one line,
where NVIDIA DALI is not installed (a machine lent with torch only: the other GPU tests, which need
no DALI, still run there); ``benchmarks/gpu_check.py`` runs them where a GPU is.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from autoaug.policies import Policy, ops, resolve_policy

pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI (the search extra), not installed here")

from autoaug.policies.dali_apply import decode_trace  # noqa: E402  (DALI's, imported when it is here)

RANDOM_POSITION = {"Cutout", "SamplePairing"}  # checked structurally below
#: Mean absolute difference (grey levels, averaged over the images) allowed between an op's output
#: by DALI on the GPU and by DALI on the CPU, for images that drew the same sign: the same
#: operators, so only float rounding (nearest-neighbour sampling at half-pixel boundaries, the
#: rounding of blends) may differ. What each op measured is in ``$AUTOAUG_GPU_REPORT``.
GPU_CPU_TOLERANCE = 1.0


def negations(policy: Policy, trace: np.ndarray) -> list[bool]:
    return [bool(f) and f[0].startswith("-") for _, f in decode_trace(policy, trace)]


# ----------------------------------------------------------------------------------------------
# The policy step on the GPU


@pytest.mark.parametrize("name", [n for n in ops.OP_NAMES if n not in RANDOM_POSITION])
def test_op_on_the_gpu_matches_dali_on_the_cpu_and_torchvision(
    name, images64, dali_run, op_tolerance, gpu_report, op_checks
):
    spec = ops.get(name)
    for magnitude_bin in (0, 9):
        policy = Policy("t", 10, [[(name, 1.0, magnitude_bin)]])
        [(gpu, gpu_trace)] = dali_run(policy, images64, seed=7, return_trace=True, device="gpu")
        [(cpu, cpu_trace)] = dali_run(policy, images64, seed=7, return_trace=True)
        assert gpu.shape == images64.shape and gpu.dtype == np.uint8
        gpu_neg, cpu_neg = negations(policy, gpu_trace), negations(policy, cpu_trace)
        if name != "Identity":
            assert all(f for _, f in decode_trace(policy, gpu_trace)), "probability 1: fires on every image"
        same = [i for i in range(len(images64)) if gpu_neg[i] == cpu_neg[i]]
        assert len(same) >= 8, "too few images drew the same sign on both devices to compare"
        vs_cpu = float(op_checks.mad(gpu[same], cpu[same]).mean())
        vs_torchvision = float(
            op_checks.mad(gpu, op_checks.torch_reference(images64, name, magnitude_bin, gpu_neg)).mean()
        )
        gpu_report.setdefault("ops", {})[f"{name}@{magnitude_bin}"] = {
            "gpu_vs_cpu": vs_cpu,
            "gpu_vs_torchvision": vs_torchvision,
            "images_compared_with_cpu": len(same),
        }
        assert vs_cpu <= GPU_CPU_TOLERANCE, (name, magnitude_bin, vs_cpu)
        assert vs_torchvision <= op_tolerance[name], (name, magnitude_bin, vs_torchvision)
        if magnitude_bin == 0 and spec.has_magnitude:
            assert op_checks.mad(gpu, images64).max() <= 0.5, f"{name}: bin 0 is the identity"
        if magnitude_bin == 9 and name != "Identity":
            assert op_checks.mad(gpu, images64).mean() > 1.0, f"{name} at the highest bin changed nothing on the GPU"


def test_cutout_on_the_gpu_fills_one_grey_square(images64, dali_run, op_checks):
    side = round(60 / 331 * 32)  # 6 px on 32 x 32
    [out] = dali_run(Policy("t", 10, [[("Cutout", 1.0, 9)]]), images64, seed=3, device="gpu")
    [out0] = dali_run(Policy("t", 10, [[("Cutout", 1.0, 0)]]), images64, seed=3, device="gpu")
    assert np.array_equal(out0, images64)
    assert 0.5 * side**2 < op_checks.cutout_area(out, images64, side) <= side**2


def test_sample_pairing_on_the_gpu_blends_with_another_image_of_the_batch(images64, dali_run, op_checks):
    [out] = dali_run(Policy("t", 10, [[("SamplePairing", 1.0, 9)]]), images64, seed=5, device="gpu")
    partners = op_checks.pairing_partners(out, images64)
    assert sorted(partners) == list(range(len(images64)))  # a permutation of the batch


def _base_draws(base: str, image: np.ndarray, n: int) -> list[np.ndarray]:
    from nvidia.dali import fn, pipeline_def

    from autoaug.policies.dali_apply import apply_base

    batch = [image] * n

    @pipeline_def(batch_size=n, num_threads=2, device_id=0, seed=11)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC").gpu()
        return apply_base(base, x, image_size=image.shape[:2])

    p = pipe()
    p.build()
    (out,) = p.run()
    assert "GPU" in type(out).__name__, "the base ran on the GPU"
    out = out.as_cpu()
    return [np.asarray(out[i]) for i in range(n)]


@pytest.mark.parametrize("base", ["none", "crop", "standard"])
def test_base_on_the_gpu_shifts_and_mirrors_as_on_the_cpu(base, marker_image, outcome_of):
    got = [outcome_of(marker_image, out) for out in _base_draws(base, marker_image, 256)]
    if base == "none":
        assert set(got) == {(0, 0, False)}
        return
    shifts = {(dy, dx) for dy, dx, _ in got}
    assert {dy for dy, _ in shifts} == {dx for _, dx in shifts} == set(range(-4, 5))
    mirrored = sum(m for _, _, m in got) / len(got)
    assert mirrored == 0 if base == "crop" else 0.35 < mirrored < 0.65


def test_a_policy_trace_on_the_gpu_fires_ops_at_their_probabilities(images256, dali_run):
    policy = resolve_policy("autoaugment-cifar10")
    runs = dali_run(policy, images256, seed=1, iterations=4, return_trace=True, device="gpu")
    fired = expected = 0.0
    n = 0
    for out, trace in runs:
        for img, src, (k, names), row in zip(out, images256, decode_trace(policy, trace), trace):
            assert 0 <= k < len(policy.sub_policies)
            if not names:
                assert np.array_equal(img, src), "an image on which no op fired is unchanged"
            for stage, op in enumerate(policy.sub_policies[k]):
                fired += bool(row[1 + 2 * stage])
                expected += op.probability
                n += 1
    # a binomial count: within 4 standard errors of the probabilities the policy gives
    p = expected / n
    assert abs(fired - expected) < 4 * math.sqrt(n * p * (1 - p))


# ----------------------------------------------------------------------------------------------
# The input pipeline and the learner on CUDA


@pytest.fixture(scope="module")
def cifar(cifar_dir):
    from autoaug.proxy_models.data import open_dataset

    return open_dataset(cifar_dir)


def test_loader_on_the_gpu_resumes_from_its_checkpoint_exactly(cifar):
    from autoaug.proxy_models.pipeline import DaliLoader
    from autoaug.proxy_models.splits import reduced_split

    split = reduced_split(cifar.labels, train_size=512, val_size=128, seed=0)
    policy = resolve_policy("autoaugment-cifar10")

    def loader():
        return DaliLoader(cifar, split.train, batch_size=128, policy=policy, seed=3, device="gpu")

    first = loader()
    for _ in first:  # epoch 0
        pass
    state = first.state_dict()
    expected = [(x.clone(), y.clone()) for x, y in first]  # epoch 1
    assert expected[0][0].is_cuda and expected[0][0].device.index == torch.cuda.current_device()
    resumed = loader()
    resumed.load_state_dict(state)
    again = [(x.clone(), y.clone()) for x, y in resumed]
    assert len(again) == len(expected) == 4
    for (x0, y0), (x1, y1) in zip(expected, again):
        assert torch.equal(y0, y1) and torch.equal(x0, x1)


def _smoke(cifar_dir, **overrides):
    from autoaug.proxy_models.train_config import TrainConfig

    return TrainConfig.from_preset("smoke", data=str(cifar_dir / "train.parquet"), device="cuda", **overrides)


@pytest.mark.parametrize(
    ("amp_dtype", "channels_last", "compile"),
    [("bfloat16", True, False), ("float16", True, False), ("float16", False, True), (None, False, False)],
    ids=["bf16-channels-last", "fp16-channels-last", "fp16-compiled", "fp32"],
)
def test_learner_trains_on_cuda(cifar_dir, amp_dtype, channels_last, compile, gpu_report):
    from autoaug.core.errors import AutoaugWarning
    from autoaug.proxy_models.train import train

    config = _smoke(
        cifar_dir, amp=amp_dtype is not None, amp_dtype=amp_dtype, channels_last=channels_last, compile=compile
    )
    reports = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(config, "autoaugment-cifar10", report=reports.append)
    fallbacks = [
        str(w.message)
        for w in caught
        if issubclass(w.category, AutoaugWarning) and ("compile" in str(w.message) or "bfloat16" in str(w.message))
    ]
    assert not fallbacks, fallbacks  # compiled when asked; bf16 native, no fallback to float16
    assert [m["epoch"] for m in reports] == [1, 2]
    assert all(math.isfinite(m["train_loss"]) for m in reports)
    assert result.val_accuracy is not None and result.val_accuracy > 0.15  # chance: 0.10
    assert next(result.model.parameters()).is_cuda
    key = f"{amp_dtype or 'fp32'}{'-channels-last' if channels_last else ''}{'-compiled' if compile else ''}"
    gpu_report.setdefault("learner", {})[key] = {
        "images_per_sec": reports[-1]["images_per_sec"],
        "val_accuracy": result.val_accuracy,
    }


def test_a_deterministic_training_run_on_cuda_repeats_exactly_and_resumes_exactly(cifar_dir, tmp_path):
    """Same seed, same numbers (cuDNN deterministic kernels, cuBLAS's fixed workspace); a run
    stopped after its first epoch and resumed from its checkpoint (CUDA RNG state included) ends
    with the uninterrupted run's metrics."""
    from autoaug.proxy_models.train import load_checkpoint, train

    config = _smoke(cifar_dir, epochs=3, deterministic=True)
    runs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            reports = []
            train(config, "autoaugment-cifar10", report=reports.append)
            runs.append([(m["train_loss"], m["val_accuracy"], m["val_loss"]) for m in reports])
    # torch's warn-only deterministic mode names each operation without a deterministic kernel
    nondeterministic = sorted({str(w.message).splitlines()[0] for w in caught if "deterministic" in str(w.message)})
    assert runs[0] == runs[1], nondeterministic
    assert not nondeterministic

    class Interrupt(Exception):
        pass

    def stop_after_first(metrics):
        if metrics["epoch"] == 1:
            raise Interrupt

    with pytest.raises(Interrupt):
        train(config, "autoaugment-cifar10", report=stop_after_first, checkpoint_dir=tmp_path)
    assert load_checkpoint(tmp_path)["rng"]["cuda"] is not None
    reports = []
    train(config, "autoaugment-cifar10", report=reports.append, checkpoint_dir=tmp_path, resume_from=tmp_path)
    assert [(m["train_loss"], m["val_accuracy"], m["val_loss"]) for m in reports] == runs[0][1:]


# ----------------------------------------------------------------------------------------------
# Ray: a search whose trials share the GPU, and compare with GPU runs


@pytest.fixture(scope="module")
def cifar_parts(cifar_dir, tmp_path_factory, every_nth_row_of):
    """About 2,500 training and 1,000 test images (every n-th, all classes): the searches' data."""
    import pyarrow.parquet as pq

    where = tmp_path_factory.mktemp("gpu-data")
    parts = []
    for name, keep in (("train", 2500), ("test", 1000)):
        rows = pq.ParquetFile(cifar_dir / f"{name}.parquet").metadata.num_rows
        parts.append(every_nth_row_of(cifar_dir / f"{name}.parquet", max(1, rows // keep), where / f"{name}.parquet"))
    return tuple(parts)


@pytest.mark.usefixtures("shared_ray")
def test_a_search_of_trials_sharing_one_gpu_stores_a_policy(cifar_parts, tmp_path, capsys):
    from autoaug.launch.cli import main
    from autoaug.policies.store import PolicyStore

    train_data, _ = cifar_parts
    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(train_data),
        "--name",
        "gpu",
        "--num-trials",
        "4",
        "--concurrency",
        "4",
        "--gpus-per-trial",
        "0.25",
        "--set",
        "train.device=cuda",
        "--storage",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "stored as gpu@1" in out
    prov = PolicyStore(str(tmp_path / "store")).get("gpu@1").provenance
    assert prov["search"]["config"]["train"]["device"] == "cuda"
    assert prov["search"]["config"]["gpus_per_trial"] == 0.25
    trials = prov["trials"]
    assert len(trials) == 4 and all(t["status"] in ("completed", "early_stopped") for t in trials)


@pytest.mark.usefixtures("shared_ray")
def test_compare_trains_its_runs_on_the_gpu(cifar_parts, tmp_path, capsys):
    from autoaug.launch.cli import main

    train_data, test_data = cifar_parts
    out = tmp_path / "cmp"
    argv = [
        "compare",
        "--policy",
        "autoaugment-cifar10",
        "--baselines",
        "standard",
        "--seeds",
        "2",
        "--preset",
        "smoke",
        "--data",
        str(train_data),
        "--test-data",
        str(test_data),
        "--gpus-per-run",
        "0.5",
        "--set",
        "train.device=cuda",
        "--no-attach",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "95% CI" in capsys.readouterr().out
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    assert len(records) == 4
    for record in records:
        assert record["train_config"]["device"] == "cuda" and 0.0 < record["test_accuracy"] <= 1.0
