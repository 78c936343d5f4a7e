"""Where a candidate's score noise comes from, and how much of it a larger validation set or
another score removes.

A search ranks candidates by a proxy run's validation score. That score varies for two reasons:
the **training** (another seed gives another model) and the **validation sample** (another set
of validation images gives another accuracy for the same model). This benchmark trains each
policy of a list under the search's proxy (``--preset``, ``proxy-cpu`` by default) with two or
more seeds, validates each run at the epochs the search reads a score (the windows before ASHA's
rungs and the last ``--window``) on a *pool* of ``--pool`` validation images drawn, stratified
(and grouped, with ``--group-by``) from the images the training split leaves unused, and keeps
every image's right/wrong and loss (``runs/*.npz``). From those it computes, without training
again, for scores on ``n`` of the pool's images (disjoint subsets; ``n`` = 1,000 is the shipped
score):

- **per-run spread**: the standard deviation of the paired difference between two seeds' scores
  of the same policy on the same images, over the policies, divided by sqrt(2) -- how far one
  run's score is from the policy's expectation, in the units a search compares candidates in
  (two candidates scored on the same images);
- its **decomposition**: validation sampling (the paired difference's variance that comes from
  which images score it: ``d / n``, ``d`` the two models' per-image disagreement, measured
  directly as the spread of one model pair's difference across disjoint subsets) and training
  (what is left: the spread of the two models' difference on the whole population, estimated on
  the pool with its own sampling part removed);
- the **rank correlation** (Spearman) of the mean score with the evaluation regime's test
  accuracy (``--eval``, runs.csv files of ``autoaug compare`` matched by policy hash), and of the
  two seeds' scores with each other;
- the **CPU per trial** of validating ``n`` images at the score's epochs, relative to the shipped
  score, from the runs' own epoch times (training epochs vs validated epochs).

Scores: ``acc`` (mean validation accuracy over the last ``--window`` epochs: the shipped score)
and ``nll`` (minus the mean cross-entropy over the same epochs: a continuous score).

::

    python benchmarks/score_noise.py run --data ../shared/data/cifar10-jpeg --out runs/score-noise/cifar10 \\
        --policies none,standard,randaugment:n=2,m=9,trivialaugment,autoaugment-cifar10 \\
        --policy benchmarks/results/search-quality-cpu-eval-cpu/found_policy.json --random 4 --seeds 2
    python benchmarks/score_noise.py analyse runs/score-noise/cifar10 \\
        --eval benchmarks/results/search-quality-cpu-eval-cpu/eval_runs.csv \\
        --eval benchmarks/results/search-quality-cpu-eval-cpu/eval_random_runs.csv \\
        --out benchmarks/results/score-noise-cifar10
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

#: Validation sizes the analysis reads the scores at (those above the pool's size are left out).
SIZES = (1000, 2000, 5000, 10000, 20000)


# --------------------------------------------------------------------------------------- run --
def _policies(a: argparse.Namespace) -> list:
    from autoaug.policies import resolve_policy

    # commas separate references, except inside one's parameters (randaugment:n=2,m=9)
    refs = [r for r in re.split(r",(?![a-z_]+=)", a.policies or "") if r.strip()] + list(a.policy)
    out = [resolve_policy(r) for r in refs]
    if a.random:
        out += _random_policies(a.random, a.random_seed)
    if a.base:
        out = [p.with_base(a.base) for p in out]
    return out


def _random_policies(k: int, seed: int) -> list:
    """``k`` policies drawn uniformly from the search's default space (the ``cpu`` preset's), as
    ``benchmarks/search_quality.py --fidelity`` draws them (same seed, same policies)."""
    import random

    from autoaug.search.space import SearchSpace

    space = SearchSpace()
    rng = random.Random(seed)
    return [space.to_policy(space.random_params(rng), name=f"random-{i}.json") for i in range(k)]


def _config(a: argparse.Namespace, seed: int):
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.score import asha_milestones, score_epochs

    schedule = {"epochs": a.epochs} if a.epochs else {}
    base = TrainConfig.from_preset(a.preset, **schedule)
    milestones = asha_milestones(a.grace_period, a.reduction_factor, base.epochs)
    return TrainConfig.from_preset(
        a.preset,
        **schedule,
        **study_settings(a, seed),
        eval_epochs=list(score_epochs(base.epochs, a.window, milestones)),
    )


def study_settings(a: argparse.Namespace, seed: int) -> dict:
    """The ``TrainConfig`` settings of a study's run (here and in ``density_noise.py``): its data,
    seed, validation pool and groups, one thread, float32 with ``--fp32``."""
    return {
        "data": a.data,
        "seed": seed,
        "val_size": a.pool,
        "group_by": a.group_by,
        "num_threads": 1,
        **({"amp": False} if a.fp32 else {}),
    }


def _train_one(a: argparse.Namespace, policy, seed: int, path: str) -> str:
    from autoaug.proxy_models.train import train

    epochs, correct, loss = [], [], []
    held: dict = {}

    def keep(epoch, stats, val_indices):
        epochs.append(epoch)
        correct.append(np.asarray(stats.image_correct, dtype=bool))
        loss.append(np.asarray(stats.image_loss, dtype=np.float32))
        held["val"] = np.asarray(val_indices, dtype=np.int64)

    t0, c0 = time.perf_counter(), time.process_time()
    result = train(_config(a, seed), policy, on_validate=keep)
    epoch_times = np.array([row["epoch_time_s"] for row in result.history])
    validated = np.array([row["val_accuracy"] is not None for row in result.history])
    tmp = path + ".tmp.npz"
    np.savez_compressed(
        tmp,
        epochs=np.array(epochs),
        correct=np.stack(correct),
        loss=np.stack(loss),
        val=held["val"],
        epoch_times=epoch_times,
        validated=validated,
        wall_s=time.perf_counter() - t0,
        cpu_s=time.process_time() - c0,
        meta=json.dumps(
            {
                "policy": policy.name,
                "policy_hash": policy.content_hash,
                "seed": seed,
                "data": a.data,
                "preset": a.preset,
                "epochs": a.epochs,
                "fp32": a.fp32,
                "pool": a.pool,
                "group_by": a.group_by,
                "window": a.window,
                "split_fingerprint": result.split_fingerprint,
            }
        ),
    )
    os.replace(tmp, path)
    return path


def run(a: argparse.Namespace) -> int:
    out = Path(a.out) / "runs"
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for policy in _policies(a):
        for seed in range(a.seeds):
            path = out / f"{policy.content_hash[:12]}-seed{seed}.npz"
            if not path.exists():  # a killed study continues where it stopped
                jobs.append((policy, seed, str(path)))
    print(f"{len(jobs)} run(s) to train, {a.workers} at a time -> {out}", flush=True)
    with ProcessPoolExecutor(a.workers) as pool:
        futures = {pool.submit(_train_one, a, p, s, path): (p.name, s) for p, s, path in jobs}
        for done, fut in enumerate(as_completed(futures), 1):
            name, seed = futures[fut]
            fut.result()
            print(f"[{done}/{len(jobs)}] {name} seed {seed} done ({time.strftime('%H:%M:%S')})", flush=True)
    return 0


# ---------------------------------------------------------------------------------- analyse --
def _load(folder: Path) -> dict:
    """{policy_hash: {"name", "seeds": {seed: run}}}; every run on the same pool in the same order."""
    runs: dict = {}
    val = None
    for path in sorted((folder / "runs").glob("*.npz")):
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            run = {k: z[k] for k in ("epochs", "correct", "loss", "epoch_times", "validated")}
            run.update(wall_s=float(z["wall_s"]), cpu_s=float(z["cpu_s"]))
            if val is None:
                val = z["val"]
            elif not np.array_equal(val, z["val"]):
                raise SystemExit(f"{path}: another validation pool than the other runs (another split?)")
        entry = runs.setdefault(meta["policy_hash"], {"name": meta["policy"], "seeds": {}, "meta": meta})
        entry["seeds"][meta["seed"]] = run
    if not runs:
        raise SystemExit(f"no runs in {folder / 'runs'}")
    return runs


def _scores(run: dict, window: int, kind: str) -> np.ndarray:
    """Per image, the score's contribution: right/wrong (acc) or minus the loss (nll), averaged
    over the last ``window`` validated epochs."""
    last = run["correct" if kind == "acc" else "loss"][-window:].astype(np.float64)
    per_image = last.mean(axis=0)
    return per_image if kind == "acc" else -per_image


def _subsets(n_pool: int, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n_pool)
    return [order[i * n : (i + 1) * n] for i in range(n_pool // n)]


def analyse(a: argparse.Namespace) -> int:
    from scipy import stats

    folder = Path(a.folder)
    runs = _load(folder)
    pairs = {h: r for h, r in runs.items() if {0, 1} <= set(r["seeds"])}
    any_run = next(iter(next(iter(runs.values()))["seeds"].values()))
    n_pool = any_run["correct"].shape[1]
    window = a.window
    evaluation = _evaluation(a.eval)
    rng = np.random.default_rng(0)
    sizes = [n for n in SIZES if n <= n_pool] + ([n_pool] if n_pool not in SIZES else [])
    report: dict = {
        "pool": n_pool,
        "policies": len(runs),
        "paired_policies": len(pairs),
        "window": window,
        "scores": {},
    }
    lines = [
        f"{len(runs)} policies ({len(pairs)} with seeds 0 and 1), validation pool of {n_pool:,} images, "
        f"score: mean over the last {window} validated epochs",
        "",
    ]

    # CPU: training epochs vs validated epochs, per 1,000 validation images.
    train_t, val_extra, epochs_validated, epochs_total = [], [], 0, 0
    for r in runs.values():
        for run in r["seeds"].values():
            t, v = run["epoch_times"], run["validated"]
            plain = float(np.median(t[~v])) if (~v).any() else float("nan")
            train_t.append(plain)
            val_extra.append(float(np.median(t[v])) - plain)
            epochs_validated, epochs_total = int(v.sum()), len(v)
    epoch_s, pool_eval_s = float(np.median(train_t)), max(float(np.median(val_extra)), 0.0)
    per_1000 = pool_eval_s / n_pool * 1000

    def cost(n: int, epochs: int | None = None) -> float:
        """CPU of a trial validating ``n`` images at its score epochs over the shipped score's
        (1,000 images): a whole run, or (``epochs``) a trial ASHA stops at its first rung, which
        validates the window before it."""
        trained = epochs_total if epochs is None else epochs
        validated = epochs_validated if epochs is None else window
        return (epoch_s * trained + per_1000 * n / 1000 * validated) / (epoch_s * trained + per_1000 * validated)

    report["cpu"] = {
        "train_epoch_s": epoch_s,
        "eval_s_per_1000": per_1000,
        "epochs": epochs_total,
        "validated_epochs": epochs_validated,
    }
    rung = int(a.rung)
    lines.append(
        f"CPU: a training epoch {epoch_s:.2f} s, validating 1,000 images {per_1000:.2f} s; "
        f"{epochs_validated} of {epochs_total} epochs validated (the search's score epochs); "
        f"CPU x: a whole run / a trial stopped at ASHA's first rung (epoch {rung})"
    )
    lines.append("")
    header = (
        f"{'score':<5} {'n':>6} {'per-run spread':>15} {'sampling':>9} {'training':>9} "
        f"{'noise/':>7} {'rho eval':>9} {'rho seeds':>10} {'CPU x':>11}"
    )
    lines += [header, "-" * len(header)]
    for kind in ("acc", "nll"):
        unit = 100.0 if kind == "acc" else 100.0  # points (acc) / centi-nats (nll)
        per_policy = {h: {s: _scores(run, window, kind) for s, run in r["seeds"].items()} for h, r in runs.items()}
        for n in sizes:
            subsets = _subsets(n_pool, n, rng)
            # per-run spread: over disjoint subsets, the sd over policies of the seed difference, / sqrt 2
            spreads, sampling = [], []
            for sub in subsets:
                diffs = [per_policy[h][0][sub].mean() - per_policy[h][1][sub].mean() for h in pairs]
                if len(diffs) >= 2:
                    spreads.append(float(np.std(diffs, ddof=1)) / math.sqrt(2))
            # sampling: per policy pair, the variance of the difference over validation sets of n
            # images drawn from the data (analytic from the per-image differences: var(d_i) / n)
            for h in pairs:
                d_i = per_policy[h][0] - per_policy[h][1]
                sampling.append(float(np.var(d_i, ddof=1)) / n)
            spread = float(np.sqrt(np.mean(np.square(spreads)))) if spreads else float("nan")
            samp = math.sqrt(float(np.mean(sampling)) / 2) if sampling else float("nan")
            # training: the seed difference on the whole pool, its own sampling part removed
            full = [per_policy[h][0].mean() - per_policy[h][1].mean() for h in pairs]
            full_samp = np.mean([float(np.var(per_policy[h][0] - per_policy[h][1], ddof=1)) / n_pool for h in pairs])
            train_var = max(float(np.var(full, ddof=1)) - full_samp, 0.0) / 2 if len(full) >= 2 else float("nan")
            train_sd = math.sqrt(train_var) if train_var == train_var else float("nan")
            # rank correlations (first subset of n: what one search would see)
            sub = subsets[0]
            means = {h: float(np.mean([v[sub].mean() for v in per_policy[h].values()])) for h in runs}
            rho_eval = _spearman(stats, means, evaluation)
            rho_seeds = (
                stats.spearmanr(
                    [per_policy[h][0][sub].mean() for h in pairs], [per_policy[h][1][sub].mean() for h in pairs]
                )[0]
                if len(pairs) >= 3
                else float("nan")
            )
            # signal: how far apart the policies are (sd of their mean scores on the whole pool)
            signal = float(np.std([np.mean([v.mean() for v in per_policy[h].values()]) for h in runs], ddof=1))
            row = {
                "n": n,
                "noise_to_signal": spread / signal,
                "per_run_spread": spread * unit,
                "sampling": samp * unit,
                "training": train_sd * unit,
                "rho_eval": rho_eval,
                "rho_seeds": float(rho_seeds),
                "cpu_ratio": cost(n),
                "cpu_ratio_first_rung": cost(n, rung),
                "subsets": len(subsets),
            }
            report["scores"].setdefault(kind, []).append(row)
            lines.append(
                f"{kind:<5} {n:>6,} {spread * unit:>15.2f} {samp * unit:>9.2f} {train_sd * unit:>9.2f} "
                f"{spread / signal:>7.3f} {_fmt(rho_eval):>9} {_fmt(rho_seeds):>10} "
                f"{cost(n):>5.2f}/{cost(n, rung):<5.2f}"
            )
        lines.append("")
    lines += [
        "per-run spread, sampling and training in points of accuracy (acc) or centi-nats (nll); sampling and",
        "training are the two parts of the per-run spread (their squares add up to its square, up to",
        "the estimators' noise); noise/: the per-run spread over the sd of the policies' mean scores on the",
        "whole pool (the signal), comparable between the two scores; rho eval: Spearman over the policies of the mean score (both seeds) against",
        "the evaluation regime's mean test accuracy; rho seeds: seed 0's scores against seed 1's.",
    ]
    lines += ["", *_rungs(runs, pairs, window, evaluation, stats, report)]
    lines += ["", *_mid_training(runs, pairs, n_pool, epoch_s, per_1000, report)]
    first = _subsets(n_pool, 1000, np.random.default_rng(0))[0]
    report["per_policy"] = {
        r["name"]: {
            "seeds": {
                str(s): {
                    "acc_1000": float(_scores(run, window, "acc")[first].mean()),
                    "acc_pool": float(_scores(run, window, "acc").mean()),
                }
                for s, run in r["seeds"].items()
            },
            "eval": evaluation.get(h),
        }
        for h, r in runs.items()
    }
    write_report("\n".join(lines), report, a.out)
    return 0


def write_report(text: str, report: dict, out: str | None) -> None:
    """Print an analysis and, with ``out``, write it there as ``noise.txt`` and ``noise.json``
    (here and in ``density_noise.py``)."""
    print(text)
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "noise.txt").write_text(text + "\n")
        (folder / "noise.json").write_text(json.dumps(report, indent=1, default=float) + "\n")


def _rungs(runs: dict, pairs: dict, window: int, evaluation: dict, stats, report: dict) -> list[str]:
    """What a trial's score says before its end: at each window the runs validated (the ones
    before ASHA's rungs and the last), on the whole pool, the policies' spread, one run's spread,
    and how the policies rank against their final scores and against the evaluation regime."""
    ends = None
    for r in runs.values():
        for run in r["seeds"].values():
            ep = [int(e) for e in run["epochs"]]
            mine = sorted({e for e in ep if all(x in ep for x in range(e - window + 1, e + 1))} & {*ep})
            found = [e for e in mine if e + 1 not in ep]  # the last epoch of each validated window
            ends = found if ends is None else [e for e in ends if e in found]
    if not ends:
        return []

    def at(run: dict, end: int) -> float:
        ep = [int(e) for e in run["epochs"]]
        rows = [ep.index(e) for e in range(end - window + 1, end + 1)]
        return float(run["correct"][rows].astype(np.float64).mean())

    final = {h: np.mean([at(run, ends[-1]) for run in r["seeds"].values()]) for h, r in runs.items()}
    lines = [
        f"the score before its end (accuracy on the whole pool, mean of the {window} epochs up to each rung):",
        f"{'epoch':>6} {'policies sd':>12} {'per-run spread':>15} {'rho final':>10} {'rho eval':>9}",
    ]
    report["rungs"] = []
    for end in ends:
        means = {h: float(np.mean([at(run, end) for run in r["seeds"].values()])) for h, r in runs.items()}
        diffs = [at(r["seeds"][0], end) - at(r["seeds"][1], end) for r in pairs.values()]
        spread = float(np.std(diffs, ddof=1)) / math.sqrt(2) if len(diffs) >= 2 else float("nan")
        signal = float(np.std(list(means.values()), ddof=1))
        common = list(means)
        rho_final = float(stats.spearmanr([means[h] for h in common], [final[h] for h in common])[0])
        rho_eval = _spearman(stats, means, evaluation)
        report["rungs"].append(
            {"epoch": end, "signal": signal, "per_run_spread": spread, "rho_final": rho_final, "rho_eval": rho_eval}
        )
        lines.append(f"{end:>6} {signal * 100:>12.2f} {spread * 100:>15.2f} {_fmt(rho_final):>10} {_fmt(rho_eval):>9}")
    lines.append("policies sd and per-run spread in points; rho final: Spearman against the last window's score.")
    return lines


#: The windows (epochs averaged) and validation sizes :func:`_mid_training` reads the score with,
#: and the perturbation interval of the PBA member whose CPU it prices (pba-cpu's).
MID_WINDOWS, MID_SIZES, PBA_INTERVAL = (1, 3, 5), (1000, 2000, 5000), 4


def _mid_training(runs: dict, pairs: dict, n_pool: int, epoch_s: float, per_1000: float, report: dict) -> list[str]:
    """The score at each validated window's last epoch (20, 60: where PBA's members exploit one
    another mid-training; 120: the end), read over the last 1, 3 or 5 epochs on 1,000 to 5,000
    images: one run's spread (the sd over policies of the seed difference, / sqrt 2, averaged
    over disjoint subsets of the pool), the policies' spread, and the CPU of a PBA member that
    validates ``window`` of every :data:`PBA_INTERVAL` epochs on ``n`` images, over pba-cpu's
    (window 3 on 1,000)."""
    any_run = next(iter(next(iter(runs.values()))["seeds"].values()))
    epochs = [int(e) for e in any_run["epochs"]]
    ends = [e for e in epochs if e + 1 not in epochs]
    rng = np.random.default_rng(1)

    def member_cpu(window: int, n: int) -> float:
        mine = PBA_INTERVAL * epoch_s + window * per_1000 * n / 1000
        return mine / (PBA_INTERVAL * epoch_s + 3 * per_1000)

    lines = [
        "the score mid-training (PBA's exploit decisions) and at the end: the last `window` epochs on n images",
        f"{'epoch':>6} {'window':>7} {'n':>6} {'per-run spread':>15} {'policies sd':>12} {'ratio':>6} {'PBA CPU x':>10}",
    ]
    report["mid_training"] = []
    for end in ends:
        for window in MID_WINDOWS:
            if any(e not in epochs for e in range(end - window + 1, end + 1)):
                continue
            rows = [epochs.index(e) for e in range(end - window + 1, end + 1)]
            for n in (m for m in MID_SIZES if m <= n_pool):
                spreads, signals = [], []
                for sub in _subsets(n_pool, n, rng):
                    score = {
                        h: {s: float(run["correct"][rows][:, sub].mean()) for s, run in r["seeds"].items()}
                        for h, r in runs.items()
                    }
                    diffs = [score[h][0] - score[h][1] for h in pairs]
                    if len(diffs) >= 2:
                        spreads.append(float(np.std(diffs, ddof=1)) / math.sqrt(2))
                    signals.append(float(np.std([np.mean(list(v.values())) for v in score.values()], ddof=1)))
                spread, signal = float(np.mean(spreads)) * 100, float(np.mean(signals)) * 100
                row = {
                    "epoch": end,
                    "window": window,
                    "n": n,
                    "per_run_spread": spread,
                    "policies_sd": signal,
                    "pba_cpu_ratio": member_cpu(window, n),
                }
                report["mid_training"].append(row)
                lines.append(
                    f"{end:>6} {window:>7} {n:>6,} {spread:>15.2f} {signal:>12.2f} {signal / spread:>6.1f} "
                    f"{member_cpu(window, n):>10.2f}"
                )
    lines.append(
        "points; ratio: policies sd over one run's spread; PBA CPU x: a member validating `window` of every "
        f"{PBA_INTERVAL} epochs on n images, over window 3 on 1,000 (pba-cpu)."
    )
    return lines


def _fmt(x: float) -> str:
    return "n/a" if x != x else f"{x:+.3f}"


def _evaluation(paths: list[str]) -> dict:
    acc: dict = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("test_accuracy"):
                    acc.setdefault(row["policy_hash"], []).append(float(row["test_accuracy"]))
    return {h: sum(v) / len(v) for h, v in acc.items()}


def _spearman(stats, means: dict, evaluation: dict) -> float:
    common = [h for h in means if h in evaluation]
    if len(common) < 3:
        return float("nan")
    return float(stats.spearmanr([means[h] for h in common], [evaluation[h] for h in common])[0])


def add_study_arguments(r: argparse.ArgumentParser) -> None:
    """A study's data, output folder, policies (:func:`_policies`) and groups: the arguments of
    ``run`` here and in ``density_noise.py``."""
    r.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"))
    r.add_argument("--out", required=True)
    r.add_argument(
        "--policies",
        default="none,standard,randaugment:n=2,m=9,trivialaugment,autoaugment-cifar10",
        help="comma-separated policy references",
    )
    r.add_argument("--policy", action="append", default=[], help="one more policy reference (repeatable)")
    r.add_argument("--random", type=int, default=0, help="random policies of the cpu preset's space")
    r.add_argument("--random-seed", type=int, default=0)
    r.add_argument("--group-by", default=None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train the policies' proxy runs, keeping per-image validation outputs")
    add_study_arguments(r)
    r.add_argument("--base", default=None, help="move every policy onto this base (none, crop, standard)")
    r.add_argument("--preset", default="proxy-cpu")
    r.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="a whole schedule of this many epochs instead of the preset's (warm-up and decay compressed)",
    )
    r.add_argument("--pool", type=int, default=10000, help="validation images (the pool the scores are read on)")
    r.add_argument("--seeds", type=int, default=2)
    r.add_argument("--window", type=int, default=5)
    r.add_argument("--grace-period", type=int, default=20)
    r.add_argument("--reduction-factor", type=float, default=3)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument(
        "--fp32",
        action="store_true",
        help="train in float32 (amp off): on a CPU without native bfloat16, the preset's emulated "
        "bfloat16 autocast costs 3-4x the CPU of float32",
    )
    an = sub.add_parser("analyse", help="the noise figures from a run folder")
    an.add_argument("folder")
    an.add_argument("--eval", action="append", default=[], help="runs.csv of the evaluation regime (repeatable)")
    an.add_argument("--window", type=int, default=5, help="epochs the score averages (at most the run's)")
    an.add_argument("--rung", type=int, default=20, help="ASHA's first rung, for the CPU of a stopped trial")
    an.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.cmd == "run":
        if not a.data:
            p.error("--data is required (or set AUTOAUG_CIFAR10)")
        return run(a)
    return analyse(a)


if __name__ == "__main__":
    sys.exit(main())
