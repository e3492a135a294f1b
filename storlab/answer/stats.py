"""Statistics a DBA can trust: mean with a 95 % confidence interval, spread, outliers, comparisons that say
"not significant" when the noise is larger than the difference, corrected for the number of comparisons,
and how many runs a difference would need at the noise measured. Cells are compared paired within rounds
(log ratios, the rounds as blocks: what a round's runs share cancels out), as the factor table reads them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as sps

from storlab.rounds import ALPHA

CONFIDENCE = 1 - ALPHA
NOISY_CV = 0.05  # above this, a cell's runs spread too much to tell small differences apart
POWER = 0.80  # the usual target of a power calculation (Cohen 1988)

NOT_SIGNIFICANT = "not significant"
WORSE = "worse"
BETTER = "better"
TOO_FEW_RUNS = "not enough runs to tell"
NO_VERDICT = "no verdict"  # a figure of 0 or below: no ratio, no log, so no paired test


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


def _scaled(data: np.ndarray) -> tuple[np.ndarray, float]:
    """The figures over the largest of their magnitudes, and that magnitude: sums of figures near the
    largest float stay finite (the scale is put back in Python, whose floats overflow to inf quietly)."""
    scale = float(np.max(np.abs(data))) if len(data) else 0.0
    return (data / scale, scale) if scale > 0 else (data, 1.0)


def _fences(data: np.ndarray) -> tuple[float, float]:
    """Tukey's fences: 1.5 IQR beyond the quartiles, the usual line between noise and an outlier."""
    unit, scale = _scaled(data)
    q1, q3 = (float(q) for q in np.percentile(unit, [25, 75]))
    reach = 1.5 * (q3 - q1)
    return (q1 - reach) * scale, (q3 + reach) * scale


