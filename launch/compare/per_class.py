"""Per-class results of a comparison: balanced accuracy, per-class accuracy, and the classes on
which a policy is worse than the best baseline beyond the noise.

Every run records, per class of the test data (label order), the test images predicted right and
the test images (``test_class_correct`` / ``test_class_total``, counted by the trainer's test
pass). From them:

* per run, the **balanced accuracy**: the mean per-class accuracy over the classes with test
  images (:func:`autoaug.core.metrics.balanced_accuracy`); on an imbalanced test set it weighs a
  rare class as much as a frequent one, where the overall accuracy barely sees it;
* per policy and class, the accuracy's mean, sample std and 95% Student t interval over the seeds
  (``per_class.csv``, the markdown table);
* **the best baseline**: of the candidates of kind ``baseline`` (``--baselines``), the one with the
  highest mean test accuracy (the first in order on a tie). Each ``--policy`` candidate is compared
  with it (with no ``--policy``, every other baseline is);
* per compared policy and class, the accuracy difference to the best baseline paired by seed
  (:func:`autoaug.launch.compare.stats.paired_difference`: the same seed gives both runs the same
  initialisation and data order, and every run sees the same test images), its 95% interval and
  a paired t test over the seeds. The p-values of a policy's classes are adjusted together with
  Benjamini-Hochberg (:func:`autoaug.launch.compare.stats.adjust_p_values`); a class is **worse
  (better) beyond the noise** when its adjusted p-value is at most :data:`ALPHA` and the mean
  difference is negative (positive).

Why this test: every run is scored on the same test images, so what varies between runs is the
training (seed), and a seed is the unit of replication -- as for the overall accuracy's interval.
Pooling the counts over seeds into one binomial test would count each test image once per seed as
if independent and ignore seed-to-seed variation, so one unlucky seed could look significant.
With few seeds the paired t test has few degrees of freedom and names only differences that are
large and consistent across seeds (:func:`detectable_ratio`). Why Benjamini-Hochberg: 43 classes
tested at 5% each would name about two unaffected classes per policy by chance; Holm (or
Bonferroni) would keep the chance of *any* false name under 5% but, with 3-5 seeds, would rarely
name anything; controlling the false discovery rate keeps the named list mostly right while still
naming a group of destroyed classes (e.g. the mirrored signs a flip confuses).
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
from matplotlib.lines import Line2D
from scipy import stats

from autoaug.core.metrics import balanced_accuracy
from autoaug.launch.compare.candidates import Candidate
from autoaug.launch.compare.stats import PairedDifference, adjust_p_values, mean_ci, paired_difference

__all__ = [
    "ALPHA",
    "ClassResult",
    "PerClass",
    "analyze",
    "best_baseline",
    "class_counts",
    "detectable_ratio",
    "plot",
    "run_balanced_accuracy",
]

#: False discovery rate at which classes are named worse (better) than the best baseline.
ALPHA = 0.05
#: At most this many classes per policy in ``per_class.png`` (the lowest differences).
MAX_PLOTTED = 60
#: How a user gets per-class counts for runs recorded before compare kept them.
RERUN_HINT = "delete those run files and run the same command again (only those runs are trained again)"

CSV_COLUMNS = [
    "class_index",
    "class",
    "test_images",
    "policy",
    "kind",
    "n",
    "mean",
    "std",
    "ci95_low",
    "ci95_high",
    "seeds",
    "accuracies",
    "baseline",
    "diff_n",
    "diff_mean",
    "diff_ci95_low",
    "diff_ci95_high",
    "p_value",
    "p_adjusted",
    "verdict",
]


def class_counts(record: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(correct, total)`` per class of a run record, or None for a record without them (written
    before per-class counts existed, or by another tool)."""
    correct, total = record.get("test_class_correct"), record.get("test_class_total")
    if not isinstance(correct, (list, tuple)) or not isinstance(total, (list, tuple)) or len(correct) != len(total):
        return None
    try:
        counts = tuple(int(c) for c in correct), tuple(int(t) for t in total)
    except (TypeError, ValueError):  # not counts: treated like a record without them
        return None
    if any(not 0 <= c <= t for c, t in zip(*counts)):
        return None
    return counts


