"""Overhead of the search machinery: how much of a search's wall time is not trial training.

Runs a real search (``cpu`` preset by default: ResNet-8 on 4,000 CIFAR-10 images, 8 epochs per
trial, ASHA, 2 trials at a time on 1 CPU each) of ``--trials`` trials (default 8) through
:func:`search.tuner.run_search` -- embedded Ray start, Tune + Optuna, DALI pipelines, checkpoints,
assembly and the policy store -- and reports:

* **overhead**: ``1 - sum(trial training time) / (wall time x concurrency)``, the fraction of the
  machine's trial slots not spent inside the trainer's epochs (training + validation). It
  includes Ray start-up and shutdown, trial set-up (dataset, DALI pipeline and model building),
  per-epoch reporting and checkpointing, scheduling gaps, and the final assembly. Target < 10%.
* where it goes: Ray start/stop, per-trial set-up (Tune's trial time minus training time), idle
  slots, and the time after ``fit`` (records, study check, store);
* **trials per hour**.

Run it alone on the machine::

    flock /tmp/autoaug-cpu.lock .venv/bin/python benchmarks/search_overhead.py --data PATH/train.parquet

(``--data`` defaults to ``$AUTOAUG_CIFAR10``.) Figures are printed and written as JSON
(``--json``, default ``benchmarks/results/search_overhead.json``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="CIFAR-10 Parquet file/folder")
    parser.add_argument("--preset", default="cpu", choices=("smoke", "cpu", "paper"))
    parser.add_argument("--trials", type=int, default=8, help="number of trials (>= 8 for the reported figure)")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--epochs", type=int, help="override the preset's epochs per trial")
    parser.add_argument("--no-early-stopping", action="store_true")
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "search_overhead.json"))
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("give --data (or set AUTOAUG_CIFAR10)")

    from ray.tune import ExperimentAnalysis

    from search.config import SearchConfig
    from search.tuner import ray_session, run_search

    timings: dict[str, float] = {}

    @contextlib.contextmanager
    def timed_session():
        t0 = time.perf_counter()
        with ray_session(None, verbose=1):
            timings["ray_start_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            try:
                yield
            finally:
                timings["fit_s"] = time.perf_counter() - t1
                t2 = time.perf_counter()
        timings["ray_stop_s"] = time.perf_counter() - t2

    with tempfile.TemporaryDirectory(prefix="autoaug-bench-") as tmp:
        overrides = {"train": {"epochs": args.epochs}} if args.epochs else {}
        config = SearchConfig.from_preset(
            args.preset, name="bench", data=args.data, num_trials=args.trials, concurrency=args.concurrency,
            early_stopping=not args.no_early_stopping, storage=f"{tmp}/runs", store=f"{tmp}/store", **overrides,
        )  # fmt: skip
        t0 = time.perf_counter()
        outcome = run_search(config, session=timed_session)
        wall = time.perf_counter() - t0
        analysis = ExperimentAnalysis(outcome.run_dir)
        tune_time = {t.trial_id: float(t.last_result.get("time_total_s") or 0.0) for t in analysis.trials}

    trials = outcome.trials
    slots = config.concurrency or 1
    train = sum(t.train_time_s or 0.0 for t in trials)
    trial_wall = sum(tune_time.values())
    setup = trial_wall - train
    after_fit = wall - timings["ray_start_s"] - timings["fit_s"] - timings["ray_stop_s"]
    figures = {
        "preset": args.preset,
        "trials": len(trials),
        "concurrency": slots,
        "epochs_per_trial": config.epochs,
        "early_stopping": config.early_stopping,
        "epochs_trained": sum(t.epochs for t in trials),
        "statuses": {s: sum(t.status == s for t in trials) for s in ("completed", "early_stopped", "failed")},
        "wall_s": wall,
        "trial_training_s": train,
        "overhead_fraction": 1.0 - train / (wall * slots),
        "breakdown_slot_s": {
            "ray_start": timings["ray_start_s"] * slots,
            "ray_stop": timings["ray_stop_s"] * slots,
            "trial_setup_and_reporting": setup,
            "idle_slots_during_fit": timings["fit_s"] * slots - trial_wall,
            "before_ray_and_after_fit": after_fit * slots,
        },
        "trials_per_hour": len(trials) / wall * 3600.0,
        "best_score": outcome.score,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    total_slot = wall * slots
    print(f"search of {len(trials)} trials ({args.preset} preset, {config.epochs} epochs, concurrency {slots}, "
          f"ASHA {'on' if config.early_stopping else 'off'}): {figures['statuses']}")
    print(f"  wall time                 {wall:8.1f} s   ({figures['trials_per_hour']:.1f} trials/hour)")
    print(f"  trial training (x{slots} slots) {train:8.1f} s   = {train / total_slot:6.1%} of wall x slots")
    print(f"  overhead                  {figures['overhead_fraction']:8.1%}   (target < 10%)")
    for name, seconds in figures["breakdown_slot_s"].items():
        print(f"    {name:<28} {seconds:7.1f} slot-s  {seconds / total_slot:6.1%}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