def summarize(values: Sequence[float]) -> Summary:
    """Student's t interval: right for the 3-5 repetitions storage experiments can afford."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        raise ValueError("no values to summarize")
    unit, scale = _scaled(data)
    mean = float(unit.mean()) * scale
    if n == 1:
        return Summary(1, mean, mean, 0.0, math.nan, math.nan, ())
    stdev = float(unit.std(ddof=1)) * scale
    half = float(sps.t.ppf(1 - ALPHA / 2, n - 1) * stdev / math.sqrt(n))
    low, high = _fences(data)
    outliers = tuple(int(i) for i in np.flatnonzero((data < low) | (data > high)))
    return Summary(n, mean, float(np.median(unit)) * scale, stdev, mean - half, mean + half, outliers)


@dataclass(frozen=True)
class Spread:
    """Positive figures (the runs' times, a throughput over the rounds): their geometric mean and its 95 %
    t interval on the logs, which stays above 0 (nan with one value)."""

    n: int
    mean: float
    low: float
    high: float


def spread(values: list[float]) -> Spread | None:
    logs = np.log([v for v in values if v > 0])
    if not len(logs):
        return None
    mean = float(logs.mean())
    if len(logs) < 2:
        return Spread(1, math.exp(mean), math.nan, math.nan)
    half = float(sps.t.ppf(1 - ALPHA / 2, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs)))
    return Spread(len(logs), math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def describe_outliers(values: Sequence[float], repetitions: Sequence[int] | None = None, unit: str = "s") -> str | None:
    """Name the runs `summarize` calls outliers, so they are shown and never dropped silently: a slow run is
    often the one that tells about the storage (a checkpoint, a device flush), not a mistake.
    `repetitions` are the runs' numbers in the same order as `values` (1, 2, ... when omitted)."""
    found = summarize(values).outliers
    if not found:
        return None
    numbers = list(repetitions) if repetitions is not None else list(range(1, len(values) + 1))
    low, high = _fences(np.asarray(values, dtype=float))
    runs = ", ".join(f"repetition {numbers[i]} ({values[i]:.4g} {unit})" for i in found)
    noun = "outlier" if len(found) == 1 else "outliers"
    return f"{noun} kept in the figures: {runs}, outside {low:.4g}-{high:.4g} {unit} (1.5 IQR beyond the quartiles)"


# -- verdicts --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    change_percent: float  # (candidate - baseline) / baseline
    p_value: float
    significant: bool


def _direction(change_percent: float, lower_is_better: bool) -> str:
    return BETTER if (change_percent < 0) == lower_is_better else WORSE


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): the chance of calling at least one equal pair different
    stays at alpha whatever the dependence between the tests, and it never rejects less than Bonferroni.
    The same figures as statsmodels' multipletests(method="holm") (a test holds them together), written out
    because that call costs 20 ms here and the simulations that prove the error rates make it 10^5 times."""
    m = len(p_values)
    adjusted = [1.0] * m
    running = 0.0
    for step, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class CellVerdict:
    change_percent: float  # this cell's mean against the reference cell's mean
    p_value: float  # the t-test of this comparison alone, paired by round; nan when too few runs
    adjusted_p: float  # after the correction for the number of comparisons; the verdict reads this one
    verdict: str  # "worse", "better", "not significant" or "not enough runs to tell"

    @property
    def significant(self) -> bool:
        return self.verdict in (WORSE, BETTER)


@dataclass(frozen=True)
class Verdicts:
    reference: str  # the best cell, or the baseline chosen by the user
    cells: dict[str, CellVerdict]  # every other cell, in the order given
    correction: str  # what the verdicts were corrected for, to print beside them

    @property
    def comparisons(self) -> int:
        return sum(1 for v in self.cells.values() if v.verdict != TOO_FEW_RUNS)


# -- comparing many cells, paired by round ---------------------------------------------------------------

# cell id -> round (repetition) -> the run's figure; a failed run may be None, and counts as missing
ByRound = Mapping[str, Mapping[int, float | None]]


def _logs(values: ByRound) -> dict[str, dict[int, float]]:
    return {cell: {r: math.log(v) for r, v in runs.items() if v is not None and v > 0} for cell, runs in values.items()}


def _paired(reference: Mapping[int, float], candidate: Mapping[int, float],
            pooled: tuple[float, int] | None = None) -> Comparison:
    """The t-test of the mean log ratio candidate / reference over the rounds both have (Student 1908): what
    the rounds share (the machine's mood that round) cancels out of each ratio. Its noise is `pooled`, the
    residual mean square and degrees of freedom of the two-way model (cell + round) over every cell, where
    there is one: the factor table reads the same noise, so a handful of rounds can tell the cells apart
    as surely as it tells the factors' levels; otherwise the spread of this pair's own ratios."""
    common = sorted(reference.keys() & candidate.keys())
    diffs = [candidate[r] - reference[r] for r in common]
    n = len(diffs)
    mean = math.fsum(diffs) / n if n else 0.0
    change = 100.0 * math.expm1(mean)
    if n < 2:
        return Comparison(change, math.nan, False)
    if pooled is not None:
        mse, df = pooled
        variance_of_mean = 2 * mse / n
    else:
        df = n - 1
        variance_of_mean = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1) / n
    if variance_of_mean == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * special.stdtr(df, -abs(mean) / math.sqrt(variance_of_mean)))
    return Comparison(change, p, p < ALPHA)


def _pooled(logs: Mapping[str, Mapping[int, float]]) -> tuple[float, int] | None:
    """Residual mean square and degrees of freedom of log(figure) ~ cell + round over the rounds every cell
    has; None with fewer than three cells (a pair's own spread is the same thing) or two such rounds."""
    cells = [c for c in logs if logs[c]]
    if len(cells) < 3:
        return None
    rounds = sorted(set.intersection(*(set(logs[c]) for c in cells)))
    if len(rounds) < 2:
        return None
    y = np.array([[logs[c][r] for r in rounds] for c in cells])
    residuals = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    df = (len(cells) - 1) * (len(rounds) - 1)
    return float((residuals**2).sum() / df), df


def _blocked_levels(logs: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
    """Each cell's level on the log scale from the two-way model log(figure) ~ cell + round (least squares):
    with every round complete it is the cell's mean log; with runs missing, the rounds are still accounted for."""
    cells = list(logs)
    rounds = sorted({r for runs in logs.values() for r in runs})
    rows = [(i, rounds.index(r), v) for i, c in enumerate(cells) for r, v in logs[c].items()]
    X = np.zeros((len(rows), len(cells) + len(rounds) - 1))
    for row, (i, j, _) in enumerate(rows):
        X[row, i] = 1.0
        if j:
            X[row, len(cells) + j - 1] = 1.0
    coef = np.linalg.lstsq(X, np.array([v for *_, v in rows]), rcond=None)[0]
    return {c: float(coef[i]) for i, c in enumerate(cells)}


def blocked_anova(logs: Mapping[str, Mapping[int, float]]) -> float:
    """p-value of the two-way ANOVA without replication (cells x rounds, on the logs): do the cells differ once
    each round's own level is taken out? The F test of cell in log(figure) ~ cell + round against ~ round;
    with missing runs, the same F test by least squares."""
    cells = [c for c in logs if logs[c]]
    if len(cells) < 2:  # no cells to tell apart (their figures at 0 or below have no log)
        return math.nan
    rounds = sorted({r for c in cells for r in logs[c]})
    rows = [(i, rounds.index(r), v) for i, c in enumerate(cells) for r, v in logs[c].items()]
    y = np.array([v for *_, v in rows])
    blocks = np.zeros((len(rows), len(rounds)))
    groups = np.zeros((len(rows), len(cells) - 1))
    for row, (i, j, _) in enumerate(rows):
        blocks[row, j] = 1.0
        if i:
            groups[row, i - 1] = 1.0
    full = np.hstack([blocks, groups])
    rank_full, rank_blocks = np.linalg.matrix_rank(full), np.linalg.matrix_rank(blocks)
    df_resid, df_cells = len(y) - rank_full, rank_full - rank_blocks
    if df_resid < 1 or df_cells < 1:
        return math.nan

    def rss(X: np.ndarray) -> float:
        return float(((y - X @ np.linalg.lstsq(X, y, rcond=None)[0]) ** 2).sum())

    within, restricted = rss(full), rss(blocks)
    if within <= 1e-24 * max(restricted, 1e-300):
        return 1.0 if restricted <= 1e-24 else 0.0
    return float(special.fdtrc(df_cells, df_resid, ((restricted - within) / df_cells) / (within / df_resid)))


def best_cell_paired(values: ByRound, lower_is_better: bool = True) -> str:
    """The cell with the best geometric mean once the rounds are taken out (the two-way model's cell level),
    the same reading of the runs as the factor table's; ties go to the first cell given. A geometric mean
    needs figures above 0: without one, ValueError."""
    logs = {c: runs for c, runs in _logs(values).items() if runs}
    if not logs:
        raise ValueError("no cell has a figure above 0: there is no geometric mean to rank by")
    levels = _blocked_levels(logs)
    sign = 1.0 if lower_is_better else -1.0
    return min(levels, key=lambda cell: sign * levels[cell])


def against_best_paired(values: ByRound, lower_is_better: bool = True) -> Verdicts:
    """Every cell against the best one, each comparison paired within rounds, the family-wise error held at 5 %.

    `values` are each cell's figures by round (cell id -> round -> figure). The best is the best geometric mean
    with the rounds taken out, as the factor table reads the runs (`effects`: log of the figure, the round as
    a block), so ranking and factor table agree on direction and size. Each other cell is compared with it by
    the t-test of the log ratios over the rounds both have, its noise the two-way model's residual (as the
    factor table's, so a few rounds tell cells apart as they tell levels apart); change_percent is 100 (geometric-mean
    ratio - 1). As in `against_best`, the best is picked from the data, so each step of Holm's step-down must
    be confirmed by the blocked form of the ANOVA gate: the two-way ANOVA (cell + round, on the logs) over the
    best and the cells not yet told apart from it. Simulated with identical cells, rounds drifting by 15 %
    and CV 5-20 %, the rate of at least one false "worse" is 3.3-5.6 % (1,000 experiments each of 4, 8 or 16
    cells x 2, 3, 5 or 10 rounds; 4.6-4.8 % in 4,000 each of 4 cells x 2, 3 or 5 rounds; tests/test_stats.py
    checks 8 and 16 cells)."""
    best = best_cell_paired(values, lower_is_better)
    return _paired_step_down(values, best, lower_is_better, gated=True)


def against_baseline_paired(values: ByRound, baseline: str, lower_is_better: bool = True) -> Verdicts:
    """Every cell against a baseline the user chose (`compare`), paired within rounds; Holm alone holds the
    family-wise error, the baseline not being picked from the data."""
    if baseline not in values:
        raise KeyError(baseline)
    return _paired_step_down(values, baseline, lower_is_better, gated=False)


def _paired_step_down(values: ByRound, reference: str, lower_is_better: bool, gated: bool) -> Verdicts:
    logs = _logs(values)
    pooled = _pooled(logs)
    raw = {cell: _paired(logs[reference], runs, pooled) for cell, runs in logs.items() if cell != reference}
    tested = [cell for cell, c in raw.items() if not math.isnan(c.p_value)]
    adjusted = dict(zip(tested, holm([raw[c].p_value for c in tested])))
    if gated and len(tested) >= 2:
        order = sorted(tested, key=lambda c: raw[c].p_value)
        running = 0.0
        for step, cell in enumerate(order):
            still_tied = {c: logs[c] for c in [reference] + order[step:]}  # not yet told apart
            gate = blocked_anova(still_tied) if len(still_tied) >= 3 else 0.0
            running = max(running, adjusted[cell], 1.0 if math.isnan(gate) else gate)
            adjusted[cell] = running
    cells = {}
    for cell, c in raw.items():
        p = adjusted.get(cell, math.nan)
        verdict = TOO_FEW_RUNS if math.isnan(p) else (
            _direction(c.change_percent, lower_is_better) if p < ALPHA else NOT_SIGNIFICANT
        )
        cells[cell] = CellVerdict(c.change_percent, c.p_value, p, verdict)
    return Verdicts(reference, cells, _paired_correction_text(len(tested), gated))


def without_verdicts(cells: Sequence[str], reference: str, why: str) -> Verdicts:
    """Every cell against `reference` with no verdict: `why` its figures cannot be read as ratios."""
    nan = math.nan
    return Verdicts(reference, {c: CellVerdict(nan, nan, nan, NO_VERDICT) for c in cells if c != reference},
                    f"no verdicts: {why}")


def _paired_correction_text(comparisons: int, gated: bool) -> str:
    against = "the best" if gated else "the baseline"
    if comparisons == 0:
        return "no comparison: every cell needs runs in at least 2 rounds it shares with " + against
    if comparisons == 1:
        return f"one comparison against {against}, paired by round: nothing to correct"
    text = f"Holm over {comparisons} comparisons against {against}, paired by round"
    return text + ", each step confirmed by a two-way ANOVA (cell + round)" if gated else text


# -- noise made visible ----------------------------------------------------------------------------------


def repetitions_needed_paired(cv: float, difference: float, power: float = POWER, alpha: float = ALPHA) -> int:
    """Rounds (runs per cell) that tell a `difference` apart from none when the two cells are paired within
    rounds and `cv` is the spread left once each round's own level is taken out (the factor table's
    residual_cv): the paired t-test's power, a one-sample t-test on the differences, whose spread is
    sqrt(2) cv, from the noncentral t (the calculation in Cohen 1988 and statsmodels' TTestPower)."""
    if difference <= 0 or cv < 0:
        raise ValueError("difference must be positive and cv not negative")
    if cv == 0:
        return 2
    effect = difference / (math.sqrt(2) * cv)

    def powered(n: int) -> bool:
        return float(sps.nct.sf(special.stdtrit(n - 1, 1 - alpha / 2), n - 1, effect * math.sqrt(n))) >= power

    # The power rises with n: doubling, then halving the gap, finds the first n in a few dozen looks where
    # noisy runs (a CV of 300 %) need tens of thousands of rounds, one look each took seconds.
    low, high = 1, 2
    while not powered(high):
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if powered(mid) else (mid, high)
    return high


def noise_warning(cv: float, runs: int) -> str | None:
    """The warning `show` prints under a cell whose CV is above 5 %. Its spread includes the rounds'
    drift, which the paired answer takes out (its noise line says the rounds an effect needs). None when
    the noise is low enough or unknown."""
    if runs < 2 or math.isnan(cv) or cv <= NOISY_CV:
        return None
    return (f"noisy: its {runs} runs vary {100 * cv:.1f} %, above {100 * NOISY_CV:.0f} % (the rounds' drift "
            "included: the verdicts compare cells round by round, which takes it out)")
