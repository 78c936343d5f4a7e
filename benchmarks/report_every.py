"""What reporting every few epochs saves a search whose epochs are short (packs on a GPU train an
epoch of a member in a fraction of a second): a real search (``autoaug.search.driver.run_search``:
embedded Ray, Ray Tune, the Optuna study, the progress lines; ASHA off) of ``--trials`` trials of
``--epochs`` epochs on ``--train-size`` images, packs of ``--pack`` (1: one trial per process),
once for each ``--report-every``. For each it prints and records the trials' span (the first
trial's start to the last report), the trial-epochs an hour over it, the reports Tune took in,
and what the pack servers did (rounds, and the time they trained and waited)::

    python benchmarks/report_every.py --data DIR --trials 8 --pack 4 --epochs 40 --report-every 1,5

Run it alone on the machine (the pack servers, the trials, Ray and the driver share its cores).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import write_record  # noqa: E402  (the record's command, commit and date)


def measure(args: argparse.Namespace, every: int, root: Path, index: int) -> dict:
    from autoaug.search.config import SearchConfig
    from autoaug.search.driver import run_search

    name = f"every-{index}-{every}"
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "data": args.data,
            "name": name,
            "num_trials": args.trials,
            "concurrency": args.concurrency or args.pack,
            "cpus_per_trial": args.cpus_per_server,
            "pack": args.pack,
            "report_every": every,
            "early_stopping": False,
            "base": "crop",
            "train": {
                "preset": "smoke",
                "epochs": args.epochs,
                "train_size": args.train_size,
                "val_size": args.val_size,
            },
            "storage": str(root / "runs"),
            "store": str(root / "store"),
            "verbose": 0,
        }
    )
    t0 = time.perf_counter()
    run_search(config)
    wall = time.perf_counter() - t0
    run = root / "runs" / name
    rows = [
        json.loads(line)
        for log in run.glob("trial_*/result.json")
        for line in log.read_text().splitlines()
        if line.strip()
    ]
    starts = [r["timestamp"] - r["time_total_s"] for r in rows if r.get("epochs_this_report") == r.get("epoch")]
    span = max(r["timestamp"] for r in rows) - min(starts)
    epochs = sum(int(r["epochs_this_report"]) for r in rows)
    packs = (json.loads((run / "result.json").read_text())["provenance"].get("method") or {}).get("packs")
    return {
        "report_every": every,
        "trial_epochs": epochs,
        "reports": len(rows),
        "trials_span_s": span,
        "trial_epochs_per_hour": round(epochs / span * 3600) if span > 0 else None,
        "search_wall_s": round(wall, 1),
        "pack_servers": packs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="a dataset (the search opens it)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--pack", type=int, default=4, help="trials per pack (1: one trial per process)")
    ap.add_argument("--concurrency", type=int, default=None, help="trials at once (default: a pack)")
    ap.add_argument("--cpus-per-server", type=float, default=1.0, help="CPUs of a pack server (or of a trial)")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--train-size", type=int, default=64)
    ap.add_argument("--val-size", type=int, default=32)
    ap.add_argument("--report-every", default="1,5", help="epochs between reports, comma-separated")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "report-every" / "cpu.json"))
    args = ap.parse_args(argv)
    if not args.data:
        ap.error("--data: give a dataset (or set AUTOAUG_CIFAR10)")
    try:
        values = [int(x) for x in args.report_every.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        ap.error(f"--report-every {args.report_every!r}: expected whole numbers of epochs >= 1, comma-separated")
    for flag, value in (("--trials", args.trials), ("--pack", args.pack), ("--epochs", args.epochs)):
        if value < 1:
            ap.error(f"{flag} {value}: expected at least 1")
    logging.getLogger("ray").setLevel(logging.WARNING)
    from autoaug.core.machine import cpu_kind

    rows = []
    with tempfile.TemporaryDirectory(prefix="autoaug-report-every-") as tmp:
        for index, every in enumerate(values):  # (a value given twice is measured twice: the spread)
            row = measure(args, every, Path(tmp), index)
            rows.append(row)
            servers = row["pack_servers"]
            said = (
                f"; pack servers: {int(servers['rounds'])} rounds, trained {servers['train_s']:.1f} s, waited "
                f"{servers['wait_s']:.1f} s"
                if servers
                else ""
            )
            print(
                f"report every {every}: {row['trial_epochs']} trial-epochs in {row['reports']} reports over "
                f"{row['trials_span_s']:.0f} s, {row['trial_epochs_per_hour']:,} trial-epochs an hour{said}; "
                f"the search {row['search_wall_s']} s",
                flush=True,
            )
    write_record(
        Path(args.out),
        "report_every.py",
        argv,
        machine={"cpu": cpu_kind(), "host_cpus": os.cpu_count()},
        trials=args.trials,
        pack=args.pack,
        epochs=args.epochs,
        train_size=args.train_size,
        rows=rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
