"""Proxy fidelity from finished runs: how well a proxy's scores rank policies the way the
evaluation regime does, and how well an early ASHA rung ranks them the way the proxy's end does.

Reads ``autoaug compare`` outputs: a proxy comparison's ``runs/*.json`` records (with per-epoch
histories) and the evaluation regime's ``runs.csv`` files; policies are matched by policy hash.
Prints and writes (``--out``, JSON) Spearman's rho with its p-value for:

- the proxy's final score -- the last epoch's validation accuracy, and the mean over the last
  ``W`` epochs (``--window``, the search's ``score_window``) -- against the evaluation regime's
  mean test accuracy;
- the score at an early rung (``--rung`` epochs; raw, and mean over the ``W`` epochs up to it)
  against the proxy's own final score: how often ASHA's cut agrees with the end of training;
  over all policies, and over the augmented ones only (all but ``none`` and ``standard``: every
  candidate of a search augments, and the un-augmented policies lead early in training, so they
  weigh on the all-policies figure in a way no search decision meets).

::

    python benchmarks/proxy_fidelity.py --proxy runs/fid/proxy-cpu \\
        --eval benchmarks/results/search-quality-cpu-eval-cpu/eval_runs.csv \\
        --eval benchmarks/results/search-quality-cpu-eval-cpu/eval_random_runs.csv --rung 40 --window 5
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

#: The baselines that apply no augmentation operation (``standard``: crop + flip only).
UNAUGMENTED = ("none", "standard")


def _mean(xs):
    return sum(xs) / len(xs)


def main(argv=None) -> int:
    from scipy import stats

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--proxy", required=True, help="an autoaug compare --out folder of the proxy")
    p.add_argument("--eval", action="append", required=True, help="runs.csv of the evaluation regime (repeatable)")
    p.add_argument("--rung", type=int, default=40)
    p.add_argument("--window", type=int, default=5)
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="RUNS",
        help="another proxy's runs of the same policies (a compare --out folder or its runs.csv, e.g. the "
        "same proxy without a speed lever, or with another seed): per policy, this proxy's final "
        "validation accuracy minus the reference's, and the rank correlation of the two (repeatable)",
    )
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    a = p.parse_args(argv)

    evaluation: dict[str, list[float]] = {}
    labels: dict[str, str] = {}
    for path in a.eval:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                evaluation.setdefault(row["policy_hash"], []).append(float(row["test_accuracy"]))
                labels.setdefault(row["policy_hash"], row["policy"])
    proxy: dict[str, dict[str, float]] = {}
    for rec_path in sorted(Path(a.proxy, "runs").glob("*.json")):
        r = json.loads(rec_path.read_text())
        vals = [row.get("val_accuracy") for row in r["history"]]
        # The epochs read (a proxy validated only where a search reads its score has the rest None).
        needed = [*range(a.rung - a.window + 1, a.rung + 1), *range(len(vals) - a.window + 1, len(vals) + 1)]
        if len(vals) < a.rung or any(vals[e - 1] is None for e in needed):
            sys.exit(
                f"{rec_path}: needs the validation accuracy of epochs {a.rung - a.window + 1}-{a.rung} and of "
                f"the last {a.window}"
            )
        proxy[r["policy_hash"]] = {
            "final": vals[-1],
            "final_window": _mean(vals[-a.window :]),
            "rung": vals[a.rung - 1],
            "rung_window": _mean(vals[a.rung - a.window : a.rung]),
        }
        labels.setdefault(r["policy_hash"], r["policy"])
    common = sorted(set(proxy) & set(evaluation), key=lambda h: -_mean(evaluation[h]))
    ev = [_mean(evaluation[h]) for h in common]
    augmented = [h for h in common if labels[h] not in UNAUGMENTED]

    def rho(xs, ys):
        r, pv = stats.spearmanr(xs, ys)
        return {"spearman": float(r), "p_value": float(pv)}

    out = {
        "n_policies": len(common),
        "proxy_final_vs_eval": rho([proxy[h]["final"] for h in common], ev),
        f"proxy_final_mean{a.window}_vs_eval": rho([proxy[h]["final_window"] for h in common], ev),
        f"rung{a.rung}_vs_proxy_final_mean{a.window}": rho(
            [proxy[h]["rung"] for h in common], [proxy[h]["final_window"] for h in common]
        ),
        f"rung{a.rung}_mean{a.window}_vs_proxy_final_mean{a.window}": rho(
            [proxy[h]["rung_window"] for h in common], [proxy[h]["final_window"] for h in common]
        ),
        f"rung{a.rung}_mean{a.window}_vs_proxy_final_mean{a.window}_augmented": rho(
            [proxy[h]["rung_window"] for h in augmented], [proxy[h]["final_window"] for h in augmented]
        ),
        "n_augmented": len(augmented),
        "policies": [
            {
                "policy": labels[h],
                "policy_hash": h[:12],
                "eval_mean_test": _mean(evaluation[h]),
                "eval_seeds": len(evaluation[h]),
                **proxy[h],
            }
            for h in common
        ],
    }
    print(
        f"{'policy':28s} {'eval test':>9s} {'proxy final':>11s} {'final mean' + str(a.window):>12s} "
        f"{'rung' + str(a.rung):>7s} {'rung mean' + str(a.window):>11s}"
    )
    for row in out["policies"]:
        print(
            f"{row['policy'][:28]:28s} {100 * row['eval_mean_test']:9.2f} {100 * row['final']:11.1f} "
            f"{100 * row['final_window']:12.2f} {100 * row['rung']:7.1f} {100 * row['rung_window']:11.2f}"
        )
    for key, v in out.items():
        if isinstance(v, dict):
            print(f"{key}: rho {v['spearman']:+.3f} (p {v['p_value']:.3f})")
    references = {}
    for ref in a.reference:
        path = Path(ref) / "runs.csv" if Path(ref).is_dir() else Path(ref)
        with open(path, newline="") as f:
            final = {row["policy_hash"]: float(row["val_accuracy"]) for row in csv.DictReader(f) if row["val_accuracy"]}
        both = [h for h in common if h in final]
        diffs = [proxy[h]["final"] - final[h] for h in both]
        sd = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
        references[ref] = {
            "n_policies": len(both),
            "mean_diff": _mean(diffs),
            "sd_diff": sd,
            "final_vs_reference": rho([proxy[h]["final"] for h in both], [final[h] for h in both]),
            "reference_final_vs_eval": rho([final[h] for h in both], [_mean(evaluation[h]) for h in both]),
            "diffs": {labels[h]: d for h, d in zip(both, diffs)},
        }
        print(
            f"against {ref}: final val acc minus the reference's, points: "
            + ", ".join(f"{labels[h][:20]} {100 * d:+.1f}" for h, d in zip(both, diffs))
            + f"; mean {100 * references[ref]['mean_diff']:+.2f}, sd {100 * sd:.2f}; rho with the reference "
            f"{references[ref]['final_vs_reference']['spearman']:+.3f}; the reference's final vs eval: rho "
            f"{references[ref]['reference_final_vs_eval']['spearman']:+.3f}"
        )
    if references:
        out["references"] = references
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
