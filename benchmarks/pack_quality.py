"""Does training in a pack change a policy's proxy score? Paired over seeds: for each seed, one
policy's proxy run alone (``autoaug.proxy_models.train.train``) and the same run as a member of a
pack (``autoaug.proxy_models.pack.train_pack``) beside pack-mates of other policies, same seed,
same split, same data order. The difference of the two search scores (mean validation accuracy over
the last ``--window`` epochs, as a search reads it), its mean and 95% t interval over the seeds.

A member computes its solo run's arithmetic up to float rounding (a grouped convolution sums in
another order), and training amplifies rounding like any perturbation: the interval bounds what
that costs a search's ranking.

    python benchmarks/pack_quality.py --data ../shared/data/cifar10-jpeg --seeds 5 --pack 2 \\
        --out benchmarks/results/pack-quality

Each (seed, mode) run is appended to ``OUT/runs.csv`` as it ends (a rerun skips what is there);
``OUT/summary.json`` and the printed table are the paired statistics of what is done.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PRESET = "proxy-cpu"
POLICY = "autoaugment-cifar10"
MATES = ("randaugment:n=2,m=9", "trivialaugment", "autoaugment-svhn", "autoaugment-imagenet", "standard", "crop")


def _score(history: list[dict], window: int) -> float:
    from autoaug.search.score import search_score

    return search_score([h.get("val_accuracy") for h in history], window)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="dataset (a folder holding train.parquet, or a Parquet file)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds --first-seed .. --first-seed + --seeds - 1")
    ap.add_argument("--pack", type=int, default=2, help="members of the pack (the policy and K-1 mates)")
    ap.add_argument("--preset", default=PRESET)
    ap.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if not 2 <= args.pack <= len(MATES) + 1:
        ap.error(f"--pack must be from 2 to {len(MATES) + 1}, got {args.pack}")

    from autoaug.core.machine import machine_kind
    from autoaug.launch.compare.stats import mean_ci
    from autoaug.policies import resolve_policy
    from autoaug.proxy_models.pack import train_pack
    from autoaug.proxy_models.train import TrainConfig, train

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = args.data
    if os.path.isdir(data):
        data = os.path.join(data, "train.parquet")
    overrides = {"data": data, "num_threads": args.threads}
    if args.epochs:
        overrides["epochs"] = args.epochs
    base = TrainConfig.from_preset(args.preset, **overrides)
    window_epochs = tuple(range(max(1, base.epochs - args.window + 1), base.epochs + 1))
    base = dataclasses.replace(base, eval_epochs=window_epochs)  # validated where the score is read
    policy = resolve_policy(POLICY)
    mates = [resolve_policy(m) for m in MATES[: args.pack - 1]]
    runs_file = out / "runs.csv"
    done: dict[tuple[int, str], float] = {}
    if runs_file.exists():
        with runs_file.open() as f:
            for row in csv.DictReader(f):
                done[(int(row["seed"]), row["mode"])] = float(row["score"])
    fields = ["seed", "mode", "score", "pack", "seconds", "precision", "cpu"]
    new_file = not runs_file.exists()
    with runs_file.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new_file:
            writer.writeheader()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            cfg = dataclasses.replace(base, seed=seed)
            for mode in ("solo", f"pack{args.pack}"):
                if (seed, mode) in done:
                    continue
                t0 = time.perf_counter()
                if mode == "solo":
                    result = train(cfg, policy)
                else:
                    result = train_pack(cfg, [policy, *mates])[0]
                score = _score(result.history, args.window)
                seconds = time.perf_counter() - t0
                done[(seed, mode)] = score
                writer.writerow(
                    {
                        "seed": seed,
                        "mode": mode,
                        "score": f"{score:.6f}",
                        "pack": 1 if mode == "solo" else args.pack,
                        "seconds": f"{seconds:.1f}",
                        "precision": result.precision,
                        "cpu": machine_kind(),
                    }
                )
                f.flush()
                print(f"seed {seed} {mode}: score {score * 100:.2f} ({seconds:.0f} s)", flush=True)

    mode = f"pack{args.pack}"
    seeds = sorted(s for s, m in done if m == mode and (s, "solo") in done)
    diffs = [(done[(s, mode)] - done[(s, "solo")]) * 100 for s in seeds]
    summary: dict = {
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "cpu": machine_kind(),
        "preset": args.preset,
        "epochs": base.epochs,
        "policy": POLICY,
        "mates": list(MATES[: args.pack - 1]),
        "pairs": len(seeds),
    }
    if len(diffs) >= 2:
        mean, sd, lo, hi = mean_ci(diffs)
        summary.update(mean_points=mean, ci95=[lo, hi], sd_points=sd, differences=diffs)
        print(
            f"pack of {args.pack} - solo, {len(diffs)} seeds: {mean:+.2f} points [{lo:+.2f}, {hi:+.2f}] "
            f"(sd {sd:.2f}); solo mean {sum(done[(s, 'solo')] for s in seeds) / len(seeds) * 100:.2f}"
        )
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
