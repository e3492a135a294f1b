"""Racing: which cells still get runs, and when the cells left are as good as one another.

Runs come in rounds: round r is repetition r of every cell still racing, and the rounds are blocks, so slow
drift of the machine touches every cell of a round alike. After each round from `min_rounds` on (a look),
the race reads its runs as the factor table does (storlab.answer.effects): the log of the figure, each
cell its mean, each round a block, one least-squares fit (statsmodels OLS) over every run the race has
decided on, the runs of the cells already dropped included, so every comparison faces the noise pooled
over every cell (after round 2 of 16 cells, 15 degrees of freedom where two cells alone would have 1).

**Drops.** A cell goes when it is clearly worse than another cell racing (one-sided t test of the fitted
contrast), or when its level of a factor is clearly worse than another level of that factor everywhere: in
each combination of the other factors' levels where a cell still races at it, worse than the cell of the
other level there, dropped or not (Berger's intersection-union test, 1982: the level's p-value is its least
convincing combination's); the level goes with every cell racing at it. A cell without factors (a results
folder from before the levels were kept) is a level of its own, and its race is cell by cell.
Each comparison is tested at the look's alpha (the Lan-DeMets spending of storlab.answer.sequential over the
race's looks) divided by the most comparisons one cell can be dropped by: the best cell goes only when one of
its own comparisons, each against a cell no better than it, errs (Hsu's multiple comparisons with the best,
1984, with Bonferroni's bound for Dunnett's), so the chance that the race ever drops it stays at or below
5 %. Cells tied with the best are each protected so, not all at once: among 16 identical cells some cell goes
in about a fifth of races, and a race keeps at least one of them.

**The end.** The race ends with one cell left, at `max_rounds`, or once the cells left are equivalent to
one another within the margin (`equivalent_within`, 5 % by default): every pair's interval of the ratio, at
1 - 2 alpha of the look (two one-sided tests, Schuirmann 1987) on the same pooled fit, lies inside ±margin.
"Every pair" is again an intersection-union test: each pair at the look's alpha, with no correction, keeps
the chance of calling cells equivalent that are not at or below the look's alpha.
It also ends, "not told apart", once the rounds left could not change it (stopping for futility, as a
clinical trial stops on low conditional power): with every difference seen taken as the truth and its
standard error shrunk to what `max_rounds` would make it, no cell left could be dropped and the cells left
could not be shown equivalent even at the most lenient later look. The cells left are then those the race
would most likely end with at `max_rounds`, in fewer runs: where the noise hides the difference between the
best cells and their margin (16 cells at a CV of 15-20 %, ±25 %), running them to the last round bought
nothing. Stopping drops no cell and claims no equivalence, so neither error rate can rise.

Simulated (tests/test_racing_simulated.py: docs/statistics.md has the figures): a 16-cell matrix where one
factor of 4 levels does nothing, and benchmarks/racing.py's 16 cells as a real full matrix measured them.

The decision is a pure function of the runs recorded and the settings: `race` replays every round from the
first, so a resumed run and a `show` reach the same drops in the same rounds. A raised `max` spreads the
error rate over more looks, so each look spends less: a cell dropped before may race again, its missing
rounds run first (the round it lacks is the race's next). A race decides where runs
go, not the answer: every run is kept, and the verdicts come from the factor table and the ranking over
all of them.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import statsmodels.api as sm
from scipy import stats as sps

from storlab.answer import sequential
from storlab.rounds import DEFAULT_MARGIN, RaceSettings

# cell id -> repetition number (1, 2, ...) -> the run's figure, or None when that run failed.
# A repetition that has not run yet is absent.
Rounds = Mapping[str, Mapping[int, float | None]]

CELL = "cell"  # the one factor of cells whose levels are not known: each cell a level of it


@dataclass(frozen=True)
class Look:
    """One look of the race, kept for `show` and the report."""

    round: int
    alpha: float  # what the look spends (storlab.answer.sequential)
    cells: tuple[str, ...]  # the cells racing at it
    noise: float  # the pooled residual standard deviation of the log (about the runs' CV)
    df: int  # its degrees of freedom
    comparisons: int  # the most comparisons one cell could be dropped by: the look's alpha is shared among them


@dataclass(frozen=True)
class Drop:
    cell: str
    round: int  # the last round the cell ran in
    evidence: str  # one sentence for `show`


@dataclass(frozen=True)
class RaceState:
    alive: tuple[str, ...]  # the cells still racing, in the order given
    drops: tuple[Drop, ...]
    rounds: int  # rounds complete and decided
    best: str | None  # the cell racing with the best geometric mean so far
    finished: str | None  # why the race stopped; None while it goes on
    tests: tuple[Look, ...]
    margin: float = DEFAULT_MARGIN  # the margin of equivalence the race ended on, as a fraction
    equivalent: tuple[str, ...] = ()  # the cells left when they are equivalent to one another within it

    @property
    def next_round(self) -> int | None:
        """The repetition every cell in `alive` runs next (those it already has are kept as they are)."""
        return None if self.finished else self.rounds + 1


def levels_of(cells: Mapping[str, Mapping[str, object]]) -> dict[str, dict[str, str]]:
    """Each cell's factor levels as RaceSettings keeps them: every value as JSON text, so a level compares
    equal to itself after the store's round trip whatever its type."""
    return {cell: {name: json.dumps(value, sort_keys=True) for name, value in factors.items()}
            for cell, factors in cells.items()}


