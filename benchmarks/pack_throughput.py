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

``--measure input,train`` (real data, ``--data``: CIFAR-10's folder) measures the input side
instead: ``input``, the images per second K members' training loaders serve in lockstep, as a
pack consumes them -- ``dali``, one DALI loader per member on the run's device (what
``loader: dali`` trains with; ``dali-cpu`` too on a GPU), and ``device``, one
:class:`~autoaug.proxy_models.device_feed.DeviceFeed` per member (``loader: device``) served
together as a pack serves them (``device-apart``: each augmenting its own batches) -- each
with the real policy (``--policy``) on its own seed, after one warm-up epoch, the kinds one epoch
each in turn until each had ``--seconds`` (the median epoch); ``train``, the end-to-end training
rate of a pack of K fed each way (images per second of all members, no validation; the two packs
one epoch each in turn, the median of the epochs after the first of ``--epochs``)::

    python benchmarks/pack_throughput.py --device cpu --measure input,train --data DIR --proxies proxy-cpu --packs 1,2,4

``--measure churn`` asks what a pack should do when the scheduler stops a member: let the next
candidate take its slot (``refill``, what a search's pack server does) or train on with fewer
until the pack is empty and then start the next K together (``shrink``). The same ``--trials``
candidates (seeds 0..N-1, the real policy, ``loader: device``), each run for a share of
``--epochs`` that repeats ``--lengths`` (default ``0.5,0.5,1``: ASHA of the ``gpu`` preset, two
in three stopped at its rung, half-way), are trained by one pack of K either way; it reports each
way's trial-epochs per hour, the time spent adding members, and the pack's sizes over its rounds::

    python benchmarks/pack_throughput.py --device cpu --measure churn --data DIR --proxies proxy-cpu --packs 4 --epochs 4 --trials 12

``--graphs`` (CUDA) measures each pack size of the model side a second time with its step --
the batch gathered, forward, backward, the SGD step -- captured once in a CUDA graph and replayed
(rows with ``"graphs": true``; a step that cannot be captured is its row's error).

It prints a table and writes ``--out`` (JSON), with the machine (CPU model, GPU) and the command.
The model side needs torch only (and this checkout): it runs where Ray, Optuna and DALI are not
installed; the input side's ``dali`` rows need DALI.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import write_record  # noqa: E402  (the record's command, commit and date)

PROXIES = {
    "paper": {"model": "wrn-40-2", "batch_size": 128, "train_size": 4000, "lr": 0.1, "weight_decay": 5e-4},
    "proxy-cpu": {"model": "resnet-8", "batch_size": 64, "train_size": 1000, "lr": 0.2},
}
EPOCHS = 120
#: The share of a full run each candidate of ``--measure churn`` trains, in turn: the ``gpu``
#: preset's ASHA, two in three stopped at its rung, half-way.
ASHA_LENGTHS = (0.5, 0.5, 1.0)


def make_importable() -> str | None:
    """Make ``autoaug.*`` importable from this checkout when the project is not installed (a
    machine lent with torch only): a temporary ``autoaug`` folder linking the packages, on the
    path of this process and, through ``PYTHONPATH``, of the processes it starts (the GPU tests,
    the training snippets, the processes measuring at once). Returns that folder's parent (None:
    installed, nothing done)."""
    try:
        import autoaug.proxy_models  # noqa: F401

        return None
    except ImportError:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="autoaug-src-")) / "autoaug"
        root.mkdir()
        (root / "__init__.py").write_text("")
        for package in ("core", "policies", "proxy_models", "search", "launch"):
            (root / package).symlink_to(REPO / package)
        sys.path.insert(0, str(root.parent))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(root.parent), os.environ.get("PYTHONPATH")) if p)
        for name in [m for m in sys.modules if m == "autoaug" or m.startswith("autoaug.")]:
            del sys.modules[name]  # what the failed import left
        return str(root.parent)


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


