"""Does the ``cpu`` proxy trial tell policies apart?

Trains the ``cpu`` preset (reduced CIFAR-10: 4,000 training images, 1,000 validation images) with
each policy over several seeds (model init / data order / augmentation draws; the split is the same
for every run) and prints validation accuracy per seed, mean and spread. Defaults: ``none`` (no
augmentation at all), ``standard`` (pad-4 crop + flip), ``autoaugment-cifar10`` (crop + flip + the
published policy), seeds 0 and 1; ``--harmful`` adds a deliberately destructive policy (Invert,
Solarize, Rotate at maximum strength with probability 1) as a known-bad reference.

    flock /tmp/autoaug-cpu.lock .venv/bin/python benchmarks/policy_sensitivity.py --data PATH/train.parquet

(``--data`` defaults to ``$AUTOAUG_CIFAR10/train.parquet``; ``--json FILE`` also writes the rows.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from autoaug.policies import Policy, resolve_policy
from autoaug.proxy_models.train import TrainConfig, resolve_config, train

HARMFUL = Policy(
    name="harmful",
    num_magnitude_bins=10,
    sub_policies=[
        [("Invert", 1.0, 0), ("Rotate", 1.0, 9)],
        [("Solarize", 1.0, 9), ("ShearX", 1.0, 9)],
        [("Invert", 1.0, 0), ("Posterize", 1.0, 9)],
    ],
)


def default_data() -> str | None:
    root = os.environ.get("AUTOAUG_CIFAR10")
    return str(Path(root) / "train.parquet") if root else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", default=default_data(), help="training Parquet (default: $AUTOAUG_CIFAR10/train.parquet)"
    )
    parser.add_argument("--preset", default="cpu")
    parser.add_argument(
        "--policies",
        default="none,standard,autoaugment-cifar10",
        help="comma-separated policy references (presets or JSON files)",
    )
    parser.add_argument("--harmful", action="store_true", help="add a deliberately destructive policy")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    parser.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    parser.add_argument("--train-size", type=int, default=None, help="override the preset's train_size")
    parser.add_argument("--lr", type=float, default=None, help="override the preset's lr")
    parser.add_argument("--json", default=None, help="also write the per-run rows to this JSON file")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required (or set AUTOAUG_CIFAR10)")

    overrides = {"data": args.data}
    for field in ("epochs", "train_size", "lr"):
        if getattr(args, field) is not None:
            overrides[field] = getattr(args, field)
    base = resolve_config(TrainConfig.from_preset(args.preset, **overrides))  # sized to the data
    policies = [resolve_policy(ref.strip()) for ref in args.policies.split(",") if ref.strip()]
    if args.harmful:
        policies.append(HARMFUL)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"preset {args.preset}: {base.model}, {base.train_size} train / {base.val_size} val images, "
        f"{base.epochs} epochs, batch {base.batch_size}, lr {base.lr}, {torch.get_num_threads()} threads; "
        f"seeds {seeds}",
        flush=True,
    )

    rows = []
    for policy in policies:
        for seed in seeds:
            t = time.perf_counter()
            result = train(dataclasses.replace(base, seed=seed), policy)
            wall = time.perf_counter() - t
            rows.append(
                {
                    "policy": policy.name,
                    "seed": seed,
                    "val_accuracy": result.val_accuracy,
                    "train_accuracy": result.history[-1]["train_accuracy"],
                    "train_time_s": result.train_time_s,
                    "wall_s": wall,
                }
            )
            print(
                f"  {policy.name:<22} seed {seed}: val_acc {result.val_accuracy:.4f}  "
                f"train_acc {result.history[-1]['train_accuracy']:.4f}  ({wall:.0f}s)",
                flush=True,
            )

    print()
    header = f"| policy | {' | '.join(f'seed {s}' for s in seeds)} | mean | spread (max-min) | s/trial |"
    print(header)
    print("|" + "---|" * (len(seeds) + 4))
    for policy in policies:
        mine = [r for r in rows if r["policy"] == policy.name]
        accs = [r["val_accuracy"] for r in mine]
        print(
            f"| {policy.name} | {' | '.join(f'{a:.4f}' for a in accs)} | {statistics.mean(accs):.4f} | "
            f"{max(accs) - min(accs):.4f} | {statistics.mean(r['wall_s'] for r in mine):.0f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"config": base.to_dict(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