def run_balanced_accuracy(record: Mapping[str, Any]) -> float | None:
    """The balanced accuracy of one run record; None when it has no per-class counts."""
    counts = class_counts(record)
    if counts is None:
        return None
    value = balanced_accuracy(*counts)
    return value if math.isfinite(value) else None


def best_baseline(summaries: Sequence[Any]) -> str | None:
    """Label of the baseline with the highest mean test accuracy (first on a tie); None without one."""
    best = None
    for s in summaries:
        if s.kind == "baseline" and math.isfinite(s.mean) and (best is None or s.mean > best.mean):
            best = s
    return best.policy if best is not None else None


def detectable_ratio(seeds: int, classes: int, alpha: float = ALPHA) -> float:
    """How many times the standard deviation of its per-seed differences a class's mean difference
    must be for the paired t test to name it when it is the only class named: Benjamini-Hochberg's
    strictest threshold is ``alpha / classes``, so ``t(1 - alpha / (2 classes), seeds - 1) / sqrt(seeds)``."""
    if seeds < 2 or classes < 1:
        return math.inf
    return float(stats.t.ppf(1.0 - alpha / (2.0 * classes), seeds - 1)) / math.sqrt(seeds)


@dataclasses.dataclass(frozen=True)
class ClassResult:
    """One policy on one class: its accuracy over the seeds and, when it is compared, its paired
    difference to the best baseline."""

    policy: str
    kind: str
    class_index: int
    class_name: str
    test_images: int
    seeds: tuple[int, ...]
    accuracies: tuple[float, ...]
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    baseline: str | None = None
    diff: PairedDifference | None = None
    p_adjusted: float = math.nan
    alpha: float = ALPHA

    @property
    def verdict(self) -> str:
        """``"worse"`` / ``"better"`` than the baseline beyond the noise, else ``""``."""
        if self.diff is None or not self.p_adjusted <= self.alpha:
            return ""
        return "worse" if self.diff.mean < 0 else "better" if self.diff.mean > 0 else ""

    @property
    def suspect(self) -> bool:
        """Not named, but the class's own 95% CI lies below 0: worse if this class alone had been
        looked at, not after correcting for all the classes (with few seeds, more seeds can tell)."""
        d = self.diff
        return not self.verdict and d is not None and math.isfinite(d.ci95_high) and d.ci95_high < 0

    def to_dict(self) -> dict[str, Any]:
        d = self.diff
        return {
            "class_index": self.class_index,
            "class": self.class_name,
            "test_images": self.test_images,
            "policy": self.policy,
            "kind": self.kind,
            "n": len(self.accuracies),
            "mean": self.mean,
            "std": self.std,
            "ci95_low": self.ci95_low,
            "ci95_high": self.ci95_high,
            "seeds": list(self.seeds),
            "accuracies": list(self.accuracies),
            "baseline": self.baseline if d is not None else None,
            "diff_n": d.n if d is not None else None,
            "diff_mean": d.mean if d is not None else None,
            "diff_ci95_low": d.ci95_low if d is not None else None,
            "diff_ci95_high": d.ci95_high if d is not None else None,
            "p_value": d.p_value if d is not None else None,
            "p_adjusted": self.p_adjusted if d is not None else None,
            "verdict": self.verdict or ("suspect" if self.suspect else ""),
        }

    def describe_diff(self) -> str:
        """``-12.30 points [-20.10, -4.50], q=0.012``: the difference to the baseline."""
        d = self.diff
        if d is None:
            return "-"
        ci = f" [{_pts(d.ci95_low)}, {_pts(d.ci95_high)}]" if math.isfinite(d.ci95_low) else ""
        q = f", q={self.p_adjusted:.2g}" if math.isfinite(self.p_adjusted) else ""
        return f"{_pts(d.mean)} points{ci}{q}"

    def describe(self) -> str:
        """``keep_left -12.30 points [-20.10, -4.50], q=0.012``."""
        return f"{self.class_name} {self.describe_diff()}"


