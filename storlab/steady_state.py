"""Whether a run reached a steady state, where its warm-up really ended, and how it drifted, from one
of its per-second series (throughput, or a latency percentile).

The rule (docs/statistics.md, "Steady state"):
- The measured part (after the declared `warmup_s`) is cut into SNIA's window of 5 consecutive
  intervals of equal length (SNIA SSS PTS: 5 rounds), and their means are held to SNIA's two criteria:
  their range within 20 % of the mean of the window, and the excursion of the least-squares line through
  them (its change over the window) within 10 % of that mean.
- A per-second series of a few seconds is noisy: a window of 1-second intervals fails SNIA's range by
  its noise alone. So the run is judged *not steady* only when SNIA's criteria fail and the series also
  holds a change its noise does not explain: the CUSUM of the measured part (the largest distance of its
  cumulative sum of deviations from zero), scaled by the noise (the points' spread about the two means
  either side of its peak, so a step does not count as noise, widened by their lag-1 autocorrelation
  to the long-run noise of an AR(1) series) and by the square root of its length, is
  beyond what a series without change reaches at ALPHA (the supremum of a Brownian bridge: Kolmogorov's
  distribution, scipy). Where the CUSUM peaks is where it changed.
- Fewer than MIN_POINTS measured points (2 a SNIA interval): not judged (None); below that the change
  test calls a series without change not steady too often.
- The warm-up found: MSER-5 (White 1997) over the whole series, the declared warm-up included: the
  truncation, in batches of 5 points (single points below 4 batches), that minimises the variance of the
  mean of what is left, looked for in the first half.
- The drift: the least-squares slope over the measured part, as the change it makes over
  the measured part in % of its mean, with a 95 % interval.
tests/test_steady.py measures the rule's error rates on simulated series.

While a run by `until = "steady"` runs, the per-second throughput its figures would keep is held to
SNIA's two criteria alone (snia_holds), and `warmup_s = "found"` cuts the warm-up found as above (warmup_to_cut)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

WINDOW = 5  # SNIA's window: 5 rounds, here 5 equal intervals of the measured part
MIN_POINTS = 2 * WINDOW  # below, the change test's p values are not what they say (tests/test_steady.py)
RANGE_LIMIT = 0.20  # of the window's mean
EXCURSION_LIMIT = 0.10
ALPHA = 0.01  # the change test's level: a change the noise does not explain
BATCH = 5  # MSER-5


@dataclass(frozen=True)
class Judgement:
    """One series of one run, judged."""

    metric: str
    points: int  # measured points judged
    steady: bool | None  # None: too few points to judge
    range: float | None  # SNIA's range of the window's interval means, a fraction of their mean
    excursion: float | None  # SNIA's excursion of the fitted line over the window, a fraction of the mean
    change_p: float | None  # the CUSUM test's p value
    changed_at_s: float | None  # where the CUSUM peaks (the first second after the change), on the run's axis
    change: float | None  # the mean after that point against the mean before, a fraction (-0.3: 30 % lower)
    drift: float | None  # the fitted line's change over the measured part, a fraction of its mean
    drift_low: float | None
    drift_high: float | None
    said: str


def mser(values: np.ndarray, batch: int = BATCH) -> int:
    """MSER-5's truncation point, in points: minimises the variance of the mean of what is left."""
    n = len(values)
    if n // batch < 4:
        batch = 1
    k = n // batch
    if k < 2:
        return 0
    means = values[:k * batch].reshape(k, batch).mean(axis=1)
    tail = means[::-1]
    count = np.arange(1, k + 1)
    mean = np.cumsum(tail) / count
    spread = np.cumsum(tail ** 2) / count - mean ** 2  # the variance of each tail, last batches first
    score = (spread / count)[::-1]  # index d: the batches from d on
    half = k // 2 + 1
    return int(np.argmin(score[:half])) * batch


def cusum(values: np.ndarray) -> tuple[float, int]:
    """The CUSUM test's p value, and the index of the first point after the change it points at."""
    n = len(values)
    sums = np.cumsum(values - values.mean())[:-1]
    if n < 3:
        return 1.0, n
    peak = int(np.argmax(np.abs(sums)))
    at = peak + 1
    before, after = values[:at], values[at:]
    residuals = np.concatenate([before - before.mean(), after - after.mean()])
    noise = math.sqrt(float((residuals ** 2).sum()) / (n - 2))
    # Seconds next to each other are alike (a checkpoint's stretch, the page cache's write-back): the
    # noise of the cumulative sum is the long-run one, the AR(1) correction of the points' spread.
    lag = float((residuals[1:] * residuals[:-1]).sum() / (residuals ** 2).sum()) if noise > 0 else 0.0
    lag = min(max(lag, 0.0), 0.9)
    noise *= math.sqrt((1 + lag) / (1 - lag))
    if noise <= 0:
        return (0.0 if abs(sums[peak]) > 0 else 1.0), at
    statistic = abs(sums[peak]) / (noise * math.sqrt(n))
    return float(_stats().kstwobign.sf(statistic)), at