def rounds_from(cells: Sequence[str], runs: Sequence, failures: Sequence[tuple[str, int, str]], figure: str) -> Rounds:
    """What a race is decided on, from a store's records: each cell's figure by repetition, a failed
    run as None (a later success of the same repetition replaces it). `runs` have cell_id,
    repetition and figures (store.RunRecord)."""
    found: dict[str, dict[int, float | None]] = {cell: {} for cell in cells}
    for cell, rep, _ in failures:
        if cell in found:
            found[cell][rep] = None
    for run in runs:
        if run.cell_id in found and figure in run.figures:
            found[run.cell_id][run.repetition] = run.figures[figure]
    return found


def race(values: Rounds, settings: RaceSettings) -> RaceState:
    """Replay the race over every complete round and say where it stands.

    A round is complete when every cell still racing has a run at that repetition, finished or failed.
    Nothing is decided before `min_rounds`. After each round: drop the cells clearly worse than another, and
    the factor levels clearly worse than another everywhere; stop when one cell is left, when the cells left are equivalent to one another, or
    at `max_rounds`. Runs beyond a cell's drop (recorded before racing was switched on) are kept in the
    store but take no part in the race."""
    if not values:
        raise ValueError("no cells to race")
    levels = {c: (settings.levels or {}).get(c) or {CELL: c} for c in values}
    margin = settings.equivalent_within or DEFAULT_MARGIN
    looks = settings.max_rounds - settings.min_rounds + 1
    alive = list(values)
    drops: list[Drop] = []
    tests: list[Look] = []
    finished, equivalent, fit, futile = None, (), None, None
    done = 0
    for rnd in range(1, settings.max_rounds + 1):
        if any(rnd not in values[cell] for cell in alive):
            break
        done = rnd
        if rnd < settings.min_rounds:
            continue
        alpha = sequential.alpha_at(rnd - settings.min_rounds + 1, looks, settings.alpha)
        fit = Pooled.of(values, rnd, alive, {d.cell: d.round for d in drops}, settings.lower_is_better)
        if fit is not None:
            look, dropped = decide(fit, alive, levels, alpha, rnd)
            tests.append(look)
            drops += dropped
            alive = [c for c in alive if c not in {d.cell for d in dropped}]
            if len(alive) > 1 and fit.equivalent(alive, margin, alpha):
                equivalent = tuple(alive)
            elif len(alive) > 1 and rnd < settings.max_rounds:
                later = max(sequential.alpha_at(k - settings.min_rounds + 1, looks, settings.alpha)
                            for k in range(rnd + 1, settings.max_rounds + 1))
                futile = fit.futile(alive, margin, later / look.comparisons, later, rnd, settings.max_rounds)
        finished = _finish(alive, equivalent, rnd, settings, margin, alpha, levels, futile)
        if finished:
            break
    best = (fit.best(alive) if fit is not None else None) or (_best_mean(values, alive, done, settings.lower_is_better)
                                                            if done else None)
    return RaceState(tuple(alive), tuple(drops), done, best, finished, tuple(tests), margin, equivalent)


