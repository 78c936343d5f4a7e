"""Quality study: a found policy against every default baseline on reduced CIFAR-10.

Trains the training preset's model (``cpu``: ResNet-8 on a stratified 4,000-image split of the
CIFAR-10 training set, 1,000 validation images, 8 epochs) with the policy and each default
baseline (none, standard crop+flip, RandAugment n=2 m=9, TrivialAugment-wide, AutoAugment's
published CIFAR-10 policy) for >= 3 seeds, and evaluates every run on the full CIFAR-10 test set
(10,000 images). Prints the table (mean, std, 95% CI of test accuracy; mean training time) and
writes ``results.md/.csv/.parquet``, ``runs.csv``, ``comparison.png``, the per-run records
(``runs/*.json``, which make an interrupted study resumable) and ``study.json`` (command,
machine, wall time) to ``benchmarks/results/compare-<preset>/``.

Run it from the repository root on an otherwise idle machine (about 15 minutes on 2 CPU cores
for the ``cpu`` preset, 3 seeds, 6 policies)::

    flock /tmp/autoaug-cpu.lock .venv/bin/python benchmarks/compare_study.py \\
        --policy NAME@latest --store ~/.autoaug/policies --data "$AUTOAUG_CIFAR10"

``--policy`` is a stored policy reference (its stored record receives the evaluation) or a
policy JSON file. ``--data`` is a folder holding ``train.parquet`` and ``test.parquet`` (default
``$AUTOAUG_CIFAR10``). ``--preset smoke`` checks the plumbing in about two minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from autoaug.launch.compare import DEFAULT_BASELINES, CompareError, config_from_dict, run_compare  # noqa: E402


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--policy", required=True, help="stored policy reference (NAME@N) or policy JSON file")
    parser.add_argument("--store", default=None, help="policy store of the reference ($AUTOAUG_STORE if unset)")
    parser.add_argument(
        "--data",
        default=os.environ.get("AUTOAUG_CIFAR10"),
        help="folder with train.parquet and test.parquet (default $AUTOAUG_CIFAR10)",
    )
    parser.add_argument("--preset", default="cpu", help="training preset (cpu; smoke for a plumbing check)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per policy (at least 3)")
    parser.add_argument("--cpus-per-run", type=int, default=1, help="CPUs and trainer threads per run")
    parser.add_argument("--address", default=None, help="Ray cluster (default: embedded local Ray)")
    parser.add_argument("--out", default=None, help="output folder (default benchmarks/results/compare-<preset>)")
    args = parser.parse_args(argv)

    if args.seeds < 3:
        parser.error(f"--seeds must be at least 3 for the study, got {args.seeds}")
    if not args.data:
        parser.error("give --data (a folder with train.parquet and test.parquet) or set AUTOAUG_CIFAR10")
    data = Path(args.data).expanduser()
    train = data / "train.parquet" if data.is_dir() else data
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"compare-{args.preset}"

    try:
        config = config_from_dict(
            {
                "data": str(train),
                "preset": args.preset,
                "policies": [args.policy],
                "baselines": list(DEFAULT_BASELINES),
                "seeds": args.seeds,
                "store": args.store,
                "out": str(out),
                "cpus_per_run": args.cpus_per_run,
                "address": args.address,
            }
        )
    except CompareError as exc:
        parser.error(str(exc))

    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    try:
        comparison = run_compare(config, progress=lambda line: print(line, flush=True))
    except CompareError as exc:
        print(f"compare_study: {exc}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - t0

    print()
    print(comparison.table())
    print()
    trained_times = [r["train_time_s"] for r in comparison.runs]
    print(
        f"wall time {wall:.0f} s for {comparison.trained} trained run(s) "
        f"({len(comparison.runs) - comparison.trained} reused); mean run {sum(trained_times) / len(trained_times):.0f} s"
    )
    import ray
    import torch

    study = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_at": started.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "wall_time_s": wall,
        "trained_runs": comparison.trained,
        "reused_runs": len(comparison.runs) - comparison.trained,
        "preset": args.preset,
        "train_config": config.train.to_dict(),
        "seeds": list(config.seeds),
        "policy": args.policy,
        "baselines": list(DEFAULT_BASELINES),
        "cpus_per_run": config.cpus_per_run,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "ray": ray.__version__,
        },
        "git_commit": _git_commit(),
        "results": [s.to_dict() for s in comparison.summaries],
        "attached_to": comparison.attached,
    }
    (out / "study.json").write_text(json.dumps(study, indent=2, default=str) + "\n", encoding="utf-8")
    for path in comparison.files.values():  # results, runs, plots; per_class.* when the runs have per-class counts
        print(f"wrote {path}")
    print(f"wrote {out / 'study.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
