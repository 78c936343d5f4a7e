"""Every GPU path in one command, with the figures that size a GPU search.

On a machine with one NVIDIA GPU, in about 8 minutes (``--budget-s``)::

    python benchmarks/gpu_check.py --data DIR         # DIR: train.parquet (+ test.parquet)

1. runs the GPU tests (``pytest tests/gpu``: every op through DALI on the GPU against the CPU and
   torchvision, the bases, a trace, the pipeline checkpoint, the learner in bf16/fp16 with
   channels-last and ``torch.compile``, a reproducible run and its resume, a search of trials
   sharing the GPU, ``compare`` on the GPU), and keeps what they measured;
2. times the policy step (images/s) of AutoAugment, RandAugment and TrivialAugment with DALI on
   the GPU, DALI on the CPU and torchvision (a ``DataLoader``), on real 32x32 images in memory;
3. times one proxy training run (the ``paper`` proxy: WRN-40-2 on 4,000 images, a few epochs)
   and samples the GPU's utilisation while it trains;
4. runs 1, 2 and 4 such runs at once on the one GPU (what ``--gpus-per-trial`` 1, 0.5, 0.25
   give a search) and turns their epoch times into 120-epoch trials per GPU-hour;
4b. ``pack``: 120-epoch trials per GPU-hour of packs of K members (``--packs``) beside 1 and 8
   separate processes, both proxies, bf16 on device-resident images, the sizes of
   ``--graph-packs`` again with the step in a CUDA graph (``benchmarks/pack_throughput.py``);
4c. ``feed``: a pack's input side (``--feed-packs`` K): the images per second K members' DALI
   loaders (on the GPU, as ``loader: dali`` trains, and on the CPU) and K device feeds
   (``loader: device``) serve with AutoAugment's CIFAR-10 policy on real images, and the ``paper``
   proxy's pack of K trained end to end fed each way (``pack_throughput.py --measure input,train``);
4d. ``churn``: when the scheduler stops members, a pack that refills their slots with the next
   candidates against one that shrinks until it is empty, for both proxies (``--churn-packs`` K;
   3K candidates fed by device feeds, each trained half or all of 4 epochs as the ``gpu`` preset's
   ASHA would: ``pack_throughput.py --measure churn``);
5. runs ``autoaug search --preset smoke`` end to end with 4 trials sharing the GPU;
6. runs ``autoaug search --preset gpu`` end to end, shortened (``--preset-epochs`` a run, ASHA's
   rung moved with them, ``--preset-budget-s``): calibration, trials at 1/8 GPU each, re-scoring,
   the store; the GPU's utilisation while it runs and the trial-epochs it trains an hour.
   ``--search-preset cpu --preset-epochs 0 --preset-args "--set train.device=cuda
   --gpus-per-trial 0.0625 --concurrency 16"``: the same for another preset moved onto the GPU,
   at its own epochs and rungs (e.g. what a ``cpu``-preset search of many trials costs on a GPU).

``--proxy proxy-cpu`` times the ``cpu`` preset's proxy (ResNet-8 on 1,000 images) in steps 3 and 4
instead of the ``paper`` proxy.

It prints a table and writes every figure as JSON to
``benchmarks/results/gpu/<gpu-name>.json`` (``--out``). ``--skip`` leaves steps out (e.g.
``--skip tests,search``); ``--only`` runs the steps named and no other (``--only feed``). Without a
GPU it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = ("tests", "augment", "train", "concurrency", "pack", "feed", "churn", "search", "preset")
POLICIES = ("autoaugment-cifar10", "randaugment:n=2,m=9", "trivialaugment")


def log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def gpu_facts() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    facts = {
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "multiprocessors": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host_cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    for module, key in (("nvidia.dali", "dali"), ("ray", "ray"), ("optuna", "optuna")):
        try:
            facts[key] = __import__(module, fromlist=["__version__"]).__version__
        except ImportError:
            facts[key] = None
    try:
        facts["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        facts["driver"] = None
    return facts


# ----------------------------------------------------------------------------------------------
# 1. the GPU tests


def run_tests(data: Path, out_dir: Path, timeout_s: float) -> dict:
    report = out_dir / "gpu-tests-measured.json"
    env = {**os.environ, "AUTOAUG_CIFAR10": str(data), "AUTOAUG_GPU_REPORT": str(report), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-p", "no:cacheprovider", "-rfEs", "--durations=10"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        code = "timeout"
    (out_dir / "gpu-tests.log").write_text(output)
    print(output[-6000:], flush=True)
    counts = (
        {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", output.splitlines()[-1])}
        if output
        else {}
    )
    return {
        "command": " ".join(["python", "-m", "pytest", "tests/gpu", "-q"]),
        "exit": code,
        "counts": counts,
        "failures": [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))],
        "wall_s": round(time.perf_counter() - t0, 1),
        "measured": json.loads(report.read_text()) if report.is_file() else None,
    }


# ----------------------------------------------------------------------------------------------
# 2. the policy step


def augment_rates(data: Path, *, batch_size: int, batches: int, repeats: int, threads: int, workers: int) -> dict:
    from augment_throughput import dali_pipeline, load_images, time_dali, time_loader, torchvision_loader

    from autoaug.policies import resolve_policy
    from autoaug.policies.dali_apply import apply_policy

    images, _, _ = load_images(data, batch_size * batches)
    n = len(images) // batch_size
    chunks = [list(images[i * batch_size : (i + 1) * batch_size]) for i in range(n)]
    h, w = images.shape[1:3]
    rates: dict = {}
    for ref in POLICIES:
        policy = resolve_policy(ref)
        runners = {}
        for device in ("gpu", "cpu"):
            pipe = dali_pipeline(
                chunks,
                lambda x, p=policy: apply_policy(p, x, image_size=(h, w)),
                batch_size=batch_size,
                threads=threads,
                device=device,
            )
            runners[f"dali-{device}"] = lambda pipe=pipe: time_dali(pipe, n, batch_size)
        loader = torchvision_loader(images, policy, batch_size=batch_size, workers=workers)
        runners["torchvision"] = lambda loader=loader: time_loader(loader)
        for run in runners.values():
            run()  # warm-up
        measured = {k: [] for k in runners}
        for _ in range(repeats):
            for name, run in runners.items():
                measured[name].append(run())
        rates[ref] = {k: round(statistics.median(v)) for k, v in measured.items()}
        log(f"policy step {ref}: " + ", ".join(f"{k} {v:,} img/s" for k, v in rates[ref].items()))
    return {
        "images": f"{n} batches of {batch_size} real {h}x{w} images, in memory",
        "dali_cpu_threads": threads,
        "torchvision_workers": workers,
        "repeats": repeats,
        "images_per_s": rates,
    }


# ----------------------------------------------------------------------------------------------
# 3 and 4. proxy training runs


_TRAIN_SNIPPET = r"""
import json, sys, time
from autoaug.proxy_models.train import train
from autoaug.proxy_models.train_config import TrainConfig
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
t0 = time.perf_counter()
rows = []
def report(m):
    rows.append({"epoch": m["epoch"], "epoch_time_s": m["epoch_time_s"], "images_per_sec": m["images_per_sec"],
                 "t": time.perf_counter() - t0})
