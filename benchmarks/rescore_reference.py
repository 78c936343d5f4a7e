"""Re-score reference policies exactly as a finished search re-scored its final candidates.

A search with re-scoring trains each final candidate once more under its proxy with the seed
``train.seed + RESCORE_SEED_OFFSET`` and keeps the highest search score (``selection`` in the
provenance). This trains other policies -- by default the strong baselines -- under the same
proxy, seed and score window, so that their scores sit beside the candidates' in one list: did
the search beat the published policies *on its own objective*, or only lose to them in the
evaluation regime? Runs two policies at a time (one core each)::

    python benchmarks/rescore_reference.py --result benchmarks/results/search-quality-cpu16-eval-cpu/search_result.json \\
        --data ../shared/data/cifar10-jpeg --out benchmarks/results/search-quality-cpu16-eval-cpu/rescore_reference.json

The search's configuration is read from the result (``provenance.search.config``); ``--data``
replaces its data path (the result records the machine's absolute path).
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
    from autoaug.search.rescore import _train_val_accuracy

    t0 = time.time()
    out = _train_val_accuracy(train_config, resolve(policy_ref).policy.to_dict(), window)
    return {"policy": policy_ref, **out, "wall_s": time.time() - t0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--result", required=True, help="a search's result.json (or a results folder's search_result.json)")
    p.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="training data (default $AUTOAUG_CIFAR10)")
    p.add_argument("--policy", action="append", default=None, help=f"policy to re-score (default: {', '.join(STRONG)})")
    p.add_argument("--workers", type=int, default=2, help="runs at a time (one CPU thread each)")
    p.add_argument("--seed", type=int, default=None,
                   help="train with this seed instead of the search's re-scoring seed (a second draw of the "
                        "same comparison; the search's candidates are then left out unless given as --policy)")
    p.add_argument("--out", default=None, help="write the figures here as JSON")
    a = p.parse_args(argv)

    from autoaug.search.config import METRIC, SearchConfig
    from autoaug.search.rescore import RESCORE_SEED_OFFSET

    result = json.loads(Path(a.result).read_text())
    prov = result["provenance"]
    if "selection" not in prov:
        p.error(f"{a.result}: the search did not re-score its candidates (no provenance.selection)")
    config = SearchConfig.from_dict(prov["search"]["config"])
    train = config.train
    if a.data:
        train = dataclasses.replace(train, data=os.path.abspath(a.data))
    seed = (train.seed + RESCORE_SEED_OFFSET) % 2**31 if a.seed is None else a.seed
    cfg = dataclasses.replace(train, seed=seed, num_threads=1).to_dict()
    refs = a.policy or list(STRONG)
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        runs = list(pool.map(_score, [cfg] * len(refs), refs, [config.score_window] * len(refs)))
    # The search's own re-scores belong beside the references only when they used the same seed.
    rows = [{"kind": c["kind"], "num_sub_policies": c["num_sub_policies"], METRIC: c.get(METRIC), "chosen":
             c["kind"] == prov["selection"]["chosen"]} for c in prov["selection"]["candidates"]
            if c.get("seed", seed) == seed]
    rows += [{"kind": f"reference {r['policy']}", METRIC: r[METRIC], "val_accuracy": r["val_accuracy"],
              "wall_s": r["wall_s"]} for r in runs]
    print(f"re-scores under the proxy of {config.name} (seed {seed}, mean validation accuracy of the last "
          f"{config.score_window} epochs):")
    for r in sorted(rows, key=lambda r: -(r[METRIC] or 0)):
        print(f"  {r[METRIC]:.4f}  {r['kind']}{'  (stored)' if r.get('chosen') else ''}")
    if a.out:
        Path(a.out).write_text(json.dumps({"search": config.name, "seed": seed, "score_window": config.score_window,
                                           "rows": rows}, indent=1))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
