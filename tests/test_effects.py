"""The factor table: effects of each factor from the runs read as a factorial design in rounds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from storlab.answer import stats
from storlab.answer.effects import DIFFERENT, EQUIVALENT, UNDECIDED, Observation, analyse
from tests import simulate

QUICKSTART = Path(__file__).parent / "data" / "quickstart_runs.json"
TWO_BY_TWO = {"layout.log_on": ["disk", "ram"], "workload.data_files": [1, 4]}


def observe(factors, rounds, ratio, seed, cv=0.10, drift=0.15, exclude=()):
    """One simulated experiment as analyse's input."""
    rng = np.random.default_rng(seed)
    layout = simulate.template(factors, rounds, exclude)
    logs = simulate.responses(layout, ratio, 1, rng, cv=(cv, cv), drift=drift)[:, 0]
    return [Observation(o.cell, o.round, o.factors, 10 * math.exp(v)) for o, v in zip(layout, logs)]


def test_the_quickstart_runs_read_as_a_factorial_say_the_log_on_ram_is_different():
    recorded = json.loads(QUICKSTART.read_text())
    runs = [Observation(r["cell"], r["round"], r["factors"], r["elapsed"]) for r in recorded["runs"]]
    answer = analyse(runs, recorded["factors"], headline="elapsed")
    log_on, data_files = answer.effects
    assert (log_on.factor, log_on.level, log_on.reference) == ("layout.log_on", "ram", "disk")
    assert log_on.verdict == DIFFERENT and log_on.better is True
    assert (round(log_on.ratio, 2), round(log_on.ci_low, 2), round(log_on.ci_high, 2)) == (0.53, 0.47, 0.60)
    assert log_on.adjusted_p < 1e-4
    assert (data_files.level, data_files.reference) == (4, 1)
    assert data_files.verdict in (EQUIVALENT, UNDECIDED)
    assert (round(data_files.ratio, 2), round(data_files.ci_low, 2), round(data_files.ci_high, 2)) == (0.99, 0.87, 1.12)
    assert round(data_files.hidden, 2) == 0.15  # "no effect beyond ±15 % can be ruled out yet"
    assert data_files.better is None
    assert [i.factors for i in answer.interactions] == [("layout.log_on", "workload.data_files")]
    assert not answer.interactions[0].significant and answer.conditional == []
    assert answer.not_estimable == [] and not answer.settled
    assert (answer.rounds, answer.runs, round(answer.residual_cv, 3)) == (3, 12, 0.087)
    assert answer.formula == (
        "log(elapsed) ~ layout.log_on + workload.data_files + layout.log_on:workload.data_files + round")
    assert "Holm" in answer.method and "Schuirmann" in answer.method
    json.dumps(answer.to_json(), allow_nan=False)  # plain JSON, no nan


def test_a_look_of_a_sequential_experiment_widens_the_interval_to_its_level():
    recorded = json.loads(QUICKSTART.read_text())
    runs = [Observation(r["cell"], r["round"], r["factors"], r["elapsed"]) for r in recorded["runs"]]
    fixed = analyse(runs, recorded["factors"])
    looked = analyse(runs, recorded["factors"], look=2, max_looks=11)
    assert looked.alpha < 0.01 and looked.look == 2
    assert looked.effects[0].ci_low < fixed.effects[0].ci_low and looked.effects[0].ci_high > fixed.effects[0].ci_high
    assert looked.effects[0].verdict == DIFFERENT
    assert "Lan" in looked.method


def test_the_numpy_fits_of_the_simulations_are_analyse_s():
    factors = {"a": ["x", "y"], "b": [1, 2, 3, 4]}
    runs = observe(factors, 3, lambda lv: 1.3 if lv["a"] == "y" else 1.0, seed=3)
    answer = analyse(runs, factors)
    fits = simulate.Fits(runs, factors)
    est, se, p, inter = fits.tests(np.log([[r.value] for r in runs]))
    assert fits.labels == [(e.factor, e.level) for e in answer.effects]
    assert np.exp(est[:, 0]) == pytest.approx([e.ratio for e in answer.effects])
    assert p[:, 0] == pytest.approx([e.p_value for e in answer.effects])
    assert inter[:, 0] == pytest.approx([i.p_value for i in answer.interactions])
    codes, _ = fits.verdicts(np.log([[r.value] for r in runs]), 0.05)
    assert [c[0] for c in codes] == [e.verdict[0].upper() for e in answer.effects]