def _pts(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.2f}"


@dataclasses.dataclass
class PerClass:
    """The per-class results of a comparison (see the module docs); :func:`analyze` builds it."""

    classes: tuple[str, ...]
    test_images: tuple[int, ...] = ()  # per class, from the runs' counts
    results: list[ClassResult] = dataclasses.field(default_factory=list)  # class order, then policy order
    policies: tuple[str, ...] = ()  # with per-class counts, candidate order
    baseline: str | None = None  # the best baseline
    compared: tuple[str, ...] = ()  # policies compared with it
    balanced_diffs: dict[str, PairedDifference] = dataclasses.field(default_factory=dict)
    missing: tuple[str, ...] = ()  # run ids without per-class counts
    notes: list[str] = dataclasses.field(default_factory=list)
    alpha: float = ALPHA

    @property
    def available(self) -> bool:
        return bool(self.results)

    def of(self, policy: str) -> list[ClassResult]:
        return [r for r in self.results if r.policy == policy]

    def worse(self, policy: str) -> list[ClassResult]:
        """The classes on which ``policy`` is worse than the best baseline beyond the noise, worst first."""
        return sorted((r for r in self.of(policy) if r.verdict == "worse"), key=lambda r: r.diff.mean)

    def better(self, policy: str) -> list[ClassResult]:
        return sorted((r for r in self.of(policy) if r.verdict == "better"), key=lambda r: -r.diff.mean)

    def suspects(self, policy: str) -> list[ClassResult]:
        """Classes not named whose own 95% CI is below 0 (:attr:`ClassResult.suspect`), lowest first."""
        return sorted((r for r in self.of(policy) if r.suspect), key=lambda r: r.diff.mean)

    def tested(self, policy: str) -> list[ClassResult]:
        return [r for r in self.of(policy) if r.diff is not None and not math.isnan(r.diff.p_value)]

    def missing_note(self) -> str | None:
        if not self.missing:
            return None
        shown = ", ".join(f"runs/{m}.json" for m in self.missing[:6])
        more = f" and {len(self.missing) - 6} more" if len(self.missing) > 6 else ""
        return (
            f"{len(self.missing)} run(s) were recorded before compare kept per-class counts ({shown}{more}): "
            f"their balanced and per-class accuracies are unavailable. To get them, {RERUN_HINT}."
        )

    def verdict_lines(self) -> list[str]:
        """One line per compared policy: the classes worse than the baseline beyond the noise, or none."""
        lines = []
        for policy in self.compared:
            b = self.balanced_diffs.get(policy)
            bal = ""
            if b is not None and b.n:
                ci = f" [{_pts(b.ci95_low)}, {_pts(b.ci95_high)}]" if math.isfinite(b.ci95_low) else ""
                bal = f"; balanced accuracy {_pts(b.mean)} points{ci}"
            if not self.tested(policy):
                lines.append(
                    f"{policy}: not tested (needs 2 seeds of it and of {self.baseline} with per-class counts){bal}"
                )
                continue
            worse, suspects = self.worse(policy), self.suspects(policy)
            if worse:
                line = (
                    f"{policy} is worse than {self.baseline} on {len(worse)} class(es): "
                    + "; ".join(r.describe() for r in worse)
                    + bal
                )
            else:
                line = f"{policy}: no class worse than {self.baseline} beyond the noise{bal}"
            if suspects:
                line += (
                    f"; {len(suspects)} {'more ' if worse else ''}class(es) with their own 95% CI below 0, "
                    f"not beyond the noise over {len(self.tested(policy))} classes (more seeds can tell): "
                    + ", ".join(f"{r.class_name} {_pts(r.diff.mean)}" for r in suspects[:8])
                    + (", ..." if len(suspects) > 8 else "")
                )
            lines.append(line)
        return lines

    def method(self) -> str:
        seeds = max((r.diff.n for r in self.results if r.diff is not None), default=0)
        tested = max((len(self.tested(p)) for p in self.compared), default=0)
        text = (
            f"Per class, the accuracy difference to `{self.baseline}` is paired by seed (same seed: same "
            "initialisation and data order; every run sees the same test images) and tested with a paired t "
            f"test over the seeds; the p-values of each policy's {tested} classes are adjusted together "
            f"(Benjamini-Hochberg): a class is named when its adjusted p-value q is at most {self.alpha:g}, "
            f"so on average at most {100 * self.alpha:g}% of the named classes are false alarms. The 95% CIs "
            "are per class, not adjusted."
        )
        if seeds >= 2 and tested:
            ratio = detectable_ratio(seeds, tested, self.alpha)
            more = [f"{n} seeds: {detectable_ratio(n, tested, self.alpha):.1f}" for n in (5, 10) if n > seeds]
            text += (
                f" With {seeds} seeds a class is named on its own only if its mean difference is at least "
                f"{ratio:.1f} times the standard deviation of its per-seed differences"
                + (f" (with {', '.join(more)})" if more else "")
                + "; several classes hurt together are named "
                "sooner. Classes whose own 95% CI is below 0 but are not named are listed apart: more seeds can tell."
            )
        return text

    def markdown(self) -> list[str]:
        """The ``## Per class`` section of ``results.md``."""
        lines = ["", "## Per class", ""]
        k = sum(1 for t in self.test_images if t > 0)
        lines.append(
            "Per-class accuracy: the share of a class's test images predicted right. Balanced accuracy (table "
            f"above): its mean over the {k or len(self.classes)} classes with test images, so a rare class counts "
            "as much as a frequent one. One row per policy and class in `per_class.csv`; `per_class.png` plots "
            "the differences."
        )
        note = self.missing_note()
        for text in ([note] if note else []) + self.notes:
            lines += ["", f"> {text}"]
        if not self.available:
            return lines + [""]
        if self.baseline and self.compared:
            lines += self._worse_section()
        return lines + self._accuracy_section() + [""]

    def _worse_section(self) -> list[str]:
        """``### Classes worse than the best baseline``: per compared policy, its balanced accuracy
        minus the baseline's and the classes worse, suspect and better."""
        lines = ["", "### Classes worse than the best baseline", ""]
        what = (
            "each `--policy`"
            if any(r.kind == "policy" for r in self.results if r.policy in self.compared)
            else "each other baseline"
        )
        lines.append(
            f"The best baseline is `{self.baseline}` (the highest mean test accuracy of the baselines); "
            f"{what} is compared with it. " + self.method()
        )
        lines += [
            "",
            f"| policy | balanced acc minus `{self.baseline}`, points [95% CI] | "
            "worse beyond the noise: points [95% CI], q | own 95% CI below 0, not beyond the noise | "
            "better beyond the noise |",
            "|---|---|---|---|---|",
        ]
        for policy in self.compared:
            b = self.balanced_diffs.get(policy)
            bal = (
                "-"
                if b is None or not b.n
                else _pts(b.mean) + (f" [{_pts(b.ci95_low)}, {_pts(b.ci95_high)}]" if math.isfinite(b.ci95_low) else "")
            )
            suspects = self.suspects(policy)
            suspect_txt = ", ".join(f"{r.class_name} {_pts(r.diff.mean)}" for r in suspects) or "none"
            if not self.tested(policy):
                worse_txt, better_txt, suspect_txt = "not tested (fewer than 2 paired seeds)", "-", "-"
            else:
                worse = self.worse(policy)
                worse_txt = (
                    "; ".join(f"**{r.class_name}** {r.describe_diff()}" for r in worse)
                    if worse
                    else "none beyond the noise"
                )
                better = self.better(policy)
                better_txt = ", ".join(r.class_name for r in better) if better else "none"
            lines.append(f"| `{policy}` | {bal} | {worse_txt} | {suspect_txt} | {better_txt} |")
        return lines

    def _accuracy_section(self) -> list[str]:
        """``### Per-class accuracy, mean over seeds (%)``: a row per class, a column per policy,
        marked where it differs from the best baseline."""
        lines = ["", "### Per-class accuracy, mean over seeds (%)", ""]
        if self.baseline and self.compared:
            lines += [
                f"▼ / ▲: worse / better than `{self.baseline}` beyond the noise; ▽: own 95% CI below 0, "
                "not beyond the noise.",
                "",
            ]
        lines.append("| label | class | test images | " + " | ".join(f"`{p}`" for p in self.policies) + " |")
        lines.append("|---:|---|---:|" + "---:|" * len(self.policies))
        by = {(r.class_index, r.policy): r for r in self.results}
        for i, name in enumerate(self.classes):
            cells = []
            for p in self.policies:
                r = by.get((i, p))
                mark = (
                    {"worse": " ▼", "better": " ▲"}.get(r.verdict, "") or (" ▽" if r.suspect else "")
                    if r is not None
                    else ""
                )
                cells.append((_pct(r.mean) if r is not None else "-") + mark)
            lines.append(
                f"| {i} | {name} | {self.test_images[i] if i < len(self.test_images) else '-'} | "
                + " | ".join(cells)
                + " |"
            )
        return lines

    def csv_rows(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.results]

    def to_dict(self) -> dict[str, Any]:
        """The ``per_class`` part of compare's ``--json`` document."""
        return {
            "classes": list(self.classes),
            "test_images": list(self.test_images),
            "baseline": self.baseline,
            "compared": list(self.compared),
            "alpha": self.alpha,
            "test": "paired t over seeds, Benjamini-Hochberg over each policy's classes",
            "balanced_vs_baseline": {p: dataclasses.asdict(d) for p, d in self.balanced_diffs.items()},
            "worse": {p: [r.to_dict() for r in self.worse(p)] for p in self.compared},
            "better": {p: [r.to_dict() for r in self.better(p)] for p in self.compared},
            "suspect": {p: [r.to_dict() for r in self.suspects(p)] for p in self.compared},
            "missing_runs": list(self.missing),
            "notes": ([self.missing_note()] if self.missing else []) + list(self.notes),
            "rows": self.csv_rows(),
        }


