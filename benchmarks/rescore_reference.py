"""Re-score reference policies exactly as a finished search re-scored its final candidates.

A search with re-scoring trains each final candidate ``rescore_seeds`` more times under its
proxy (seeds ``train.seed + RESCORE_SEED_OFFSET + i``, ``rescore_val_size`` validation images)
and keeps the highest mean search score (``selection`` in the provenance). This trains other
policies -- by default the strong baselines -- under the same protocol
(:meth:`SearchConfig.rescore_train_config`), so that their scores sit beside the candidates' in
one list: did the search beat the published policies *on its own objective*, or only lose to
them in the evaluation regime? Runs two trainings at a time (one core each)::

    python benchmarks/rescore_reference.py --result benchmarks/results/search-quality-cpu16-eval-cpu/search_result.json \\
        --data ../shared/data/cifar10-jpeg --out benchmarks/results/search-quality-cpu16-eval-cpu/rescore_reference.json

The search's configuration is read from the result (``provenance.search.config``); ``--data``
replaces its data path (the result records the machine's absolute path). ``--seed`` trains one
run with another seed instead (a second draw of a one-seed comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

STRONG = ("autoaugment-cifar10", "randaugment:n=2,m=9", "trivialaugment")


def _score(train_config: dict, policy_ref: str, window: int) -> dict:
    from autoaug.policies.reference import resolve
    from autoaug.search.decide.proxy_runs import train_and_score

    t0 = time.time()
    out = train_and_score(train_config, resolve(policy_ref).policy.to_dict(), window)
    return {"policy": policy_ref, **out, "wall_s": time.time() - t0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--result", required=True, help="a search's result.json (or a results folder's search_result.json)")
    p.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="training data (default $AUTOAUG_CIFAR10)")
    p.add_argument("--policy", action="append", default=None, help=f"policy to re-score (default: {', '.join(STRONG)})")
    p.add_argument("--workers", type=int, default=2, help="runs at a time (one CPU thread each)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="train with this seed instead of the search's re-scoring seed (a second draw of the "
        "same comparison; the search's candidates are then left out unless given as --policy)",
    )
    p.add_argument("--out", default=None, help="write the figures here as JSON")
    a = p.parse_args(argv)

    from autoaug.search.config import METRIC, SearchConfig

    result = json.loads(Path(a.result).read_text())
    prov = result["provenance"]
    if "selection" not in prov:
        p.error(f"{a.result}: the search did not re-score its candidates (no provenance.selection)")
    config = SearchConfig.from_dict(prov["search"]["config"])
    if a.data:
        config = config.replace(train=dataclasses.replace(config.train, data=os.path.abspath(a.data)))
    train = config.train
    if a.seed is None:
        cfgs = [config.rescore_train_config(i) for i in range(config.rescore_seeds)]
    else:
        cfgs = [dataclasses.replace(config.rescore_train_config(0), seed=a.seed)]
    seeds = [c.seed for c in cfgs]
    val_size = cfgs[0].val_size
    refs = a.policy or list(STRONG)
    jobs = [(dataclasses.replace(c, num_threads=1).to_dict(), ref) for ref in refs for c in cfgs]
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        runs = list(pool.map(_score, [j[0] for j in jobs], [j[1] for j in jobs], [config.score_window] * len(jobs)))

    def mean(values: list) -> float:
        return sum(values) / len(values)

    # The search's own re-scores belong beside the references only when they used the same runs.
    rows = []
    for c in prov["selection"]["candidates"]:
        c_runs = c.get("runs") or [{"seed": c.get("seed"), METRIC: c.get(METRIC)}]
        if [r.get("seed") for r in c_runs] == seeds and c.get("val_size", train.val_size) == val_size:
            rows.append(
                {
                    "kind": c["kind"],
                    "num_sub_policies": c["num_sub_policies"],
                    METRIC: c.get(METRIC),
                    "runs": [r.get(METRIC) for r in c_runs],
                    "chosen": c["kind"] == prov["selection"]["chosen"],
                }
            )
    for ref in refs:
        mine = [r for r in runs if r["policy"] == ref]
        rows.append(
            {
                "kind": f"reference {ref}",
                METRIC: mean([r[METRIC] for r in mine]),
                "runs": [r[METRIC] for r in mine],
                "val_accuracy": mean([r["val_accuracy"] for r in mine]),
                "wall_s": sum(r["wall_s"] for r in mine),
            }
        )
    print(
        f"re-scores under the proxy of {config.name} (seeds {seeds}, {val_size} validation images; mean over "
        f"seeds of the mean validation accuracy of the last {config.score_window} epochs):"
    )
    for r in sorted(rows, key=lambda r: -(r[METRIC] or 0)):
        per_run = " ".join(f"{v:.4f}" for v in r["runs"]) if len(r["runs"]) > 1 else ""
        print(
            f"  {r[METRIC]:.4f}  {r['kind']}{'  (stored)' if r.get('chosen') else ''}"
            f"{f'   runs: {per_run}' if per_run else ''}"
        )
    if a.out:
        Path(a.out).write_text(
            json.dumps(
                {
                    "search": config.name,
                    "seeds": seeds,
                    "val_size": val_size,
                    "score_window": config.score_window,
                    "rows": rows,
                },
                indent=1,
            )
        )
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