def test_an_interaction_is_found_and_each_factor_given_at_each_level_of_the_other():
    # the log on RAM halves the time only with 4 data files
    runs = observe(TWO_BY_TWO, 6, lambda lv: 0.5 if lv == {"layout.log_on": "ram", "workload.data_files": 4} else 1.0,
                   seed=6, cv=0.05)
    answer = analyse(runs, TWO_BY_TWO)
    assert answer.interactions[0].significant
    by = {(e.factor, json.dumps(e.given)): e for e in answer.conditional}
    assert len(answer.conditional) == 4
    at_one = by[("layout.log_on", '{"workload.data_files": 1}')]
    at_four = by[("layout.log_on", '{"workload.data_files": 4}')]
    assert at_one.verdict != DIFFERENT and at_one.ci_low < 1 < at_one.ci_high
    assert at_four.verdict == DIFFERENT and at_four.ratio == pytest.approx(0.5, rel=0.1)
    assert by[("workload.data_files", '{"layout.log_on": "ram"}')].verdict == DIFFERENT
    # the main effect is the average over data_files: about sqrt(0.5)
    assert answer.effects[0].ratio == pytest.approx(math.sqrt(0.5), rel=0.1)


def test_a_design_with_an_excluded_cell_says_what_it_cannot_estimate():
    runs = observe(TWO_BY_TWO, 4, lambda lv: 0.6 if lv["layout.log_on"] == "ram" else 1.0, seed=9,
                   exclude=[{"layout.log_on": "ram", "workload.data_files": 4}])
    answer = analyse(runs, TWO_BY_TWO)
    assert [(e.factor, e.level) for e in answer.effects] == [("layout.log_on", "ram"), ("workload.data_files", 4)]
    assert answer.effects[0].verdict == DIFFERENT
    assert answer.interactions == []
    assert answer.not_estimable == [
        "interaction layout.log_on x workload.data_files: the design has no runs to estimate it (aliased)"]

    three = {"a": ["x", "y"], "b": [1, 2, 3]}
    runs = observe(three, 4, lambda lv: 1.0, seed=2, exclude=[{"a": "y", "b": 3}])
    answer = analyse(runs, three)
    assert [i.factors for i in answer.interactions] == [("a", "b")]
    assert answer.not_estimable == ["interaction a x b: 1 of its 2 terms are not estimable (missing cells)"]


def test_a_factor_with_one_level_or_a_level_without_runs_is_named():
    factors = {"engine": ["postgres"], "b": [1, 2, 3]}
    runs = [o for o in observe({"engine": ["postgres"], "b": [1, 2]}, 3, lambda lv: 1.0, seed=1)]
    answer = analyse(runs, factors)
    assert [(e.factor, e.level) for e in answer.effects] == [("b", 2)]
    assert answer.not_estimable == ['engine: one level only ("postgres"), nothing to compare', "b = 3: no runs"]


def test_two_rounds_of_a_two_by_two_leave_the_interaction_out():
    runs = observe(TWO_BY_TWO, 1, lambda lv: 1.0, seed=4)
    answer = analyse(runs, TWO_BY_TWO)
    assert answer.interactions == [] and answer.rounds == 1
    assert answer.not_estimable[0].startswith("interaction layout.log_on x workload.data_files: not fitted")
    assert answer.formula == "log(value) ~ layout.log_on + workload.data_files"


def test_a_reference_can_be_named_and_levels_may_be_dicts():
    factors = {"ratio": [{"a": 1, "b": 1}, {"a": 3, "b": 1}]}
    runs = observe(factors, 4, lambda lv: 2.0 if lv["ratio"] == {"a": 1, "b": 1} else 1.0, seed=8, cv=0.05)
    answer = analyse(runs, factors, references={"ratio": {"b": 1, "a": 3}}, lower_is_better=False)
    (effect,) = answer.effects
    assert effect.reference == {"a": 3, "b": 1} and effect.level == {"a": 1, "b": 1}
    assert effect.verdict == DIFFERENT and effect.ratio == pytest.approx(2, rel=0.1)
    assert effect.better is True  # a higher figure is better here


