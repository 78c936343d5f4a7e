"""How much of a density-matching score is noise, where it comes from, and whether the score ranks
policies the way training with them does (the density method's score).

The density method (:mod:`autoaug.search.methods.density.method`, Fast AutoAugment) scores a candidate by
evaluating a fold model -- the proxy trained with the base alone on ``K-1`` of ``K`` folds of the
reduced training split -- on its held-out fold (``1/K`` of the split: 200 images of the
1,000-image CIFAR-10 split) augmented by the candidate, one random draw per image; the score is
minus the mean cross-entropy (``objective: loss``) or the accuracy. This benchmark

1. trains the ``K`` fold models with ``--seeds`` training seeds (same folds, another seed: the
   training part of the noise), in the search's recipe (:func:`autoaug.search.methods.density.fold_models.train_fold`);
2. evaluates every fold model on its held-out fold **and** on a pool of ``--pool`` images the
   reduced split leaves unused, augmented by each policy of a list, ``--draws`` times (the same
   random draws for every model: each scoring process rebuilds its pipeline with one seed and
   feeds the policies in one order), keeping every image's right/wrong and loss (``runs/*.npz``);

and, without evaluating again (``analyse``), reports for each score -- the shipped one (one fold
model, its held-out fold, one draw) and the candidates' levers (the pool's images, several draws,
several fold models) --:

- the **per-candidate spread**: the sd over policies of the difference between two independent
  replicates of the score (another training seed, another draw, other images where the score's
  images can change), over sqrt(2), in the score's units and as a fraction of the spread *between*
  policies (the signal);
- its **decomposition**: the random draws (same model, same images, another draw), the images
  (same model and draw, disjoint pool subsets of the held-out fold's size) and the training
  (same images and draws, the other seed's fold model);
- the **rank correlation** (Spearman) of each replicate and of the mean with the evaluation
  regime's test accuracy (``--eval``: runs.csv files of ``autoaug compare``, policies matched by
  hash), and of the two replicates with each other;
- the CPU of one scoring pass per image.

A policy without sub-policies (``none``, ``standard``) scores the plain images: density matching
sees only the policy applied to the images, never the base (crop and flip) it trains with.

::

    python benchmarks/density_noise.py run --data ../shared/data/cifar10-jpeg --out runs/density-noise/cifar10 \\
        --policy benchmarks/results/search-quality-cpu-eval-cpu/found_policy.json --random 4 --fp32
    python benchmarks/density_noise.py analyse runs/density-noise/cifar10 \\
        --eval benchmarks/results/search-quality-cpu-eval-cpu/eval_runs.csv \\
        --eval benchmarks/results/search-quality-cpu-eval-cpu/eval_random_runs.csv --out benchmarks/results/density-noise-cifar10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import score_noise  # noqa: E402  (the policy list, the evaluation files and rank correlation, shared)


# --------------------------------------------------------------------------------------- run --
def _train_config(a: argparse.Namespace, seed: int):
    from autoaug.proxy_models.train import TrainConfig, resolve_config

    return resolve_config(
        TrainConfig.from_preset(
            a.preset,
            **score_noise.study_settings(a, seed),
            **({"train_size": a.train_size} if a.train_size else {}),
        )
    )


def _folds(a: argparse.Namespace, cfg):
    """``(dataset, folds, pool)``: the search's folds of the reduced split and the unused images."""
    from autoaug.proxy_models.splits import config_split
    from autoaug.search.methods.density.fold_models import fold_splits

    ds, folds = fold_splits(cfg, a.folds, a.fold_seed)
    return ds, folds, config_split(ds, cfg, dataset_fingerprint=ds.fingerprint()).val


def _atomic_save(path: str, **arrays) -> None:
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _train_job(a: argparse.Namespace, seed: int, k: int, path: str) -> str:
    from autoaug.search.methods.density.fold_models import train_fold

    cfg = _train_config(a, seed)
    _, folds, _ = _folds(a, cfg)
    c0 = time.process_time()
    info = train_fold(cfg.to_dict(), k, folds[k].train.tolist(), folds[k].val.tolist(), a.fold_base)
    weights = info.pop("weights")
    info.update(cpu_s=time.process_time() - c0, seed=seed)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(weights)
    os.replace(tmp, path)
    Path(path).with_suffix(".json").write_text(json.dumps(info, indent=1))
    return path


