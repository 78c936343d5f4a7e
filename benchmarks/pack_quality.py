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

``--mates same``: the pack's members are the policy itself at K consecutive seeds, each paired
with its own solo run (K pairs a pack, the mode ``packK-same``): what a member computes does not
depend on its pack-mates (tests/proxy_models/test_pack.py), so their policy does not matter, and a
pair costs about half as much. ``--seeds`` is then a multiple of ``--pack``.

Each (seed, mode) run is appended to ``OUT/runs.csv`` as it ends (a rerun skips what is there);
``OUT/summary.json`` and the printed table are the paired statistics of what is done.

``--pairs CSV [CSV ...]`` trains nothing: the paired statistics of runs already recorded, a row
per file (its pack runs, each paired with its seed's solo run from whichever file holds it) and
one for all of them; ``--solo CSV ...`` lends more files' solo runs only (their pack runs, of
another commit, left out). A seed's solo run recorded twice must have the same score (solo runs
are deterministic), or the files are refused in one line.

    R=benchmarks/results/pack-quality
    python benchmarks/pack_quality.py --pairs $R/2026-11-30/runs-mate-randaugment.csv \
        $R/2026-11-30/runs-mate-same*.csv --solo $R/runs.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import commit  # noqa: E402  (this checkout's commit)

PRESET = "proxy-cpu"
POLICY = "autoaugment-cifar10"
MATES = ("randaugment:n=2,m=9", "trivialaugment", "autoaugment-svhn", "autoaugment-imagenet", "standard", "crop")


def _score(history: list[dict], window: int) -> float:
    from autoaug.search.score import search_score

    return search_score([h.get("val_accuracy") for h in history], window)