def analyze(
    candidates: Sequence[Candidate],
    summaries: Sequence[Any],
    runs: Sequence[Mapping[str, Any]],
    classes: Sequence[str] = (),
    alpha: float = ALPHA,
) -> PerClass:
    """The per-class results of the runs (see the module docs). ``classes``: the dataset's class
    names (label order); without them the classes are named by their labels."""
    counted: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    missing = []
    for r in runs:
        counts = class_counts(r)
        if counts is None:
            missing.append(str(r.get("run_id")))
        else:
            counted.setdefault(r["policy_hash"], {})[int(r["seed"])] = counts
    sizes = {len(c[1]) for per_seed in counted.values() for c in per_seed.values()}
    names = tuple(classes) or tuple(str(i) for i in range(max(sizes, default=0)))
    out = PerClass(classes=names, missing=tuple(missing), alpha=alpha)
    total = _shared_test_set(out, counted, sizes, bool(runs))
    if total is None:
        return out
    out.test_images = total
    accs: dict[str, list[dict[int, float]]] = {}  # per policy, per class: {seed: accuracy}
    for c in candidates:
        per_seed = counted.get(c.policy_hash)
        if per_seed:
            accs[c.label] = [
                {s: correct[k] / total[k] for s, (correct, _) in sorted(per_seed.items())} if total[k] > 0 else {}
                for k in range(len(names))
            ]
    out.policies = tuple(accs)
    out.baseline, out.compared = _baseline_and_compared(out, candidates, summaries, accs)
    diffs, adjusted = _differences(out, candidates, counted, accs, total)
    _add_results(out, candidates, accs, total, diffs, adjusted)
    return out