def _spec(policies: list):
    """A policy step that takes every policy of the list (their operations, most sub-policies,
    most operations per sub-policy), as the density trial's takes its space's."""
    ops = sorted({op for p in policies for op in p.ops_used} - {"Identity"}) or ["Identity"]
    subs = max([len(p.sub_policies) for p in policies] + [1])
    stages = max([p.max_ops_per_sub_policy for p in policies if p.sub_policies] + [1])
    return SimpleNamespace(op_choices=ops, num_sub_policies=subs, ops_per_sub_policy=stages)


def _score_job(a: argparse.Namespace, seed: int, k: int, weights_path: str, path: str) -> str:
    import torch

    from autoaug.search.methods.density.fold_models import FoldScorer

    torch.set_num_threads(1)
    cfg = _train_config(a, seed)
    _, folds, pool = _folds(a, cfg)
    heldout = np.asarray(folds[k].val, dtype=np.int64)
    images = np.concatenate([heldout, np.asarray(pool, dtype=np.int64)])
    policies = score_noise._policies(a)
    with open(weights_path, "rb") as f:
        # one seed for every model: the same policy order gives every model the same random draws
        scorer = FoldScorer(cfg, _spec(policies), f.read(), images, seed=a.draw_seed)
    correct = np.zeros((len(policies), a.draws, len(images)), dtype=bool)
    loss = np.zeros((len(policies), a.draws, len(images)), dtype=np.float32)
    c0 = time.process_time()
    for i, policy in enumerate(policies):
        scorer.loader.set_policy(policy if policy.sub_policies else None)
        for r in range(a.draws):
            stats = scorer.learner.evaluate_per_class(scorer.loader, per_image=True)
            correct[i, r], loss[i, r] = stats.image_correct, stats.image_loss
    cpu_s = time.process_time() - c0
    _atomic_save(
        path,
        correct=correct,
        loss=loss,
        n_heldout=len(heldout),
        images=images,
        cpu_per_image_pass=cpu_s / (len(policies) * a.draws * len(images)),
        meta=json.dumps(
            {
                "seed": seed,
                "fold": k,
                "policies": [p.name for p in policies],
                "hashes": [p.content_hash for p in policies],
                "bases": [p.base for p in policies],
                "data": a.data,
                "preset": a.preset,
                "fold_base": a.fold_base,
                "folds": a.folds,
                "fold_seed": a.fold_seed,
                "pool": a.pool,
                "draws": a.draws,
                "fp32": a.fp32,
                "group_by": a.group_by,
                "train_size": cfg.train_size,
            }
        ),
    )
    return path


def run(a: argparse.Namespace) -> int:
    out = Path(a.out)
    (out / "folds").mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    models = [(s, k, str(out / "folds" / f"seed{s}-fold{k}.pt")) for s in range(a.seeds) for k in range(a.folds)]
    todo = [(s, k, p) for s, k, p in models if not os.path.exists(p)]  # a killed study continues
    print(f"{len(todo)} fold model(s) to train, {a.workers} at a time -> {out}", flush=True)
    with ProcessPoolExecutor(a.workers) as pool:
        futures = {pool.submit(_train_job, a, s, k, p): (s, k) for s, k, p in todo}
        for done, fut in enumerate(as_completed(futures), 1):
            fut.result()
            print(
                f"[{done}/{len(todo)}] fold model seed {futures[fut][0]} fold {futures[fut][1]} ({time.strftime('%H:%M:%S')})",
                flush=True,
            )
        scores = [(s, k, p, str(out / "runs" / f"seed{s}-fold{k}.npz")) for s, k, p in models]
        todo2 = [job for job in scores if not os.path.exists(job[3])]
        print(f"{len(todo2)} fold model(s) to score", flush=True)
        futures = {pool.submit(_score_job, a, s, k, p, r): (s, k) for s, k, p, r in todo2}
        for done, fut in enumerate(as_completed(futures), 1):
            fut.result()
            print(
                f"[{done}/{len(todo2)}] scored seed {futures[fut][0]} fold {futures[fut][1]} ({time.strftime('%H:%M:%S')})",
                flush=True,
            )
    return 0


