"""Overhead of the search machinery: how much of a search's wall time is not trial training.

Runs a real search (``cpu`` preset by default: ResNet-8 on 4,000 CIFAR-10 images, 8 epochs per
trial, ASHA, 2 trials at a time on 1 CPU each) of ``--trials`` trials (default 8) through
:func:`autoaug.search.driver.run_search` -- embedded Ray start, Tune + Optuna, DALI pipelines, checkpoints,
assembly and the policy store -- and reports:

* **overhead**: ``1 - sum(trial training time) / (wall time x concurrency)``, the fraction of the
  machine's trial slots not spent inside the trainer's epochs (training + validation). It
  includes Ray start-up and shutdown, trial set-up (dataset, DALI pipeline and model building),
  per-epoch reporting and checkpointing, scheduling gaps, and the final assembly. Target < 10%.
* where it goes, in slot-seconds: Ray start/stop; per-trial set-up and reporting (the trial
  function's wall time minus its training time: dataset, DALI pipeline and model building,
  checkpoints, ``tune.report``); idle slots before the first trials start, between trials, in the
  *tail* (a slot free while the last trial runs alone: nothing is left to run on it), and after
  the last trial (Tune wrapping up); the time outside ``fit`` (checks, assembly, store);
* the overhead without the tail: the tail depends on the workload (how long the last trial
  runs), not on the machinery, and shrinks relative to wall time as searches grow;
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
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _timed_trial(spans_file: str):
    """The search's own trainable, recording when each trial process starts and ends it."""

    def timed_trial(config, **kwargs):
        from ray import tune

        from autoaug.search.methods.train.trial import run_trial

        start = time.time()
        try:
            run_trial(config, **kwargs)
        finally:
            span = {"trial_id": tune.get_context().get_trial_id(), "start": start, "end": time.time()}
            with open(spans_file, "a") as f:
                f.write(json.dumps(span) + "\n")

    return timed_trial


def _idle_slot_time(spans: list[dict], slots: int, fit_start: float, fit_end: float) -> dict[str, float]:
    """Slot-seconds with no trial running during ``fit``: before the first ``slots`` trials
    started (ramp), between the last trial's start and end (tail: nothing left to run on the
    free slots), after the last trial ended (wrap-up: Tune's final state, actors stopping), and
    otherwise (gaps between trials)."""
    events = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans])
    last_start = max(s["start"] for s in spans)
    last_end = max(s["end"] for s in spans)
    ramp_end = sorted(s["start"] for s in spans)[min(slots, len(spans)) - 1]
    out = {"ramp": 0.0, "gaps": 0.0, "tail": 0.0, "wrapup": 0.0}
    running, t = 0, fit_start
    for when, delta in events + [(fit_end, 0)]:
        when = min(max(when, fit_start), fit_end)
        free = max(slots - running, 0) * (when - t)
        if t < ramp_end:
            kind = "ramp"
        elif t >= last_end:
            kind = "wrapup"
        elif t >= last_start:
            kind = "tail"
        else:
            kind = "gaps"
        out[kind] += free
        running += delta
        t = when
    return out


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

    from autoaug.core.ray_session import ray_session
    from autoaug.search.config import SearchConfig
    from autoaug.search.driver import run_search
    from autoaug.search.methods.train.method import TrainMethodConfig

    timings: dict[str, float] = {}

    @contextlib.contextmanager
    def timed_session():
        t0 = time.perf_counter()
        with ray_session(None, log_to_driver=False, logging_level=logging.WARNING):
            timings["ray_start_s"] = time.perf_counter() - t0
            timings["fit_start"] = time.time()
            t1 = time.perf_counter()
            try:
                yield
            finally:
                timings["fit_s"] = time.perf_counter() - t1
                timings["fit_end"] = time.time()
                t2 = time.perf_counter()
        timings["ray_stop_s"] = time.perf_counter() - t2

    with tempfile.TemporaryDirectory(prefix="autoaug-bench-") as tmp:
        spans_file = os.path.join(tmp, "spans.jsonl")
        overrides = {"train": {"epochs": args.epochs}} if args.epochs else {}
        config = SearchConfig.from_preset(
            args.preset,
            name="bench",
            data=args.data,
            num_trials=args.trials,
            concurrency=args.concurrency,
            early_stopping=not args.no_early_stopping,
            storage=f"{tmp}/runs",
            store=f"{tmp}/store",
            **overrides,
        )
        from autoaug.proxy_models.train import resolve_config

        config = config.replace(train=resolve_config(config.train))  # sized to the data, as the CLI's preflight does
        t0 = time.perf_counter()
        outcome = run_search(config, session=timed_session, trainable=_timed_trial(spans_file))
        wall = time.perf_counter() - t0
        with open(spans_file) as f:
            spans = [json.loads(line) for line in f]

    trials = outcome.trials
    slots = config.concurrency or 1
    train = sum(t.train_time_s or 0.0 for t in trials)
    trial_wall = sum(s["end"] - s["start"] for s in spans)
    idle = _idle_slot_time(spans, slots, timings["fit_start"], timings["fit_end"])
    after_fit = wall - timings["ray_start_s"] - timings["fit_s"] - timings["ray_stop_s"]
    figures = {
        "preset": args.preset,
        "trials": len(trials),
        "concurrency": slots,
        "epochs_per_trial": config.epochs,
        "early_stopping": config.method_settings(TrainMethodConfig).early_stopping,
        "epochs_trained": sum(t.epochs for t in trials),
        "statuses": {s: sum(t.status == s for t in trials) for s in ("completed", "early_stopped", "failed")},
        "wall_s": wall,
        "trial_training_s": train,
        "overhead_fraction": 1.0 - train / (wall * slots),
        "breakdown_slot_s": {
            "ray_start": timings["ray_start_s"] * slots,
            "ray_stop": timings["ray_stop_s"] * slots,
            "trial_setup_and_reporting": trial_wall - train,
            "idle_before_first_trials": idle["ramp"],
            "idle_between_trials": idle["gaps"],
            "idle_tail_no_trial_left": idle["tail"],
            "idle_after_last_trial": idle["wrapup"],
            "before_ray_and_after_fit": after_fit * slots,
        },
        "machinery_overhead_fraction": 1.0 - (train + idle["tail"]) / (wall * slots),
        "trial_spans_s": sorted(
            [round(s["start"] - timings["fit_start"], 2), round(s["end"] - timings["fit_start"], 2)] for s in spans
        ),
        "trials_per_hour": len(trials) / wall * 3600.0,
        "best_score": outcome.score,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    total_slot = wall * slots
    print(
        f"search of {len(trials)} trials ({args.preset} preset, {config.epochs} epochs, concurrency {slots}, "
        f"ASHA {'on' if config.method_settings(TrainMethodConfig).early_stopping else 'off'}): {figures['statuses']}"
    )
    print(f"  wall time                 {wall:8.1f} s   ({figures['trials_per_hour']:.1f} trials/hour)")
    print(f"  trial training (x{slots} slots) {train:8.1f} s   = {train / total_slot:6.1%} of wall x slots")
    print(f"  overhead                  {figures['overhead_fraction']:8.1%}   (target < 10%)")
    print(
        f"  overhead without the tail {figures['machinery_overhead_fraction']:8.1%}   "
        "(the tail: free slots while the last trial runs alone)"
    )
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