@dataclass(frozen=True)
class Pooled:
    """log(figure) ~ cell + round by least squares (statsmodels OLS), signed so that lower is better."""

    cells: tuple[str, ...]  # the cells with a run in the fit, in the order of its first columns
    result: object  # statsmodels' RegressionResults
    cov: np.ndarray  # its covariance of the parameters

    @classmethod
    def of(cls, values: Rounds, rnd: int, alive: Sequence[str], dropped: Mapping[str, int],
           lower_is_better: bool) -> Pooled | None:
        """Every run of rounds 1..rnd of the cells racing, and of each dropped cell up to the round it was
        dropped in; None when no degree of freedom is left for the noise."""
        sign = 1.0 if lower_is_better else -1.0
        rows = [(c, r, sign * math.log(v)) for c in list(alive) + [c for c in dropped if c not in alive]
                for r in range(1, min(dropped.get(c, rnd), rnd) + 1)
                if (v := values[c].get(r)) is not None and v > 0]
        cells = tuple(dict.fromkeys(c for c, _, _ in rows))
        rounds = sorted({r for _, r, _ in rows})
        if len(rows) <= len(cells) + len(rounds) - 1:
            return None
        X = np.zeros((len(rows), len(cells) + len(rounds) - 1))
        for i, (c, r, _) in enumerate(rows):
            X[i, cells.index(c)] = 1.0
            if rounds.index(r):
                X[i, len(cells) + rounds.index(r) - 1] = 1.0
        result = sm.OLS(np.array([y for *_, y in rows]), X).fit()
        if result.df_resid < 1:
            return None
        return cls(cells, result, np.asarray(result.cov_params()))

    @property
    def df(self) -> int:
        return int(round(self.result.df_resid))

    @property
    def noise(self) -> float:
        return math.sqrt(max(float(self.result.mse_resid), 0.0))

    def difference(self, cell: str, other: str) -> tuple[float, float]:
        """The log ratio cell / other (positive: cell is worse) and its standard error."""
        i, j = self.cells.index(cell), self.cells.index(other)
        params, cov = self.result.params, self.cov
        return float(params[i] - params[j]), math.sqrt(max(cov[i, i] + cov[j, j] - 2 * cov[i, j], 0.0))

    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """For every ordered pair of the fit's cells (row, column): the log ratio row / column and its
        standard error."""
        k = len(self.cells)
        params, cov = np.asarray(self.result.params)[:k], self.cov[:k, :k]
        gap = params[:, None] - params[None, :]
        return gap, np.sqrt(np.maximum(np.diag(cov)[:, None] + np.diag(cov)[None, :] - 2 * cov, 0.0))

    def worse_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """For every ordered pair of the fit's cells (row, column): the one-sided p-value of "row is worse than
        column", and the log ratio row / column."""
        gap, se = self.gaps()
        with np.errstate(divide="ignore", invalid="ignore"):
            p = sps.t.sf(gap / se, self.df)
        return np.where(se > 0, p, np.where(gap > 0, 0.0, 1.0)), gap

    def within(self, cell: str, other: str, margin: float, alpha: float) -> bool:
        """Two one-sided tests: the 1 - 2 alpha interval of the ratio lies inside [1 / (1 + margin), 1 + margin]."""
        gap, se = self.difference(cell, other)
        half = float(sps.t.ppf(1 - alpha, self.df)) * se
        bound = math.log1p(margin)
        return -bound < gap - half and gap + half < bound

    def equivalent(self, cells: Sequence[str], margin: float, alpha: float) -> bool:
        if any(c not in self.cells for c in cells):
            return False
        return all(self.within(a, b, margin, alpha) for a, b in itertools.combinations(cells, 2))

    def futile(self, alive: Sequence[str], margin: float, each: float, alpha: float, rnd: int, last: int) -> str | None:
        """Why the rounds left up to `last` would not change the race, or None when they might. Each difference
        seen is taken as the truth and its standard error projected to `last` rounds (shrinking as the rounds
        grow; a dropped cell's half of it does not): if no cell could then be dropped (one-sided at `each`, the
        most a later look allows one comparison) and the cells left could not be shown equivalent (at `alpha`,
        the most a later look spends), more rounds would most likely end the race at `last` with the same
        cells. Stopping drops nothing and claims nothing, so neither error rate can rise."""
        df = self.df + (last - rnd) * (len(alive) - 1)
        drop, same = float(sps.t.ppf(1 - each, df)), float(sps.t.ppf(1 - alpha, df))
        shrink = math.sqrt(rnd / last)
        racing = np.array([c in alive for c in self.cells])
        gap, se = (m[racing] for m in self.gaps())  # rows: the cells left; columns: every cell fitted
        later = se * np.where(racing, shrink, math.sqrt((shrink ** 2 + 1) / 2))[None, :]
        if (gap > drop * later).any():  # a cell's gap to itself is 0, never above
            return None
        if (np.abs(gap) + same * later < math.log1p(margin))[:, racing].all():
            return None
        return (f"the noise ({100 * self.noise:.2g} % a run) would hide a difference between them, and equivalence "
                f"within ±{100 * margin:g} %, through round {last}")

    def best(self, cells: Sequence[str]) -> str | None:
        fitted = [c for c in cells if c in self.cells]
        return min(fitted, key=lambda c: (self.result.params[self.cells.index(c)], c)) if fitted else None


