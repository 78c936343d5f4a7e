"""The statistics, tables and figure of ``benchmarks/search_quality.py``: per-policy intervals and
ranks from compare's runs, paired differences by seed, proxy-to-evaluation rank correlation, the
results and difference tables, ``quality.png``, and the found policies of several searches that
differ only in their seed taken together (with what makes two searches the same recipe).
``search_quality.py`` runs the stages, reads the runs and writes the report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def interval(values: Sequence[float]) -> dict[str, float | None]:
    """``{n, mean, std, low, high}``: compare's :func:`autoaug.launch.compare.stats.mean_ci` (mean,
    sample std, two-sided 95% Student t interval of the mean) as a record; std and the interval
    None with fewer than two values."""
    from autoaug.launch.compare.stats import mean_ci

    mean, std, low, high = mean_ci(values)
    if len(values) < 2:
        return {"n": len(values), "mean": mean, "std": None, "low": None, "high": None}
    return {"n": len(values), "mean": mean, "std": std, "low": low, "high": high}


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{policy label: {seeds: {seed: test acc}, **interval, balanced}}`` from compare's ``runs.csv``
    rows. ``balanced``: the same for the balanced accuracy (mean per-class accuracy) over the runs
    that have one (``balanced_accuracy`` column, empty for runs recorded without per-class counts
    and absent from older files); None when no run of the policy has one."""
    by: dict[str, dict[int, float]] = {}
    balanced: dict[str, dict[int, float]] = {}
    for r in runs:
        by.setdefault(r["policy"], {})[int(r["seed"])] = float(r["test_accuracy"])
        if r.get("balanced_accuracy") not in (None, ""):
            balanced.setdefault(r["policy"], {})[int(r["seed"])] = float(r["balanced_accuracy"])
    out = {}
    for label, seeds in by.items():
        out[label] = {"seeds": dict(sorted(seeds.items())), **interval(list(seeds.values()))}
        b = balanced.get(label)
        out[label]["balanced"] = {"seeds": dict(sorted(b.items())), **interval(list(b.values()))} if b else None
    for rank, label in enumerate(sorted(out, key=lambda k: -out[k]["mean"]), 1):
        out[label]["rank"] = rank
    return out


def balanced_paired(summary: dict[str, dict[str, Any]], found: str, other: str) -> dict[str, Any] | None:
    """:func:`paired` on the balanced accuracies; None when either policy has none."""
    a, b = summary[found].get("balanced"), summary[other].get("balanced")
    return paired(a["seeds"], b["seeds"]) if a and b else None


def results_table(summary: dict[str, dict[str, Any]], marks: dict[str, str] | None = None) -> list[str]:
    """Markdown rows of the results: rank, test accuracy and balanced accuracy (mean, std, 95% CI)
    per policy; ``marks`` adds text after a label. A balanced accuracy over fewer seeds than the test
    accuracy says over how many; none at all shows ``–`` and a note says why."""
    marks = marks or {}
    lines = [
        "| rank | policy | n | test acc % | std | 95% CI | balanced acc % | std | 95% CI |",
        "|---:|---|---:|---:|---:|---|---:|---:|---|",
    ]
    missing = False
    for label in sorted(summary, key=lambda k: summary[k]["rank"]):
        s, b = summary[label], summary[label].get("balanced")
        if b:
            partial = f" ({b['n']} of {s['n']} seeds)" if b["n"] < s["n"] else ""
            bal = f"{pct(b['mean'])}{partial} | {pct(b['std'])} | [{pct(b['low'])}, {pct(b['high'])}]"
        else:
            bal, missing = "– | – | –", True
        missing = missing or bool(b and b["n"] < s["n"])
        lines.append(
            f"| {s['rank']} | `{label}`{marks.get(label, '')} | {s['n']} | {pct(s['mean'])} | "
            f"{pct(s['std'])} | [{pct(s['low'])}, {pct(s['high'])}] | {bal} |"
        )
    if missing:
        lines += [
            "",
            "Balanced accuracy (the mean of the per-class test accuracies) is missing for runs recorded "
            "before `autoaug compare` kept per-class counts, and for runs imported from a committed "
            "`runs.csv` (`--import-runs`, `--also`: the CSV holds no per-class counts). Delete those run "
            "records under `$WORK/eval/runs/` and re-run the same command to train them again.",
        ]
    return lines


