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
A level test drops a cell only when the cell's own comparison with its neighbour there (the cell at the other
level and its levels of the other factors) would, so a cell can be dropped by its comparisons with the other
cells racing and with its neighbours no longer racing, and by nothing else. The best cell is no worse than any
of them, so each of its comparisons is a true null (Hsu's multiple comparisons with the best, 1984): each is
tested at Dunnett's one-sided many-to-one critical value (Dunnett 1955) for that cell's number of comparisons
at the look's alpha (the Lan-DeMets spending of storlab.answer.sequential over the race's looks), computed for
their least correlation in the fit (0.5 between cells of as many rounds), which by Slepian's inequality (1962)
bounds the chance that the largest of them exceeds it. So the chance that a look drops the best cell is at
most its alpha, and that the race ever drops it at most 5 %. Bonferroni over the most comparisons one cell
could be dropped by (the other cells, and every other level of each factor, 20 for 16 cells of levels 4 x 2 x
2) asked for 3.79 standard errors where this asks 3.41 (15 comparisons, the first look of 4, 15 degrees of
freedom): 1.5 fewer runs of 80 at a CV of 5-20 %. Cells tied with the best are each protected so, not all at
once: among 16 identical cells (the bound's own case) a given cell goes in 3.0 % of races (2.1 % with
Bonferroni's) and some cell in about 3 in 10, and a race keeps at least one of them.

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

import functools
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special
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
    comparisons: int  # the most comparisons one cell could be dropped by (Dunnett's critical value is for them)


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
    neighbours = neighbours_of(levels)
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
            look, dropped, dropping = decide(fit, alive, levels, alpha, rnd, neighbours)
            tests.append(look)
            drops += dropped
            alive = [c for c in alive if c not in {d.cell for d in dropped}]
            if len(alive) > 1 and fit.equivalent(alive, margin, alpha):
                equivalent = tuple(alive)
            elif len(alive) > 1 and rnd < settings.max_rounds:
                later = max(sequential.alpha_at(k - settings.min_rounds + 1, looks, settings.alpha)
                            for k in range(rnd + 1, settings.max_rounds + 1))
                futile = fit.futile(alive, margin, dropping, later, rnd, settings.max_rounds)
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
        # Imported here, as effects.py does: statsmodels takes most of a second to import, and every command
        # that plans runs imports this module, most of them before (or without) any race to decide.
        from statsmodels.regression.linear_model import OLS

        result = OLS(np.array([y for *_, y in rows]), X).fit()
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

    def futile(self, alive: Sequence[str], margin: float, dropping: Dropping, alpha: float, rnd: int,
               last: int) -> str | None:
        """Why the rounds left up to `last` would not change the race, or None when they might. Each difference
        seen is taken as the truth and its standard error projected to `last` rounds (shrinking as the rounds
        grow; a dropped cell's half of it does not): if no cell could then be dropped (above the critical value
        of this look's `dropping` at `alpha`, the most a later look spends) and the cells left could not be
        shown equivalent (at `alpha`), more rounds would most likely end the race at `last` with the same
        cells. Stopping drops nothing and claims nothing, so neither error rate can rise."""
        df = self.df + (last - rnd) * (len(alive) - 1)
        drop, same = dropping.critical(df, alpha), float(sps.t.ppf(1 - alpha, df))
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


def decide(fit: Pooled, alive: Sequence[str], levels: Mapping[str, Mapping[str, str]], alpha: float, rnd: int,
           neighbours: Mapping[str, Sequence[str]]) -> tuple[Look, list[Drop], Dropping]:
    """One look's drops. A cell goes when it is worse (one-sided) than another cell racing, or when its level of a
    factor is worse than another level of that factor in each combination of the other factors where it still
    races (an intersection-union test: every combination's cell worse than its neighbour at the other level, so
    the level goes only when each of its cells would go on its own comparison). A cell can so be dropped by its
    comparisons with the other cells racing and with its `neighbours` (the cells at another level of one factor
    and its own levels of the others) that are no longer racing; the best cell is no worse than any of them, so
    each of its comparisons is a true null, and testing every cell's comparisons at Dunnett's many-to-one
    critical value for their number at the look's `alpha` (`Dropping`) drops it at this look with a chance of
    at most `alpha` (Hsu's multiple comparisons with the best, 1984)."""
    p, gap = fit.worse_matrix()
    at = {c: i for i, c in enumerate(fit.cells)}
    racing = [c for c in alive if c in at]
    factors = sorted({f for c in alive for f in levels[c]} - {CELL})
    dropping = Dropping.of(fit, racing, neighbours, alpha)
    drops: dict[str, str] = {}
    for factor, level, other, pairs in _level_pairs(fit, alive, levels, factors):
        if not all(p[at[c], at[n]] < dropping.each[c] for c, n in pairs):
            continue
        c, n = max(pairs, key=lambda pair: (p[at[pair[0]], at[pair[1]]], pair))
        where = "in its one combination of the other factors" if len(pairs) == 1 else \
            f"in each of its {len(pairs)} combinations of the other factors"
        for mine in racing:
            if levels[mine].get(factor) == level and mine not in drops:
                drops[mine] = (f"after round {rnd}: {factor}={_text(level)} is worse than {factor}={_text(other)} {where}, "
                               f"the least of them {math.exp(gap[at[c], at[n]]):.2f}x (one-sided p = {p[at[c], at[n]]:.2g}, "
                               f"{dropping.said(c)})")
    for c in racing:
        j = min((j for j in racing if j != c), key=lambda j: p[at[c], at[j]], default=None)
        if j is not None and p[at[c], at[j]] < dropping.each[c] and c not in drops:
            drops[c] = (f"after round {rnd}: {math.exp(gap[at[c], at[j]]):.2f}x {_named(j, levels)} in the geometric mean "
                        f"paired by round (one-sided p = {p[at[c], at[j]]:.2g}, {dropping.said(c)})")
    look = Look(rnd, alpha, tuple(alive), fit.noise, fit.df, dropping.most)
    return look, [Drop(c, rnd, drops[c]) for c in alive if c in drops], dropping


@dataclass(frozen=True)
class Dropping:
    """The one-sided level each racing cell's comparisons are tested at, at one look.

    A cell's comparisons (its log ratio to each cell it can be dropped by, over the standard error) share the
    cell's own estimate, so they are positively correlated: 0.5 between two cells of as many runs. Dunnett's
    many-to-one critical value (Dunnett 1955) for m comparisons whose correlations are all at least rho: the
    value the largest of m t statistics of equal correlation rho (multivariate t, the fit's degrees of freedom)
    exceeds with chance alpha. By Slepian's inequality (1962) the largest of comparisons more correlated than
    rho exceeds it less often, so the bound holds for the fit's own correlations, which are lower when dropped
    cells have fewer runs. Bonferroni (alpha / m) needs a larger value: 3.65 where Dunnett's is 3.41 for 15
    comparisons at the first look of 4 (15 degrees of freedom)."""

    each: Mapping[str, float]  # the one-sided p-value a cell's comparison must go below
    count: Mapping[str, int]  # the comparisons the cell can be dropped by
    alpha: float
    most: int
    least_correlated: float

    @classmethod
    def of(cls, fit: Pooled, racing: Sequence[str], neighbours: Mapping[str, Sequence[str]], alpha: float) -> Dropping:
        at = {c: i for i, c in enumerate(fit.cells)}
        k = len(fit.cells)
        rows = [at[c] for c in racing]
        against = np.zeros((len(racing), k), dtype=bool)  # each racing cell's comparisons, by the fit's cells
        against[:, rows] = True
        for row, c in enumerate(racing):
            against[row, [at[n] for n in neighbours.get(c, ()) if n in at]] = True
            against[row, at[c]] = False
        # the covariance of (cell - j) and (cell - l) for every racing cell and every pair j, l of the fit's cells
        cov = fit.cov[:k, :k]
        own = np.diag(cov)[rows]
        shared = own[:, None, None] - cov[rows][:, :, None] - cov[rows][:, None, :] + cov[None, :, :]
        sd = np.sqrt(np.einsum("cjj->cj", shared))
        with np.errstate(divide="ignore", invalid="ignore"):  # a cell against itself: no comparison
            corr = shared / sd[:, :, None] / sd[:, None, :]
        pairs = against[:, :, None] & against[:, None, :] & ~np.eye(k, dtype=bool)[None, :, :]
        rho = np.where(pairs, corr, 1.0).min(axis=(1, 2))
        count = {c: int(n) for c, n in zip(racing, against.sum(axis=1))}
        each = {c: _level(count[c], float(rho[row]), fit.df, alpha) for row, c in enumerate(racing)}
        return cls(each, count, alpha, max(count.values(), default=0), float(rho.min(initial=1.0)))

    def critical(self, df: int, alpha: float) -> float:
        """The critical value of a t statistic of `df` degrees of freedom for the cell of the most comparisons,
        at their least correlation, at `alpha`."""
        return dunnett(self.most, self.least_correlated, df, alpha)

    def said(self, cell: str) -> str:
        return (f"below {self.each[cell]:.2g}: Dunnett's level for the {self.count[cell]} comparisons the cell can be "
                f"dropped by at the look's alpha {self.alpha:.3g}")


def neighbours_of(levels: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """Each cell's neighbours: the cells at another level of one of its factors and its own levels of the others."""
    cells = {tuple(sorted(mine.items())): cell for cell, mine in levels.items()}
    values: dict[str, set[str]] = {}
    for mine in levels.values():
        for f, v in mine.items():
            values.setdefault(f, set()).add(v)
    return {cell: [n for f in mine if f != CELL for other in sorted(values[f] - {mine[f]})
                   if (n := cells.get(tuple(sorted({**mine, f: other}.items())))) is not None]
            for cell, mine in levels.items()}


def _level(m: int, rho: float, df: int, alpha: float) -> float:
    """The one-sided p-value below which one of m comparisons (correlations at least rho) drops a cell; 0 for none."""
    return _level_at(m, _rounded(rho), df, alpha) if m else 0.0


def _rounded(rho: float) -> float:
    """A correlation rounded down to a twentieth (lower is more cautious), so that looks share the computation."""
    return math.floor(min(rho, 0.95) * 20 + 1e-9) / 20


@functools.lru_cache(maxsize=4096)
def _level_at(m: int, rho: float, df: int, alpha: float) -> float:
    return float(sps.t.sf(dunnett(m, rho, df, alpha), df))


def dunnett(m: int, rho: float, df: int, alpha: float) -> float:
    """The one-sided critical value of the largest of m t statistics (df degrees of freedom) whose correlations
    are all at least rho: exceeded with chance at most alpha. With correlations below 0.05, or under 2 degrees
    of freedom (where the quadrature is not exact enough), Bonferroni's t at alpha / m."""
    grid = _rounded(rho)
    if m <= 1:
        return float(sps.t.isf(alpha, df))
    if grid < 0.05 or df < 2:
        return float(sps.t.isf(alpha / m, df))
    return _dunnett(m, grid, df, alpha)


_NORMAL = np.polynomial.hermite_e.hermegauss(40)  # nodes and weights for the shared normal part
_SPREAD = np.polynomial.legendre.leggauss(96)  # nodes and weights for the noise estimate's scale


@functools.lru_cache(maxsize=4096)
def _dunnett(m: int, rho: float, df: int, alpha: float) -> float:
    z, wz = _NORMAL[0], _NORMAL[1] / math.sqrt(2 * math.pi)
    low, top = (math.sqrt(sps.chi2.ppf(q, df) / df) for q in (1e-12, 1 - 1e-12))
    s = low + (_SPREAD[0] + 1) / 2 * (top - low)  # the estimated noise over the true one: sqrt(chi2(df) / df)
    ws = _SPREAD[1] / 2 * (top - low) * sps.chi.pdf(s * math.sqrt(df), df) * math.sqrt(df)

    def exceeded(d: float) -> float:
        # each statistic is sqrt(rho) z + sqrt(1 - rho) e_i over s: given z and s the m are independent
        inside = special.ndtr((d * s[:, None] - math.sqrt(rho) * z[None, :]) / math.sqrt(1 - rho)) ** m @ wz
        return float((1 - inside) @ ws)

    return float(optimize.brentq(lambda d: exceeded(d) - alpha, sps.t.isf(alpha, df), sps.t.isf(alpha / m, df) + 1e-9,
                                 xtol=1e-6))


def _level_pairs(fit: Pooled, alive: Sequence[str], levels: Mapping[str, Mapping[str, str]],
                 factors: Sequence[str]) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """(factor, level, other level, each racing cell at the level with its measured neighbour at the other) for
    every level a cell races at against every other measured level of its factor, where each has one."""
    found = []
    for factor in factors:
        racing = [c for c in alive if factor in levels[c] and c in fit.cells]
        for level in sorted({levels[c][factor] for c in racing}):
            mine = [c for c in racing if levels[c][factor] == level]
            for other in sorted({levels[c][factor] for c in fit.cells if factor in levels[c]} - {level}):
                pairs = [(c, _neighbour(c, factor, other, fit.cells, levels)) for c in mine]
                if all(n is not None for _, n in pairs):  # else "everywhere" is unknown
                    found.append((factor, level, other, pairs))
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