def decide(fit: Pooled, alive: Sequence[str], levels: Mapping[str, Mapping[str, str]], alpha: float,
           rnd: int) -> tuple[Look, list[Drop]]:
    """One look's drops. A cell goes when it is worse (one-sided) than another cell racing, or when its level of a
    factor is worse than another level of that factor in each combination of the other factors where it still
    races (the intersection-union p-value: the largest of the combinations'). Each comparison is tested at the
    look's `alpha` over the most comparisons any one cell can be dropped by (the other cells racing, and the
    other levels of each of its factors): the best cell is dropped only when one of its own comparisons, each
    against a cell no better than it, errs, so Bonferroni over those keeps that chance at `alpha` (Hsu's
    multiple comparisons with the best, 1984, with Bonferroni's bound for Dunnett's)."""
    p, gap = fit.worse_matrix()
    at = {c: i for i, c in enumerate(fit.cells)}
    racing = [c for c in alive if c in at]
    factors = sorted({f for c in alive for f in levels[c]} - {CELL})
    by_level = _level_tests(fit, alive, levels, factors, at, p, gap)
    comparisons = len(racing) - 1 + sum(len({levels[c][f] for c in fit.cells if f in levels[c]}) - 1 for f in factors)
    each = alpha / max(comparisons, 1)
    said = f"below {each:.2g}: the look's alpha {alpha:.3g} over the {comparisons} comparisons a cell can be dropped by"
    drops: dict[str, str] = {}
    for factor, level, other, worst, ratio, combos in by_level:
        if worst >= each:
            continue
        where = "in its one combination of the other factors" if combos == 1 else \
            f"in each of its {combos} combinations of the other factors"
        for c in racing:
            if levels[c].get(factor) == level and c not in drops:
                drops[c] = (f"after round {rnd}: {factor}={_text(level)} is worse than {factor}={_text(other)} {where}, "
                            f"the least of them {ratio:.2f}x (one-sided p = {worst:.2g}, {said})")
    for c in racing:
        j = min((j for j in racing if j != c), key=lambda j: p[at[c], at[j]], default=None)
        if j is not None and p[at[c], at[j]] < each and c not in drops:
            drops[c] = (f"after round {rnd}: {math.exp(gap[at[c], at[j]]):.2f}x {_named(j, levels)} in the geometric mean "
                        f"paired by round (one-sided p = {p[at[c], at[j]]:.2g}, {said})")
    look = Look(rnd, alpha, tuple(alive), fit.noise, fit.df, comparisons)
    return look, [Drop(c, rnd, drops[c]) for c in alive if c in drops]


