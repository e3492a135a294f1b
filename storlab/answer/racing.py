"""Racing: which cells still get runs (F-race: Birattari, Stützle, Paquete and Varrentrapp 2002).

Runs come in rounds: round r is repetition r of every cell still racing, and the rounds are the blocks of a
Friedman test, so slow drift of the machine touches every cell of a round alike. After each round from
`min_rounds` on, a Friedman test over the cells still racing asks whether they differ at all; when they do,
Conover's post-hoc test on the rank sums (Conover 1999, Practical Nonparametric Statistics, 3rd ed.,
pp. 369-371, the post-hoc of F-race as irace implements it) tells which cells are worse than the leader,
and those get no more runs. Ranks, not means, so one slow run (a checkpoint) cannot decide a drop.

Ranks also throw away how far apart the cells are, so the race weighs the paired evidence too, the way the
factor table reads the runs (storlab.effects): the two-way ANOVA (cell + round) on the logs of the figures
and Fisher's least significant difference from its pooled residual. A cell is dropped when either test finds
it worse than the leader. Simulated on 16 cells with one clearly best (0.7-0.85x the next, the others up to
1.6x, CV 5-10 %, rounds drifting by 10 %), racing from 2 to 5 rounds took 47-58 % of the full matrix's runs
on ranks alone and 40-47 % with the paired evidence, keeping the best cell in every race
(tests/test_racing.py).

The paired evidence's noise is read from every run the race has decided on: the cells dropped keep telling
it (`pooled_noise`). benchmarks/racing.py's race had used 47 of its 80 runs on a busy day: its 16 cells' runs
last 10 to 700 ms and vary by 20 to 70 %, so after round 2 the least significant difference was about 2x and
the second best cell, 2x slower, raced on to round 5 against the best with the two cells' own runs for
noise (1 to 4 degrees of freedom). Replayed over the 120 orders of a real full matrix's five rounds, the race
used 32-38 runs; with the noise of the 14 cells dropped after round 2 the second goes after round 3
(34 runs in the order it ran). Simulated with that matrix's cells, it names the best in 34 runs of 80 at a
CV of 35 % and 38 at 50 % (37.5 and 38.5 before), and no race names a cell more than 5 % worse than the best
more often than the full matrix of the same runs does (tests/test_racing.py).

The decision is a pure function of the runs recorded: `race` replays every round from the first, so a
resumed run, a `show`, or a raised `max` reach the same drops in the same rounds.

A race decides where runs go, not the answer: it tests after every round, so among 8 identical cells
(CV 10 %, rounds drifting by 10 %) it drops one in about 21 % of races from 3 to 10 rounds (14 % from 2 to 5;
15 % and 10 % on ranks alone). Every run is kept; the verdicts come from `stats.against_best_paired` and the
factor table over all of them. To spend at most half the runs of a 5-repetition matrix,
`min_rounds` must be 2: three rounds of every cell already cost 60 %.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as sps

from storlab.rounds import ALPHA, RaceSettings

# cell id -> repetition number (1, 2, ...) -> the run's figure, or None when that run failed.
# A repetition that has not run yet is absent.
Rounds = Mapping[str, Mapping[int, float | None]]

SHUFFLES = 4000  # permutations behind each Friedman p-value: its Monte Carlo error near 5 % is 0.3 %
SHUFFLE_SEED = 2002  # fixed, so the same runs always give the same p-value and the same drops


@dataclass(frozen=True)
class RoundTest:
    """The Friedman test of one round, kept for `show` and the report."""

    round: int
    cells: tuple[str, ...]  # the cells that raced in this round
    blocks: int  # rounds with a figure from every one of those cells
    statistic: float  # Friedman's chi-squared (Conover's T1, corrected for ties)
    p_value: float  # from shuffling the ranks within each round
    rank_sums: dict[str, float]  # rank 1 is the best run of a round
    critical_difference: float | None  # Conover's, when the test was significant
    blocked_p: float | None = None  # the two-way ANOVA (cell + round) on the logs; None without positive figures
    least_difference: float | None = None  # its least significant log ratio to the leader, when significant


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
    best: str | None  # the cell racing with the best mean so far
    finished: str | None  # why the race stopped; None while it goes on
    tests: tuple[RoundTest, ...]

    @property
    def next_round(self) -> int | None:
        """The repetition every cell in `alive` runs next (those it already has are kept as they are)."""
        return None if self.finished else self.rounds + 1


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
    Nothing is decided before `min_rounds`. After each round: drop the cells Conover's test finds worse
    than the leader; stop when one cell is left, when every cell left is within `equivalent_within` of the
    best, or at `max_rounds`. Runs beyond a cell's drop (recorded before racing was switched on) are kept
    in the store but take no part in the race."""
    if not values:
        raise ValueError("no cells to race")
    alive = list(values)
    drops: list[Drop] = []
    tests: list[RoundTest] = []
    finished = None
    done = 0
    for rnd in range(1, settings.max_rounds + 1):
        if any(rnd not in values[cell] for cell in alive):
            break
        done = rnd
        if rnd < settings.min_rounds:
            continue
        test, dropped = decide_round(values, alive, rnd, settings, {d.cell: d.round for d in drops})
        if test is not None:
            tests.append(test)
        drops += dropped
        alive = [c for c in alive if c not in {d.cell for d in dropped}]
        finished = _finish(values, alive, rnd, settings)
        if finished:
            break
    best = _best_mean(values, alive, done, settings.lower_is_better) if done else None
    return RaceState(tuple(alive), tuple(drops), done, best, finished, tuple(tests))