result = train(cfg, sys.argv[2], report=report)
print("RESULT " + json.dumps({"epochs": rows, "wall_s": time.perf_counter() - t0,
                              "val_accuracy": result.val_accuracy, "train_size": result.config.train_size}), flush=True)
"""


def proxy_config(data: Path, epochs: int, proxy: str = "paper") -> dict:
    from autoaug.proxy_models.train_config import TrainConfig

    cfg = TrainConfig.from_preset(proxy, data=str(data / "train.parquet"), epochs=epochs, max_val_size=None)
    d = cfg.to_dict()
    d["device"] = "cuda"
    # a search's trial validates only where its score is read; the last epoch here
    d["eval_epochs"] = [epochs]
    d["val_size"] = 1000
    return d


def start_runs(count: int, config: dict, policy: str) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return [
        subprocess.Popen(
            [sys.executable, "-c", _TRAIN_SNIPPET, json.dumps({**config, "seed": k}), policy],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(count)
    ]


def finish_runs(procs: list[subprocess.Popen], timeout_s: float) -> list[dict]:
    results = []
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"a training run failed (exit {proc.returncode}):\n{out[-3000:]}")
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    return results


class Utilisation:
    """Samples the GPU's utilisation (NVML, through torch) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.25) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _run(self, interval: float) -> None:
        import torch

        while not self._stop.wait(interval):
            try:
                self.samples.append(int(torch.cuda.utilization(0)))
            except Exception:  # noqa: BLE001 - no NVML: no figure
                return

    def __enter__(self) -> Utilisation:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def train_rate(run: dict) -> float:
    """Training images/s of a run after its first epoch (compilation, cuDNN autotuning and
    warm-up excluded; validation is not in it: a search's trial validates only where its score is
    read)."""
    rows = run["epochs"][1:] or run["epochs"]
    return statistics.median(r["images_per_sec"] for r in rows)


