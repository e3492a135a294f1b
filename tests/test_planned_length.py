"""The plan acted on: under `until = "settled"` with `run_length`, each round after the first look runs at the
length the noise split plans (storlab.answer.noise_split.costed), and the answer still reads the rounds as
blocks. Simulated (no servers): thousands of 2x2 experiments whose runs vary mostly inside themselves; then
on a real PostgreSQL, a small pgbench whose third round runs at the planned length and says so.

Each simulated run is what the answer reads of it: its figure's log, the cell's truth plus the round's mood
plus the noise between runs (s_run) plus the mean of its n seconds' noise (s_in / sqrt n), and the spread of
its seconds (s_in^2 times a chi-square on n - 1). The plan reads the two variances from them by the method of
moments (the seconds' pooled spread; the runs' residual spread about cell and round, less what their seconds
explain), which is what the mixed model the answer fits finds in a design this balanced, at a thousandth of
its cost; the rest is the real planner, fed each experiment's own undecided intervals."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from storlab.answer import analysis, noise_split, sequential
from storlab.results.store import Store
from tests import simulate
from tests.commands import storlab

SIMS = 2000
LIMIT = 0.05 + 2.6 * math.sqrt(0.05 * 0.95 / SIMS)  # a method at exactly 5 % fails it with probability below 0.5 %
FACTORS = {"layout.log_on": ["disk", "ram"], "workload.clients": [1, 4]}
CELLS = len(simulate.cells(FACTORS))
DECLARED, SHORTEST, LONGEST = 10, 10, 120  # run_length = { max = "2m" } on duration_s = 10
COST_S = 60.0  # a run's fixed part: its instance made, its data prepared (scale 100 or so), its warm-up
MAX_ROUNDS = 30
MARGIN = 0.05
INSIDE = 0.20  # one second's CV inside a run
BETWEEN = 0.005  # a run's offset from its cell: the noise is mostly inside runs
LENGTH_SHIFT = -0.05  # every cell's figure 5 % lower each time its runs double (a cache filling, a checkpoint)


def _moments(figures: np.ndarray, spread: np.ndarray, lengths: np.ndarray, rounds: int):
    """(between, inside) per simulation from `rounds` rounds: figures and spreads are runs x sims, lengths
    rounds x sims."""
    n = np.repeat(lengths[:rounds], CELLS, axis=0)  # runs x sims
    inside = spread[: rounds * CELLS].sum(axis=0) / (n - 1).sum(axis=0)
    cell = np.tile(np.eye(CELLS), (rounds, 1))
    block = np.repeat(np.eye(rounds), CELLS, axis=0)[:, 1:]
    X = np.hstack([cell, block])
    resid = figures[: rounds * CELLS] - X @ np.linalg.lstsq(X, figures[: rounds * CELLS], rcond=None)[0]
    mse = (resid**2).sum(axis=0) / (X.shape[0] - X.shape[1])
    return np.maximum(mse - inside * (1 / n).mean(axis=0), 0.0), inside


def until_settled(ratio, seed: int, planned: bool, inside: float = INSIDE, between: float = BETWEEN,
                  max_rounds: int = MAX_ROUNDS):
    """SIMS experiments run until settled from a look after round 2, each round's length planned (`planned`) or
    the declared one, each length moving every cell's figure alike (LENGTH_SHIFT); returns (any false
    'different' or interaction per sim, settled per sim, rounds run, the seconds they cost, each round's
    length rounds x sims)."""
    rng = np.random.default_rng(seed)
    full = simulate.template(FACTORS, max_rounds)
    truth = np.array([math.log(ratio(o.factors)) for o in full])
    mood = np.repeat(rng.normal(0, 0.10, (max_rounds, SIMS)), CELLS, axis=0)
    between_noise = rng.normal(0, between, (len(full), SIMS))
    seconds_noise = rng.normal(size=(len(full), SIMS))
    spread_draw = rng.random((len(full), SIMS))
    lengths = np.full((max_rounds, SIMS), float(DECLARED))
    figures, spread = np.zeros((len(full), SIMS)), np.zeros((len(full), SIMS))
    going = np.ones(SIMS, dtype=bool)
    different = np.zeros(SIMS, dtype=bool)
    rounds_run = np.full(SIMS, max_rounds)
    max_looks = sequential.looks(max_rounds)

    def made(rnd: int) -> None:  # round rnd's runs, at each simulation's length for it
        rows = slice((rnd - 1) * CELLS, rnd * CELLS)
        n = lengths[rnd - 1]
        figures[rows] = (truth[rows, None] + mood[rows] + LENGTH_SHIFT * np.log2(n / DECLARED) + between_noise[rows]
                         + seconds_noise[rows] * inside / np.sqrt(n))
        spread[rows] = inside**2 * stats.chi2.ppf(spread_draw[rows], n - 1)

    made(1)
    for rnd in range(2, max_rounds + 1):
        made(rnd)
        look = rnd - 1
        fits = simulate.Fits(full[: rnd * CELLS], FACTORS)
        alpha = sequential.alpha_at(look, max_looks)
        Y = figures[: rnd * CELLS]
        codes, interaction = fits.verdicts(Y, alpha, MARGIN)
        different |= going & ((codes == "D").any(axis=0) | interaction)
        settled = (codes != "U").all(axis=0)
        rounds_run[going & settled] = rnd
        going &= ~settled
        if rnd == max_rounds or not going.any():
            break
        if not planned:
            continue
        est, se, _, _ = fits.tests(Y)
        wide, narrow = stats.t.ppf(1 - alpha / 2, fits.df), stats.t.ppf(1 - alpha, fits.df)
        across, within = _moments(figures, spread, lengths, rnd)
        for sim in np.flatnonzero(going):
            undecided = [SimpleNamespace(ratio=math.exp(e), ci_low=math.exp(e - wide * s), ci_high=math.exp(e + wide * s),
                                         equivalence_low=math.exp(e - narrow * s), equivalence_high=math.exp(e + narrow * s))
                         for e, s, code in zip(est[:, sim], se[:, sim], codes[:, sim]) if code == "U"]
            need = noise_split.Need(noise_split.narrowing(undecided, MARGIN), cells=CELLS, rounds=rnd,
                                    longest_s=LONGEST, shortest_s=SHORTEST, lengths=tuple(lengths[:rnd, sim]),
                                    rounds_left=max_rounds - rnd)
            _, _, plan = noise_split.costed(across[sim], within[sim], float(lengths[:rnd, sim].mean()), COST_S, need)
            lengths[rnd:, sim] = lengths[rnd - 1, sim] if plan is None else plan.length
    used = np.arange(1, max_rounds + 1)[:, None] <= rounds_run[None, :]
    seconds = (CELLS * (COST_S + lengths) * used).sum(axis=0)
    return different, ~going, rounds_run, seconds, lengths


def test_acting_on_the_plan_settles_in_fewer_seconds_when_the_noise_is_inside_runs():
    """One factor makes a 1.5x difference and one is inert; runs of 10 s vary by 6 %, nearly all of it their
    seconds' noise (20 % a second, 0.5 % between runs), and a run costs 60 s before its load: longer runs
    settle the inert factor's equivalence within ±5 % in fewer seconds than more rounds of 10 s runs do, and
    settle more often by round 30."""
    effect = lambda levels: 1.5 if levels["layout.log_on"] == "ram" else 1.0  # noqa: E731
    _, fixed_settled, fixed_rounds, fixed_s, _ = until_settled(effect, seed=3, planned=False)
    _, settled, rounds, seconds, lengths = until_settled(effect, seed=3, planned=True)
    print(f"fixed 10 s: {fixed_s.mean():.0f} s, {fixed_rounds.mean():.1f} rounds, settled {100 * fixed_settled.mean():.0f} %; "
          f"planned: {seconds.mean():.0f} s, {rounds.mean():.1f} rounds, settled {100 * settled.mean():.0f} %, "
          f"round 3's length {np.percentile(lengths[2], [10, 50, 90])} s (10th, 50th, 90th percentiles)")
    assert seconds.mean() < 0.8 * fixed_s.mean()
    assert settled.mean() >= fixed_settled.mean()
    assert np.median(lengths[2]) > DECLARED  # the plan lengthened the runs after the first look


@pytest.mark.parametrize("between, inside, max_rounds", [(BETWEEN, INSIDE, 12), (BETWEEN, INSIDE, MAX_ROUNDS),
                                                         (0.02, 0.30, 12)])
def test_identical_cells_are_rarely_called_different_when_lengths_change_between_rounds(between, inside, max_rounds):
    """The rounds are blocks and every round weighs alike, so a length that changes between rounds (and the
    variance with it, and every cell's level as LENGTH_SHIFT moves it) shifts no level against another: the
    false 'different' rate stays at most 5 % over every look, the lengths chosen from each experiment's own
    intervals."""
    different, _, rounds, _, lengths = until_settled(lambda levels: 1.0, seed=17, planned=True, inside=inside,
                                                     between=between, max_rounds=max_rounds)
    changed = (lengths[1:] != lengths[:-1]).any(axis=0)
    print(f"identical cells, up to {max_rounds} rounds, {100 * between:.1f} % between runs and {100 * inside:.0f} % "
          f"a second inside: false 'different' in {100 * different.mean():.1f} % of {SIMS} (limit {100 * LIMIT:.1f} %), "
          f"lengths changed in {100 * changed.mean():.0f} %, {rounds.mean():.1f} rounds on average")
    assert changed.mean() > 0.5  # the test exercises changing lengths
    assert different.mean() <= LIMIT


# -- on a real PostgreSQL ---------------------------------------------------------------------------------

PGBENCH = """
name = "planned-length"
engine = "postgres"
repetitions = {{ max = 3, until = "settled", run_length = {{ max = "5s" }} }}
equivalent_within = "0.1%"

[placements]
disk = "{disk}"

[layout]
data_on = "disk"

[workload]
kind = "pgbench"
scale = 1
clients = 2
duration_s = 3

[engine_settings]
statement_timeout = ["1h", "2h"]
"""


@pytest.mark.engine
def test_a_round_after_the_first_look_runs_at_the_planned_length_and_the_answer_says_so(write_experiment, lab_dir,
                                                                                       tmp_path):
    """A factor that cannot matter to pgbench (a statement timeout none comes near) and a margin (±0.1 %) two
    rounds of 3 s runs cannot show equivalence within: the first look leaves it undecided, the noise split plans
    round 3 (within run_length's 3 to 5 s: its longest, as the last round allowed cannot reach the need), the
    runs of round 3 last that long, and `run` and `show` say which rounds ran at which length and why."""
    path = write_experiment(PGBENCH.format(disk=lab_dir), "planned.toml")
    out = tmp_path / "r"
    done = storlab("run", str(path), "--no-trace", "--out", str(out))
    assert done.returncode == 0, done.stderr
    printed = " ".join(done.stdout.split())  # as wide as the terminal: rich wraps the long lines
    said = re.search(r"round 3: runs of (\d+) s \((planned|kept)[:,] (.+?)\) (round \d+:|runs |max reached|settled)",
                     printed)
    assert said, done.stdout
    planned = int(said[1])
    # One round left cannot narrow the interval to ±0.1 %: the plan is the most it can do, max's one round
    # of the longest runs the file allows.
    assert said[2] == "planned" and planned == 5 and "the most max 3 rounds and runs of at most 5 s allow" in said[3]
    assert "round 1: runs of 3 s (declared duration_s, until the first look)" in printed
    with Store.open(out, create=False) as store:
        results = analysis.load(store)
        stopped = store.experiment().stopped
    assert f"round 3 {planned} s" in stopped, stopped
    measured = {(kept.repetition, round(kept.measured_s)) for c in results.measured for kept in c.series}
    assert {rep for rep, _ in measured} == {1, 2, 3}
    assert measured == {(1, 3), (2, 3), (3, planned)}, measured  # each round's runs lasted its length
    assert all(r.conditions[noise_split.RUN_LENGTH]["s"] == (3 if r.repetition < 3 else planned)
               for c in results.measured for r in c.runs)
    details = storlab("show", str(out), "--details").stdout
    print(done.stdout, details, sep="\n")
    assert f"round 3 ran {planned} s ({said[2]}" in " ".join(details.split())

