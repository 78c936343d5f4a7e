"""120-epoch proxy trials per device-hour: packs of K members (one process, the models stacked,
``autoaug.proxy_models.pack.PackLearner``) beside today's one trial per process, P processes at
once on the same device, in one run.

    python benchmarks/pack_throughput.py --device cuda --packs 1,4,8,16,32,64 --processes 1,8
    python benchmarks/pack_throughput.py --device cpu --packs 1,2,4 --processes 1,2 --seconds 20

For each proxy (``--proxies``: ``paper``, WRN-40-2 on 4,000 images at batch 128; ``proxy-cpu``,
ResNet-8 on 1,000 images at batch 64) it times the training step -- forward, backward, the SGD
step -- on training images resident on the device (uint8, each member its own order, normalised
on the device; no augmentation: the model's side of a trial, what a pack changes), in the
preset's precision (``--amp bf16`` / ``fp32`` / ``preset``; a pack refuses float16). A K of 1 is
the solo learner itself. Separate processes each run the solo learner's loop for the same time;
their images per second add up. Trials per hour = images per second x 3600 / (training images x
120 epochs). On CUDA it also records each pack's peak memory, what sizes a pack to a device.

It prints a table and writes ``--out`` (JSON), with the machine (CPU model, GPU) and the command.
Needs torch only (and this checkout): it runs where Ray, Optuna and DALI are not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROXIES = {
    "paper": {"model": "wrn-40-2", "batch_size": 128, "train_size": 4000, "lr": 0.1, "weight_decay": 5e-4},
    "proxy-cpu": {"model": "resnet-8", "batch_size": 64, "train_size": 1000, "lr": 0.2},
}
EPOCHS = 120


def _importable() -> None:
    """Make ``autoaug.*`` importable from this checkout when the project is not installed (a
    machine lent with torch only): a temporary ``autoaug`` folder linking the packages, on the path."""
    try:
        import autoaug.proxy_models  # noqa: F401
    except ImportError:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="autoaug-src-")) / "autoaug"
        root.mkdir()
        (root / "__init__.py").write_text("")
        for package in ("core", "policies", "proxy_models", "search", "launch"):
            (root / package).symlink_to(REPO / package)
        sys.path.insert(0, str(root.parent))
        for name in [m for m in sys.modules if m == "autoaug" or m.startswith("autoaug.")]:
            del sys.modules[name]  # what the failed import left


def _config(proxy: str, device: str, amp: str):
    from autoaug.proxy_models.train_config import TrainConfig

    spec = PROXIES[proxy]
    fields = {k: v for k, v in spec.items() if k != "train_size"}
    if amp == "bf16":
        fields.update(amp=True, amp_dtype="bfloat16")
    elif amp == "fp32":
        fields.update(amp=False)
    elif device.startswith("cuda"):
        fields.update(amp=True, amp_dtype="bfloat16")  # the preset's fp16 needs a scaler: packs train bf16
    else:
        fields.update(amp="native", amp_dtype="bfloat16")
    return TrainConfig(
        data="synthetic", device=device, epochs=EPOCHS, train_size=spec["train_size"], val_size=0, **fields
    )


def time_steps(proxy: str, k: int, device: str, amp: str, seconds: float) -> dict:
    """Images per second (all members) of a pack of ``k`` (1: the solo learner) for about
    ``seconds`` (:func:`autoaug.proxy_models.pack_sizing.pack_rate`)."""
    import torch

    from autoaug.proxy_models.pack_sizing import pack_rate

    cfg = _config(proxy, device, amp)
    n = PROXIES[proxy]["train_size"]
    with torch.random.fork_rng(devices=[]):
        row = pack_rate(cfg, k, train_size=n, seconds=seconds, warmup=3)
    rate = row["images_per_s"]
    out = {
        "proxy": proxy,
        "k": k,
        "steps": row["steps"],
        "seconds": round(row["seconds"], 2),
        "images_per_s": round(rate, 1),
        "trials_per_hour": round(rate * 3600 / (n * EPOCHS), 1),
    }
    if "peak_bytes" in row:
        out["peak_memory_gib"] = round(row["peak_bytes"] / 2**30, 2)
    return out


def processes(proxy: str, count: int, device: str, amp: str, seconds: float, threads: int) -> dict:
    """``count`` separate processes, each the solo learner's loop; their rates added."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--worker", proxy, "--device", device, "--amp", amp, "--seconds", str(seconds)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO) for _ in range(count)]
    rates = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds * 10 + 300)
        rates.append(json.loads(out.strip().splitlines()[-1])["images_per_s"])
    n = PROXIES[proxy]["train_size"]
    total = sum(rates)
    return {
        "proxy": proxy,
        "processes": count,
        "images_per_s": round(total, 1),
        "trials_per_hour": round(total * 3600 / (n * EPOCHS), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--proxies", default="paper,proxy-cpu")
    ap.add_argument("--packs", default="1,4,8,16,32,64")
    ap.add_argument("--processes", default="1,8")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per measurement")
    ap.add_argument("--amp", choices=("preset", "bf16", "fp32"), default="preset")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each process (CPU)")
    ap.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/pack-throughput/<device>.json)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    _importable()
    import torch

    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(time_steps(args.worker, 1, args.device, args.amp, args.seconds)))
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("pack_throughput: no CUDA device here; use --device cpu", file=sys.stderr)
        return 2
    from autoaug.core.machine import cpu_kind

    machine = {"cpu": cpu_kind(), "host_cpus": os.cpu_count(), "torch": torch.__version__}
    if args.device.startswith("cuda"):
        machine["gpu"] = torch.cuda.get_device_name(0)
    rows = []
    for proxy in args.proxies.split(","):
        for count in (int(x) for x in args.processes.split(",") if x):
            row = processes(proxy, count, args.device, args.amp, args.seconds, args.threads)
            rows.append(row)
            print(
                f"{proxy:9s} {count:3d} processes      {row['images_per_s']:10.0f} img/s {row['trials_per_hour']:8.1f} trials/h",
                flush=True,
            )
        for k in (int(x) for x in args.packs.split(",") if x):
            try:
                row = time_steps(proxy, k, args.device, args.amp, args.seconds)
            except torch.cuda.OutOfMemoryError:
                print(f"{proxy:9s} pack of {k:3d}: out of memory", flush=True)
                break
            rows.append(row)
            mem = f"  {row['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in row else ""
            print(
                f"{proxy:9s} pack of {k:3d}       {row['images_per_s']:10.0f} img/s {row['trials_per_hour']:8.1f} trials/h{mem}",
                flush=True,
            )
    out = (
        Path(args.out)
        if args.out
        else REPO / "benchmarks" / "results" / "pack-throughput" / f"{args.device.split(':')[0]}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    record = {
        "command": " ".join(["python", "benchmarks/pack_throughput.py", *(argv if argv is not None else sys.argv[1:])]),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine,
        "rows": rows,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
