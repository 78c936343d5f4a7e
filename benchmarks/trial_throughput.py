"""Training throughput of one proxy trial: real data through DALI with a policy vs. a synthetic
upper bound vs. what the cores can do, and the speed levers of the trainer side by side.

For the model and batch size of a training preset (default ``cpu``) this measures, in one process
and with the trainer's own optimisation step (:class:`autoaug.proxy_models.learner.Learner`):

(p) **peak**: a large float32 and bfloat16 matmul (``torch.mm``) and 3x3 convolution (oneDNN,
    channels-last), with one torch thread (per core) and with all of them: the machine's measured
    GFLOP/s; the best kernel of a dtype is the roof of the figures below (both measured by
    ``benchmarks/compute_peak.py``);
(f) **FLOPs per image** of the model's training step (forward + backward) and of its evaluation
    (forward), counted by ``torch.utils.flop_counter.FlopCounterMode`` (convolutions and matmuls;
    batch norm, ReLU and the optimizer's element-wise updates are not counted);
(a) **real**: the reduced split through :class:`autoaug.proxy_models.pipeline.DaliLoader` with the
    policy (default AutoAugment-CIFAR-10, after the standard crop + flip), as ``train`` runs it;
(b) **synthetic**: one batch of the same shape, already in memory, repeated (no input pipeline at
    all: the upper bound);
(c) **loader only**: the DALI pipeline iterated without training (what the input costs alone);
(e) **evaluation**: one pass over the validation split (no augmentation, batches of
    ``eval_batch_size``, ``torch.inference_mode``), as every epoch of a trial ends.

It prints images/s for each, (a) and (b) as a fraction of the peak (achieved GFLOP/s = images/s x
FLOPs per image), the ratio (a)/(b), how (a)'s wall time splits between waiting for the next batch
and the training step, and what one trial epoch (training + validation at the preset's sizes)
costs in each. ``--profile`` adds a cProfile listing of (a).

``--levers`` instead measures the trainer's speed options side by side in one process: each
variant (a :class:`TrainConfig` change and a torch/DALI thread split) has its own learner and
loaders; every round trains one real epoch and one validation pass of every variant, the order
rotating from round to round, so that a load change on the machine touches all variants alike;
then the same for synthetic epochs. Reported per variant: median images/s (real, synthetic,
evaluation), fraction of peak, wall and CPU seconds of one trial epoch, **trial epochs per
CPU-hour** (process CPU time, DALI's threads included) against the baseline, the warm-up (compile)
time, and the training loss after the rounds (the variants see the same batches from the same
initial weights: a numerics sanity check, not a fidelity measure).

Run it alone on the machine (load average is recorded at start and end)::

    flock /tmp/autoaug-cpu.lock .venv/bin/python benchmarks/trial_throughput.py --data PATH/train.parquet
    flock /tmp/autoaug-cpu.lock .venv/bin/python benchmarks/trial_throughput.py --preset proxy-cpu --levers \\
        --rounds 5 --out benchmarks/results/trial-throughput

(``--data`` defaults to ``$AUTOAUG_CIFAR10/train.parquet``; ``--quick``: a smoke run of a few
seconds per variant, not a measurement.)
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from autoaug.policies import resolve_policy
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.pipeline import DaliLoader
from autoaug.proxy_models.splits import reduced_split
from autoaug.proxy_models.train import TrainConfig, eval_batch_size, resolve_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compute_peak import count_flops, measure_peak, peak_for, peak_lines  # noqa: E402  (the roof)


def default_data() -> str | None:
    root = os.environ.get("AUTOAUG_CIFAR10")
    if root:
        return str(Path(root) / "train.parquet")
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-jpeg" / "train.parquet"
    return str(shared) if shared.is_file() else None


# --------------------------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------------------------
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


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``(fn(), wall seconds, process CPU seconds)``."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def machine() -> dict[str, Any]:
    flags: list[str] = []
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = value.split()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "avx512_fp16": "avx512_fp16" in flags,
    }


def epoch_cost(train_images: int, val_images: int, train_per_image: float, eval_per_image: float) -> float:
    """Seconds (wall or CPU, as the rates given) of one trial epoch: training + validation."""
    return train_images * train_per_image + val_images * eval_per_image


# --------------------------------------------------------------------------------------------
# Levers
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Lever:
    """One variant: TrainConfig changes and the thread split (None: the run's ``--num-threads`` /
    ``--dali-threads``)."""

    name: str
    changes: dict[str, Any]
    torch_threads: int | None = None
    dali_threads: int | None = None


def lever_table(threads: int) -> dict[str, Lever]:
    """The levers ``--levers`` knows, by name (``threads``: the run's torch threads)."""
    levers = [
        Lever("baseline", {}),
        Lever("channels_last", {"channels_last": True}),
        Lever("contiguous", {"channels_last": False}),  # the preset's channels_last undone
        Lever("bf16", {"amp": True, "amp_dtype": "bfloat16"}),
        Lever("bf16+channels_last", {"amp": True, "amp_dtype": "bfloat16", "channels_last": True}),
        Lever("compile", {"compile": True}),
        Lever("compile+bf16", {"compile": True, "amp": True, "amp_dtype": "bfloat16"}),
        Lever(
            "compile+bf16+channels_last", {"compile": True, "amp": True, "amp_dtype": "bfloat16", "channels_last": True}
        ),
        Lever("eval_batch_1024", {"eval_batch_size": 1024}),
        Lever("bf16+eval_batch_1024", {"amp": True, "amp_dtype": "bfloat16", "eval_batch_size": 1024}),
        Lever("nondeterministic", {"deterministic": False}),  # what use_deterministic_algorithms costs
    ]
    if threads > 1:
        # Thread placement: DALI on fewer threads than torch, and a 1-CPU trial (a search's).
        levers += [
            Lever(f"threads_{threads}+dali_1", {}, threads, 1),
            Lever("threads_1+dali_1", {}, 1, 1),
            Lever("bf16 threads_1+dali_1", {"amp": True, "amp_dtype": "bfloat16"}, 1, 1),
        ]
    return {lever.name: lever for lever in levers}


DEFAULT_LEVERS = (
    "baseline",
    "channels_last",
    "bf16",
    "bf16+channels_last",
    "compile",
    "compile+bf16",
    "eval_batch_1024",
)
QUICK_LEVERS = ("baseline", "bf16", "compile", "eval_batch_1024")


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else None


def measure_levers(
    args: argparse.Namespace,
    cfg: TrainConfig,
    ds: Any,
    split: Any,
    policy: Any,
    threads: int,
    dali_threads: int,
    peak: dict,
    flops: dict,
    names: list[str],
) -> list[dict]:
    """Every lever of ``names``: a warm-up epoch each, then ``args.rounds`` rounds of one real
    epoch + one validation pass per lever (order rotating), then as many synthetic epochs."""
    table = lever_table(threads)
    unknown = [n for n in names if n not in table]
    if unknown:
        sys.exit(f"unknown lever(s) {', '.join(unknown)}; expected some of {', '.join(table)}")
    variants = []
    for name in names:
        lever = table[name]
        vcfg = dataclasses.replace(cfg, **lever.changes)
        t_threads = lever.torch_threads or threads
        d_threads = lever.dali_threads or dali_threads
        loader = DaliLoader(
            ds,
            split.train,
            batch_size=vcfg.batch_size,
            policy=policy,
            train=True,
            seed=vcfg.seed,
            image_size=vcfg.image_size,
            num_threads=d_threads,
            device="cpu",
        )
        val_loader = None
        if len(split.val):
            val_loader = DaliLoader(
                ds,
                split.val,
                batch_size=eval_batch_size(vcfg),
                train=False,
                seed=vcfg.seed,
                image_size=vcfg.image_size,
                num_threads=d_threads,
                device="cpu",
            )
        torch.set_num_threads(t_threads)
        torch.manual_seed(0)
        learner = Learner(vcfg, num_classes=ds.num_classes, steps_per_epoch=len(loader), device="cpu")
        # Warm-up: builds the pipelines, compiles (compile levers), first-touch allocations.
        _, warm_s, _ = timed(lambda: learner.train_epoch(loader))
        if val_loader is not None:
            learner.evaluate(val_loader)
        variants.append(
            {
                "lever": lever,
                "cfg": vcfg,
                "threads": t_threads,
                "dali_threads": d_threads,
                "loader": loader,
                "val_loader": val_loader,
                "learner": learner,
                "warmup_s": warm_s,
                "real": [],
                "real_cpu": [],
                "eval": [],
                "eval_cpu": [],
                "synth": [],
                "synth_cpu": [],
                "loss": None,
            }
        )
        print(
            f"  warm-up {name}: {warm_s:.1f} s (torch {t_threads} / DALI {d_threads} threads"
            f"{', compiled' if learner.compiled else ''})",
            flush=True,
        )

    order = list(range(len(variants)))
    for r in range(args.rounds):
        for i in order[r % len(order) :] + order[: r % len(order)]:
            v = variants[i]
            torch.set_num_threads(v["threads"])
            stats, wall, cpu = timed(lambda: v["learner"].train_epoch(v["loader"]))
            v["real"].append(stats.seen / wall)
            v["real_cpu"].append(cpu / stats.seen)
            v["loss"] = stats.loss
            if v["val_loader"] is not None:
                result, wall, cpu = timed(lambda: v["learner"].evaluate_per_class(v["val_loader"]))
                v["eval"].append(result.seen / wall)
                v["eval_cpu"].append(cpu / result.seen)
        print(
            f"  round {r + 1}/{args.rounds}: "
            + ", ".join(f"{v['lever'].name} {v['real'][-1]:.0f}" for v in variants)
            + " images/s (real)",
            flush=True,
        )
    images, labels = next(iter(variants[0]["loader"]))
    batch_list = [(images.clone(), labels.clone())] * len(variants[0]["loader"])
    for r in range(args.rounds):
        for i in order[r % len(order) :] + order[: r % len(order)]:
            v = variants[i]
            torch.set_num_threads(v["threads"])
            stats, wall, cpu = timed(lambda: v["learner"].train_epoch(batch_list))
            v["synth"].append(stats.seen / wall)
            v["synth_cpu"].append(cpu / stats.seen)
    torch.set_num_threads(threads)

    train_n, val_n = len(split.train), len(split.val)
    rows = []
    for v in variants:
        vcfg, learner = v["cfg"], v["learner"]
        dtype = "bfloat16" if learner.amp and learner.amp_dtype == torch.bfloat16 else "float32"
        roof = peak_for(peak, dtype, v["threads"]) if peak else None
        real, synth, ev = _median(v["real"]), _median(v["synth"]), _median(v["eval"])
        real_cpu, ev_cpu = _median(v["real_cpu"]), _median(v["eval_cpu"]) or 0.0
        wall = epoch_cost(train_n, val_n, 1 / real, 1 / ev if ev else 0.0) if real else None
        cpu = epoch_cost(train_n, val_n, real_cpu, ev_cpu) if real_cpu else None
        rows.append(
            {
                "lever": v["lever"].name,
                "changes": v["lever"].changes,
                "torch_threads": v["threads"],
                "dali_threads": v["dali_threads"],
                "compiled": learner.compiled,
                "dtype": dtype,
                "eval_batch_size": eval_batch_size(vcfg),
                "real_images_per_s": real,
                "synthetic_images_per_s": synth,
                "eval_images_per_s": ev,
                "real_runs": v["real"],
                "synthetic_runs": v["synth"],
                "eval_runs": v["eval"],
                "fraction_of_peak_synthetic": synth * flops["train"] / 1e9 / roof if roof and synth else None,
                "fraction_of_peak_real": real * flops["train"] / 1e9 / roof if roof and real else None,
                "peak_gflops": roof,
                "trial_epoch_wall_s": wall,
                "trial_epoch_cpu_s": cpu,
                "eval_share_of_epoch_wall": (val_n / ev) / wall if ev and wall else None,
                "trial_epochs_per_cpu_hour": 3600 / cpu if cpu else None,
                "warmup_s": v["warmup_s"],
                "train_loss_after": v["loss"],
            }
        )
    base = next((row for row in rows if row["lever"] == "baseline"), rows[0])
    for row in rows:
        b = base["trial_epochs_per_cpu_hour"]
        row["speedup_per_cpu_hour"] = (
            row["trial_epochs_per_cpu_hour"] / b if b and row["trial_epochs_per_cpu_hour"] else None
        )
        row["speedup_wall"] = (
            base["trial_epoch_wall_s"] / row["trial_epoch_wall_s"]
            if base["trial_epoch_wall_s"] and row["trial_epoch_wall_s"]
            else None
        )
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def levers_markdown(rows: list[dict], header: dict) -> str:
    lines = [
        f"Trial throughput levers: {header['model']}, preset {header['preset']}, {header['train_images']} training "
        f"+ {header['val_images']} validation images per trial epoch, batch {header['batch_size']}, policy "
        f"{header['policy']}; {header['rounds']} rounds; load average {header['load_start']:.1f} at start, "
        f"{header['load_end']:.1f} at end on {header['machine']['cores']} cores.",
        "",
        "| lever | torch+DALI threads | real img/s | synthetic img/s | eval img/s | of peak (synthetic / real) "
        "| trial epoch wall s | trial epoch CPU s | eval share | trial epochs / CPU-h | vs baseline (CPU-h / wall) "
        "| warm-up s | train loss after |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['lever']} | {r['torch_threads']}+{r['dali_threads']} | {_fmt(r['real_images_per_s'], ',.0f')} "
            f"| {_fmt(r['synthetic_images_per_s'], ',.0f')} | {_fmt(r['eval_images_per_s'], ',.0f')} "
            f"| {_fmt(r['fraction_of_peak_synthetic'], '.1%')} / {_fmt(r['fraction_of_peak_real'], '.1%')} ({r['dtype']}) "
            f"| {_fmt(r['trial_epoch_wall_s'], '.2f')} | {_fmt(r['trial_epoch_cpu_s'], '.2f')} "
            f"| {_fmt(r['eval_share_of_epoch_wall'], '.0%')} | {_fmt(r['trial_epochs_per_cpu_hour'], ',.0f')} "
            f"| {_fmt(r['speedup_per_cpu_hour'], '.2f')}x / {_fmt(r['speedup_wall'], '.2f')}x "
            f"| {_fmt(r['warmup_s'], '.1f')} | {_fmt(r['train_loss_after'], '.4f')} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """The benchmark (``--help``); torch's process-wide settings it sets for its runs (threads,
    deterministic algorithms) are put back when it returns, as for a caller in the same process."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        return _main(argv)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", default=default_data(), help="training Parquet (default: $AUTOAUG_CIFAR10/train.parquet)"
    )
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--policy", default="autoaugment-cifar10")
    parser.add_argument("--epochs", type=int, default=None, help="measured epochs (after one warm-up epoch; default 2)")
    parser.add_argument("--batch-size", type=int, default=None, help="override the preset's batch size")
    parser.add_argument("--model", default=None, help="override the preset's model")
    parser.add_argument("--train-size", type=int, default=None, help="override the preset's training split (a total)")
    parser.add_argument("--val-size", type=int, default=None, help="override the preset's validation split")
    parser.add_argument("--num-threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--dali-threads", type=int, default=None, help="DALI threads (default: as --num-threads)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TrainConfig field for every run, e.g. --set amp=true (YAML value)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the real-data run and print the top entries")
    parser.add_argument(
        "--levers",
        nargs="?",
        const=",".join(DEFAULT_LEVERS),
        default=None,
        metavar="NAMES",
        help="measure the speed levers side by side (comma-separated names; default: "
        f"{','.join(DEFAULT_LEVERS)}; 'all' for every one)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="--levers: measured rounds (default 5, --quick 1)")
    parser.add_argument("--no-peak", action="store_true", help="skip the peak matmul measurement")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run (small split and matrices, one round): checks the tool, measures nothing",
    )
    parser.add_argument(
        "--out", default=None, help="write JSON + Markdown into this folder (e.g. benchmarks/results/trial-throughput)"
    )
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required (or set AUTOAUG_CIFAR10)")
    import yaml

    sets = {}
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        sets[key.strip()] = yaml.safe_load(raw)
    if args.quick:
        sets.setdefault("train_size", args.train_size or 512)
        sets.setdefault("val_size", args.val_size if args.val_size is not None else 256)
    else:
        if args.train_size is not None:
            sets["train_size"] = args.train_size
        if args.val_size is not None:
            sets["val_size"] = args.val_size
    epochs = args.epochs or (1 if args.quick else 2)
    rounds = args.rounds or (1 if args.quick else 5)
    args.rounds = rounds

    load_start = os.getloadavg()[0]
    overrides = {k: v for k, v in (("batch_size", args.batch_size), ("model", args.model)) if v is not None}
    cfg = TrainConfig.from_preset(args.preset, data=args.data, **overrides, **sets)
    threads = args.num_threads or cfg.num_threads or os.cpu_count() or 1
    dali_threads = args.dali_threads or cfg.loader_threads or threads
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(cfg.deterministic, warn_only=True)
    policy = resolve_policy(args.policy)
    ds = open_dataset(cfg.data)
    cfg = resolve_config(cfg, ds)  # the split per class as a total, the image size the data's
    split = reduced_split(ds.labels, train_size=cfg.train_size or None, val_size=cfg.val_size, seed=cfg.split_seed)
    info = machine()
    print(
        f"preset {args.preset}: {cfg.model}, {len(split.train)} training + {len(split.val)} validation images, "
        f"batch {cfg.batch_size}, policy {policy.name!r} ({len(policy.sub_policies)} sub-policies), "
        f"torch threads {threads}, DALI threads {dali_threads}; {info['cores']} cores ({info['cpu']}, "
        f"AVX512-BF16 {'yes' if info['avx512_bf16'] else 'no'}), load average {load_start:.1f}"
        + ("  [--quick: a smoke run, not a measurement]" if args.quick else ""),
        flush=True,
    )

    peak: dict = {}
    if not args.no_peak:
        peak = measure_peak(min(threads, os.cpu_count() or threads), quick=args.quick, repeats=2 if args.quick else 5)
    flops = count_flops(cfg, ds.num_classes, cfg.image_size)
    for line in peak_lines(peak, flops):
        print(line)
    header = {
        "preset": args.preset,
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "policy": policy.name,
        "train_images": len(split.train),
        "val_images": len(split.val),
        "rounds": rounds,
        "threads": threads,
        "dali_threads": dali_threads,
        "machine": info,
        "load_start": load_start,
        "quick": args.quick,
        "train_config": cfg.to_dict(),
        "argv": list(argv if argv is not None else sys.argv[1:]),
    }

    if args.levers is not None:
        names = [n.strip() for n in args.levers.split(",") if n.strip()]
        if names == ["all"]:
            names = list(lever_table(threads))
        elif args.quick and args.levers == ",".join(DEFAULT_LEVERS):
            names = list(QUICK_LEVERS)
        rows = measure_levers(args, cfg, ds, split, policy, threads, dali_threads, peak, flops, names)
        header["load_end"] = os.getloadavg()[0]
        text = levers_markdown(rows, header)
        print()
        print(text)
        result = {**header, "kind": "levers", "peak_gflops": peak, "flops_per_image": flops, "levers": rows}
    else:
        result = {
            **header,
            "kind": "throughput",
            "peak_gflops": peak,
            "flops_per_image": flops,
            **basic(args, cfg, ds, split, policy, threads, dali_threads, epochs, peak, flops),
        }
        header["load_end"] = result["load_end"] = os.getloadavg()[0]
        text = None
    print(f"load average at end: {header['load_end']:.1f}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        stem = f"{result['kind']}-{args.preset}-{stamp}" + ("-quick" if args.quick else "")
        result["finished_at"] = stamp
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        md = text if text is not None else basic_markdown(result)
        (out / f"{stem}.md").write_text("\n".join(peak_lines(peak, flops)) + "\n\n" + md)
        print(f"wrote {out / stem}.json and .md")
    return 0


def basic(
    args: argparse.Namespace,
    cfg: TrainConfig,
    ds: Any,
    split: Any,
    policy: Any,
    threads: int,
    dali_threads: int,
    epochs: int,
    peak: dict,
    flops: dict,
) -> dict[str, Any]:
    """(a), (b), (c) and (e) of the module docs, printed; returns the figures."""
    loader = DaliLoader(
        ds,
        split.train,
        batch_size=cfg.batch_size,
        policy=policy,
        train=True,
        seed=cfg.seed,
        image_size=cfg.image_size,
        num_threads=dali_threads,
        device="cpu",
    )
    steps = len(loader)

    def learner() -> Learner:
        torch.manual_seed(0)
        return Learner(cfg, num_classes=ds.num_classes, steps_per_epoch=steps, device="cpu")

    # (c) loader only (also builds the pipeline and warms it up)
    for _ in loader:
        pass
    c0, t0 = time.process_time(), time.perf_counter()
    n = 0
    for _ in range(epochs):
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
    real_s, real_n, real_wait, real_cpu = run_epochs(real, lambda: loader, epochs)
    if profiler:
        profiler.disable()
    real_rate = real_n / real_s

    # (e) evaluation of the validation split, as every trial epoch ends
    eval_rate = eval_cpu = None
    if len(split.val):
        val_loader = DaliLoader(
            ds,
            split.val,
            batch_size=eval_batch_size(cfg),
            train=False,
            seed=cfg.seed,
            image_size=cfg.image_size,
            num_threads=dali_threads,
            device="cpu",
        )
        real.evaluate(val_loader)  # warm-up pass
        seen = 0
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(epochs):
            seen += real.evaluate_per_class(val_loader).seen
        eval_rate = seen / (time.perf_counter() - t0)
        eval_cpu = (time.process_time() - c0) / seen

    # (b) one synthetic batch, repeated
    images, labels = next(iter(loader))
    images, labels = images.clone(), labels.clone()
    synth = learner()
    batch_list = [(images, labels)] * steps
    synth.train_epoch(batch_list)  # warm-up epoch
    synth_s, synth_n, _, synth_cpu = run_epochs(synth, lambda: batch_list, epochs)
    synth_cpu /= synth_n / cfg.batch_size
    synth_rate = synth_n / synth_s

    dtype = "bfloat16" if real.amp and real.amp_dtype == torch.bfloat16 else "float32"
    roof = peak_for(peak, dtype, threads) if peak else None
    ratio = real_rate / synth_rate
    print(
        f"(a) real data + {policy.name} through DALI : {real_rate:8.0f} images/s"
        + (
            f"  ({real_rate * flops['train'] / 1e9:.1f} GFLOP/s, {real_rate * flops['train'] / 1e9 / roof:.1%} of the "
            f"{dtype} peak at {threads} threads)"
            if roof
            else ""
        )
    )
    print(
        f"(b) one synthetic batch repeated          : {synth_rate:8.0f} images/s"
        + (
            f"  ({synth_rate * flops['train'] / 1e9:.1f} GFLOP/s, {synth_rate * flops['train'] / 1e9 / roof:.1%} "
            f"of the peak)"
            if roof
            else ""
        )
    )
    print(f"(c) DALI loader alone (no training)       : {loader_rate:8.0f} images/s")
    if eval_rate is not None:
        print(f"(e) evaluation, batches of {eval_batch_size(cfg):<5d}         : {eval_rate:8.0f} images/s")
    print(f"ratio (a)/(b) = {ratio:.3f}  (target >= 0.90: {'met' if ratio >= 0.9 else 'MISSED'})")
    print(
        f"in (a): {100 * real_wait / real_s:.1f}% of the wall time waiting for the next batch, "
        f"{100 * (1 - real_wait / real_s):.1f}% in the training step (slowed by the DALI threads "
        f"sharing the cores); {1000 * real_cpu / (real_n / cfg.batch_size):.1f} CPU-ms per batch"
    )
    print(
        f"per batch of {cfg.batch_size}: training step alone {1000 * synth_s / (synth_n / cfg.batch_size):.1f} ms wall, "
        f"{1000 * synth_cpu:.1f} CPU-ms; DALI loader alone {1000 * cfg.batch_size / loader_rate:.1f} ms wall, "
        f"{1000 * loader_cpu:.1f} CPU-ms"
    )
    train_n, val_n = len(split.train), len(split.val)
    epoch_wall = epoch_cost(train_n, val_n, 1 / real_rate, 1 / eval_rate if eval_rate else 0.0)
    epoch_cpu = epoch_cost(train_n, val_n, real_cpu / real_n, eval_cpu or 0.0)
    eval_share = (val_n / eval_rate) / epoch_wall if eval_rate else 0.0
    print(
        f"one trial epoch ({train_n} training + {val_n} validation images): {epoch_wall:.2f} s wall "
        f"({eval_share:.0%} of it validation), {epoch_cpu:.2f} CPU-s: {3600 / epoch_cpu:,.0f} trial epochs per CPU-hour"
    )
    cores = min(threads, os.cpu_count() or 1)
    bound = (
        synth_cpu / (synth_cpu + loader_cpu)
        if synth_cpu / cores >= synth_s / (synth_n / cfg.batch_size) * 0.9
        else None
    )
    if bound is not None:
        print(
            f"the training step already keeps all {cores} cores busy, so the input pipeline's CPU time comes out "
            f"of it: expected ratio <= {bound:.3f}"
        )
    if profiler:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(15)
        print(buf.getvalue())
    return {
        "dtype": dtype,
        "real_images_per_s": real_rate,
        "synthetic_images_per_s": synth_rate,
        "loader_images_per_s": loader_rate,
        "eval_images_per_s": eval_rate,
        "eval_batch_size": eval_batch_size(cfg),
        "ratio_real_synthetic": ratio,
        "wait_share_real": real_wait / real_s,
        "fraction_of_peak_real": real_rate * flops["train"] / 1e9 / roof if roof else None,
        "fraction_of_peak_synthetic": synth_rate * flops["train"] / 1e9 / roof if roof else None,
        "cpu_ms_per_batch_real": 1000 * real_cpu / (real_n / cfg.batch_size),
        "cpu_ms_per_batch_synthetic": 1000 * synth_cpu,
        "cpu_ms_per_batch_loader": 1000 * loader_cpu,
        "trial_epoch_wall_s": epoch_wall,
        "trial_epoch_cpu_s": epoch_cpu,
        "eval_share_of_epoch_wall": eval_share,
        "trial_epochs_per_cpu_hour": 3600 / epoch_cpu,
    }


def basic_markdown(result: dict) -> str:
    def pct(v):
        return "-" if v is None else f"{v:.1%}"

    return (
        "\n".join(
            [
                f"Trial throughput: {result['model']}, preset {result['preset']}, batch {result['batch_size']}, "
                f"torch {result['threads']} / DALI {result['dali_threads']} threads, {result['dtype']}; load average "
                f"{result['load_start']:.1f} at start, {result['load_end']:.1f} at end.",
                "",
                "| run | images/s | of peak |",
                "| --- | ---: | ---: |",
                f"| (a) real data + policy through DALI | {result['real_images_per_s']:,.0f} | {pct(result['fraction_of_peak_real'])} |",
                f"| (b) synthetic batch | {result['synthetic_images_per_s']:,.0f} | {pct(result['fraction_of_peak_synthetic'])} |",
                f"| (c) DALI loader alone | {result['loader_images_per_s']:,.0f} | |",
                f"| (e) evaluation (batch {result['eval_batch_size']}) | "
                f"{'-' if result['eval_images_per_s'] is None else format(result['eval_images_per_s'], ',.0f')} | |",
                "",
                f"One trial epoch ({result['train_images']} + {result['val_images']} images): "
                f"{result['trial_epoch_wall_s']:.2f} s wall ({result['eval_share_of_epoch_wall']:.0%} validation), "
                f"{result['trial_epoch_cpu_s']:.2f} CPU-s, {result['trial_epochs_per_cpu_hour']:,.0f} trial epochs per CPU-hour.",
            ]
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
