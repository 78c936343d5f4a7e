"""Statistics of a comparison (``scipy.stats``): the mean of a policy's test accuracies over
seeds with a two-sided Student t confidence interval; the paired difference of two policies over
the seeds they share (with its interval and a paired t test); Benjamini-Hochberg adjusted
p-values for many such tests at once (one per class)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from scipy import stats

__all__ = ["PairedDifference", "adjust_p_values", "mean_ci", "paired_difference"]


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """``(mean, sample std, ci_low, ci_high)``; a two-sided Student t interval of the mean.

    With one value the standard deviation and the interval are NaN; with none everything is NaN.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return (math.nan,) * 4
    mean = math.fsum(xs) / n
    if n == 1:
        return mean, math.nan, math.nan, math.nan
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """``a - b`` paired by seed: the per-seed differences, their mean, sample std, Student t
    interval of the mean and the two-sided paired t test's p-value (mean difference 0)."""

    seeds: tuple[int, ...]
    diffs: tuple[float, ...]
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    p_value: float

    @property
    def n(self) -> int:
        return len(self.diffs)


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], confidence: float = 0.95) -> PairedDifference:
    """``a[seed] - b[seed]`` over the seeds both have (the same seed gives both runs the same model
    initialisation, data order and test set, so pairing removes what they share).

    The p-value is the paired t test's (``t = mean / (std / sqrt(n))``, ``n - 1`` degrees of
    freedom): NaN with fewer than two pairs; when every pair differs by the same amount (std 0) it
    is 0 for a non-zero difference and 1 for none.
    """
    seeds = tuple(sorted(set(a) & set(b)))
    diffs = tuple(float(a[s]) - float(b[s]) for s in seeds)
    mean, std, lo, hi = mean_ci(diffs, confidence)
    n = len(diffs)
    if n < 2:
        p = math.nan
    elif std == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
    else:
        t = mean / (std / math.sqrt(n))
        p = float(2.0 * stats.t.sf(abs(t), n - 1))
    return PairedDifference(seeds=seeds, diffs=diffs, mean=mean, std=std, ci95_low=lo, ci95_high=hi, p_value=p)


def adjust_p_values(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (``scipy.stats.false_discovery_control``): naming every
    test whose adjusted p-value is at most ``alpha`` keeps the expected share of false findings
    among those named at ``alpha`` or below. NaN p-values (tests that could not be made) stay NaN
    and do not count as tests."""
    ps = [float(p) for p in p_values]
    tested = [i for i, p in enumerate(ps) if not math.isnan(p)]
    out = [math.nan] * len(ps)
    if tested:
        adjusted = stats.false_discovery_control([ps[i] for i in tested], method="bh")
        for i, q in zip(tested, adjusted):
            out[i] = float(q)
    return out
