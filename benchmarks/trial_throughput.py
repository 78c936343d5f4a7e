"""Training throughput of one proxy trial: real data through DALI with a policy vs. a synthetic
upper bound.

For the model and batch size of a training preset (default ``cpu``) this measures, in one process
and with the trainer's own optimisation step (:class:`autoaug.proxy_models.train.Learner`):

(a) **real**: the reduced CIFAR-10 split through :class:`autoaug.proxy_models.pipeline.DaliLoader` with the
    policy (default AutoAugment-CIFAR-10, after the standard crop + flip), as ``train`` runs it;
(b) **synthetic**: one batch of the same shape, already in memory, repeated (no input pipeline at
    all: the upper bound);
(c) **loader only**: the DALI pipeline iterated without training (what the input costs alone).

It prints images/s for each, the ratio (a)/(b) (target >= 0.90), and how (a)'s wall time splits
between waiting for the next batch and the training step. ``--profile`` adds a cProfile listing of
(a). Run it alone on the machine::

    flock /tmp/autoaug-cpu.lock .venv/bin/python benchmarks/trial_throughput.py --data PATH/train.parquet

(``--data`` defaults to ``$AUTOAUG_CIFAR10/train.parquet``.)
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

import torch

from autoaug.policies import resolve_policy
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.splits import reduced_split
from autoaug.proxy_models.pipeline import DaliLoader
from autoaug.proxy_models.train import Learner, TrainConfig, resolve_config


def default_data() -> str | None:
    root = os.environ.get("AUTOAUG_CIFAR10")
    return str(Path(root) / "train.parquet") if root else None


class TimedBatches:
    """Wraps a batch iterable and accumulates the time spent waiting for each batch."""

    def __init__(self, batches):
        self.batches = batches
        self.wait_s = 0.0

    def __iter__(self):
        it = iter(self.batches)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                self.wait_s += time.perf_counter() - t
                return
            self.wait_s += time.perf_counter() - t
            yield batch


def run_epochs(learner: Learner, batches_for_epoch, epochs: int) -> tuple[float, int, float, float]:
    """(wall seconds, images, seconds waiting for data, process CPU seconds) over ``epochs`` epochs."""
    images = 0
    wait = 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(epochs):
        timed = TimedBatches(batches_for_epoch())
        stats = learner.train_epoch(timed)
        images += stats.seen
        wait += timed.wait_s
    return time.perf_counter() - t0, images, wait, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=default_data(), help="training Parquet (default: $AUTOAUG_CIFAR10/train.parquet)")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--policy", default="autoaugment-cifar10")
    parser.add_argument("--epochs", type=int, default=2, help="measured epochs (after one warm-up epoch)")
    parser.add_argument("--batch-size", type=int, default=None, help="override the preset's batch size")
    parser.add_argument("--model", default=None, help="override the preset's model")
    parser.add_argument("--num-threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--dali-threads", type=int, default=None, help="DALI threads (default: as --num-threads)")
    parser.add_argument("--profile", action="store_true", help="cProfile the real-data run and print the top entries")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required (or set AUTOAUG_CIFAR10)")

    overrides = {k: v for k, v in (("batch_size", args.batch_size), ("model", args.model)) if v is not None}
    cfg = TrainConfig.from_preset(args.preset, data=args.data, **overrides)
    threads = args.num_threads or cfg.num_threads or os.cpu_count() or 1
    dali_threads = args.dali_threads or threads
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(cfg.deterministic, warn_only=True)
    policy = resolve_policy(args.policy)
    ds = open_dataset(cfg.data)
    cfg = resolve_config(cfg, ds)  # the split per class as a total, the image size the data's
    split = reduced_split(ds.labels, train_size=cfg.train_size or None, val_size=cfg.val_size, seed=cfg.split_seed)
    loader = DaliLoader(ds, split.train, batch_size=cfg.batch_size, policy=policy, train=True, seed=cfg.seed,
                        image_size=cfg.image_size, num_threads=dali_threads, device="cpu")
    steps = len(loader)
    print(f"preset {args.preset}: {cfg.model}, {len(split.train)} training images, batch {cfg.batch_size} "
          f"({steps} steps/epoch), policy {policy.name!r} ({len(policy.sub_policies)} sub-policies), "
          f"torch threads {threads}, DALI threads {dali_threads}, {os.cpu_count()} cores")

    def learner() -> Learner:
        torch.manual_seed(0)
        return Learner(cfg, num_classes=ds.num_classes, steps_per_epoch=steps, device="cpu")

    # (c) loader only (also builds the pipeline and warms it up)
    for _ in loader:
        pass
    c0, t0 = time.process_time(), time.perf_counter()
    n = 0
    for _ in range(args.epochs):
        for images, _labels in loader:
            n += images.shape[0]
    loader_rate = n / (time.perf_counter() - t0)
    loader_cpu = (time.process_time() - c0) / n * cfg.batch_size  # CPU seconds per batch, all threads

    # (a) real data through DALI with the policy
    real = learner()
    real.train_epoch(loader)  # warm-up epoch
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    real_s, real_n, real_wait, real_cpu = run_epochs(real, lambda: loader, args.epochs)
    if profiler:
        profiler.disable()
    real_rate = real_n / real_s

    # (b) one synthetic batch, repeated
    images, labels = next(iter(loader))
    images, labels = images.clone(), labels.clone()
    synth = learner()
    batch_list = [(images, labels)] * steps
    synth.train_epoch(batch_list)  # warm-up epoch
    synth_s, synth_n, _, synth_cpu = run_epochs(synth, lambda: batch_list, args.epochs)
    synth_cpu /= synth_n / cfg.batch_size
    synth_rate = synth_n / synth_s

    ratio = real_rate / synth_rate
    print(f"(a) real data + {policy.name} through DALI : {real_rate:8.0f} images/s")
    print(f"(b) one synthetic batch repeated          : {synth_rate:8.0f} images/s")
    print(f"(c) DALI loader alone (no training)       : {loader_rate:8.0f} images/s")
    print(f"ratio (a)/(b) = {ratio:.3f}  (target >= 0.90: {'met' if ratio >= 0.9 else 'MISSED'})")
    print(f"in (a): {100 * real_wait / real_s:.1f}% of the wall time waiting for the next batch, "
          f"{100 * (1 - real_wait / real_s):.1f}% in the training step (slowed by the DALI threads "
          f"sharing the cores); {1000 * real_cpu / (real_n / cfg.batch_size):.1f} CPU-ms per batch")
    print(f"per batch of {cfg.batch_size}: training step alone {1000 * synth_s / (synth_n / cfg.batch_size):.1f} ms wall, "
          f"{1000 * synth_cpu:.1f} CPU-ms; DALI loader alone {1000 * cfg.batch_size / loader_rate:.1f} ms wall, "
          f"{1000 * loader_cpu:.1f} CPU-ms")
    cores = min(threads, os.cpu_count() or 1)
    bound = synth_cpu / (synth_cpu + loader_cpu) if synth_cpu / cores >= synth_s / (synth_n / cfg.batch_size) * 0.9 else None
    if bound is not None:
        print(f"the training step already keeps all {cores} cores busy, so the input pipeline's CPU time comes out "
              f"of it: expected ratio <= {bound:.3f}")
    if profiler:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(15)
        print(buf.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
