"""The noise split on simulated runs (no servers): 4 cells x 3 runs of 10 per-second points, each run
offset from its cell by the noise between runs, each second by the noise inside a run (lognormal). The
split finds each level's size, and its plan is "more runs" where the noise is between runs and "longer
runs" where it is inside them. docs/statistics.md quotes the rates."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from storlab.answer import noise_split

EXPERIMENTS = 20


def simulated(rng: np.random.Generator, between: float, inside: float) -> dict[str, list[np.ndarray]]:
    return {f"cell{c}": [1000 * np.exp(level + rng.normal(0, between) + rng.normal(0, inside, 10)) for _ in range(3)]
            for c in range(4) for level in [rng.normal(0, 0.3)]}


@pytest.mark.parametrize("between, inside, advice", [(0.10, 0.05, "more runs"), (0.02, 0.20, "longer runs")])
def test_the_plan_follows_where_the_noise_is(between, inside, advice):
    rng = np.random.default_rng(7)
    found = [noise_split.split(simulated(rng, between, inside), cost_s=30.0) for _ in range(EXPERIMENTS)]
    assert sum(f.advice == advice for f in found) / EXPERIMENTS >= 0.85
    assert np.median([np.sqrt(f.inside_run) for f in found]) == pytest.approx(inside, rel=0.1)
    if between >= 0.1:
        assert np.median([np.sqrt(f.between_runs) for f in found]) == pytest.approx(between, rel=0.25)


def test_one_run_a_cell_has_no_split_and_an_unknown_cost_no_advice():
    rng = np.random.default_rng(8)
    assert noise_split.split({"a": [np.full(10, 1000.0)], "b": [np.full(10, 900.0)]}, 30.0) is None
    found = noise_split.split(simulated(rng, 0.05, 0.05), cost_s=None)
    assert found.advice is None and "unknown" in found.plan


def test_a_runs_fixed_cost_is_the_wall_time_between_runs_beyond_their_load():
    assert noise_split.run_cost([(100.0, 10.0), (135.0, 10.0), (170.0, 12.0)]) == pytest.approx(25.0)
    assert noise_split.run_cost([(100.0, 10.0)]) is None


SPLIT = {"between": 0.02**2, "inside": 0.20**2}  # a run's mean varies mostly by its seconds


def _series(rng, between, inside, runs=3, seconds=20):
    return {f"cell{c}": [1000 * np.exp(rng.normal(0, math.sqrt(between)) + rng.normal(0, math.sqrt(inside), seconds))
                         for _ in range(runs)] for c in range(4)}


def test_a_settled_answer_plans_nothing():
    found = noise_split.split(_series(np.random.default_rng(1), **SPLIT), cost_s=30.0, settled=True)
    assert found.advice is None and found.plan == "none: the answer is settled"
    assert "2843" not in found.plan and "longer" not in found.plan


PLANNED = r"\w+ runs: (\d+) rounds? more of (\d+) s"


@pytest.mark.parametrize("between, inside, longer", [(0.10**2, 0.05**2, False), (0.02**2, 0.20**2, True)])
def test_the_costed_plan_is_the_cheaper_way_to_the_interval_the_verdicts_need(between, inside, longer):
    """Where the noise is between runs, more rounds of the same runs; inside them, fewer rounds of longer runs."""
    rng = np.random.default_rng(9)
    need = noise_split.Need(narrow=0.6, cells=4, rounds=3)
    found = [noise_split.split(_series(rng, between, inside), cost_s=30.0, need=need) for _ in range(EXPERIMENTS)]
    lengths = [int(re.match(PLANNED, f.plan)[2]) for f in found]
    assert sum((n > 20) == longer for n in lengths) / EXPERIMENTS >= 0.85


def test_following_the_plan_narrows_the_interval_as_it_says():
    """Simulated: the rounds and run length each of 20 plans gives (from 3 rounds' estimates of the two
    variances), run with the true variances, narrow a cell's mean's spread to the share asked (0.5) of what the
    rounds done left, or short of it by the estimates' error: 3 rounds tell the variance between runs poorly
    when it is small, and a plan read from too small a one lengthens runs that cannot average it away
    (docs/statistics.md quotes the median)."""
    rng = np.random.default_rng(11)
    between, inside = SPLIT["between"], SPLIT["inside"]
    reached = []
    for _ in range(EXPERIMENTS):
        found = noise_split.split(_series(rng, between, inside), cost_s=30.0,
                                  need=noise_split.Need(narrow=0.5, cells=4, rounds=3))
        rounds, length = [int(x) for x in re.match(PLANNED, found.plan).groups()]

        def means(count, seconds):
            return (rng.normal(0, math.sqrt(between), (4000, count))
                    + rng.normal(0, math.sqrt(inside / seconds), (4000, count)))

        done, more = means(3, 20), means(rounds, length)
        # every round weighed alike, as the factor answer's fit (OLS, each round a block) weighs them
        pooled = np.hstack([done, more]).mean(axis=1)
        reached.append(pooled.std() / done.mean(axis=1).std())
    print(f"the plans asked 0.5 and reached {np.median(reached):.2f} (median of {EXPERIMENTS})")
    assert 0.45 <= np.median(reached) <= 0.7


def test_no_plan_outgrows_the_budget_left():
    """A plan that would reach the need costs more than the budget left: the plan is the most the budget
    holds, and says so; never more."""
    rng = np.random.default_rng(12)
    need = noise_split.Need(narrow=0.5, cells=4, rounds=3, budget_left_s=400.0)
    found = noise_split.split(_series(rng, **SPLIT), cost_s=30.0, need=need)
    assert found.costed.total_s <= 400 and not found.costed.reaches
    assert "the most the budget left allow" in found.plan and f"to {found.costed.reached:.2f} of its width" in found.plan
    roomy = noise_split.split(_series(rng, **SPLIT), cost_s=30.0, need=noise_split.Need(0.5, 4, 3, budget_left_s=1e5))
    assert roomy.costed.reaches and roomy.costed.total_s <= 1e5
    tight = noise_split.split(_series(rng, **SPLIT), cost_s=30.0, need=noise_split.Need(0.5, 4, 3, budget_left_s=100.0))
    assert tight.advice is None and tight.costed is None and tight.plan.startswith("none fits: a round of 4 runs of 20 s")


def test_the_need_is_what_settles_the_hardest_undecided_level():
    undecided = [
        # 1.10x [0.95, 1.27], its equivalence interval [0.97, 1.24], against ±25 %: inside the margin at a half-width
        # of log 1.25 - log 1.10 (0.128) where it has 0.123 (log 1.24 - log 0.97, halved): 1.04, already enough
        SimpleNamespace(ratio=1.10, ci_low=0.95, ci_high=1.27, equivalence_low=0.97, equivalence_high=1.24),
        # 1.12x [0.90, 1.39] / [0.93, 1.35]: different at a half-width of log 1.12 (0.113) of 0.217 (0.52), or
        # equivalent at log 1.25 - log 1.12 (0.110) of 0.186 (0.59): the second asks less
        SimpleNamespace(ratio=1.12, ci_low=0.90, ci_high=1.39, equivalence_low=0.93, equivalence_high=1.35),
    ]
    assert noise_split.narrowing(undecided, 0.25) == pytest.approx(math.log(1.25 / 1.12) / (math.log(1.35 / 0.93) / 2))
    assert noise_split.narrowing([], 0.25) == 1.0  # nothing undecided: nothing to narrow