def time_steps(proxy: str, k: int, device: str, amp: str, seconds: float, graphs: bool = False) -> dict:
    """Images per second (all members) of a pack of ``k`` (1: the solo learner) for about
    ``seconds`` (:func:`autoaug.proxy_models.pack_sizing.pack_rate`; ``graphs``: its step
    replayed from a CUDA graph)."""
    import torch

    from autoaug.proxy_models.pack_sizing import pack_rate

    cfg = _config(proxy, device, amp)
    n = PROXIES[proxy]["train_size"]
    with torch.random.fork_rng(devices=[]):
        row = pack_rate(cfg, k, train_size=n, seconds=seconds, warmup=3, graphs=graphs)
    rate = row["images_per_s"]
    out = {
        "proxy": proxy,
        "k": k,
        **({"graphs": True} if graphs else {}),
        "steps": row["steps"],
        "seconds": round(row["seconds"], 2),
        "images_per_s": round(rate, 1),
        "trials_per_hour": round(rate * 3600 / (n * EPOCHS), 1),
    }
    if "peak_bytes" in row:
        out["peak_memory_gib"] = round(row["peak_bytes"] / 2**30, 2)
    return out


def graphed_steps(proxy: str, k: int, device: str, amp: str, seconds: float) -> dict:
    """:func:`time_steps` with the step in a CUDA graph; a step that cannot be captured is its
    row's ``error`` (the first line of what capture raised)."""
    try:
        return time_steps(proxy, k, device, amp, seconds, graphs=True)
    except Exception as exc:  # noqa: BLE001 - what capture meets is the measurement
        text = str(exc).strip().splitlines()
        return {
            "proxy": proxy,
            "k": k,
            "graphs": True,
            "error": f"{type(exc).__name__}: {text[0] if text else ''}"[:300],
        }


def _rate(row: dict) -> str:
    if "error" in row:
        return row["error"]
    return f"{row['images_per_s']:10.0f} img/s {row['trials_per_hour']:8.1f} trials/h"


def processes(proxy: str, count: int, device: str, amp: str, seconds: float, threads: int) -> dict:
    """``count`` separate processes at once, each the solo learner's loop with ``threads`` torch
    threads, started together (:func:`autoaug.proxy_models.pack_sizing.shared_rate`, what
    ``--pack auto`` measures trials sharing a device with); their rates added. One: this process."""
    import dataclasses

    import torch

    from autoaug.proxy_models.pack_sizing import shared_rate

    cfg = dataclasses.replace(_config(proxy, device, amp), num_threads=threads)
    n = PROXIES[proxy]["train_size"]
    with torch.random.fork_rng(devices=[]):
        row = shared_rate(cfg, 1, count, train_size=n, seconds=seconds, warmup=3)
    total = row["images_per_s"]
    return {
        "proxy": proxy,
        "processes": count,
        "images_per_s": round(total, 1),
        "trials_per_hour": round(total * 3600 / (n * EPOCHS), 1),
    }


