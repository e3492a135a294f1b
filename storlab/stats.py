"""Statistics a DBA can trust: mean with a 95 % confidence interval, spread, outliers, and comparisons
that say "not significant" when the noise is larger than the difference."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    stdev: float
    ci_low: float
    ci_high: float
    outliers: tuple[int, ...]  # indexes of values outside 1.5 IQR of the quartiles

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    @property
    def cv(self) -> float:
        """Coefficient of variation: the spread relative to the mean."""
        return self.stdev / self.mean if self.mean else math.nan


def summarize(values: list[float]) -> Summary:
    """Student's t interval: right for the 3-5 repetitions storage experiments can afford."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        raise ValueError("no values to summarize")
    mean = float(data.mean())
    if n == 1:
        return Summary(1, mean, mean, 0.0, math.nan, math.nan, ())
    stdev = float(data.std(ddof=1))
    half = float(sps.t.ppf(1 - ALPHA / 2, n - 1) * stdev / math.sqrt(n))
    q1, q3 = np.percentile(data, [25, 75])
    fence = 1.5 * (q3 - q1)
    outliers = tuple(int(i) for i in np.flatnonzero((data < q1 - fence) | (data > q3 + fence)))
    return Summary(n, mean, float(np.median(data)), stdev, mean - half, mean + half, outliers)


@dataclass(frozen=True)
class Comparison:
    change_percent: float  # (candidate - baseline) / baseline
    p_value: float
    significant: bool

    def describe(self, lower_is_better: bool = True) -> str:
        if math.isnan(self.p_value):
            return "not enough runs to tell"
        if not self.significant:
            return "not significant"
        better = (self.change_percent < 0) == lower_is_better
        return "better" if better else "worse"


def compare(baseline: list[float], candidate: list[float]) -> Comparison:
    """Welch's t-test: it does not assume the two cells are equally noisy."""
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    change = 100.0 * (cand.mean() - base.mean()) / base.mean()
    if len(base) < 2 or len(cand) < 2:
        return Comparison(float(change), math.nan, False)
    if base.std(ddof=1) == 0 and cand.std(ddof=1) == 0:
        equal = base.mean() == cand.mean()
        return Comparison(float(change), 1.0 if equal else 0.0, not equal)
    p = float(sps.ttest_ind(base, cand, equal_var=False).pvalue)
    return Comparison(float(change), p, p < ALPHA)
