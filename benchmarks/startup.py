"""Start-up time of the ``autoaug`` command: ``autoaug --help`` and ``autoaug policies list``.

Each command runs as a whole process (the installed ``autoaug`` script next to this Python)
``--runs`` times after ``--warmup`` runs that are not counted, in turn (A B C A B C ...), so that
a change in the machine's load touches every command alike. For each command it prints the
minimum, median and maximum of the wall time and of the CPU time (user + system of the child,
from ``resource.getrusage``); quote the medians. On a shared machine the wall time includes
waiting for a CPU: compare it with the CPU time, and with the baseline ``python -c pass``.

``policies list`` reads a temporary store holding two stored policies (so the figure includes
opening the store and reading Parquet), and ``import pyarrow.parquet`` is timed as well: it is
the floor of any command that reads the store.

    .venv/bin/python benchmarks/startup.py                  # prints the table
    .venv/bin/python benchmarks/startup.py --runs 15 --json benchmarks/results/startup.json

Target: both ``autoaug`` commands under 0.5 s on the project's 2-core machine.

``--training`` adds what a process that trains pays before its work (a trial actor, a
calibration or re-scoring task): one training step of the proxy with the learner's own SGD and
schedule, and the same step with ``torch.optim``'s ``SGD``, ``LambdaLR`` and
``torch.use_deterministic_algorithms`` (what the learner used before; they import
``torch._dynamo``).

    .venv/bin/python benchmarks/startup.py --training --runs 6 --warmup 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "ray", "optuna", "nvidia.dali")


def _autoaug() -> str:
    script = Path(sys.executable).with_name("autoaug")
    if not script.exists():
        raise SystemExit(f"no autoaug script next to {sys.executable}: install the project (make install)")
    return str(script)


def _prepare_store(root: str) -> None:
    from autoaug.policies.presets import resolve
    from autoaug.policies.store import PolicyStore

    store = PolicyStore(root)
    store.save(resolve("autoaugment-cifar10"), "bench-a")
    store.save(resolve("autoaugment-svhn"), "bench-b")


def _run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """``(wall seconds, cpu seconds)`` of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _heavy_imports(env: dict[str, str]) -> list[str]:
    """The heavy libraries ``autoaug --help``'s module tree imports (expected: none)."""
    code = (
        "import sys; from autoaug.launch.cli import build_parser; build_parser(); "
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.split()


#: One proxy training step in a fresh process, deterministic, with the learner's optimizer
#: ("learner") or with torch.optim's (as before; "torch.optim").
_TRAIN_STEP = """
import torch
from autoaug.proxy_models.learner import Learner, WarmupCosine
from autoaug.proxy_models.train import _TorchState
from autoaug.proxy_models.train_config import TrainConfig
cfg = TrainConfig.from_preset("smoke", epochs=1, deterministic=True)
with _TorchState(cfg, torch.device("cpu")):
    learner = Learner(cfg, num_classes=3, steps_per_epoch=1)
    if TORCH_OPTIM:
        torch.use_deterministic_algorithms(True, warn_only=True)
        learner.optimizer = torch.optim.SGD(learner.model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, WarmupCosine(1, 2))
    learner.train_epoch([(torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 0]))])
"""


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 4), "median": round(statistics.median(values), 4), "max": round(max(values), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="counted runs per command (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="uncounted runs per command first (default 2)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    ap.add_argument("--training", action="store_true", help="also time a process that trains one step, both ways")
    args = ap.parse_args()

    autoaug = _autoaug()
    with tempfile.TemporaryDirectory(prefix="autoaug-startup-") as tmp:
        store = os.path.join(tmp, "store")
        _prepare_store(store)
        env = dict(os.environ, AUTOAUG_STORE=store)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import pyarrow.parquet'": [sys.executable, "-c", "import pyarrow.parquet, pyarrow.fs"],
            "autoaug --help": [autoaug, "--help"],
            "autoaug policies list": [autoaug, "policies", "list"],
        }
        if args.training:
            for label, torch_optim in (("learner", False), ("torch.optim", True)):
                code = f"TORCH_OPTIM = {torch_optim}\n{_TRAIN_STEP}"
                commands[f"one training step ({label})"] = [sys.executable, "-c", code]
        walls: dict[str, list[float]] = {k: [] for k in commands}
        cpus: dict[str, list[float]] = {k: [] for k in commands}
        for i in range(args.warmup + args.runs):
            for name, argv in commands.items():
                wall, cpu = _run_once(argv, env)
                if i >= args.warmup:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        heavy = _heavy_imports(env)

    results = {
        name: {"wall_s": _stats(walls[name]), "cpu_s": _stats(cpus[name]), "runs": args.runs} for name in commands
    }
    load = os.getloadavg()
    record = {
        "what": "start-up time of autoaug commands, whole process",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_1_5_15": [round(x, 2) for x in load],
        },
        "heavy_modules_imported_by_the_parser": heavy,
        "results": results,
    }
    width = max(len(n) for n in commands)
    print(f"{'command':<{width}}  wall s (min / median / max)   cpu s (min / median / max)")
    for name, r in results.items():
        w, c = r["wall_s"], r["cpu_s"]
        print(
            f"{name:<{width}}  {w['min']:.3f} / {w['median']:.3f} / {w['max']:.3f}        "
            f"{c['min']:.3f} / {c['median']:.3f} / {c['max']:.3f}"
        )
    print(
        f"{args.runs} counted runs each after {args.warmup} warm-up; load average {load[0]:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"heavy modules imported by the parser: {', '.join(heavy) or 'none'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