def test_bad_runs_are_refused_with_what_is_wrong():
    runs = observe(TWO_BY_TWO, 2, lambda lv: 1.0, seed=1)
    with pytest.raises(ValueError, match="positive"):
        analyse(runs[:-1] + [Observation("c", 2, runs[-1].factors, 0.0)], TWO_BY_TWO)
    with pytest.raises(ValueError, match="not one of its declared levels"):
        analyse(runs, {"layout.log_on": ["disk"], "workload.data_files": [1, 4]})


def test_equal_cells_with_little_noise_are_equivalent():
    runs = observe(TWO_BY_TWO, 6, lambda lv: 1.0, seed=12, cv=0.02)
    answer = analyse(runs, TWO_BY_TWO)
    assert [e.verdict for e in answer.effects] == [EQUIVALENT, EQUIVALENT]
    assert answer.settled
    assert all(e.hidden < 0.05 for e in answer.effects)


def _power(test, rounds, sims, rng):
    """The share of `sims` two-cell experiments of `rounds` rounds in which `test` finds a 10 % difference
    when the runs spread by 10 % and a round's two runs correlate by 0.8 (80 % of the variance is the
    round's mood: the issue's figures)."""
    factors = {"cell": ["a", "b"]}
    layout = simulate.template(factors, rounds)
    within, drift = math.sqrt(0.2) * 0.1, math.sqrt(0.8) * 0.1
    Y = simulate.responses(layout, lambda lv: 1.1 if lv["cell"] == "b" else 1.0, sims, rng, cv=(within, within),
                           drift=drift)
    return test(layout, factors, Y).mean()


def _paired(layout, factors, Y):
    codes, _ = simulate.Fits(layout, factors).verdicts(Y, 0.05)
    return codes[0] == "D"


def _unpaired(layout, factors, Y):
    """A Welch t-test on each cell's figures, unpaired, as `show` compared cells before the rounds were paired."""
    values = np.exp(Y)
    a = values[[o.factors["cell"] == "a" for o in layout]]
    b = values[[o.factors["cell"] == "b" for o in layout]]
    n = a.shape[0]
    va, vb = a.var(axis=0, ddof=1) / n, b.var(axis=0, ddof=1) / n
    df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    return 2 * special.stdtr(df, -np.abs(a.mean(axis=0) - b.mean(axis=0)) / np.sqrt(va + vb)) < 0.05


def test_pairing_within_rounds_needs_fewer_runs_for_the_same_power():
    rng = np.random.default_rng(2017)
    needed = {}
    for name, test in (("paired", _paired), ("unpaired", _unpaired)):
        rounds = 2
        while _power(test, rounds, 2000, rng) < 0.8 and rounds < 60:
            rounds += 1
        needed[name] = 2 * rounds
    print(f"10 % difference at CV 10 %, correlation 0.8 within a round: 80 % power takes {needed['paired']} runs "
          f"paired by round, {needed['unpaired']} unpaired")
    assert needed["paired"] < needed["unpaired"]


def test_runs_that_leave_no_residual_are_undecided_not_an_error():
    runs = observe({"log_on": ["disk", "ram"]}, 1, lambda lv: 0.5 if lv["log_on"] == "ram" else 1.0, seed=1)
    answer = analyse(runs, {"log_on": ["disk", "ram"]})
    (effect,) = answer.effects
    assert effect.verdict == UNDECIDED and effect.ratio == pytest.approx(runs[1].value / runs[0].value)
    assert math.isnan(effect.p_value) and math.isnan(effect.hidden) and not answer.settled
    assert json.loads(json.dumps(answer.to_json(), allow_nan=False))["effects"][0]["ci_low"] is None


def test_the_paired_ranking_and_the_factor_table_agree_on_the_quickstart_runs():
    recorded = json.loads(QUICKSTART.read_text())
    by_cell: dict[str, dict[int, float]] = {}
    for r in recorded["runs"]:
        by_cell.setdefault(r["cell"], {})[r["round"]] = r["elapsed"]
    ranking = stats.against_best_paired(by_cell)
    assert ranking.reference.startswith("log_on=ram")
    for cell, verdict in ranking.cells.items():
        # log_on different: every disk cell is worse than the best; data_files undecided: the other RAM cell is not
        assert verdict.verdict == ("worse" if cell.startswith("log_on=disk") else "not significant")