def _read_runs(path: Path) -> list[dict[str, Any]]:
    """The rows of one ``runs.csv``: seed, mode and score (a fraction), as recorded."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return [{"seed": int(r["seed"]), "mode": r["mode"], "score": float(r["score"])} for r in rows]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: not a runs.csv of this benchmark (expected the columns seed, mode, score)") from None


def _pairs_table(paths: list[Path], solo_paths: list[Path], out: str | None) -> int:
    """``--pairs``: each file's pack runs paired with their seeds' solo runs (from any of the
    files or of ``solo_paths``), a row a file and one for all; printed, and written to
    ``OUT/summary.json`` if given."""
    from autoaug.launch.compare.stats import mean_ci

    runs = {p: _read_runs(p) for p in paths}
    solo: dict[int, float] = {}
    for p, rows in [*runs.items(), *((p, _read_runs(p)) for p in solo_paths)]:
        for r in (r for r in rows if r["mode"] == "solo"):
            if r["seed"] in solo and solo[r["seed"]] != r["score"]:
                raise ValueError(
                    f"{p}: seed {r['seed']}'s solo run scored {r['score']:.6f}, another file has "
                    f"{solo[r['seed']]:.6f}: solo runs of one seed are the same run (use one study's files)"
                )
            solo[r["seed"]] = r["score"]
    table: list[dict[str, Any]] = []
    every: list[float] = []
    for p, rows in runs.items():
        packed = [r for r in rows if r["mode"] != "solo" and r["seed"] in solo]
        diffs = [(r["score"] - solo[r["seed"]]) * 100 for r in packed]
        every += diffs
        table.append({"file": str(p), "modes": sorted({r["mode"] for r in packed}), "differences": diffs})
    table.append({"file": "all", "modes": sorted({m for row in table for m in row["modes"]}), "differences": every})
    width = max(len(row["file"]) for row in table)
    print(f"{'runs':<{width}}  {'pairs':>5}  pack minus alone, points (95% CI)  sd")
    for row in table:
        n = len(row["differences"])
        if n >= 2:
            mean, sd, lo, hi = mean_ci(row["differences"])
            row.update(pairs=n, mean_points=mean, ci95=[lo, hi], sd_points=sd)
            said = f"{mean:+.2f} [{lo:+.2f}, {hi:+.2f}]{'':<13}  {sd:.2f}"
        else:
            row.update(pairs=n)
            said = "-"
        print(f"{row['file']:<{width}}  {n:>5}  {said}")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        summary = {"command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]), "rows": table}
        (Path(out) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="dataset (a folder holding train.parquet, or a Parquet file)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds --first-seed .. --first-seed + --seeds - 1")
    ap.add_argument("--pack", type=int, default=2, help="members of the pack (the policy and K-1 mates)")
    ap.add_argument("--preset", default=PRESET)
    ap.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--mates",
        choices=("others", "same"),
        default="others",
        help="others: the pack-mates are other policies; same: the policy at the next seeds, each member a pair",
    )
    ap.add_argument("--out", help="the folder of runs.csv and summary.json (with --pairs: summary.json, optional)")
    ap.add_argument(
        "--pairs", nargs="+", metavar="CSV", help="train nothing: the paired statistics of these runs.csv files"
    )
    ap.add_argument("--solo", nargs="+", metavar="CSV", default=[], help="with --pairs: files lending solo runs only")
    args = ap.parse_args(argv)
    if args.pairs:
        try:
            return _pairs_table([Path(p) for p in args.pairs], [Path(p) for p in args.solo], args.out)
        except ValueError as exc:
            ap.error(str(exc))
    if not args.data or not args.out:
        ap.error("--data and --out are needed to train (or --pairs CSV ... to read runs already recorded)")
    if args.mates == "others" and not 2 <= args.pack <= len(MATES) + 1:
        ap.error(f"--pack must be from 2 to {len(MATES) + 1}, got {args.pack}")
    if args.mates == "same" and (args.pack < 2 or args.seeds % args.pack):
        ap.error(
            f"--mates same: --pack at least 2 and --seeds a multiple of it, got --pack {args.pack} --seeds {args.seeds}"
        )

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
    mates = [resolve_policy(m) for m in MATES[: args.pack - 1]] if args.mates == "others" else []
    mode = f"pack{args.pack}" + ("-same" if args.mates == "same" else "")
    runs_file = out / "runs.csv"
    done: dict[tuple[int, str], float] = {}
    if runs_file.exists():
        try:
            done = {(r["seed"], r["mode"]): r["score"] for r in _read_runs(runs_file)}
        except ValueError as exc:
            ap.error(str(exc))
    fields = ["seed", "mode", "score", "pack", "seconds", "precision", "cpu"]
    new_file = not runs_file.exists()
    with runs_file.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new_file:
            writer.writeheader()

        def record(seed: int, mode: str, result, seconds: float) -> None:
            score = _score(result.history, args.window)
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

        seeds = range(args.first_seed, args.first_seed + args.seeds)
        step = args.pack if args.mates == "same" else 1
        for group in (list(seeds[i : i + step]) for i in range(0, len(seeds), step)):
            for seed in group:
                if (seed, "solo") not in done:
                    t0 = time.perf_counter()
                    result = train(dataclasses.replace(base, seed=seed), policy)
                    record(seed, "solo", result, time.perf_counter() - t0)
            if all((seed, mode) in done for seed in group):
                continue
            t0 = time.perf_counter()
            if args.mates == "same":  # the policy at each seed of the group, one member each
                results = train_pack(base, [policy] * len(group), seeds=group)
            else:
                results = train_pack(dataclasses.replace(base, seed=group[0]), [policy, *mates])[:1]
            for seed, result in zip(group, results):
                record(seed, mode, result, (time.perf_counter() - t0) / len(group))

    seeds = sorted(s for s, m in done if m == mode and (s, "solo") in done)
    diffs = [(done[(s, mode)] - done[(s, "solo")]) * 100 for s in seeds]
    summary: dict = {
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "commit": commit(),
        "cpu": machine_kind(),
        "preset": args.preset,
        "epochs": base.epochs,
        "policy": POLICY,
        "mates": list(MATES[: args.pack - 1]) if args.mates == "others" else f"{POLICY} at the next seeds",
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