def _shared_test_set(
    out: PerClass, counted: Mapping[str, Any], sizes: set[int], any_runs: bool
) -> tuple[int, ...] | None:
    """The test images per class every run with per-class counts was tested on; None, with a note
    in ``out``, when no run has counts, their classes are not the data's, or their test sets differ."""
    if not counted:
        if any_runs:
            out.notes.append("No run has per-class counts: balanced and per-class accuracies are unavailable.")
        return None
    if sizes != {len(out.classes)}:
        out.notes.append(
            f"The runs' per-class counts have {sorted(sizes)} classes but the data have {len(out.classes)}: "
            "per-class results are not shown; re-run in a new --out."
        )
        return None
    totals = {c[1] for per_seed in counted.values() for c in per_seed.values()}
    if len(totals) > 1:
        out.notes.append(
            "The runs were tested on different test sets (their per-class image counts differ): "
            "per-class results are not shown; re-run in a new --out."
        )
        return None
    (total,) = totals
    return total


def _baseline_and_compared(
    out: PerClass, candidates: Sequence[Candidate], summaries: Sequence[Any], accs: Mapping[str, Any]
) -> tuple[str | None, tuple[str, ...]]:
    """``(the best baseline, the policies compared with it)``: the ``--policy`` ones, else the other
    baselines; no baseline (a note in ``out``) when there is none or it has no per-class counts."""
    baseline = best_baseline(summaries)
    if baseline is None:
        out.notes.append("No baseline to compare with (--baselines ''): the classes are not tested.")
        return None, ()
    if baseline not in accs:
        out.notes.append(
            f"The best baseline `{baseline}` has no run with per-class counts: the classes are not tested."
        )
        return None, ()
    policies = [c.label for c in candidates if c.kind == "policy"]
    others = policies or [c.label for c in candidates if c.kind == "baseline" and c.label != baseline]
    return baseline, tuple(p for p in others if p in accs)


