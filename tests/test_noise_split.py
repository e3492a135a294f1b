"""The noise split on simulated runs (no servers): 4 cells x 3 runs of 10 per-second points, each run
offset from its cell by the noise between runs, each second by the noise inside a run (lognormal). The
split finds each level's size, and its plan is "more runs" where the noise is between runs and "longer
runs" where it is inside them. docs/statistics.md quotes the rates."""

from __future__ import annotations

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