def _real_config(proxy: str, device: str, data: str, loader: str, train_size: int | None = None):
    """The proxy's training configuration on real data (``data``: a folder with train.parquet, of
    32 x 32 images: CIFAR-10's), sized to it (``train_size``: that many training images instead),
    without validation, in the precision a pack trains in."""
    import dataclasses

    from autoaug.proxy_models.train_config import PRESETS, resolve_config

    preset = {"paper": "paper", "proxy-cpu": "proxy-cpu"}[proxy]
    amp = {"amp": True, "amp_dtype": "bfloat16"} if device.startswith("cuda") else {}
    sizing = {}
    if train_size is not None:
        sizing = {"train_size": train_size, "train_per_class": None, "min_train_size": None, "max_train_size": None}
    cfg = dataclasses.replace(
        PRESETS[preset],
        data=str(Path(data) / "train.parquet"),
        device=device,
        val_size=0,
        max_val_size=None,
        num_threads=torch_threads(),
        loader=loader,
        image_size=32,  # the data's own (given: reading 50,000 image headers to learn it costs seconds)
        **amp,
        **sizing,
    )
    return resolve_config(cfg)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def input_rates(
    data: str,
    proxy: str,
    k: int,
    device: str,
    policy: str,
    seconds: float,
    loader_threads: int,
    train_size: int | None = None,
) -> list:
    """Images per second (all members) that K members' training loaders serve in lockstep (one
    batch of each per step, as a pack steps), each its own seed, after a warm-up epoch: DALI
    loaders on the run's device (and on the CPU, when that is a GPU), device feeds served together
    (as a pack serves them) and, for K > 1, device feeds each augmenting its own batches."""
    import torch

    from autoaug.policies import resolve_policy
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.device_feed import DeviceFeed, serve_together
    from autoaug.proxy_models.splits import config_split

    cfg = _real_config(proxy, device, data, "dali", train_size)
    ds = open_dataset(cfg.data, split="train")
    train = config_split(ds, cfg).train
    pol = resolve_policy(policy)
    dev = torch.device(device)

    def dali(on: str):
        from autoaug.proxy_models.pipeline import DaliLoader

        return lambda seed: DaliLoader(
            ds,
            train,
            batch_size=cfg.batch_size,
            policy=pol,
            train=True,
            seed=seed,
            image_size=cfg.image_size,
            num_threads=loader_threads,
            device=on,
        )

    def feed(seed: int):
        return DeviceFeed(
            ds, train, batch_size=cfg.batch_size, policy=pol, seed=seed, image_size=cfg.image_size, device=dev
        )

    def apart(loaders):
        return loaders

    kinds = {"dali": (dali(device), apart), "device": (feed, serve_together)}
    if k > 1:
        kinds["device-apart"] = (feed, apart)  # each feed augmenting its own batches
    if dev.type == "cuda":
        kinds["dali-cpu"] = (dali("cpu"), apart)
    rows, ready = {}, {}
    for name, (make, streams) in kinds.items():
        rows[name] = row = {"measure": "input", "proxy": proxy, "k": k, "loader": name, "policy": policy}
        try:
            t0 = time.perf_counter()
            loaders = [make(seed) for seed in range(k)]
            for _ in zip(*streams(loaders)):  # warm-up epoch: pipelines built, first epoch drawn
                pass
            _sync(dev)
            row["setup_s"] = round(time.perf_counter() - t0, 2)
            ready[name] = (loaders, streams)
        except Exception as exc:  # noqa: BLE001 - DALI missing, out of memory: the row says so
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    # Rounds of one epoch of each kind in turn (a load that comes and goes falls on every kind),
    # until each has had about `seconds`; each kind's rate is the median of its epochs'.
    epochs: dict[str, list[float]] = {name: [] for name in ready}
    spent = dict.fromkeys(ready, 0.0)
    while ready and min(spent.values()) < seconds:
        for name, (loaders, streams) in ready.items():
            t0, served = time.perf_counter(), 0
            for batches in zip(*streams(loaders)):
                served += sum(int(b[1].shape[0]) for b in batches)
            _sync(dev)
            elapsed = time.perf_counter() - t0
            spent[name] += elapsed
            epochs[name].append(served / elapsed)
    for name, rates in epochs.items():
        rows[name].update(epochs=len(rates), seconds=round(spent[name], 2), images_per_s=round(median(rates), 1))
    return list(rows.values())