def paired(found: dict[int, float], other: dict[int, float]) -> dict[str, Any]:
    """Found minus other, paired by seed (same seed = same init, data order and test set): compare's
    :func:`autoaug.launch.compare.stats.paired_difference`, with the paired t test's p-value."""
    from autoaug.launch.compare.stats import paired_difference

    d = paired_difference(found, other)  # its mean, std and interval: mean_ci of the differences
    return {
        "seeds": list(d.seeds),
        "diffs": list(d.diffs),
        **interval(d.diffs),
        "p_value": d.p_value if d.n >= 2 else None,
    }


# ------------------------------------------------------------------------- over search seeds
#: Search-config keys that name, place or resource a search without changing what it does.
_NOT_RECIPE = {
    "name",
    "seed",
    "storage",
    "optuna_storage",
    "store",
    "mlflow_uri",
    "verbose",
    "reuse_actors",
    "max_failures",
    "cpus_per_trial",
    "gpus_per_trial",
}


def search_recipe(search_result: dict[str, Any]) -> dict[str, Any]:
    """What a search did apart from its seed, names and places: its config without those keys,
    and the fingerprint of the data it searched on (where the data lies is a place)."""
    from autoaug.proxy_models.train_config import RESUMABLE_CHANGES  # fields that change no result

    config = dict(search_result["provenance"]["search"]["config"])
    recipe = {k: v for k, v in config.items() if k not in _NOT_RECIPE}
    recipe["train"] = {k: v for k, v in config.get("train", {}).items() if k != "seed" and k not in RESUMABLE_CHANGES}
    fingerprint = search_result["provenance"].get("dataset", {}).get("fingerprint")
    if fingerprint:
        recipe["dataset_fingerprint"] = fingerprint
    # The config recorded is the one the search ran, with what its calibration measured filled in:
    # two seeds of a search that measures its base and warm start may measure different ones.
    calibration = search_result["provenance"].get("calibration") or {}
    if calibration.get("base"):
        recipe["base"] = "auto"
        recipe["space"] = {k: v for k, v in recipe.get("space", {}).items() if k != "base"}
    if calibration.get("transfer"):
        recipe["warm_start"] = "auto"
        if calibration["transfer"].get("family"):  # --space auto: the family (and its space) measured too
            recipe["family"] = "auto"
            recipe["space"] = {"family": "auto"}
    return recipe


