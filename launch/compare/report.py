"""The results of a comparison: per-policy statistics (test accuracy and balanced accuracy), the
table, and the files written to ``--out`` (``runs.csv``, ``results.md|csv|parquet``,
``comparison.png``, ``per_class.csv|png``, ``evaluations.json``), and the evaluations attached to
stored policies. The per-class analysis is :mod:`autoaug.launch.compare.per_class`.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import functools
import hashlib
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import matplotlib
import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
from matplotlib.ticker import MaxNLocator

from autoaug.core.errors import CompareError
from autoaug.core.location import Location
from autoaug.launch.compare.candidates import Candidate
from autoaug.launch.compare.config import CompareConfig
from autoaug.launch.compare.per_class import CSV_COLUMNS as PER_CLASS_COLUMNS
from autoaug.launch.compare.per_class import PerClass, analyze, run_balanced_accuracy
from autoaug.launch.compare.per_class import plot as plot_per_class
from autoaug.launch.compare.stats import mean_ci
from autoaug.policies.store import PolicyStore

__all__ = ["PolicySummary", "Comparison", "summarize", "write_outputs", "plot", "attach_evaluations"]


def _open_store(store: Any) -> Any:
    if store is not None and not isinstance(store, (str, bytes)) and hasattr(store, "attach_evaluation"):
        return store  # already a PolicyStore (or compatible)
    try:
        return PolicyStore(store)
    except (TypeError, ValueError) as exc:
        raise CompareError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class PolicySummary:
    """One row of the results table."""

    policy: str
    kind: str
    ref: str
    store_ref: str | None
    policy_hash: str
    n: int
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    mean_train_time_s: float
    seeds: tuple[int, ...]
    test_accuracies: tuple[float, ...]
    # Balanced accuracy (mean per-class accuracy) over the runs that recorded per-class counts
    # (runs recorded before compare kept them have none: balanced_n < n).
    balanced_n: int = 0
    balanced_mean: float = math.nan
    balanced_std: float = math.nan
    balanced_ci95_low: float = math.nan
    balanced_ci95_high: float = math.nan
    balanced_seeds: tuple[int, ...] = ()
    balanced_accuracies: tuple[float, ...] = ()
    base: str = "standard"  # the base the policy trained on
    rebased_from: str | None = None  # its own base when --base moved it

    @property
    def ci95_half_width(self) -> float:
        return (self.ci95_high - self.ci95_low) / 2.0

    @property
    def balanced_ci95_half_width(self) -> float:
        return (self.balanced_ci95_high - self.balanced_ci95_low) / 2.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("seeds", "test_accuracies", "balanced_seeds", "balanced_accuracies"):
            d[key] = list(d[key])
        d["ci95_half_width"] = self.ci95_half_width
        d["balanced_ci95_half_width"] = self.balanced_ci95_half_width
        return d


def summarize(candidates: Sequence[Candidate], runs: Sequence[Mapping[str, Any]]) -> list[PolicySummary]:
    """Per-candidate statistics of the test accuracy over the runs, in candidate order."""
    out = []
    for c in candidates:
        mine = sorted((r for r in runs if r["policy_hash"] == c.policy_hash), key=lambda r: r["seed"])
        accs = [float(r["test_accuracy"]) for r in mine]
        mean, std, lo, hi = mean_ci(accs)
        times = [float(r["train_time_s"]) for r in mine]
        balanced = [(int(r["seed"]), run_balanced_accuracy(r)) for r in mine]
        balanced = [(seed, b) for seed, b in balanced if b is not None]
        b_mean, b_std, b_lo, b_hi = mean_ci([b for _, b in balanced])
        out.append(
            PolicySummary(
                policy=c.label,
                kind=c.kind,
                ref=c.ref,
                store_ref=c.store_ref,
                policy_hash=c.policy_hash,
                n=len(mine),
                mean=mean,
                std=std,
                ci95_low=lo,
                ci95_high=hi,
                mean_train_time_s=math.fsum(times) / len(times) if times else math.nan,
                seeds=tuple(int(r["seed"]) for r in mine),
                test_accuracies=tuple(accs),
                balanced_n=len(balanced),
                balanced_mean=b_mean,
                balanced_std=b_std,
                balanced_ci95_low=b_lo,
                balanced_ci95_high=b_hi,
                balanced_seeds=tuple(seed for seed, _ in balanced),
                balanced_accuracies=tuple(b for _, b in balanced),
                base=c.base,
                rebased_from=c.rebased_from,
            )
        )
    return out


def _pct(x: float, digits: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}"


def _ci(lo: float, hi: float) -> str:
    return "-" if not math.isfinite(lo) else f"[{_pct(lo)}, {_pct(hi)}]"


@dataclasses.dataclass
class Comparison:
    """The outcome of :func:`run_compare`."""

    config: CompareConfig
    candidates: list[Candidate]
    runs: list[dict[str, Any]]  # one record per run, candidate order then seed
    summaries: list[PolicySummary]
    dataset_fingerprint: str
    trained: int = 0  # runs trained by this call (the others were reused)
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    attached: list[str] = dataclasses.field(default_factory=list)
    classes: tuple[str, ...] = ()  # the dataset's class names, label order (per-class tables)
    #: The kind of machine (and precision) the compared runs trained on (:func:`autoaug.core.machine.one_kind`):
    #: runs are paired by seed only within one kind. None: no run recorded its machine.
    machine: str | None = None
    #: The runs left out for being of another kind (not in ``runs``, the table or runs.csv), and the line saying so.
    left_out: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    left_out_note: str | None = None

    @functools.cached_property
    def per_class(self) -> PerClass:
        """Balanced and per-class accuracies, and the classes worse than the best baseline
        (:func:`autoaug.launch.compare.per_class.analyze`)."""
        return analyze(self.candidates, self.summaries, self.runs, self.classes)

    def rows(self) -> list[list[str]]:
        best = max((s.mean for s in self.summaries if math.isfinite(s.mean)), default=math.nan)
        rows = []
        for s in self.summaries:
            mark = " *" if math.isfinite(s.mean) and s.mean == best else ""
            partial = " †" if 0 < s.balanced_n < s.n else ""
            rows.append(
                [
                    s.policy + mark,
                    s.kind,
                    str(s.n),
                    _pct(s.mean),
                    _pct(s.std),
                    _ci(s.ci95_low, s.ci95_high),
                    _pct(s.balanced_mean) + partial,
                    _pct(s.balanced_std),
                    _ci(s.balanced_ci95_low, s.balanced_ci95_high),
                    "-" if not math.isfinite(s.mean_train_time_s) else f"{s.mean_train_time_s:.1f}",
                ]
            )
        return rows

    HEADER = [
        "policy",
        "kind",
        "n",
        "test acc % (mean)",
        "std",
        "95% CI",
        "balanced acc % (mean)",
        "std",
        "95% CI",
        "train time s (mean)",
    ]

    def _precision_note(self) -> list[str]:
        """A line when the runs trained in more than one precision (``amp: native`` on machines of two
        kinds: bfloat16 where the CPU has native instructions, float32 elsewhere): the paired
        differences then mix the precision's effect with the policies'."""
        counts = collections.Counter(r.get("precision") for r in self.runs if r.get("precision"))
        if len(counts) < 2:
            return []
        mix = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
        unknown = sum(1 for r in self.runs if not r.get("precision"))
        return [
            f"precision: the runs trained in more than one ({mix} runs{f', {unknown} not recorded' if unknown else ''}; "
            "`amp: native` trains in bfloat16 only on CPUs with native instructions): a difference between "
            "policies whose runs differ in precision mixes the two; train them on one kind of machine (runs.csv's "
            "precision column says which run is which)."
        ]

    def _machine_notes(self) -> list[str]:
        """Which kind of machine produced the table, and the runs of another kind left out."""
        lines = [f"machine: {self.machine} (every run compared; runs.csv's machine column)"] if self.machine else []
        return lines + ([self.left_out_note] if self.left_out_note else [])

    def _partial_note(self) -> list[str]:
        if any(0 < s.balanced_n < s.n for s in self.summaries):
            return [
                "† balanced accuracy over the runs with per-class counts only (the others were recorded "
                "before compare kept them)."
            ]
        return []

    def table(self) -> str:
        """The results as a plain-text table (``*`` marks the best mean), then the per-class verdicts."""
        rows = self.rows()
        widths = [max(len(r[i]) for r in [self.HEADER, *rows]) for i in range(len(self.HEADER))]
        numeric = {2, 3, 4, 6, 7, 9}

        def fmt(row: list[str]) -> str:
            return "  ".join(
                c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
            ).rstrip()

        lines = [fmt(self.HEADER), fmt(["-" * w for w in widths])]
        lines += [fmt(r) for r in rows]
        per_class = self.per_class
        verdicts = per_class.verdict_lines()
        if verdicts:
            lines += [
                "",
                f"per class, against the best baseline {per_class.baseline} (paired t over seeds, "
                f"Benjamini-Hochberg q <= {per_class.alpha:g} over the classes; per_class.csv):",
            ]
            lines += [f"  {v}" for v in verdicts]
        notes = [f"per class: {n}" for n in [per_class.missing_note(), *per_class.notes] if n]
        if self._partial_note() or self._precision_note() or notes:
            lines += ["", *self._partial_note(), *self._precision_note(), *notes]
        if self._machine_notes():
            lines += ["", *self._machine_notes()]
        return "\n".join(lines)

    def markdown(self) -> str:
        t = self.config.train
        lines = [
            "# Policy comparison",
            "",
            f"Test accuracy of `{t.model}` trained for {t.epochs} epochs on `{t.data}` "
            f"(train_size={t.train_size}, val_size={t.val_size}, split_seed={t.split_seed}, "
            + (f"group_by=`{t.group_by}`, " if t.group_by is not None else "")
            + f"batch_size={t.batch_size}, lr={t.lr}), evaluated on `{t.test_data}`; "
            f"seeds {', '.join(map(str, self.config.seeds))}. Mean, sample standard deviation and "
            "two-sided 95% confidence interval of the mean (Student t, n-1 degrees of freedom), in %, of the "
            "test accuracy and of the balanced accuracy (the mean of the per-class accuracies); "
            "`*` marks the best mean test accuracy. Training time per run includes validation and the final "
            "test pass.",
            "",
        ]
        if self.config.base is not None:
            lines += [
                f"`--base {self.config.base}`: the policies with sub-policies trained on the base "
                f"`{self.config.base}` instead of their own (marked `[base {self.config.base}]` when that "
                "changed their base); `none`, `crop` and `standard` are bases alone and kept theirs.",
                "",
            ]
        lines += [
            "| " + " | ".join(self.HEADER) + " |",
            "|" + "|".join(["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows()]
        for note in [*self._partial_note(), *self._precision_note(), *self._machine_notes()]:
            lines += ["", note]
        lines += ["", f"Dataset fingerprint `{self.dataset_fingerprint[:16]}`; one row per run in `runs.csv`."]
        lines += self.per_class.markdown()
        return "\n".join(lines)


_RUN_COLUMNS = [
    "run_id",
    "policy",
    "kind",
    "ref",
    "store_ref",
    "policy_hash",
    "base",
    "seed",
    "test_accuracy",
    "test_loss",
    "val_accuracy",
    "train_time_s",
    "epochs",
    "model",
    "node_id",
    "hostname",
    "finished_at",
    "balanced_accuracy",
    "precision",
    "machine",
]
_RESULT_COLUMNS = [
    "policy",
    "kind",
    "ref",
    "store_ref",
    "policy_hash",
    "base",
    "rebased_from",
    "n",
    "mean",
    "std",
    "ci95_low",
    "ci95_high",
    "ci95_half_width",
    "mean_train_time_s",
    "seeds",
    "test_accuracies",
    "balanced_n",
    "balanced_mean",
    "balanced_std",
    "balanced_ci95_low",
    "balanced_ci95_high",
    "balanced_ci95_half_width",
    "balanced_seeds",
    "balanced_accuracies",
]


def _run_row(r: Mapping[str, Any]) -> dict[str, Any]:
    cfg = r.get("train_config", {})
    row = {k: r.get(k) for k in _RUN_COLUMNS}
    row["epochs"], row["model"] = cfg.get("epochs"), cfg.get("model")
    row["balanced_accuracy"] = run_balanced_accuracy(r)  # empty for a run recorded without per-class counts
    if row["base"] is None:  # a record written before "base" existed
        row["base"] = (r.get("policy_json") or {}).get("base", "standard")
    return row


def _csv_bytes(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        out = {}
        for k in columns:
            v = row.get(k)
            if isinstance(v, (list, tuple)):
                v = " ".join(str(x) for x in v)
            elif isinstance(v, float) and not math.isfinite(v):
                v = ""
            out[k] = "" if v is None else v
        writer.writerow(out)
    return buf.getvalue().encode("utf-8")


def _parquet_bytes(summaries: Sequence[PolicySummary]) -> bytes:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    table = pa.table(
        {
            "policy": pa.array([s.policy for s in summaries], pa.string()),
            "kind": pa.array([s.kind for s in summaries], pa.string()),
            "ref": pa.array([s.ref for s in summaries], pa.string()),
            "store_ref": pa.array([s.store_ref for s in summaries], pa.string()),
            "policy_hash": pa.array([s.policy_hash for s in summaries], pa.string()),
            "base": pa.array([s.base for s in summaries], pa.string()),
            "rebased_from": pa.array([s.rebased_from for s in summaries], pa.string()),
            "n": pa.array([s.n for s in summaries], pa.int32()),
            "mean": pa.array([num(s.mean) for s in summaries], pa.float64()),
            "std": pa.array([num(s.std) for s in summaries], pa.float64()),
            "ci95_low": pa.array([num(s.ci95_low) for s in summaries], pa.float64()),
            "ci95_high": pa.array([num(s.ci95_high) for s in summaries], pa.float64()),
            "ci95_half_width": pa.array([num(s.ci95_half_width) for s in summaries], pa.float64()),
            "mean_train_time_s": pa.array([num(s.mean_train_time_s) for s in summaries], pa.float64()),
            "seeds": pa.array([list(s.seeds) for s in summaries], pa.list_(pa.int64())),
            "test_accuracies": pa.array([list(s.test_accuracies) for s in summaries], pa.list_(pa.float64())),
            "balanced_n": pa.array([s.balanced_n for s in summaries], pa.int32()),
            "balanced_mean": pa.array([num(s.balanced_mean) for s in summaries], pa.float64()),
            "balanced_std": pa.array([num(s.balanced_std) for s in summaries], pa.float64()),
            "balanced_ci95_low": pa.array([num(s.balanced_ci95_low) for s in summaries], pa.float64()),
            "balanced_ci95_high": pa.array([num(s.balanced_ci95_high) for s in summaries], pa.float64()),
            "balanced_ci95_half_width": pa.array([num(s.balanced_ci95_half_width) for s in summaries], pa.float64()),
            "balanced_seeds": pa.array([list(s.balanced_seeds) for s in summaries], pa.list_(pa.int64())),
            "balanced_accuracies": pa.array([list(s.balanced_accuracies) for s in summaries], pa.list_(pa.float64())),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def plot(comparison: Comparison) -> bytes:
    """``comparison.png`` (PNG bytes): test accuracy per policy (mean, 95% CI, seeds) and, where
    the runs validated (not in a regime without validation, such as ``eval-cpu``), validation
    accuracy per epoch (mean over seeds)."""
    summaries = comparison.summaries
    curves = _validation_curves(comparison)
    if any(curves):
        fig = Figure(figsize=(13, 5))
        ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    else:  # nothing validated: no empty panel
        fig = Figure(figsize=(7, 5))
        ax1, ax2 = fig.subplots(1, 1), None
    colors = [matplotlib.colormaps["tab10"](i % 10) for i in range(len(summaries))]
    _plot_test_accuracy(ax1, summaries, colors)
    if ax2 is not None:
        _plot_validation(ax2, summaries, colors, curves)
    t = comparison.config.train
    fig.suptitle(f"{t.model}, {t.epochs} epochs, train_size={t.train_size}, seeds={len(comparison.config.seeds)}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _validation_curves(comparison: Comparison) -> list[dict[int, list[float]]]:
    """Per policy (in the order of the summaries): epoch -> validation accuracies over seeds."""
    curves: list[dict[int, list[float]]] = []
    for s in comparison.summaries:
        per_epoch: dict[int, list[float]] = {}
        for r in comparison.runs:
            if r["policy_hash"] != s.policy_hash:
                continue
            for row in r.get("history", []):
                if row.get("val_accuracy") is not None:
                    per_epoch.setdefault(int(row["epoch"]), []).append(float(row["val_accuracy"]))
        curves.append(per_epoch)
    return curves


def _plot_test_accuracy(ax: Any, summaries: Sequence[PolicySummary], colors: Sequence[Any]) -> None:
    """The left panel: each policy's test accuracy, mean and 95% CI, its seeds as small dots."""
    xs = list(range(len(summaries)))
    for x, s, c in zip(xs, summaries, colors):
        if s.n == 0:
            continue
        seeds_x = [x + 0.12 + 0.06 * ((k % 3) - 1) for k in range(len(s.test_accuracies))]
        ax.scatter(seeds_x, [100 * a for a in s.test_accuracies], color=c, s=14, alpha=0.6, zorder=2)
        err = 100 * s.ci95_half_width if math.isfinite(s.ci95_half_width) else None
        ax.errorbar(
            [x],
            [100 * s.mean],
            yerr=None if err is None else [[err], [err]],
            fmt="o",
            color=c,
            markersize=8,
            capsize=6,
            elinewidth=1.6,
            zorder=3,
        )
    ax.set_xticks(xs)
    ax.set_xticklabels([s.policy for s in summaries], rotation=30, ha="right")
    ax.set_xlim(-0.6, len(summaries) - 0.4)
    shown = [100 * a for s in summaries for a in s.test_accuracies]
    shown += [100 * v for s in summaries for v in (s.ci95_low, s.ci95_high) if math.isfinite(v)]
    if shown:
        lo, hi = min(shown), max(shown)
        pad = max(0.5, 0.08 * (hi - lo))
        ax.set_ylim(max(0.0, lo - pad), min(100.0, hi + pad))
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Test accuracy: mean and 95% CI (small dots: seeds)")
    ax.grid(axis="y", alpha=0.3)