def _level_tests(fit: Pooled, alive: Sequence[str], levels: Mapping[str, Mapping[str, str]], factors: Sequence[str],
                 at: Mapping[str, int], p: np.ndarray, gap: np.ndarray) -> list[tuple[str, str, str, float, float, int]]:
    """(factor, level, other level, the intersection-union p-value, the least convincing ratio, combinations)
    for every level a cell races at against every other measured level of its factor."""
    found = []
    for factor in factors:
        racing = [c for c in alive if factor in levels[c] and c in at]
        for level in sorted({levels[c][factor] for c in racing}):
            mine = [c for c in racing if levels[c][factor] == level]
            for other in sorted({levels[c][factor] for c in fit.cells if factor in levels[c]} - {level}):
                pairs = [(c, _neighbour(c, factor, other, fit.cells, levels)) for c in mine]
                if any(n is None for _, n in pairs):
                    continue  # a combination without a measured cell at the other level: "everywhere" is unknown
                worst, c, n = max((p[at[c], at[n]], c, n) for c, n in pairs)
                found.append((factor, level, other, float(worst), math.exp(gap[at[c], at[n]]), len(pairs)))
    return found


def _neighbour(cell: str, factor: str, level: str, measured: Sequence[str],
               levels: Mapping[str, Mapping[str, str]]) -> str | None:
    """The measured cell at `level` of `factor` and the same levels of every other factor as `cell`."""
    want = {**levels[cell], factor: level}
    return next((c for c in measured if levels[c] == want), None)


def _named(cell: str, levels: Mapping[str, Mapping[str, str]]) -> str:
    known = {f: v for f, v in levels[cell].items() if f != CELL}
    return f"{' '.join(f'{f}={_text(v)}' for f, v in known.items())} ({cell})" if known else cell


def _text(level: str) -> str:
    value = json.loads(level)
    return value if isinstance(value, str) else json.dumps(value)


def _mean(values: Rounds, cell: str, rnd: int, lower_is_better: bool) -> float:
    """The cell's mean over rounds 1..rnd, signed so that smaller is better; inf for a cell with no figure."""
    figures = [v for r, v in values[cell].items() if r <= rnd and v is not None]
    if not figures:
        return math.inf
    mean = math.fsum(figures) / len(figures)
    return mean if lower_is_better else -mean


def _best_mean(values: Rounds, alive: Sequence[str], rnd: int, lower_is_better: bool) -> str:
    return min(alive, key=lambda c: (_mean(values, c, rnd, lower_is_better), c))


def _finish(alive: Sequence[str], equivalent: Sequence[str], rnd: int, settings: RaceSettings, margin: float,
            alpha: float, levels: Mapping[str, Mapping[str, str]], futile: str | None = None) -> str | None:
    if len(alive) == 1:
        return f"one cell left after round {rnd}"
    if equivalent:
        named = ", ".join(_named(c, levels) for c in equivalent)
        return (f"any of these: {named}: they are equivalent within ±{100 * margin:g} % (after round "
                f"{rnd}, every pair's {100 * (1 - 2 * alpha):.1f} % interval of the ratio inside the margin)")
    if futile:
        named = ", ".join(_named(c, levels) for c in alive)
        return f"any of these: {named}: not told apart after round {rnd}: {futile}"
    if rnd >= settings.max_rounds:
        return f"max reached: {rnd} rounds"
    return None