# ---------------------------------------------------------------------------------- analyse --
def _load(folder: Path) -> dict:
    """``{(seed, fold): run}``; every run with the same policies in the same order."""
    runs, hashes = {}, None
    for path in sorted((folder / "runs").glob("*.npz")):
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            run = {k: z[k] for k in ("correct", "loss", "images")}
            run.update(n_heldout=int(z["n_heldout"]), cpu_per_image_pass=float(z["cpu_per_image_pass"]), meta=meta)
        if hashes is None:
            hashes = meta["hashes"]
        elif meta["hashes"] != hashes:
            raise SystemExit(f"{path}: another policy list than the other runs")
        runs[(meta["seed"], meta["fold"])] = run
    if not runs:
        raise SystemExit(f"no runs in {folder / 'runs'}")
    return runs


def _per_image(run: dict, kind: str) -> np.ndarray:
    """``[policy, draw, image]``: each image's contribution to the score (right/wrong, or minus its loss)."""
    return run["correct"].astype(np.float64) if kind == "acc" else -run["loss"].astype(np.float64)


def _spread(x: np.ndarray, y: np.ndarray) -> float:
    """The per-candidate spread of two replicates' scores (one value per policy)."""
    return float(np.std(x - y, ddof=1) / np.sqrt(2))


def analyse(a: argparse.Namespace) -> int:
    from scipy import stats

    runs = _load(Path(a.folder))
    any_run = next(iter(runs.values()))
    meta = any_run["meta"]
    names, hashes = meta["policies"], meta["hashes"]
    seeds = sorted({s for s, _ in runs})
    folds = sorted({k for _, k in runs})
    draws = any_run["correct"].shape[1]
    if len(seeds) < 2 or draws < 2:
        raise SystemExit("the analysis needs 2 training seeds and 2 draws")
    evaluation = score_noise._evaluation(a.eval)
    n_pool = any_run["correct"].shape[2] - any_run["n_heldout"]
    sizes = sorted({run["n_heldout"] for run in runs.values()})
    n_h = sizes[0]  # grouped folds differ in size: pool subsets take the smallest
    # A policy that leaves every image as it is (none, standard, crop: the base is not applied)
    # scores the same in every draw; the candidates a search compares all augment.
    augments = [not np.array_equal(any_run["loss"][p, 0], any_run["loss"][p, 1]) for p in range(len(names))]
    report: dict = {
        "policies": names,
        "augments": augments,
        "seeds": seeds,
        "folds": folds,
        "draws": draws,
        "heldout": sizes,
        "pool": n_pool,
    }
    lines = [
        f"{len(names)} policies ({sum(augments)} that augment); fold models: {len(folds)} folds x {len(seeds)} "
        f"training seeds; {draws} random draws; {'-'.join(map(str, sizes))} held-out images per fold, "
        f"{n_pool} pool images",
        "",
    ]
    unit = {"acc": 100.0, "nll": 1.0}
    for kind in ("nll", "acc"):
        per = {key: _per_image(run, kind) for key, run in runs.items()}
        u = unit[kind]

        def score(s, k, r, sel=None, draws_=None):
            """[policy] scores of fold model (seed ``s``, fold ``k``), draw ``r`` (or the mean of
            ``draws_``), on its held-out fold (``sel`` None) or on the pool images ``sel``."""
            x = per[(s, k)]
            n = runs[(s, k)]["n_heldout"]
            x = x[:, r, :] if draws_ is None else x[:, draws_, :].mean(axis=1)
            return (x[:, :n] if sel is None else x[:, n + sel]).mean(axis=-1) * u

        pool = np.arange(n_pool)
        subsets = [pool[i * n_h : (i + 1) * n_h] for i in range(n_pool // n_h)] if n_pool >= 2 * n_h else []
        table = []

        def rho(values, idx):
            idx = [i for i in idx if hashes[i] in evaluation]
            if len(idx) < 3:
                return float("nan")
            return float(stats.spearmanr(values[idx], [evaluation[hashes[i]] for i in idx])[0])

        every = list(range(len(names)))
        augmenting = [i for i in every if augments[i]]

        def row(label, rep, cpu):
            """``rep(seed, draw_block, image_block)`` -> [policy] scores of one replicate."""
            x, y = rep(0, 0, 0), rep(1, 1, 1)
            mean = np.mean([rep(s, b, b) for s in seeds for b in (0, 1)], axis=0)
            signal = float(np.std(mean, ddof=1))
            spread = _spread(x, y)
            entry = dict(
                score=label,
                spread=spread,
                between=signal,
                ratio=spread / signal if signal else float("nan"),
                rho_replicates=float(stats.spearmanr(x, y)[0]),
                rho_eval_one=float(np.mean([rho(v, every) for v in (x, y)])),
                rho_eval_mean=rho(mean, every),
                rho_eval_augmenting=rho(mean, augmenting),
                cpu=cpu,
            )
            table.append(entry)

        half = draws // 2
        # The shipped score: one fold model, its held-out fold, one draw. A replicate ``i`` of a
        # one-model score is fold ``i``'s model (another fold: other training images, other
        # held-out images), so two replicates share nothing but the policy.
        fold = lambda i: folds[i % len(folds)]  # noqa: E731
        row("shipped: 1 fold model, its held-out fold, 1 draw", lambda s, b, i: score(s, fold(i), b), 1.0)
        row(
            f"1 fold model, its held-out fold, {half} draws",
            lambda s, b, i: score(s, fold(i), None, draws_=list(range(b * half, (b + 1) * half))),
            float(half),
        )
        if subsets:
            row(
                f"1 fold model, {n_h} pool images, 1 draw",
                lambda s, b, i: score(s, fold(i), b, subsets[i % len(subsets)]),
                1.0,
            )
        if n_pool:
            row(
                f"1 fold model, {n_pool // 2} pool images, 1 draw",
                lambda s, b, i: score(s, fold(i), b, pool[i * (n_pool // 2) : (i + 1) * (n_pool // 2)]),
                (n_pool // 2) / n_h,
            )
        if len(folds) > 1:
            row(
                f"mean of {len(folds)} fold models, own held-out folds, 1 draw",
                lambda s, b, i: np.mean([score(s, k, b) for k in folds], axis=0),
                float(len(folds)),
            )
        # decomposition of the shipped score's spread
        x00 = score(0, folds[0], 0)
        parts = {
            "draw (same model, same images)": _spread(x00, score(0, folds[0], 1)),
            "training (same images and draw, other seed)": _spread(x00, score(1, folds[0], 0)),
        }
        if subsets:
            parts[f"images (same model and draw, another {n_h} pool images)"] = _spread(
                score(0, folds[0], 0, subsets[0]), score(0, folds[0], 0, subsets[1])
            )
        if len(folds) > 1:
            parts["fold (same seed and draw, another fold's model and images)"] = _spread(x00, score(0, folds[1], 0))
        report[kind] = {"table": table, "parts": parts}
        name = "minus the mean cross-entropy (objective: loss)" if kind == "nll" else "accuracy, points"
        lines += [
            f"## score: {name}",
            "",
            "| score | per-candidate spread | between policies | spread / between | rho replicates | "
            "rho vs eval (one replicate) | rho vs eval (mean) | rho vs eval (mean, augmenting only) | CPU |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for e in table:
            lines.append(
                f"| {e['score']} | {e['spread']:.3f} | {e['between']:.3f} | {e['ratio']:.2f} | "
                f"{score_noise._fmt(e['rho_replicates'])} | {score_noise._fmt(e['rho_eval_one'])} | "
                f"{score_noise._fmt(e['rho_eval_mean'])} | {score_noise._fmt(e['rho_eval_augmenting'])} | "
                f"{e['cpu']:.1f}x |"
            )
        lines += ["", "The shipped score's spread, by source (each a paired comparison changing one thing):", ""]
        lines += [f"- {k}: {v:.3f}" for k, v in parts.items()]
        lines.append("")
    # the policies' mean scores beside the evaluation regime
    lines += [
        "## policies",
        "",
        "| policy | base | density loss (mean, all models, held-out) | density accuracy | eval-cpu test accuracy |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    bases = meta.get("bases") or [None] * len(names)
    nll = np.mean([run["loss"][:, :, : run["n_heldout"]].mean(axis=(1, 2)) for run in runs.values()], axis=0)
    acc = np.mean([run["correct"][:, :, : run["n_heldout"]].mean(axis=(1, 2)) for run in runs.values()], axis=0)
    for i, name in enumerate(names):
        ev = evaluation.get(hashes[i])
        lines.append(
            f"| {name} | {bases[i] or ''} | {nll[i]:.4f} | {100 * acc[i]:.2f} | {'' if ev is None else f'{100 * ev:.2f}'} |"
        )
    report["policy_scores"] = [
        {
            "policy": n,
            "hash": h,
            "base": b,
            "loss": float(nll[i]),
            "accuracy": float(acc[i]),
            "eval": evaluation.get(h),
        }
        for i, (n, h, b) in enumerate(zip(names, hashes, bases))
    ]
    # Density matching never sees the base a policy trains on (crop, flip): among policies of one
    # base, the ranking is the policies' own.
    by_base: dict = {}
    for i, b in enumerate(bases):
        if augments[i] and hashes[i] in evaluation and b is not None:
            by_base.setdefault(b, []).append(i)
    report["by_base"] = {}
    if any(len(idx) >= 3 for idx in by_base.values()):
        lines.append("")
    for b, idx in sorted(by_base.items()):
        if len(idx) >= 3:
            r = float(stats.spearmanr(-nll[idx], [evaluation[hashes[i]] for i in idx])[0])
            report["by_base"][b] = {"policies": len(idx), "rho_loss_vs_eval": r}
            lines.append(
                f"Policies that augment on base {b}: {len(idx)}; their density score (loss) vs eval: rho {r:+.2f}"
            )
    cpu = float(np.mean([run["cpu_per_image_pass"] for run in runs.values()]))
    report["cpu_per_image_pass_s"] = cpu
    lines += ["", f"CPU of scoring: {1000 * cpu:.2f} ms per image and draw (augmentation and forward pass, 1 thread)"]
    score_noise.write_report("\n".join(lines), report, a.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train the fold models and score the policies on them, per image")
    score_noise.add_study_arguments(r)
    r.add_argument("--train-size", type=int, default=None, help="the reduced training split (default: the preset's)")
    r.add_argument("--preset", default="proxy-cpu", help="the fold models' training preset (the density search's)")
    r.add_argument("--fold-base", default="standard", help="what the fold models train with (the search's base)")
    r.add_argument("--folds", type=int, default=5)
    r.add_argument("--fold-seed", type=int, default=0)
    r.add_argument("--seeds", type=int, default=2, help="training seeds of the fold models")
    r.add_argument("--draws", type=int, default=4, help="augmented passes per policy and model")
    r.add_argument("--draw-seed", type=int, default=0)
    r.add_argument("--pool", type=int, default=1000, help="unused images every fold model is also scored on")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--fp32", action="store_true", help="train in float32 (amp off), as score_noise.py --fp32")
    an = sub.add_parser("analyse", help="the noise figures from a run folder")
    an.add_argument("folder")
    an.add_argument("--eval", action="append", default=[], help="runs.csv of the evaluation regime (repeatable)")
    an.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.cmd == "run":
        if not a.data:
            p.error("--data is required (or set AUTOAUG_CIFAR10)")
        a.base = None  # score_noise._policies: the policies stay on their own bases
        return run(a)
    return analyse(a)


if __name__ == "__main__":
    sys.exit(main())