def _plot_validation(
    ax: Any, summaries: Sequence[PolicySummary], colors: Sequence[Any], curves: Sequence[Mapping[int, list[float]]]
) -> None:
    """The right panel: each policy's validation accuracy per epoch, mean over seeds."""
    for s, c, per_epoch in zip(summaries, colors, curves):
        if per_epoch:
            epochs = sorted(per_epoch)
            ax.plot(
                epochs,
                [100 * sum(per_epoch[e]) / len(per_epoch[e]) for e in epochs],
                marker="o",
                markersize=3,
                color=c,
                label=s.policy,
            )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title("Validation accuracy per epoch (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def write_outputs(comparison: Comparison) -> dict[str, str]:
    """Write runs.csv, results.{md,csv,parquet} and comparison.png into ``config.out``, and
    per_class.csv (when runs have per-class counts) and per_class.png (when a policy is compared
    with the best baseline); returns their locations (also kept in ``comparison.files``)."""
    out = Location.parse(comparison.config.out, what="--out")
    contents = {
        "runs_csv": ("runs.csv", _csv_bytes([_run_row(r) for r in comparison.runs], _RUN_COLUMNS)),
        "results_md": ("results.md", comparison.markdown().encode("utf-8")),
        "results_csv": ("results.csv", _csv_bytes([s.to_dict() for s in comparison.summaries], _RESULT_COLUMNS)),
        "results_parquet": ("results.parquet", _parquet_bytes(comparison.summaries)),
        "plot": ("comparison.png", plot(comparison)),
    }
    per_class = comparison.per_class
    if per_class.available:
        contents["per_class_csv"] = ("per_class.csv", _csv_bytes(per_class.csv_rows(), PER_CLASS_COLUMNS))
        t = comparison.config.train
        png = plot_per_class(
            per_class, f"{t.model}, {t.epochs} epochs, train_size={t.train_size}, seeds={len(comparison.config.seeds)}"
        )
        if png is not None:
            contents["per_class_plot"] = ("per_class.png", png)
    files = {}
    for key, (rel, data) in contents.items():
        out.write_bytes(data, rel)
        files[key] = out.child(rel).uri
    comparison.files = files
    return files


def _evaluation(comparison: Comparison, summary: PolicySummary) -> dict[str, Any]:
    cfg = comparison.config
    # Fields added later (group_by, the speed options) only when set (TrainConfig.to_dict): the
    # evaluations of comparisons that do not use them keep the digest they had before the fields
    # existed (evaluations.json would otherwise attach them a second time). Threads and device
    # change no result.
    train = {
        k: v
        for k, v in cfg.train.to_dict().items()
        if k not in ("seed", "num_threads", "loader_threads", "device") and not (k == "group_by" and v is None)
    }
    ranked = sorted((s for s in comparison.summaries if math.isfinite(s.mean)), key=lambda s: -s.mean)
    ranks = {s.policy_hash: i for i, s in enumerate(ranked, 1)}
    # A stored policy trained on another base (--base) was not evaluated as stored: say on which base.
    moved = {"base": summary.base, "stored_base": summary.rebased_from} if summary.rebased_from else {}
    return {
        **moved,
        "kind": "autoaug compare",
        "metric": "test_accuracy",
        "n": summary.n,
        "mean": summary.mean,
        "std": summary.std if math.isfinite(summary.std) else None,
        "ci95": [summary.ci95_low, summary.ci95_high] if math.isfinite(summary.ci95_low) else None,
        "seeds": list(summary.seeds),
        "test_accuracy": list(summary.test_accuracies),
        "mean_train_time_s": summary.mean_train_time_s,
        "rank": ranks.get(summary.policy_hash),
        "compared_with": {
            s.policy: {"mean": s.mean, "std": s.std if math.isfinite(s.std) else None, "n": s.n}
            for s in comparison.summaries
            if s.policy_hash != summary.policy_hash
        },
        "train_config": train,
        "dataset_fingerprint": comparison.dataset_fingerprint,
        "out": Location.parse(cfg.out, what="--out").uri,
        # the kind of machine the runs trained on (only when recorded: older comparisons keep their digest)
        **({"machine": comparison.machine} if comparison.machine else {}),
        **_per_class_evaluation(comparison, summary),
    }


def _per_class_evaluation(comparison: Comparison, summary: PolicySummary) -> dict[str, Any]:
    """Balanced accuracy and the classes worse than the best baseline, for a stored policy's
    evaluation; nothing for runs recorded without per-class counts (so re-running a comparison
    made before they existed attaches no second, identical evaluation)."""
    if not summary.balanced_n:
        return {}
    out: dict[str, Any] = {
        "balanced_accuracy": {
            "n": summary.balanced_n,
            "mean": summary.balanced_mean,
            "std": summary.balanced_std if math.isfinite(summary.balanced_std) else None,
            "ci95": [summary.balanced_ci95_low, summary.balanced_ci95_high]
            if math.isfinite(summary.balanced_ci95_low)
            else None,
            "seeds": list(summary.balanced_seeds),
            "per_seed": list(summary.balanced_accuracies),
        },
    }
    per_class = comparison.per_class
    if summary.policy in per_class.compared and per_class.tested(summary.policy):
        out["worse_classes"] = {
            "baseline": per_class.baseline,
            "test": "paired t over seeds, Benjamini-Hochberg over the classes",
            "alpha": per_class.alpha,
            "classes": [
                {
                    "class": r.class_name,
                    "label": r.class_index,
                    "diff": r.diff.mean,
                    "ci95": [r.diff.ci95_low, r.diff.ci95_high] if math.isfinite(r.diff.ci95_low) else None,
                    "q": r.p_adjusted,
                }
                for r in per_class.worse(summary.policy)
            ],
        }
    return out


def attach_evaluations(comparison: Comparison, store: Any = None) -> list[str]:
    """Attach the results to every stored policy of the comparison (once per identical result).

    ``evaluations.json`` in the output folder remembers what was attached, so re-running a
    finished comparison does not attach the same evaluation twice.
    """
    stored = [s for s in comparison.summaries if s.store_ref]
    if not stored:
        return []
    store = _open_store(comparison.config.store if store is None else store)
    out = Location.parse(comparison.config.out, what="--out")
    try:
        ledger = json.loads((out.read_bytes_if_exists("evaluations.json") or b"{}").decode("utf-8"))
    except ValueError:
        ledger = {}
    attached = []
    for summary in stored:
        evaluation = _evaluation(comparison, summary)
        digest = hashlib.sha256(json.dumps(evaluation, sort_keys=True, default=str).encode()).hexdigest()
        key = f"{getattr(store, 'uri', '')}|{summary.store_ref}" + (
            f"|base {summary.base}" if summary.rebased_from else ""
        )
        if ledger.get(key) == digest:
            continue
        store.attach_evaluation(summary.store_ref, evaluation)
        ledger[key] = digest
        attached.append(summary.store_ref)
        out.write_text(json.dumps(ledger, indent=1, sort_keys=True), "evaluations.json")
    comparison.attached = attached
    return attached