def _differences(
    out: PerClass,
    candidates: Sequence[Candidate],
    counted: Mapping[str, Any],
    accs: Mapping[str, Any],
    total: tuple[int, ...],
) -> tuple[dict[str, list[PairedDifference | None]], dict[str, list[float]]]:
    """Per compared policy, each class's accuracy difference to the baseline paired by seed and its
    adjusted p-value (Benjamini-Hochberg over the policy's classes); its balanced-accuracy
    difference goes to ``out.balanced_diffs``."""
    by_label = {c.label: c for c in candidates}
    baseline = out.baseline
    diffs: dict[str, list[PairedDifference | None]] = {}
    adjusted: dict[str, list[float]] = {}
    for p in out.compared:
        diffs[p] = [
            paired_difference(accs[p][k], accs[baseline][k]) if total[k] > 0 else None for k in range(len(total))
        ]
        adjusted[p] = adjust_p_values([d.p_value if d is not None else math.nan for d in diffs[p]])
        balanced = {
            label: {
                s: balanced_accuracy(*counted[by_label[label].policy_hash][s])
                for s in counted[by_label[label].policy_hash]
            }
            for label in (p, baseline)
        }
        out.balanced_diffs[p] = paired_difference(balanced[p], balanced[baseline])
    return diffs, adjusted


def _add_results(
    out: PerClass,
    candidates: Sequence[Candidate],
    accs: Mapping[str, Any],
    total: tuple[int, ...],
    diffs: Mapping[str, Any],
    adjusted: Mapping[str, Any],
) -> None:
    """One :class:`ClassResult` per class and policy (class by class), appended to ``out.results``."""
    kinds = {c.label: c.kind for c in candidates}
    for k, name in enumerate(out.classes):
        for p in out.policies:
            per_seed = accs[p][k]
            mean, std, lo, hi = mean_ci(list(per_seed.values()))
            out.results.append(
                ClassResult(
                    policy=p,
                    kind=kinds[p],
                    class_index=k,
                    class_name=name,
                    test_images=total[k],
                    seeds=tuple(per_seed),
                    accuracies=tuple(per_seed.values()),
                    mean=mean,
                    std=std,
                    ci95_low=lo,
                    ci95_high=hi,
                    baseline=out.baseline if p in diffs else None,
                    diff=diffs[p][k] if p in diffs else None,
                    p_adjusted=adjusted[p][k] if p in adjusted else math.nan,
                    alpha=out.alpha,
                )
            )