def same_recipe(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two recipes agree on every key both record (a key added by a later version, absent
    from an older search's config, does not make them differ)."""
    for key in set(a) & set(b):
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            if not same_recipe(a[key], b[key]):
                return False
        elif a[key] != b[key]:
            return False
    return True


def over_search_seeds(
    summary: dict[str, dict[str, Any]], found: Sequence[str], baselines: Sequence[str]
) -> dict[str, Any]:
    """The found policies of several searches that differ only in their seed, taken together.

    For each baseline: the per-search paired differences, their mean, and two 95% CIs: over the
    evaluation seeds (each seed's difference averaged over the searches; says how sure we are of
    *these* searches' policies) and over the searches (Student-t over the per-search mean
    differences, n - 1 degrees of freedom; says what a new search seed can be expected to give).
    """
    means = [summary[f]["mean"] for f in found]
    seeds = sorted(set.intersection(*(set(summary[f]["seeds"]) for f in found)))
    pooled = {s: sum(summary[f]["seeds"][s] for f in found) / len(found) for s in seeds}
    vs = {}
    for b in baselines:
        per_search = [paired({s: summary[f]["seeds"][s] for s in seeds}, summary[b]["seeds"])["mean"] for f in found]
        vs[b] = {
            "per_search": per_search,
            "over_eval_seeds": paired(pooled, summary[b]["seeds"]),
            "over_searches": interval(per_search),
        }
    return {
        "searches": list(found),
        "search_means": means,
        "mean": sum(means) / len(means),
        "between_searches": interval(means),
        "seeds": seeds,
        "vs": vs,
    }


def seeds_table(found: str, over: dict[str, Any], best_strong: str) -> list[str]:
    n = len(over["searches"])
    lines = [
        "",
        "## Over search seeds",
        "",
        f"The found policies of {n} searches that differ only in their seed (`{found}` and the `--also` "
        f"folders with the same search config), taken together: mean test accuracy "
        f"{pct(over['mean'])}% (per search: {', '.join(pct(m) for m in over['search_means'])}). "
        "Difference to each baseline in points: the mean over the searches of their paired differences; "
        "the first CI is over the evaluation seeds (these searches' policies), the second over the searches "
        f"(what a new search seed can be expected to give; Student-t, {n - 1} degrees of freedom).",
        "",
        "| baseline | mean diff | 95% CI, evaluation seeds | 95% CI, searches | per search |",
        "|---|---:|---|---|---|",
    ]
    for b, d in over["vs"].items():
        e, s = d["over_eval_seeds"], d["over_searches"]
        lines.append(
            f"| `{b}` | {pct(e['mean'])} | [{pct(e['low'])}, {pct(e['high'])}] | "
            f"[{pct(s['low'])}, {pct(s['high'])}] | {', '.join(pct(x) for x in d['per_search'])} |"
        )
    gap = over["vs"][best_strong]["over_eval_seeds"]["mean"]
    lines += [
        "",
        f"- over the {n} searches, found minus the best strong baseline (`{best_strong}`): "
        f"{100 * gap:+.2f} points (goal: >= 0): **{gap >= 0}**",
    ]
    return lines


def pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}"


def spearman(proxy: dict[str, float], evaluation: dict[str, float]) -> dict[str, Any]:
    from scipy import stats

    labels = sorted(set(proxy) & set(evaluation))
    rho, p = stats.spearmanr([proxy[k] for k in labels], [evaluation[k] for k in labels])
    return {"n_policies": len(labels), "spearman": float(rho), "p_value": float(p), "policies": labels}


def plot(
    summary: dict[str, dict[str, Any]],
    diffs: dict[str, dict[str, Any]],
    found: str,
    path: Path,
    title: str,
    others: Sequence[str] = (),
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted(summary, key=lambda k: summary[k]["mean"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.55 * len(labels) + 2.2), gridspec_kw={"width_ratios": [3, 2]})
    for y, label in enumerate(labels):
        s = summary[label]
        color = "tab:red" if label == found else "tab:orange" if label in others else "tab:blue"
        if s["low"] is not None:
            ax1.plot([100 * s["low"], 100 * s["high"]], [y, y], color=color, lw=3, alpha=0.5)
        ax1.plot(100 * s["mean"], y, "o", color=color, ms=8)
        ax1.plot([100 * v for v in s["seeds"].values()], [y] * len(s["seeds"]), "|", color="k", ms=10)
    ax1.set_yticks(range(len(labels)), labels)
    ax1.set_xlabel(
        "test accuracy % (mean, 95% CI, | = one seed)\nred: this search's policy"
        + ("; orange: another search's or seed's (--also)" if others else "")
    )
    ax1.grid(axis="x", alpha=0.3)
    ax1.set_title(title, fontsize=9)
    compared = [k for k in labels if k in diffs]
    for y, label in enumerate(compared):
        d = diffs[label]
        if d["low"] is not None:
            ax2.plot([100 * d["low"], 100 * d["high"]], [y, y], color="tab:green", lw=3, alpha=0.5)
        ax2.plot(100 * d["mean"], y, "o", color="tab:green", ms=8)
    ax2.axvline(0, color="k", lw=0.8)
    ax2.set_yticks(range(len(compared)), compared)
    ax2.set_xlabel(f"{found}\nminus each policy, points\n(paired by seed; mean, 95% CI)")
    ax2.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def diff_table(
    title: str, diffs: dict[str, dict[str, Any]], balanced: dict[str, dict[str, Any] | None] | None = None
) -> list[str]:
    """Markdown lines: ``title`` and one row per paired difference (mean, 95% CI, seeds), and the
    paired difference of the balanced accuracies (``balanced``, per baseline; ``–`` without)."""
    balanced = balanced or {}
    lines = [
        "",
        title,
        "",
        "| baseline | mean diff | 95% CI | seeds | balanced acc: mean diff | 95% CI |",
        "|---|---:|---|---|---:|---|",
    ]
    for b, d in diffs.items():
        bd = balanced.get(b)
        bal = f"{pct(bd['mean'])} | [{pct(bd['low'])}, {pct(bd['high'])}]" if bd else "– | –"
        lines.append(
            f"| `{b}` | {pct(d['mean'])} | [{pct(d['low'])}, {pct(d['high'])}] | "
            f"{', '.join(map(str, d['seeds']))} | {bal} |"
        )
    return lines
