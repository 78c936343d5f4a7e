"""What a candidate costs under each search method on this machine (2 CPU cores), and the wall time
of a default density-matching search.

* **train method** (``cpu`` preset: ResNet-8, 1,000 images, 120 epochs, ASHA grace 20 /
  reduction 3, 2 trials at a time on 1 core each): the proxy's epoch time is measured by training
  ``--probe-epochs`` epochs; a trial costs the epochs ASHA lets it run on average (rungs at 20
  and 60, each keeping a third: 20 x 2/3 + 60 x 2/9 + 120 x 1/9 = 40, read from the preset by
  :func:`asha_mean_epochs`) times that, plus the measured set-up;
  candidates per hour = 2 slots x 3600 / that.
* **density method** (``density-cpu`` preset: K=5 fold models of the same proxy recipe, T=2 rounds
  x B candidates per fold): a real search through :func:`autoaug.search.driver.run_search` with
  ``--trials-per-round`` candidates per round (default 200 = the full default search) and fold
  models of ``--fold-epochs`` epochs (default the preset's 120). Reported:
  fold-model training wall time, scoring wall time, candidates scored per hour, the per-trial
  time inside the trial (set-up and scoring), and the wall time of the full default search (when
  a smaller B or fewer fold epochs were run: fold training scaled to 120 epochs + the measured
  scoring rate x 2,000 candidates, labelled as an extrapolation).
* **objective** (``--objective-candidates M``, default 40): M random candidates of the search
  space are scored twice on fold model 0 with different augmentation draws; the Spearman
  correlation between the two passes says how repeatable each objective (accuracy, minus loss)
  ranks candidates, and how many ties accuracy leaves. The objective that ranks more
  repeatably is the better search signal.

::

    .venv/bin/python benchmarks/search_cost.py --data $AUTOAUG_CIFAR10 [--trials-per-round N]
    # figures of a density search that already ran (e.g. the quality benchmark's), no new search:
    .venv/bin/python benchmarks/search_cost.py --data $AUTOAUG_CIFAR10 \
        --from-run runs/search-quality/density-cpu-eval-cpu/runs/sq-density-cpu-eval-cpu

Figures are printed and written to ``--out`` (default ``benchmarks/results/search-cost``) as
``search_cost.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def asha_mean_epochs(grace: int, factor: float, max_epochs: int) -> float:
    """Epochs a trial runs on average under ASHA when each rung (grace, grace x factor, ...) keeps
    1 / factor of the trials reaching it (the steady state of asynchronous halving)."""
    mean, reach, rung = 0.0, 1.0, float(grace)
    while rung < max_epochs:
        mean += reach * (1 - 1 / factor) * rung  # stopped here
        reach /= factor
        rung *= factor
    return mean + reach * max_epochs


def _cpu_preset_mean_epochs() -> float:
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.config import SEARCH_PRESETS

    preset = SEARCH_PRESETS["cpu"]
    epochs = TrainConfig.from_preset(preset["train"]["preset"]).epochs
    return asha_mean_epochs(preset["grace_period"], preset["reduction_factor"], epochs)


FULL_DENSITY_TRIALS = 5 * 2 * 200


def _train_probe(data: str, epochs: int) -> dict:
    from autoaug.proxy_models.train import TrainConfig, train

    cfg = TrainConfig.from_preset("proxy-cpu", data=data, epochs=epochs, num_threads=1)
    t0 = time.perf_counter()
    result = train(cfg, "autoaugment-cifar10")
    wall = time.perf_counter() - t0
    epoch_s = statistics.median(h["epoch_time_s"] for h in result.history[1:] or result.history)
    setup_s = wall - result.train_time_s
    mean_epochs = _cpu_preset_mean_epochs()
    trial_s = setup_s + mean_epochs * epoch_s
    return {
        "probe_epochs": epochs,
        "epoch_time_s": epoch_s,
        "setup_s": setup_s,
        "mean_epochs_with_asha": mean_epochs,
        "trial_time_s": trial_s,
        "candidates_per_hour_2_cores": 2 * 3600 / trial_s,
    }


def _density_search(
    data: str, storage: str, trials_per_round: int, folds: int, rounds: int, fold_epochs: int | None
) -> dict:
    from autoaug.search.config import SearchConfig
    from autoaug.search.driver import run_search

    config = SearchConfig.from_preset(
        "density-cpu",
        name="search-cost",
        data=data,
        storage=os.path.join(storage, "runs"),
        store=os.path.join(storage, "store"),
        verbose=0,
        density={
            "folds": folds,
            "rounds": rounds,
            "trials_per_round": trials_per_round,
            "top_per_round": min(10, trials_per_round),
        },
        **({"train": {"preset": "proxy-cpu", "epochs": fold_epochs}} if fold_epochs else {}),
    )
    from autoaug.proxy_models.train import resolve_config

    config = config.replace(train=resolve_config(config.train))  # sized to the data, as the CLI's preflight does
    t0 = time.time()
    outcome = run_search(config, overwrite=True)
    return density_figures(outcome.provenance, outcome.run_dir, wall=time.time() - t0)


def density_figures(prov: dict, run_dir: str, wall: float | None = None) -> dict:
    """The density method's figures from a finished density search's provenance (``wall``: the
    driver's wall time; default the search's own elapsed time over all its sessions)."""
    from autoaug.search.config import SearchConfig
    from autoaug.search.methods.density.settings import DensityConfig

    config = SearchConfig.from_dict(prov["search"]["config"])
    d = config.method_settings(DensityConfig)
    folds, rounds, trials_per_round = d.folds, d.rounds, d.trials_per_round
    full_epochs = SearchConfig.from_preset("density-cpu").train.epochs
    timing = prov["time"]
    wall = float(timing["elapsed_s"]) if wall is None else wall
    fold_wall = sum(float(v) for v in timing["fold_training_wall_s"].values())
    epochs = config.train.epochs
    # Fold training is linear in epochs: with --fold-epochs E the full recipe's is scaled by 120/E.
    full_fold_wall = fold_wall * full_epochs / epochs
    rounds_wall = float(timing["rounds_wall_s"])
    trials = prov["trials"]
    per_trial = [t["train_time_s"] for t in trials if t["train_time_s"] is not None]
    n = len(trials)
    scoring_rate = n / rounds_wall * 3600
    full = full_fold_wall + FULL_DENSITY_TRIALS / scoring_rate * 3600 if n else None
    measured = n == FULL_DENSITY_TRIALS and epochs == full_epochs
    return {
        "folds": folds,
        "rounds": rounds,
        "trials_per_round": trials_per_round,
        "trials": n,
        "wall_s": wall,
        "fold_epochs": epochs,
        "fold_training_wall_s": fold_wall,
        "fold_training_wall_s_at_full_epochs": full_fold_wall,
        "fold_model_train_s": [f["train_time_s"] for f in prov["method"]["fold_models"]],
        "fold_model_heldout_accuracy": [f["val_accuracy"] for f in prov["method"]["fold_models"]],
        "scoring_wall_s": rounds_wall,
        "candidates_per_hour_2_cores": scoring_rate,
        "candidates_per_hour_incl_fold_training": n / wall * 3600,
        "trial_time_median_s": statistics.median(per_trial) if per_trial else None,
        "trial_time_max_s": max(per_trial) if per_trial else None,
        "full_default_search_wall_s": wall if measured else full,
        "full_default_search_is": "measured"
        if measured
        else f"extrapolated: fold training x {full_epochs}/{epochs} epochs + {FULL_DENSITY_TRIALS} candidates at the "
        "measured scoring rate",
        "run_dir": run_dir,
    }


def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def _objective(data: str, run_dir: str, m: int) -> dict:
    import numpy as np

    from autoaug.search.config import SearchConfig
    from autoaug.search.methods.density.fold_models import FoldScorer, fold_splits
    from autoaug.search.methods.density.settings import DensityConfig

    config = SearchConfig.from_dict(json.loads(Path(run_dir, "search_config.json").read_text())["config"])
    d = config.method_settings(DensityConfig)
    _, splits = fold_splits(config.train, d.folds, d.fold_seed)
    weights = Path(run_dir, "folds", "fold0.pt").read_bytes()
    cfg = dataclasses.replace(config.train, num_threads=1)
    space = config.space
    rng = np.random.default_rng(0)
    policies = []
    for i in range(m):
        params = {}
        for name, dist in space.distributions().items():
            if hasattr(dist, "choices"):
                params[name] = dist.choices[int(rng.integers(len(dist.choices)))]
            elif name.endswith("_prob"):
                params[name] = round(int(rng.integers(0, 11)) * 0.1, 1)
            else:
                params[name] = int(rng.integers(dist.low, dist.high + 1))
        policies.append(space.to_policy(params, name=f"random-{i}"))
    passes = []
    for seed in (1, 2):
        scorer = FoldScorer(cfg, space, weights, splits[0].val, seed=seed)
        t0 = time.perf_counter()
        passes.append([scorer.score(p) for p in policies])
        per = (time.perf_counter() - t0) / m
    acc = [[s[0] for s in p] for p in passes]
    loss = [[-s[1] for s in p] for p in passes]
    return {
        "candidates": m,
        "heldout_images": len(splits[0].val),
        "spearman_between_passes_accuracy": _spearman(*acc),
        "spearman_between_passes_minus_loss": _spearman(*loss),
        "distinct_accuracy_values": len(set(acc[0])),
        "score_time_per_candidate_s": per,
        "accuracy_range": [min(acc[0]), max(acc[0])],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"))
    parser.add_argument("--trials-per-round", type=int, default=200)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--probe-epochs", type=int, default=4)
    parser.add_argument(
        "--fold-epochs",
        type=int,
        default=None,
        help="train the fold models this many epochs instead of the preset's 120 and scale their "
        "wall time (a shorter measurement; the candidates' scoring cost does not depend on it)",
    )
    parser.add_argument("--objective-candidates", type=int, default=40)
    parser.add_argument(
        "--from-run",
        default=None,
        metavar="RUN_DIR",
        help="a finished density search's run directory (e.g. the quality benchmark's): report its "
        "figures and measure the objective on its fold models instead of running a search",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "search-cost"))
    args = parser.parse_args()
    if not args.data:
        parser.error("--data (or $AUTOAUG_CIFAR10) is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict = {
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}
    }
    figures["train_method"] = train = _train_probe(args.data, args.probe_epochs)
    print(
        f"train method: epoch {train['epoch_time_s']:.2f} s, trial {train['trial_time_s']:.0f} s "
        f"-> {train['candidates_per_hour_2_cores']:.0f} candidates/hour on 2 cores",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="autoaug-search-cost-") as tmp:
        if args.from_run:
            result = json.loads(Path(args.from_run, "result.json").read_text())
            figures["density_method"] = dens = density_figures(result["provenance"], str(Path(args.from_run).resolve()))
        else:
            figures["density_method"] = dens = _density_search(
                args.data, tmp, args.trials_per_round, args.folds, args.rounds, args.fold_epochs
            )
        print(
            f"density method: {dens['trials']} candidates, fold models {dens['fold_training_wall_s']:.0f} s, "
            f"scoring {dens['scoring_wall_s']:.0f} s -> {dens['candidates_per_hour_2_cores']:.0f} candidates/hour; "
            f"full default search {dens['full_default_search_wall_s'] / 60:.1f} min "
            f"({dens['full_default_search_is']})",
            flush=True,
        )
        if args.objective_candidates:
            figures["objective"] = obj = _objective(args.data, dens["run_dir"], args.objective_candidates)
            print(
                f"objective repeatability (Spearman between two passes over {obj['candidates']} candidates): "
                f"accuracy {obj['spearman_between_passes_accuracy']:.3f}, minus loss "
                f"{obj['spearman_between_passes_minus_loss']:.3f}",
                flush=True,
            )
    figures["loadavg_at_end"] = os.getloadavg()
    (out / "search_cost.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
