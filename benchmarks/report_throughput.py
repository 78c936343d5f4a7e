"""How many epoch reports a second a search's driver takes in, training left out: the ceiling a
search puts on trial-epochs per hour however fast the device trains (packs on a GPU train hundreds
of epochs a minute, and each is one report).

A real search (``autoaug.search.driver.run_search``: embedded Ray, Ray Tune with the search's
callbacks, ASHA off, the Optuna study in SQLite, the progress lines) of ``--trials`` trials,
``--concurrency`` at once, whose trainable trains nothing: it reports ``--epochs`` epochs as fast
as Tune takes them, each with a checkpoint of ``--checkpoint-mib`` MiB (what the training
method's trial hands Tune every epoch: the trainer's file, 17 MiB for WRN-40-2, 0.6 MiB for
ResNet-8) or without one (0). For each size it prints and records the reports per second over the
middle 80% of the reports (the first trials' start and the last ones' end left out; over all of
them too), and the trial-epochs per hour they allow::

    python benchmarks/report_throughput.py --data DIR --trials 32 --concurrency 16 --epochs 20 --checkpoint-mib 0,0.6,17

Run it alone on the machine (the trial processes, Ray and the driver share its cores).
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


def _reporting_trial(epochs: int, checkpoint_bytes: int, times_file: str):
    """A training-method trial that trains nothing: ``epochs`` reports as fast as Tune takes
    them, each with a checkpoint of ``checkpoint_bytes`` (none for 0); the time of each report
    appended to ``times_file``."""

    def reporting_trial(config, **kwargs):
        from ray import tune

        from autoaug.search.score import METRIC

        blob = os.urandom(checkpoint_bytes) if checkpoint_bytes else b""
        stamps = []
        with tempfile.TemporaryDirectory(prefix="autoaug-report-") as scratch:
            for epoch in range(1, epochs + 1):
                score = 0.5 + 0.001 * epoch
                metrics = {METRIC: score, "val_accuracy": score, "epoch": epoch, "train_loss": 1.0}
                if checkpoint_bytes:
                    with open(os.path.join(scratch, "checkpoint.pt"), "wb") as f:
                        f.write(blob)
                    tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(scratch))
                else:
                    tune.report(metrics)
                stamps.append(time.time())
        with open(times_file, "a") as f:
            f.write(json.dumps(stamps) + "\n")

    return reporting_trial


def measure(data: str, trials: int, concurrency: int, epochs: int, mib: float, root: Path, index: int = 0) -> dict:
    from autoaug.search.config import SearchConfig
    from autoaug.search.driver import run_search

    name = f"reports-{index}-{str(mib).replace('.', '_')}"
    times_file = root / f"{name}.jsonl"
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "data": data,
            "name": name,
            "num_trials": trials,
            "concurrency": concurrency,
            "cpus_per_trial": 0.01,
            "early_stopping": False,
            "base": "crop",
            "train": {"preset": "smoke", "epochs": epochs, "train_size": 32, "val_size": 16},
            "storage": str(root / "runs"),
            "store": str(root / "store"),
            "verbose": 0,
        }
    )
    t0 = time.perf_counter()
    run_search(config, trainable=_reporting_trial(epochs, int(mib * 2**20), str(times_file)))
    wall = time.perf_counter() - t0
    stamps = sorted(t for line in times_file.read_text().splitlines() for t in json.loads(line))
    span = stamps[-1] - stamps[0]
    # steady: the middle 80% of the reports (the first trials' processes starting, and the last
    # ones running alone, left out)
    lo, hi = len(stamps) // 10, len(stamps) - 1 - len(stamps) // 10
    steady = (hi - lo) / (stamps[hi] - stamps[lo]) if stamps[hi] > stamps[lo] else float("inf")
    return {
        "checkpoint_mib": mib,
        "reports": len(stamps),
        "span_s": round(span, 2),
        "reports_per_s_all": round((len(stamps) - 1) / span, 1) if span > 0 else None,
        "reports_per_s": round(steady, 1),
        "trial_epochs_per_hour": round(steady * 3600),
        "search_wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="a dataset (the search opens it)")
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--checkpoint-mib", default="0,17", help="checkpoint sizes in MiB, comma-separated (0: none)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "report-throughput" / "cpu.json"))
    args = ap.parse_args(argv)
    if not args.data:
        ap.error("--data: give a dataset (or set AUTOAUG_CIFAR10)")
    try:
        sizes = [float(x) for x in args.checkpoint_mib.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(s < 0 or s > 1024 for s in sizes):
        ap.error(f"--checkpoint-mib {args.checkpoint_mib!r}: expected sizes in MiB from 0 to 1024, comma-separated")
    for flag, value in (("--trials", args.trials), ("--concurrency", args.concurrency), ("--epochs", args.epochs)):
        if value < 1:
            ap.error(f"{flag} {value}: expected at least 1")
    logging.getLogger("ray").setLevel(logging.WARNING)
    from autoaug.core.machine import cpu_kind

    rows = []
    with tempfile.TemporaryDirectory(prefix="autoaug-report-throughput-") as tmp:
        for index, mib in enumerate(sizes):  # (a size given twice is measured twice: the spread)
            row = measure(args.data, args.trials, args.concurrency, args.epochs, mib, Path(tmp), index)
            rows.append(row)
            print(
                f"checkpoint {mib:g} MiB: {row['reports']} reports in {row['span_s']} s, {row['reports_per_s']} a second "
                f"once all run ({row['trial_epochs_per_hour']:,} trial-epochs an hour; {row['reports_per_s_all']} over "
                f"all of them); the search {row['search_wall_s']} s",
                flush=True,
            )
    write_record(
        Path(args.out),
        "report_throughput.py",
        argv,
        machine={"cpu": cpu_kind(), "host_cpus": os.cpu_count()},
        trials=args.trials,
        concurrency=args.concurrency,
        epochs=args.epochs,
        rows=rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