def decide_round(
    values: Rounds, alive: Sequence[str], rnd: int, settings: RaceSettings, dropped: Mapping[str, int] | None = None,
) -> tuple[RoundTest | None, list[Drop]]:
    """One round's decision: the Friedman test over `alive` on rounds 1..rnd, then Conover's post-hoc; and
    the paired evidence, its noise read from every run the race has decided on (`dropped`: the cells
    dropped so far, each with the last round it raced).

    A round where a racing cell's run failed is left out of the test (a complete block design needs every
    cell in every block, and a failed run says nothing about speed); the race goes on with the rounds
    that are whole. No test runs with fewer than 2 whole rounds or fewer than 2 cells."""
    cells = sorted(alive)  # the order the ranks are shuffled in must not depend on how the caller lists cells
    blocks = [r for r in range(1, rnd + 1) if all(values[c][r] is not None for c in cells)]
    if len(cells) < 2 or len(blocks) < 2:
        return None, []
    table = np.array([[values[c][r] for c in cells] for r in blocks], dtype=float)
    ranks = np.apply_along_axis(sps.rankdata, 1, table if settings.lower_is_better else -table)
    statistic, p = friedman(ranks)
    sums = ranks.sum(axis=0)
    blocked = blocked_test(table, settings, pooled_noise(values, rnd, cells, dropped or {})) if (table > 0).all() else None
    cd = conover_difference(ranks, settings.alpha) if p < settings.alpha else None
    lsd = blocked[2] if blocked is not None and blocked[1] < settings.alpha else None
    test = RoundTest(rnd, tuple(cells), len(blocks), statistic, p, dict(zip(cells, sums.tolist())), cd,
                     blocked[1] if blocked is not None else None, lsd)
    by_ranks = min(cells, key=lambda c: (test.rank_sums[c], _mean(values, c, rnd, settings.lower_is_better), c))
    logs = dict(zip(cells, blocked[0].tolist())) if blocked is not None else {}
    by_logs = min(cells, key=lambda c: (logs[c], c)) if logs else by_ranks
    evidence: dict[str, str] = {}
    for c in cells:
        if c in (by_ranks, by_logs):  # either test's leader keeps racing, so a race never drops every cell
            continue
        if cd is not None and test.rank_sums[c] - test.rank_sums[by_ranks] > cd:
            evidence[c] = _evidence(test, c, by_ranks)
        elif lsd is not None and logs[c] - logs[by_logs] > lsd:
            evidence[c] = _paired_evidence(test, c, by_logs, logs[c] - logs[by_logs])
    return test, [Drop(c, rnd, evidence[c]) for c in alive if c in evidence]