def plot(per_class: PerClass, title: str = "") -> bytes | None:
    """``per_class.png`` (PNG bytes): per compared policy, its per-class accuracy difference to the
    best baseline (mean over seeds, 95% CI), classes sorted from the worst; classes beyond the noise
    in red (worse) or green (better). None when nothing is compared."""
    panels = [(p, [r for r in per_class.of(p) if r.diff is not None and r.diff.n]) for p in per_class.compared]
    panels = [(p, rs) for p, rs in panels if rs]
    if not panels:
        return None
    rows = max(min(len(rs), MAX_PLOTTED) for _, rs in panels)
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    legend_in, title_in = 0.6, 0.4  # room for the legend below and the title above, in inches
    height = nrows * (0.24 * rows + 1.7) + legend_in + title_in
    fig = Figure(figsize=(7.0 * ncols, height))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    colors = {"worse": "tab:red", "better": "tab:green", "suspect": "tab:orange", "": "0.45"}
    # One x range for every panel (differences in points; intervals beyond +-100 are cut).
    shown_all = [r for _, rs in panels for r in sorted(rs, key=lambda r: r.diff.mean)[:MAX_PLOTTED]]
    lows = [100 * (r.diff.ci95_low if math.isfinite(r.diff.ci95_low) else r.diff.mean) for r in shown_all]
    highs = [100 * (r.diff.ci95_high if math.isfinite(r.diff.ci95_high) else r.diff.mean) for r in shown_all]
    xlim = (max(-100.0, min(lows + [0.0]) - 2), min(100.0, max(highs + [0.0]) + 2))
    for ax, (policy, rs) in zip(axes.flat, panels):
        rs = sorted(rs, key=lambda r: r.diff.mean)
        shown = rs[:MAX_PLOTTED]
        for y, r in enumerate(shown):
            d, color = r.diff, colors[r.verdict or ("suspect" if r.suspect else "")]
            if r.verdict:
                ax.axhspan(y - 0.5, y + 0.5, color=color, alpha=0.08, lw=0)
            xerr = None
            if math.isfinite(d.ci95_low):
                xerr = [[100 * (d.mean - d.ci95_low)], [100 * (d.ci95_high - d.mean)]]
            ax.errorbar([100 * d.mean], [y], xerr=xerr, fmt="o", color=color, ms=4, capsize=2, elinewidth=1.1)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(range(len(shown)), [f"{r.class_name} ({r.test_images})" for r in shown], fontsize=8)
        for tick, r in zip(ax.get_yticklabels(), shown):
            tick.set_color(colors[r.verdict or ("suspect" if r.suspect else "")] if r.verdict or r.suspect else "black")
            if r.verdict:
                tick.set_fontweight("bold")
        ax.set_ylim(len(shown) - 0.5, -0.5)  # the worst class at the top
        ax.set_xlim(*xlim)
        ax.grid(axis="x", alpha=0.3)
        worse, better, suspects = per_class.worse(policy), per_class.better(policy), per_class.suspects(policy)
        head = f"{policy} minus {per_class.baseline}\n{len(worse)} worse, {len(better)} better beyond the noise"
        if suspects:
            head += f"; {len(suspects)} more with own CI below 0"
        if len(rs) > len(shown):
            head += f"\n(the {len(shown)} lowest of {len(rs)} classes)"
        ax.set_title(head, fontsize=10)
        ax.set_xlabel(
            "per-class accuracy difference, points\n(mean over seeds, 95% CI; class (test images))", fontsize=9
        )
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [
        Line2D([], [], marker="o", ls="", color=colors[v], label=label)
        for v, label in (
            ("worse", f"worse beyond the noise (BH q <= {per_class.alpha:g})"),
            ("better", "better beyond the noise"),
            ("suspect", "own 95% CI below 0, not beyond the noise"),
            ("", "within the noise"),
        )
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, legend_in / height, 1, 1 - (title_in if title else 0.1) / height))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()