def trial_hours(train_size: int, images_per_s: float, epochs: int = 120) -> float:
    return epochs * train_size / images_per_s / 3600


def train_once(data: Path, epochs: int, policy: str, timeout_s: float, proxy: str = "paper") -> dict:
    config = proxy_config(data, epochs, proxy)
    with Utilisation() as util:
        [run] = finish_runs(start_runs(1, config, policy), timeout_s)
    busy = util.samples[len(util.samples) // 4 :]  # after start-up
    return {
        "config": {
            **{k: config[k] for k in ("model", "batch_size", "epochs", "deterministic")},
            "train_size": run["train_size"],
        },
        "policy": policy,
        "images_per_s": round(train_rate(run)),
        "epoch_s": round(run["train_size"] / train_rate(run), 3),
        "gpu_utilisation_pct": round(statistics.mean(busy), 1) if busy else None,
        "wall_s": round(run["wall_s"], 1),
    }


def concurrency(
    data: Path, epochs: int, policy: str, counts: tuple[int, ...], timeout_s: float, proxy: str = "paper"
) -> dict:
    config = proxy_config(data, epochs, proxy)
    rows = {}
    for n in counts:
        runs = finish_runs(start_runs(n, config, policy), timeout_s)
        each = statistics.median(train_rate(r) for r in runs)
        rows[str(n)] = {
            "images_per_s_each": round(each),
            "images_per_s_total": round(sum(train_rate(r) for r in runs)),
            "trials_per_gpu_hour_120_epochs": round(n / trial_hours(runs[0]["train_size"], each), 2),
            # a whole run (process start, data, pipeline, validation at its last epoch) of `epochs` epochs
            "run_wall_s": round(statistics.median(r["wall_s"] for r in runs), 1),
        }
        log(
            f"{n} run(s) at once: {each:,.0f} img/s each -> {rows[str(n)]['trials_per_gpu_hour_120_epochs']} trials/GPU-hour"
        )
    return {"proxy": proxy, "epochs_timed": epochs, "policy": policy, "runs_at_once": rows}


# ----------------------------------------------------------------------------------------------
# 5. a smoke search


def run_search(
    name: str, args: list[str], log: Path, timeout_s: float
) -> tuple[subprocess.CompletedProcess, float, dict]:
    """``autoaug search --name NAME ARGS`` with its run directory and store in a scratch folder
    (removed after): the process, its wall time and its ``result.json`` ({} when it stored
    nothing). What it printed goes to ``log``."""
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    cmd = [sys.executable, "-c", "from autoaug.launch.cli import main; raise SystemExit(main())", "search"]
    cmd += ["--name", name, *args, "--storage", str(work / "runs"), "--store", str(work / "store")]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        wall = time.perf_counter() - t0
        log.write_text(proc.stdout + proc.stderr)
        result_path = work / "runs" / name / "result.json"
        result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return proc, wall, result


def smoke_search(data: Path, out_dir: Path, timeout_s: float) -> dict:
    args = ["--preset", "smoke", "--data", str(data / "train.parquet"), "--num-trials", "8", "--concurrency", "4"]
    args += ["--gpus-per-trial", "0.25", "--set", "train.device=cuda", "-q"]
    proc, wall, result = run_search("gpu-smoke", args, out_dir / "gpu-smoke-search.log", timeout_s)
    return {
        "command": "autoaug search --preset smoke --num-trials 8 --concurrency 4 --gpus-per-trial 0.25 "
        "--set train.device=cuda",
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "stored": (result.get("stored") or {}).get("ref"),
        "last_lines": (proc.stdout + proc.stderr).strip().splitlines()[-5:],
    }


# ----------------------------------------------------------------------------------------------
# 6. the `gpu` preset end to end, shortened


def preset_search(
    data: Path,
    out_dir: Path,
    *,
    epochs: int,
    budget_s: float,
    timeout_s: float,
    preset: str = "gpu",
    extra: tuple[str, ...] = (),
) -> dict:
    """``autoaug search --preset gpu`` as a user runs it (calibration, trials sharing the GPU at
    1/8 each, re-scoring and its race, the store), shortened to fit a check: ``epochs`` epochs a
    run instead of 120, ASHA's one rung moved with them (epoch 60 of 120 -> ``epochs // 2``), and a
    time budget of ``budget_s``. What it measures: that the preset runs end to end on one GPU, how
    its time splits, how busy it keeps the GPU and how many trial-epochs an hour it trains."""
    args = ["--preset", preset, "--data", str(data / "train.parquet"), "--time-budget", f"{budget_s:g}", *extra]
    if epochs:  # shortened: ASHA's one rung moved with the epochs (epoch 60 of 120 -> epochs // 2)
        args += ["--set", f"train.epochs={epochs}", "--grace-period", str(max(1, epochs // 2))]
    name = f"{preset}-preset"
    with Utilisation(interval=1.0) as util:
        proc, wall, result = run_search(name, args, out_dir / f"{name}-search.log", timeout_s)
    prov = result.get("provenance") or {}
    trials = prov.get("trials") or []
    trial_epochs = sum(int(t.get("epochs") or 0) for t in trials)
    trained = [t for t in trials if t.get("epochs") and t.get("train_time_s")]  # (those that reported)
    trial_s = sum(float(t["train_time_s"]) for t in trained)
    elapsed = float((prov.get("time") or {}).get("elapsed_s") or wall)
    calibration = prov.get("calibration") or {}
    # the trials' own schedule (the preset's, or the shortened one)
    run_epochs = int(((prov.get("search") or {}).get("config") or {}).get("train", {}).get("epochs") or epochs or 1)
    busy = util.samples
    return {
        "command": f"autoaug search --name {name} " + " ".join(args),
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "stored": (result.get("stored") or {}).get("ref"),
        "counts": prov.get("counts"),
        "trial_epochs": trial_epochs,
        "trial_epochs_per_hour": round(trial_epochs / elapsed * 3600) if trials else 0,
        "full_length_trials_per_hour": round(trial_epochs / run_epochs / elapsed * 3600, 1) if trials else 0,
        # the trials' recorded training time (train_time_s) per epoch, with as many trials at once as
        # the preset runs: the rate of the trial phase alone (calibration and re-scoring left out)
        "trial_s_per_epoch": round(trial_s / sum(int(t["epochs"]) for t in trained), 3) if trained else None,
        "calibration": {k: calibration.get(k) for k in ("epochs", "train_size", "val_size", "seeds")},
        "chosen": (prov.get("selection") or {}).get("chosen"),
        # the pack servers' rounds, trial-epochs, training and waiting (a search with --pack)
        "packs": (prov.get("method") or {}).get("packs"),
        "budget": prov.get("budget"),
        "gpu_utilisation_pct": {
            "median": statistics.median(busy) if busy else None,
            "mean": round(statistics.fmean(busy), 1) if busy else None,
            "samples": len(busy),
        },
        "last_lines": (proc.stdout + proc.stderr).strip().splitlines()[-25:],
    }


# ----------------------------------------------------------------------------------------------


def pack_rates(packs: str, seconds: float, graph_packs: Collection[int] = ()) -> dict:
    """Step ``pack``: 120-epoch trials per GPU-hour of packs of K members beside one trial per
    process, 1 and 8 at once, for both proxies (``benchmarks/pack_throughput.py``, in bf16 on
    device-resident images); the sizes of ``graph_packs`` again with the step in a CUDA graph."""
    import pack_throughput

    rows = []
    for proxy in ("paper", "proxy-cpu"):
        for count in (1, 8):
            rows.append(pack_throughput.processes(proxy, count, "cuda", "preset", seconds, threads=1))
        for k in (int(x) for x in packs.split(",") if x):
            try:
                rows.append(pack_throughput.time_steps(proxy, k, "cuda", "preset", seconds))
            except Exception as exc:  # noqa: BLE001 - out of memory ends this proxy's sizes
                rows.append({"proxy": proxy, "k": k, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                break
            log(f"pack {proxy} K={k}: {rows[-1]['trials_per_hour']} trials/h")
            if k in graph_packs:
                rows.append(pack_throughput.graphed_steps(proxy, k, "cuda", "preset", seconds))
                log(f"pack {proxy} K={k} in a CUDA graph: {rows[-1].get('trials_per_hour', rows[-1].get('error'))}")
    return {"rows": rows}


def feed_rates(data: Path, packs: str, seconds: float, epochs: int) -> dict:
    """Step ``feed``: per pack size K, the images per second K members' training loaders serve
    (DALI on the GPU, DALI on the CPU, device feeds) and the ``paper`` proxy's pack trained end to
    end fed by DALI and by device feeds (``benchmarks/pack_throughput.py --measure input,train``)."""
    import pack_throughput

    rows = []
    threads = max(1, min(4, (os.cpu_count() or 2) // 4))
    for k in (int(x) for x in packs.split(",") if x):
        for row in pack_throughput.input_rates(
            str(data), "paper", k, "cuda", "autoaugment-cifar10", seconds, loader_threads=threads
        ) + pack_throughput.train_rates(str(data), "paper", k, "cuda", "autoaugment-cifar10", epochs):
            rows.append(row)
            rate = row.get("images_per_s", row.get("error"))
            log(f"feed K={k} {row['measure']} {row['loader']}: {rate}")
    return {"policy": "autoaugment-cifar10", "proxy": "paper", "dali_threads_per_member": threads, "rows": rows}


def churn_rates(data: Path, packs: list[tuple[str, int]], epochs: int) -> dict:
    """Step ``churn``: per proxy and pack size K (``packs``), 3K candidates trained by one pack that
    refills a stopped member's slot with the next candidate, and by one that shrinks until it is
    empty (``benchmarks/pack_throughput.py --measure churn``): trial-epochs per hour each way."""
    import pack_throughput

    rows = []
    for proxy, k in packs:
        for row in pack_throughput.churn_rates(str(data), proxy, k, "cuda", "autoaugment-cifar10", epochs, 3 * k):
            rows.append(row)
            log(
                f"churn {proxy} K={k} {row['mode']}: {row.get('trial_epochs_per_hour', row.get('error'))} trial-epochs/h"
            )
    return {"policy": "autoaugment-cifar10", "epochs": epochs, "rows": rows}


def packs_by_proxy(packs: str) -> list[tuple[str, int]]:
    """``"paper:16,proxy-cpu:32"`` as ``[("paper", 16), ("proxy-cpu", 32)]``."""
    out = []
    for item in (x.strip() for x in packs.split(",") if x.strip()):
        proxy, _, k = item.partition(":")
        out.append((proxy, int(k)))
    return out


def table(figures: dict) -> str:
    lines = [f"GPU check on {figures['gpu']['name']} (torch {figures['gpu']['torch']}, DALI {figures['gpu']['dali']})"]
    tests = figures.get("tests")
    if tests:
        lines.append(f"GPU tests: {tests['counts']} in {tests['wall_s']} s (exit {tests['exit']})")
        lines += [f"  {f}" for f in tests["failures"]]
        ops = (tests.get("measured") or {}).get("ops") or {}
        if ops:
            worst = max(ops.items(), key=lambda kv: kv[1]["gpu_vs_cpu"])
            lines.append(
                f"  ops: largest DALI-GPU vs DALI-CPU distance {worst[1]['gpu_vs_cpu']:.3f} grey levels ({worst[0]}), "
                f"{sum(v['gpu_vs_cpu'] == 0 for v in ops.values())}/{len(ops)} identical"
            )
    aug = figures.get("augment")
    if aug:
        lines.append(f"\n{'policy step, img/s':<24}{'dali-gpu':>12}{'dali-cpu':>12}{'torchvision':>13}")
        for ref, r in aug["images_per_s"].items():
            lines.append(f"{ref:<24}{r['dali-gpu']:>12,}{r['dali-cpu']:>12,}{r['torchvision']:>13,}")
        lines.append(f"(DALI CPU {aug['dali_cpu_threads']} threads, torchvision {aug['torchvision_workers']} workers)")
    tr = figures.get("train")
    if tr:
        lines.append(
            f"\nproxy run ({tr['config']['model']}, {tr['config']['train_size']} images, batch {tr['config']['batch_size']}): "
            f"{tr['images_per_s']:,} img/s, {tr['epoch_s']} s/epoch, GPU utilisation {tr['gpu_utilisation_pct']}%"
        )
    packs = figures.get("pack")
    if packs:
        lines.append(f"\n{'pack step (bf16, images on the GPU)':<40}{'img/s':>10}{'trials/GPU-h':>14}{'GiB':>7}")
        for r in packs["rows"]:
            what = f"{r['processes']} processes" if "processes" in r else f"pack of {r['k']}"
            what += ", CUDA graph" if r.get("graphs") else ""
            if "error" in r:
                lines.append(f"{r['proxy'] + ' ' + what:<40}{r['error']}")
                continue
            mem = f"{r['peak_memory_gib']:>7}" if "peak_memory_gib" in r else ""
            lines.append(f"{r['proxy'] + ' ' + what:<40}{r['images_per_s']:>10,.0f}{r['trials_per_hour']:>14,.0f}{mem}")
    feed = figures.get("feed")
    if feed:
        lines.append(
            f"\n{'pack input side (' + feed['proxy'] + ', img/s)':<40}{'served':>10}{'trained':>10}{'trials/GPU-h':>14}"
        )
        for r in feed["rows"]:
            what = f"K={r['k']} {r['loader']}"
            if "error" in r:
                lines.append(f"{what + ' ' + r['measure']:<40}{r['error']}")
            elif r["measure"] == "input":
                lines.append(f"{what:<40}{r['images_per_s']:>10,.0f}")
            else:
                lines.append(f"{what:<40}{'':>10}{r['images_per_s']:>10,.0f}{r['trials_per_hour']:>14,.0f}")
    churn = figures.get("churn")
    if churn:
        lines.append(
            f"\n{'stopped members (' + str(churn['epochs']) + '-epoch runs)':<40}{'trial-epochs/h':>16}{'members':>9}"
        )
        for r in churn["rows"]:
            what = f"{r['proxy']} K={r['k']} {r['mode']}"
            if "error" in r:
                lines.append(f"{what:<40}{r['error']}")
            else:
                lines.append(f"{what:<40}{r['trial_epochs_per_hour']:>16,}{r['mean_size']:>9}")
    conc = figures.get("concurrency")
    if conc:
        lines.append(
            f"{'trials per GPU':<16}{'img/s each':>12}{'img/s total':>13}{'120-epoch trials per GPU-hour':>32}"
        )
        for n, r in conc["runs_at_once"].items():
            lines.append(
                f"{n:<16}{r['images_per_s_each']:>12,}{r['images_per_s_total']:>13,}{r['trials_per_gpu_hour_120_epochs']:>32}"
            )
    s = figures.get("search")
    if s:
        lines.append(f"\nsmoke search, 8 trials at 0.25 GPU: exit {s['exit']}, {s['wall_s']} s, stored {s['stored']}")
    p = figures.get("preset")
    if p:
        lines.append(
            f"preset step ({p['command']}): exit {p['exit']}, {p['wall_s']} s, stored {p['stored']} "
            f"(chosen: {p['chosen']}); trials {p['counts']}; {p['trial_epochs_per_hour']:,} trial-epochs/h "
            f"({p['full_length_trials_per_hour']} full-length trials/h); GPU utilisation median "
            f"{p['gpu_utilisation_pct']['median']}%"
        )
        if p.get("packs"):
            from autoaug.search.tune.pack import describe_stats

            lines.append(f"  {describe_stats(p['packs'])}")
    for step, error in figures.get("errors", {}).items():
        lines.append(f"{step}: FAILED: {error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="folder with train.parquet")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "gpu"), help="folder for the JSON")
    parser.add_argument("--skip", default="", help=f"comma-separated steps to leave out: {', '.join(STEPS)}")
    parser.add_argument("--only", default="", help="comma-separated steps to run, no other (e.g. --only feed)")
    parser.add_argument("--runs-at-once", default="1,2,4,8", help="trials per GPU to time (default 1,2,4,8)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each timed proxy run (default 3)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="time for the whole check (default 480)")
    parser.add_argument(
        "--proxy",
        default="paper",
        choices=("paper", "proxy-cpu"),
        help="the proxy the train and concurrency steps time (default paper)",
    )
    parser.add_argument("--search-preset", default="gpu", help="the preset step's search preset (default gpu)")
    parser.add_argument(
        "--preset-args",
        default="",
        help="more autoaug search arguments for the preset step, e.g. to move the cpu preset onto the GPU: "
        "'--set train.device=cuda --gpus-per-trial 0.0625 --concurrency 16'",
    )
    parser.add_argument(
        "--preset-epochs",
        type=int,
        default=20,
        help="epochs of each run of the preset step's search, ASHA's rung at half of them; 0: the preset's own "
        "(default 20)",
    )
    parser.add_argument(
        "--preset-budget-s", type=float, default=300.0, help="time budget of the preset step's search (default 300)"
    )
    parser.add_argument("--packs", default="1,4,8,16,32,64", help="the pack step's pack sizes (default 1,4,8,16,32,64)")
    parser.add_argument("--pack-seconds", type=float, default=6.0, help="timed seconds per pack size (default 6)")
    parser.add_argument(
        "--graph-packs",
        default="1,16",
        help="the pack step's sizes measured again with the step in a CUDA graph (default 1,16; '' for none)",
    )
    parser.add_argument("--feed-packs", default="1,8,32", help="the feed step's pack sizes (default 1,8,32)")
    parser.add_argument(
        "--feed-seconds", type=float, default=5.0, help="the feed step's seconds per loader (default 5)"
    )
    parser.add_argument("--feed-epochs", type=int, default=2, help="the feed step's training epochs, the last timed")
    parser.add_argument(
        "--churn-packs",
        default="paper:16,proxy-cpu:32",
        help="the churn step's proxies and pack sizes, PROXY:K comma-separated (default paper:16,proxy-cpu:32)",
    )
    parser.add_argument("--churn-epochs", type=int, default=4, help="the churn step's full run, in epochs (default 4)")
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    for flag, named in (("--skip", skip), ("--only", only)):
        unknown = named - set(STEPS)
        if unknown:
            parser.error(f"{flag}: unknown step {sorted(unknown)[0]!r}; expected some of {', '.join(STEPS)}")
    if only:
        skip |= set(STEPS) - only
    try:
        churn_packs = packs_by_proxy(args.churn_packs)
    except ValueError:
        churn_packs = []
    from pack_throughput import PROXIES, make_importable

    make_importable()  # a machine lent with torch only: this checkout's packages, here and in what it starts

    if not churn_packs or any(p not in PROXIES or k < 1 for p, k in churn_packs):
        parser.error(
            f"--churn-packs {args.churn_packs!r}: expected PROXY:K pairs, PROXY {' or '.join(PROXIES)}, K >= 1"
        )
    graph_packs = [x.strip() for x in args.graph_packs.split(",") if x.strip()]
    if not all(x.isdigit() and int(x) >= 1 for x in graph_packs):
        parser.error(f"--graph-packs {args.graph_packs!r}: expected pack sizes >= 1, comma-separated (or '' for none)")
    if not args.data or not (Path(args.data) / "train.parquet").is_file():
        parser.error(f"--data: no train.parquet in {args.data!r} (give a folder holding one, or set AUTOAUG_CIFAR10)")
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU on this machine (torch.cuda.is_available() is False); nothing to check")
        return 2
    data = Path(args.data).resolve()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()

    def left() -> float:
        return args.budget_s - (time.monotonic() - start)

    figures: dict = {
        "gpu": gpu_facts(),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "errors": {},
    }
    log(f"on {figures['gpu']['name']}, {figures['gpu']['memory_gib']} GiB, driver {figures['gpu']['driver']}")
    steps = {
        "tests": lambda: run_tests(data, out_dir, timeout_s=max(60.0, left() * 0.6)),
        "augment": lambda: augment_rates(
            data,
            batch_size=256,
            batches=16,
            repeats=3,
            threads=min(8, os.cpu_count() or 2),
            workers=min(8, os.cpu_count() or 2),
        ),
        "train": lambda: train_once(
            data, args.epochs, "autoaugment-cifar10", timeout_s=max(60.0, left()), proxy=args.proxy
        ),
        "concurrency": lambda: concurrency(
            data,
            args.epochs,
            "autoaugment-cifar10",
            tuple(int(n) for n in args.runs_at_once.split(",")),
            timeout_s=max(60.0, left()),
            proxy=args.proxy,
        ),
        "pack": lambda: pack_rates(args.packs, args.pack_seconds, {int(x) for x in graph_packs}),
        "feed": lambda: feed_rates(data, args.feed_packs, args.feed_seconds, args.feed_epochs),
        "churn": lambda: churn_rates(data, churn_packs, args.churn_epochs),
        "search": lambda: smoke_search(data, out_dir, timeout_s=max(60.0, left())),
        "preset": lambda: preset_search(
            data,
            out_dir,
            epochs=args.preset_epochs,
            budget_s=args.preset_budget_s,
            timeout_s=max(60.0, left()),
            preset=args.search_preset,
            extra=tuple(shlex.split(args.preset_args)),
        ),
    }
    for name, step in steps.items():
        if name in skip:
            continue
        if left() < 20:
            figures["errors"][name] = f"not run: the {args.budget_s:.0f} s budget was spent"
            continue
        log(f"step {name} ({left():.0f} s left)")
        t0 = time.perf_counter()
        try:
            figures[name] = step()
        except Exception as exc:  # noqa: BLE001 - one step's failure is reported, the others run
            figures["errors"][name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
            log(f"step {name} failed: {exc}")
        log(f"step {name} took {time.perf_counter() - t0:.0f} s")
        slug = re.sub(r"[^A-Za-z0-9]+", "-", figures["gpu"]["name"]).strip("-").lower()
        path = out_dir / f"{slug}.json"
        path.write_text(json.dumps(figures, indent=2) + "\n")  # after every step: a timeout keeps what was measured
    print("\n" + table(figures), flush=True)
    print(f"\nfigures: {path}")
    tests = figures.get("tests") or {}
    return 0 if not figures["errors"] and tests.get("exit", 0) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
