"""Statistics of a comparison: the mean of a policy's test accuracies over seeds, with a
two-sided Student t confidence interval (``scipy.stats.t``)."""
from __future__ import annotations

import math
from typing import Sequence

__all__ = ["mean_ci"]


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """``(mean, sample std, ci_low, ci_high)``; a two-sided Student t interval of the mean.

    With one value the standard deviation and the interval are NaN; with none everything is NaN.
    """
    from scipy import stats

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