def pooled_noise(values: Rounds, rnd: int, alive: Sequence[str], dropped: Mapping[str, int]) -> tuple[float, int] | None:
    """The run-to-run noise of the race so far: the residual mean square and degrees of freedom of
    log(figure) ~ cell + round (least squares) over every run of rounds 1..rnd of the cells racing, and of
    each dropped cell up to the round it was dropped in. A round's cells share the machine's mood, which
    the rounds take out; what is left is the noise every comparison of the race faces, and the cells
    dropped keep telling it: after round 2 of 16 cells it has 15 degrees of freedom, where the two cells
    left racing would have 1 between them."""
    cells = list(alive) + [c for c in dropped if c not in alive]
    rows = [(i, r, math.log(v)) for i, c in enumerate(cells) for r in range(1, min(dropped.get(c, rnd), rnd) + 1)
            if (v := values[c].get(r)) is not None and v > 0]
    rounds = sorted({r for _, r, _ in rows})
    X = np.zeros((len(rows), len(cells) + len(rounds) - 1))
    for row, (i, r, _) in enumerate(rows):
        X[row, i] = 1.0
        if rounds.index(r):
            X[row, len(cells) + rounds.index(r) - 1] = 1.0
    y = np.array([v for *_, v in rows])
    rank = np.linalg.matrix_rank(X) if len(rows) else 0
    df = len(rows) - rank
    if df < 1:
        return None
    residual = y - X @ np.linalg.lstsq(X, y, rcond=None)[0]
    return float(residual @ residual) / df, df


def blocked_test(table: np.ndarray, settings: RaceSettings,
                 pooled: tuple[float, int] | None = None) -> tuple[np.ndarray, float, float]:
    """The paired evidence of a round: the two-way ANOVA without replication (cell + round) on the logs of a
    rounds x cells table of figures, as the factor table reads the runs (storlab.effects). Returns each cell's
    mean log (signed so that lower is better), the F test's p-value for "the cells differ", and Fisher's least
    significant difference of two cells' mean logs, t(1 - alpha/2, (b-1)(k-1)) sqrt(2 MSE / b).

    Ranks throw away how far apart the runs are: with 2 rounds, Conover's test cannot tell a cell twice as
    slow from one 5 % slower when both rank last twice. The logs keep it, and the pooled residual of the
    two-way model has (b-1)(k-1) degrees of freedom, 15 after 2 rounds of 16 cells, where a paired t-test
    of two cells would have 1. As with Conover's test after Friedman's, a cell is dropped only when the
    omnibus F test is significant and it is farther from the leader than the least significant difference
    (Fisher's protected LSD, Carmer and Swanson 1973)."""
    logs = np.log(table) * (1.0 if settings.lower_is_better else -1.0)
    blocks, k = logs.shape
    grand = logs.mean()
    cells, rounds = logs.mean(axis=0), logs.mean(axis=1)
    residual = logs - cells[None, :] - rounds[:, None] + grand
    df = (blocks - 1) * (k - 1)
    mse = float((residual**2).sum()) / df
    if pooled is not None:
        mse, df = pooled
    between = blocks * float(((cells - grand) ** 2).sum()) / (k - 1)
    if mse <= 1e-24:
        p = 1.0 if between <= 1e-24 else 0.0
    else:
        p = float(special.fdtrc(k - 1, df, between / mse))
    lsd = float(special.stdtrit(df, 1 - settings.alpha / 2) * math.sqrt(2 * mse / blocks))
    return cells, p, lsd


def friedman(ranks: np.ndarray) -> tuple[float, float]:
    """Friedman's statistic over a blocks x cells table of ranks, and its p-value from SHUFFLES random
    permutations of the ranks within each block.

    The chi-squared approximation F-race and irace use is poor for the few rounds and cells storlab races:
    with 2 cells and 4 rounds it calls equal cells different 13 % of the time, and the F form (Iman and
    Davenport 1980) 50 % with 2 cells and 2 rounds. Shuffling the ranks within each round draws from the
    test's exact null distribution, ties included, whatever the number of cells and rounds; the fixed seed
    makes the p-value a pure function of the ranks."""
    blocks, k = ranks.shape
    sums = ranks.sum(axis=0)
    spread = (ranks**2).sum() - blocks * k * (k + 1) ** 2 / 4  # Conover's A1 - C1; 0 when every block is a tie
    if spread <= 1e-9:
        return 0.0, 1.0
    statistic = (k - 1) * ((sums - blocks * (k + 1) / 2) ** 2).sum() / spread
    rng = np.random.default_rng(SHUFFLE_SEED)
    shuffled = rng.permuted(np.broadcast_to(ranks, (SHUFFLES, blocks, k)), axis=2)
    # Within-block shuffles keep the sum of squared ranks, so the statistic orders as the sum of squared
    # rank sums does.
    null = (shuffled.sum(axis=1) ** 2).sum(axis=1)
    extreme = int((null >= (sums**2).sum() - 1e-9).sum())
    return float(statistic), (1 + extreme) / (1 + SHUFFLES)


