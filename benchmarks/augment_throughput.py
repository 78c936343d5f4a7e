"""Throughput of the policy step: DALI (this project's table-driven ``apply_policy``) vs the
torchvision v2 transform in a ``DataLoader``, and DALI's own ``apply_auto_augment``.

Real CIFAR-10 training images (32x32) are decoded once into memory (decode is excluded from the
augmentation figures and reported on its own line), then augmented in batches of 256:

* ``dali-cpu``: a DALI CPU pipeline (``--threads`` threads, default 2) fed from memory by
  ``fn.external_source``, running ``autoaug.policies.dali_apply.apply_policy``;
* ``dali-autoaug-cpu``: the same pipeline with DALI's ``auto_augment(.., "reduced_cifar10")``
  (DALI's transcription and magnitudes of the same published policy; for reference);
* ``torchvision``: ``Policy.to_torchvision(base=False)`` applied per image in a ``DataLoader`` with
  ``--workers`` worker processes (default 2), collating batches of 256 uint8 tensors;
* ``dali-gpu``: the DALI pipeline with ``device="gpu"``, printed when a GPU is present.

Each method is timed ``--repeats`` times in alternation (after a warm-up), and the median
images/s is reported. Run under ``flock /tmp/autoaug-cpu.lock`` on a shared machine::

    flock /tmp/autoaug-cpu.lock python benchmarks/augment_throughput.py --data DIR
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def load_images(data_dir: Path, count: int) -> tuple[np.ndarray, list[bytes], float]:
    """``count`` real training images (uint8 NHWC), their JPEG bytes and the PIL decode time."""
    import pyarrow.parquet as pq
    from PIL import Image

    path = data_dir / "train.parquet"
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist (pass --data or set AUTOAUG_CIFAR10)")
    table = pq.read_table(path, columns=["image"])
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(table.num_rows, size=min(count, table.num_rows), replace=False))
    blobs = table.column("image").take(idx).to_pylist()
    t0 = time.perf_counter()
    images = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in blobs])
    return images, blobs, time.perf_counter() - t0


def dali_pipeline(batches, augment, *, batch_size, threads, device, seed=0):
    from nvidia.dali import fn, pipeline_def

    state = {"i": 0}

    def source():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        return batch

    @pipeline_def(
        batch_size=batch_size,
        num_threads=threads,
        device_id=0 if device == "gpu" else None,
        seed=seed,
        enable_conditionals=True,
        prefetch_queue_depth=2,
    )
    def pipe():
        images = fn.external_source(source=source, batch=True, layout="HWC")
        if device == "gpu":
            images = images.gpu()
        return augment(images)

    p = pipe()
    p.build()
    return p


def time_dali(pipe, num_batches: int, batch_size: int) -> float:
    t0 = time.perf_counter()
    for _ in range(num_batches):
        out = pipe.run()
        if hasattr(out[0], "as_cpu"):
            out[0].as_cpu()
    return num_batches * batch_size / (time.perf_counter() - t0)


class _TensorDataset:
    def __init__(self, images_chw, transform):
        self.images = images_chw
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i])


def torchvision_loader(images: np.ndarray, policy, *, batch_size: int, workers: int):
    import torch

    chw = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    dataset = _TensorDataset(chw, policy.to_torchvision(base=False))
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        shuffle=False,
        persistent_workers=workers > 0,
        drop_last=True,
    )


def time_loader(loader) -> float:
    t0 = time.perf_counter()
    n = 0
    for batch in loader:
        n += len(batch)
    return n / (time.perf_counter() - t0)


def count_ops(pipe) -> int:
    return len(pipe._ops)  # noqa: SLF001 - number of operators of the built graph


def dali_decode_rate(blobs: list[bytes], batch_size: int, threads: int) -> float:
    from nvidia.dali import fn, pipeline_def, types

    batches = [
        [np.frombuffer(b, dtype=np.uint8) for b in blobs[i : i + batch_size]]
        for i in range(0, len(blobs) - batch_size + 1, batch_size)
    ]
    state = {"i": 0}

    def source():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        return batch

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0)
    def decode():
        return fn.decoders.image(fn.external_source(source=source, batch=True), device="cpu", output_type=types.RGB)

    p = decode()
    p.build()
    p.run()
    return time_dali(p, len(batches), batch_size)


def gpu_available() -> bool:
    try:
        from nvidia.dali.backend import GetCUDADeviceCount

        return GetCUDADeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CUDA driver at all
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        default=os.environ.get("AUTOAUG_CIFAR10"),
        help="folder with train.parquet (default: $AUTOAUG_CIFAR10)",
    )
    parser.add_argument(
        "--policy",
        default="autoaugment-cifar10",
        help="policy reference (preset or JSON file); default autoaugment-cifar10",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=40, help="batches per timed run")
    parser.add_argument("--threads", type=int, default=2, help="DALI CPU threads")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-dali-autoaug", action="store_true")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required when AUTOAUG_CIFAR10 is not set")

    from nvidia.dali.auto_aug import auto_augment

    from autoaug.policies import resolve_policy
    from autoaug.policies.dali_apply import apply_policy

    policy = resolve_policy(args.policy)
    bs = args.batch_size
    images, blobs, pil_s = load_images(Path(args.data), bs * args.batches)
    n = len(images) // bs
    batches = [list(images[i * bs : (i + 1) * bs]) for i in range(n)]
    h, w = images.shape[1:3]
    print(
        f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        "(figures are only comparable on an otherwise idle machine)"
    )
    print(
        f"policy {policy.name}: {len(policy)} sub-policies, {policy.max_ops_per_sub_policy} "
        f"ops each; {n} batches of {bs} real {h}x{w} CIFAR-10 images from {args.data}"
    )
    print(
        f"decode (excluded below): PIL {len(images) / pil_s:,.0f} img/s (1 process), "
        f"DALI CPU {dali_decode_rate(blobs, bs, args.threads):,.0f} img/s "
        f"({args.threads} threads)"
    )

    runners = {}
    ours = dali_pipeline(
        batches, lambda x: apply_policy(policy, x, image_size=(h, w)), batch_size=bs, threads=args.threads, device="cpu"
    )
    runners["dali-cpu"] = lambda: time_dali(ours, n, bs)
    sizes = {"dali-cpu": count_ops(ours)}
    if not args.skip_dali_autoaug:
        theirs = dali_pipeline(
            batches,
            lambda x: auto_augment.auto_augment(x, "reduced_cifar10", shape=(h, w), max_translate_rel=150 / 331),
            batch_size=bs,
            threads=args.threads,
            device="cpu",
        )
        runners["dali-autoaug-cpu"] = lambda: time_dali(theirs, n, bs)
        sizes["dali-autoaug-cpu"] = count_ops(theirs)
    loader = torchvision_loader(images, policy, batch_size=bs, workers=args.workers)
    runners["torchvision"] = lambda: time_loader(loader)

    for run in runners.values():  # warm-up (DataLoader worker start, DALI buffers)
        run()
    rates: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(args.repeats):
        for name, run in runners.items():
            rates[name].append(run())

    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n{'method':<18} {'img/s (median)':>15} {'min':>9} {'max':>9}  graph ops")
    for name, values in rates.items():
        print(f"{name:<18} {med[name]:>15,.0f} {min(values):>9,.0f} {max(values):>9,.0f}  {sizes.get(name, '')}")
    if "torchvision" in med:
        print(f"\nratio dali-cpu / torchvision ({args.workers} workers): {med['dali-cpu'] / med['torchvision']:.2f}")
    if "dali-autoaug-cpu" in med:
        print(f"ratio dali-cpu / dali-autoaug-cpu: {med['dali-cpu'] / med['dali-autoaug-cpu']:.2f}")

    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    if gpu_available():
        gpu = dali_pipeline(
            batches,
            lambda x: apply_policy(policy, x, image_size=(h, w)),
            batch_size=bs,
            threads=args.threads,
            device="gpu",
        )
        time_dali(gpu, n, bs)
        gpu_rates = [time_dali(gpu, n, bs) for _ in range(args.repeats)]
        print(f"dali-gpu: {statistics.median(gpu_rates):,.0f} img/s (median)")
    else:
        print("dali-gpu: no GPU on this machine, not measured")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