def _slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The least-squares slope of y on x and its standard error (linregress's, without its per-call
    overhead, which the simulations' thousands of series would pay)."""
    dx = x - x.mean()
    sxx = float((dx ** 2).sum())
    slope = float((dx * (y - y.mean())).sum()) / sxx
    left = y - y.mean() - slope * dx
    return slope, math.sqrt(float((left ** 2).sum()) / (len(x) - 2) / sxx) if len(x) > 2 else math.nan


def snia(values: np.ndarray) -> tuple[float, float]:
    """SNIA's range and excursion of a series cut into WINDOW equal intervals, as fractions of their mean
    (a positive mean: the callers judge nothing else)."""
    blocks = np.array([b.mean() for b in np.array_split(values, WINDOW)])
    window_mean = float(blocks.mean())
    return (float(blocks.max() - blocks.min()) / window_mean,
            _slope(np.arange(WINDOW, dtype=float), blocks)[0] * (WINDOW - 1) / window_mean)


def snia_holds(values: np.ndarray) -> bool:
    """The rule a run by `until = "steady"` stops on, over the per-second throughput its figures would keep:
    SNIA's range and excursion (the slope over it) within their limits. SNIA's criteria alone, without the
    change test that spares a noisy run in `judge`: a series too noisy to hold them is no evidence of a
    steady state, and the run goes on (to its max)."""
    if len(values) < MIN_POINTS or float(values.mean()) <= 0:
        return False
    spread, excursion = snia(values)
    return spread <= RANGE_LIMIT and abs(excursion) <= EXCURSION_LIMIT


@functools.cache
def _t(points: int) -> float:
    return float(_stats().t.ppf(0.975, points - 2))


def _stats():
    # scipy.stats takes half a second to import, and every command that reads an experiment file reaches
    # this module (through the workloads' until steady) long before, or without, judging a run.
    from scipy import stats

    return stats


def judge(metric: str, times: np.ndarray, values: np.ndarray, warmup_s: float) -> Judgement:
    """One series of a run (`times` on the run's axis, from the load's start) judged by the rule above."""
    measured = times >= warmup_s
    t, x = times[measured], values[measured]
    n = len(x)
    if n < MIN_POINTS:
        return Judgement(metric, n, None, None, None, None, None, None, None, None, None,
                         f"not judged: {n} measured seconds, fewer than {MIN_POINTS} (2 for each of SNIA's {WINDOW} intervals)")
    mean = float(x.mean())
    if mean <= 0:
        return Judgement(metric, n, None, None, None, None, None, None, None, None, None,
                         "not judged: its mean is 0")
    spread, excursion = snia(x)
    p, at = cusum(x)
    change = float(x[at:].mean() / x[:at].mean() - 1) if 0 < at < n and x[:at].mean() > 0 else None
    span = float(t[-1] - t[0]) if n > 1 else 0.0
    slope, error = _slope(t, x)
    drift = slope * span / mean
    half = _t(n) * error * span / mean
    held = spread <= RANGE_LIMIT and abs(excursion) <= EXCURSION_LIMIT
    changed = p < ALPHA
    steady = held or not changed
    at_s = float(t[at]) if changed and at < n else None
    if held:
        said = f"steady: range {100 * spread:.0f} %, excursion {100 * excursion:+.0f} % (SNIA: within 20 %, 10 %)"
    elif not changed:
        said = (f"steady within its noise: range {100 * spread:.0f} %, excursion {100 * excursion:+.0f} % beyond SNIA's "
                f"20 %, 10 %, but no change the noise does not explain (CUSUM p {p:.2f})")
    else:
        moved = "" if change is None else f" by {100 * change:+.0f} %"
        said = (f"not steady: changed{moved} at {at_s:.0f} s (CUSUM p {p:.1g}); range {100 * spread:.0f} %, "
                f"excursion {100 * excursion:+.0f} % beyond SNIA's 20 %, 10 %")
    return Judgement(metric, n, steady, spread, excursion, p, at_s, change,
                     float(drift), float(drift - half) if math.isfinite(half) else None,
                     float(drift + half) if math.isfinite(half) else None, said)


def found_warmup(times: np.ndarray, values: np.ndarray) -> float | None:
    """Where the series' warm-up ended by MSER-5, on the run's axis; None for fewer than 2 points."""
    if len(values) < 2:
        return None
    return float(times[mser(values)])


def warmup_to_cut(times: np.ndarray, values: np.ndarray) -> float:
    """The warm-up `warmup_s = "found"` cuts from a run's whole per-second throughput: MSER-5's, found
    as the answer finds it (answer/steadiness.py: the last second, cut short where the load ended, left
    out), so the seconds cut are the seconds the answer says were found; 0 when too short to find one."""
    return found_warmup(times[:-1], values[:-1]) or 0.0