def conover_difference(ranks: np.ndarray, alpha: float) -> float:
    """The least difference of rank sums that tells two cells apart after a significant Friedman test
    (Conover 1999, eq. 5.8.5; the post-hoc of F-race): t(1 - alpha/2, (b-1)(k-1)) times
    sqrt(2 (b A1 - sum Rj^2) / ((b-1)(k-1)))."""
    blocks, k = ranks.shape
    df = (blocks - 1) * (k - 1)
    sums = ranks.sum(axis=0)
    scatter = max(blocks * (ranks**2).sum() - (sums**2).sum(), 0.0)
    return float(special.stdtrit(df, 1 - alpha / 2) * math.sqrt(2 * scatter / df))


def _evidence(test: RoundTest, cell: str, leader: str) -> str:
    return (
        f"after round {test.round}: rank sum {test.rank_sums[cell]:g} against {test.rank_sums[leader]:g} for the "
        f"leader {leader}, more than Conover's critical difference {test.critical_difference:.1f}; Friedman test "
        f"over {len(test.cells)} cells x {test.blocks} rounds: chi-squared {test.statistic:.1f}, p = {test.p_value:.3f}"
    )


def _paired_evidence(test: RoundTest, cell: str, leader: str, gap: float) -> str:
    return (
        f"after round {test.round}: {100 * math.expm1(gap):.0f} % worse than the leader {leader} in the geometric mean "
        f"paired by round, more than the least significant difference {100 * math.expm1(test.least_difference):.0f} %; "
        f"two-way ANOVA (cell + round, on the logs) over {len(test.cells)} cells x {test.blocks} rounds: "
        f"p = {test.blocked_p:.3g}"
    )


def _figures(values: Rounds, cell: str, rnd: int) -> list[float]:
    return [v for r, v in values[cell].items() if r <= rnd and v is not None]


def _mean(values: Rounds, cell: str, rnd: int, lower_is_better: bool) -> float:
    """The cell's mean over rounds 1..rnd, signed so that smaller is better; inf for a cell with no figure."""
    figures = _figures(values, cell, rnd)
    if not figures:
        return math.inf
    mean = math.fsum(figures) / len(figures)
    return mean if lower_is_better else -mean


def _best_mean(values: Rounds, alive: Sequence[str], rnd: int, lower_is_better: bool) -> str:
    return min(alive, key=lambda c: (_mean(values, c, rnd, lower_is_better), c))


def _finish(values: Rounds, alive: Sequence[str], rnd: int, settings: RaceSettings) -> str | None:
    if len(alive) == 1:
        return f"one cell left after round {rnd}"
    if settings.equivalent_within is not None and _all_equivalent(values, alive, rnd, settings):
        return (
            f"after round {rnd}, the {len(alive)} cells left are within "
            f"{100 * settings.equivalent_within:g} % of the best (90 % confidence)"
        )
    if rnd >= settings.max_rounds:
        return f"max reached: {rnd} rounds"
    return None


def _all_equivalent(values: Rounds, alive: Sequence[str], rnd: int, settings: RaceSettings) -> bool:
    best = _best_mean(values, alive, rnd, settings.lower_is_better)
    return all(
        within(_by_round(values, best, rnd), _by_round(values, c, rnd), settings.equivalent_within, settings.alpha)
        for c in alive if c != best
    )


def _by_round(values: Rounds, cell: str, rnd: int) -> dict[int, float]:
    return {r: v for r, v in values[cell].items() if r <= rnd and v is not None}


def within(best: Mapping[int, float], other: Mapping[int, float], margin: float, alpha: float = ALPHA) -> bool:
    """Two one-sided tests (Schuirmann 1987), paired by round as the race's evidence and the factor table
    are: True when the 1 - 2 alpha (90 %) interval of the ratio other / best, from the log ratios of the
    rounds both ran, lies inside [1 / (1 + margin), 1 + margin]. Equal-looking means are not enough: the
    interval must be narrow too, so noisy cells keep racing; a round's mood, shared by both, is not noise."""
    rounds = sorted(set(best) & set(other))
    if len(rounds) < 2 or any(best[r] <= 0 or other[r] <= 0 for r in rounds):
        return False
    logs = np.log([other[r] / best[r] for r in rounds])
    bound = math.log1p(margin)
    spread = logs.std(ddof=1)
    if spread == 0:
        return abs(logs.mean()) < bound
    half = special.stdtrit(len(logs) - 1, 1 - alpha) * spread / math.sqrt(len(logs))
    return -bound < logs.mean() - half and logs.mean() + half < bound