def train_rates(
    data: str, proxy: str, k: int, device: str, policy: str, epochs: int, train_size: int | None = None
) -> list:
    """End to end: a pack of K members (seeds 0..K-1, one policy) fed by DALI loaders and one fed
    by device feeds, trained ``epochs`` epochs each, one epoch of each in turn; images per second
    of all members (the trainer's own rate: after an epoch's first batch), the median over the
    epochs after the first, and the median epoch's wall time."""
    import contextlib
    import dataclasses

    import torch

    from autoaug.proxy_models.pack import Pack

    rows, packs = {}, {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        for loader in ("dali", "device"):
            rows[loader] = row = {"measure": "train", "proxy": proxy, "k": k, "loader": loader, "policy": policy}
            try:
                cfg = _real_config(proxy, device, data, loader, train_size)
                pack = stack.enter_context(Pack(cfg))
                for seed in range(k):
                    pack.add(seed, policy, config=dataclasses.replace(cfg, seed=seed))
                packs[loader] = pack
                row["train_images"] = cfg.train_size
            except Exception as exc:  # noqa: BLE001 - DALI missing, out of memory: the row says so
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        measured: dict[str, list[tuple[float, float]]] = {name: [] for name in packs}
        for _ in range(epochs):
            for loader, pack in packs.items():
                try:
                    report = pack.train_epoch()[0]
                    measured[loader].append((report["images_per_sec"] * k, report["epoch_time_s"]))
                except Exception as exc:  # noqa: BLE001 - out of memory: the row says so
                    rows[loader]["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        for loader, epochs_measured in measured.items():
            timed = sorted(epochs_measured[1:] or epochs_measured)
            if not timed or "error" in rows[loader]:
                continue
            rate, epoch_s = timed[(len(timed) - 1) // 2]
            rows[loader].update(
                epochs=len(epochs_measured),
                images_per_s=round(rate, 1),
                epoch_time_s=round(epoch_s, 2),
                trials_per_hour=round(rate * 3600 / (rows[loader]["train_images"] * EPOCHS), 2),
            )
    return list(rows.values())


def churn_rates(
    data: str,
    proxy: str,
    k: int,
    device: str,
    policy: str,
    epochs: int,
    trials: int,
    lengths: Sequence[float] = ASHA_LENGTHS,
    train_size: int | None = None,
) -> list:
    """The same ``trials`` candidates (each its seed; trial i runs ``lengths[i % len]`` of ``epochs``,
    at least one epoch) trained by one pack of ``k`` fed by device feeds, ``refill`` (a stopped
    member's slot taken by the next candidate at the next round) and ``shrink`` (the next K start
    only when the pack is empty): wall time, trial-epochs per hour, the time adding members took,
    and the rounds' pack sizes."""
    import contextlib
    import dataclasses

    import torch

    from autoaug.proxy_models.pack import Pack

    cfg = dataclasses.replace(_real_config(proxy, device, data, "device", train_size), epochs=epochs)
    runs = [max(1, round(lengths[i % len(lengths)] * epochs)) for i in range(trials)]
    rows = []
    for mode in ("refill", "shrink"):
        row = {"measure": "churn", "proxy": proxy, "k": k, "loader": "device", "mode": mode, "policy": policy}
        row.update(trials=trials, lengths=runs)
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.random.fork_rng(devices=[]))
                pack = stack.enter_context(Pack(cfg))
                queue, sizes, adding = list(range(trials)), [], 0.0
                t0 = time.perf_counter()
                while queue or pack.members:
                    if mode == "refill" or not pack.members:
                        while queue and len(pack.members) < k:
                            t = time.perf_counter()
                            i = queue.pop(0)
                            pack.add(i, policy, config=dataclasses.replace(cfg, seed=i))
                            adding += time.perf_counter() - t
                    sizes.append(len(pack.members))
                    pack.train_epoch()
                    for i in [i for i, m in pack.members.items() if m.epoch >= runs[i]]:
                        pack.remove(i)
                _sync(torch.device(device))
                wall = time.perf_counter() - t0
            trial_epochs = sum(runs)
            row.update(
                rounds=len(sizes),
                mean_size=round(sum(sizes) / len(sizes), 2),
                wall_s=round(wall, 2),
                adding_s=round(adding, 2),
                trial_epochs=trial_epochs,
                trial_epochs_per_hour=round(trial_epochs * 3600 / wall),
                trials_per_hour=round(trial_epochs * 3600 / wall / EPOCHS, 2),  # 120-epoch trials' worth
            )
        except Exception as exc:  # noqa: BLE001 - out of memory: the row says so
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
    return rows


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _print_row(row: dict) -> None:
    what = f"{row['proxy']:9s} {row['measure']:5s} pack of {row['k']:3d} {row.get('mode', row['loader']):8s}"
    if "error" in row:
        print(f"{what} {row['error']}", flush=True)
    elif row["measure"] == "input":
        print(f"{what} {row['images_per_s']:10.0f} img/s served ({row['setup_s']} s to build)", flush=True)
    elif row["measure"] == "churn":
        print(
            f"{what} {row['trial_epochs_per_hour']:10,} trial-epochs/h in {row['wall_s']} s "
            f"({row['rounds']} rounds of {row['mean_size']} members on average, {row['adding_s']} s adding them)",
            flush=True,
        )
    else:
        print(
            f"{what} {row['images_per_s']:10.0f} img/s trained {row['trials_per_hour']:8.2f} trials/h "
            f"({row['epoch_time_s']} s an epoch)",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--proxies", default="paper,proxy-cpu")
    ap.add_argument("--packs", default="1,4,8,16,32,64")
    ap.add_argument("--processes", default="1,8")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per measurement")
    ap.add_argument("--amp", choices=("preset", "bf16", "fp32"), default="preset")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each process (CPU)")
    ap.add_argument(
        "--graphs", action="store_true", help="model: each pack size again with its step in a CUDA graph (CUDA)"
    )
    ap.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/pack-throughput/<device>.json)")
    ap.add_argument(
        "--measure",
        default="model",
        help="model (training steps on resident images), input (the loaders' rate), train (a pack end to end "
        "fed each way), churn (stopped members' slots refilled or the pack shrunk); comma-separated (default model)",
    )
    ap.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="input/train: folder with train.parquet")
    ap.add_argument("--policy", default="autoaugment-cifar10", help="input/train: the members' policy")
    ap.add_argument("--epochs", type=int, default=3, help="train: epochs each pack trains (the first not timed)")
    ap.add_argument("--loader-threads", type=int, default=1, help="input: DALI threads of each member's loader")
    ap.add_argument("--train-size", type=int, default=None, help="input/train: training images (default the proxy's)")
    ap.add_argument("--trials", type=int, default=None, help="churn: candidates trained (default 3 x the pack)")
    ap.add_argument(
        "--lengths",
        default=",".join(f"{x:g}" for x in ASHA_LENGTHS),
        help="churn: the share of --epochs each candidate trains, repeating (default 0.5,0.5,1: ASHA's cut half-way)",
    )
    args = ap.parse_args(argv)
    measures = [m for m in args.measure.split(",") if m]
    if not measures or set(measures) - {"model", "input", "train", "churn"}:
        ap.error(f"--measure {args.measure!r}: expected some of model, input, train, churn")
    if {"input", "train", "churn"} & set(measures) and not (
        args.data and (Path(args.data) / "train.parquet").is_file()
    ):
        ap.error(f"--data: no train.parquet in {args.data!r} (input, train and churn measure on real data)")
    try:
        lengths = [float(x) for x in args.lengths.split(",") if x]
    except ValueError:
        lengths = []
    if not lengths or not all(0 < x <= 1 for x in lengths):
        ap.error(f"--lengths {args.lengths!r}: expected shares of --epochs in (0, 1], comma-separated")
    if args.trials is not None and args.trials < 1:
        ap.error(f"--trials {args.trials}: expected at least 1")
    if args.graphs and not args.device.startswith("cuda"):
        ap.error(f"--graphs: CUDA graphs need --device cuda, not {args.device!r}")
    make_importable()
    import torch

    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("pack_throughput: no CUDA device here; use --device cpu", file=sys.stderr)
        return 2
    from autoaug.core.machine import cpu_kind

    machine = {"cpu": cpu_kind(), "host_cpus": os.cpu_count(), "torch": torch.__version__}
    if args.device.startswith("cuda"):
        machine["gpu"] = torch.cuda.get_device_name(0)
    rows = []
    for proxy in args.proxies.split(",") if "model" in measures else ():
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
            print(f"{proxy:9s} pack of {k:3d}       {_rate(row)}{mem}", flush=True)
            if args.graphs:
                rows.append(graphed_steps(proxy, k, args.device, args.amp, args.seconds))
                print(f"{proxy:9s} pack of {k:3d} graph {_rate(rows[-1])}", flush=True)
    for proxy in args.proxies.split(","):
        for k in (int(x) for x in args.packs.split(",") if x):
            if "input" in measures:
                for row in input_rates(
                    args.data, proxy, k, args.device, args.policy, args.seconds, args.loader_threads, args.train_size
                ):
                    rows.append(row)
                    _print_row(row)
            if "train" in measures:
                for row in train_rates(args.data, proxy, k, args.device, args.policy, args.epochs, args.train_size):
                    rows.append(row)
                    _print_row(row)
            if "churn" in measures:
                trials = args.trials or 3 * k
                for row in churn_rates(
                    args.data, proxy, k, args.device, args.policy, args.epochs, trials, lengths, args.train_size
                ):
                    rows.append(row)
                    _print_row(row)
    name = args.device.split(":")[0] + "".join(f"-{m}" for m in measures if measures != ["model"])
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / "pack-throughput" / f"{name}.json"
    write_record(out, "pack_throughput.py", argv, machine=machine, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
