"""The race (storlab.answer.racing) on runs written out: what it drops, on what evidence, when it ends.
Its error rates are simulated in tests/test_racing_simulated.py."""

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps
from pydantic import ConfigDict, ValidationError

from storlab.answer import sequential
from storlab.answer.racing import dunnett, levels_of, race
from storlab.experiment.repetitions import RacingKeys, RepetitionRange
from storlab.rounds import RaceSettings

# Elapsed seconds of 5 cells as a race records them: A is the best, B close behind (it wins round 2),
# C and D about 12 % behind, E far behind. C, D and E stop after round 3, so they have no round 4.
RACE = {
    "A": {1: 40.1, 2: 41.0, 3: 39.8, 4: 40.3},
    "B": {1: 40.9, 2: 40.6, 3: 40.5, 4: 41.2},
    "C": {1: 44.2, 2: 46.0, 3: 44.9},
    "D": {1: 45.3, 2: 45.4, 3: 46.3},
    "E": {1: 60.3, 2: 58.9, 3: 61.7},
}
SETTINGS = RaceSettings(min_rounds=3, max_rounds=10, equivalent_within=0.01)  # A and B are not told within 1 %


def _rounds(values, last):
    return {cell: {r: v for r, v in runs.items() if r <= last} for cell, runs in values.items()}


def _fit(values, last, cells):
    """The two-way model (cell + round) on the logs, by statsmodels' formulas: what the race must agree with."""
    rows = [(c, r, math.log(v)) for c in cells for r, v in values[c].items() if r <= last and v is not None]
    data = pd.DataFrame(rows, columns=["cell", "round", "y"])
    return smf.ols("y ~ 0 + C(cell) + C(round)", data).fit()


def _se(fit, a, b):
    """The standard error of the log ratio a / b on the fit."""
    names = list(fit.params.index)
    row = np.zeros(len(names))
    row[names.index(f"C(cell)[{a}]")], row[names.index(f"C(cell)[{b}]")] = 1, -1
    return float(np.squeeze(fit.t_test(row).sd))


def _gap(fit, a, b):
    """The one-sided t test of "a is worse than b" on the fit: (log ratio, p-value)."""
    names = list(fit.params.index)
    row = np.zeros(len(names))
    row[names.index(f"C(cell)[{a}]")], row[names.index(f"C(cell)[{b}]")] = 1, -1
    test = fit.t_test(row)
    return float(np.squeeze(test.effect)), float(test.pvalue) / 2 if float(np.squeeze(test.effect)) > 0 \
        else 1 - float(test.pvalue) / 2


def test_the_race_drops_the_clearly_worse_cells_after_min_rounds():
    state = race(RACE, SETTINGS)
    assert [(d.cell, d.round) for d in state.drops] == [("C", 3), ("D", 3), ("E", 3)]
    look = state.tests[0]
    # The first look of 8 (rounds 3 to 10) spends Lan-DeMets' Pocock-type share of 5 %, shared by Dunnett's
    # critical value among the comparisons a cell can be dropped by: with the 4 others.
    assert look.round == 3 and look.alpha == pytest.approx(sequential.alpha_at(1, 8)) and look.alpha < 0.01
    assert look.comparisons == 4 and look.df == 8  # 15 runs - 5 cells - 2 rounds
    # The same fit by statsmodels' formulas: C, D and E are worse than A below Dunnett's level for 4 comparisons
    # (correlated 0.5: the 5 cells have as many rounds), above Bonferroni's alpha / 4; B is not.
    fit = _fit(RACE, 3, list(RACE))
    worst = {a: min(_gap(fit, a, b)[1] for b in RACE if b != a) for a in RACE}
    each = sps.t.sf(dunnett(4, 0.5, 8, look.alpha), 8)
    assert look.alpha / 4 < each < look.alpha
    assert {a for a, p in worst.items() if p < each} == {"C", "D", "E"}
    gap, p_c = _gap(fit, "C", "A")
    assert p_c == pytest.approx(worst["C"])
    assert state.drops[0].evidence == (
        f"after round 3: {math.exp(gap):.2f}x A in the geometric mean paired by round (one-sided p = {p_c:.2g}, below "
        f"{each:.2g}: Dunnett's level for the 4 comparisons the cell can be dropped by at the look's alpha {look.alpha:.3g})")
    assert look.noise == pytest.approx(math.sqrt(fit.mse_resid))
    # A against B: about 1 % apart at a noise of 1.8 % a run. Taken as the truth, 10 rounds would neither call
    # B worse (one-sided, at Dunnett's value for 4 comparisons at the most a later look spends) nor show the two
    # within ±1 %:
    # the race stops, the two not told apart, rather than run them to round 10.
    gap_b, _ = _gap(fit, "B", "A")
    se_b = _se(fit, "B", "A")
    later = max(sequential.alpha_at(k, 8) for k in range(2, 9))
    at_10 = se_b * math.sqrt(3 / 10)
    df = 8 + 7 * 1
    assert gap_b < dunnett(4, 0.5, df, later) * at_10
    assert abs(gap_b) + sps.t.ppf(1 - later, df) * at_10 > math.log1p(0.01)
    assert state.alive == ("A", "B") and state.rounds == 3 and state.best == "A" and state.drops[-1].round == 3
    assert state.finished == ("any of these: A, B: not told apart after round 3: the noise (1.8 % a run) would hide "
                              "a difference between them, and equivalence within ±1 %, through round 10")
    assert state.next_round is None and state.equivalent == ()
    # B 4 % behind: 10 rounds could call it worse, so the race goes on, and drops it after round 4.
    behind = race(dict(RACE, B={r: RACE["A"][r] * 1.04 * (1 + 0.003 * (-1) ** r) for r in RACE["A"]}), SETTINGS)
    assert behind.alive == ("A",) and [(d.cell, d.round) for d in behind.drops][-1] == ("B", 4)


def test_nothing_is_decided_before_min_rounds():
    early = race(_rounds(RACE, 2), SETTINGS)
    assert early.drops == () and early.tests == () and early.rounds == 2 and early.next_round == 3
    # With min 4, round 4 is only complete once C, D and E have run it: E stays although it is far behind.
    waiting = race(RACE, RaceSettings(min_rounds=4, max_rounds=10, equivalent_within=0.01))
    assert waiting.drops == () and waiting.rounds == 3 and waiting.next_round == 4
    assert set(waiting.alive) == set(RACE)


def test_resume_replays_the_same_drops_in_the_same_rounds():
    full = race(RACE, SETTINGS)
    assert race(_rounds(RACE, 3), SETTINGS).drops == full.drops
    assert set(race(dict(reversed(list(RACE.items()))), SETTINGS).drops) == set(full.drops)
    # Runs a dropped cell has beyond its drop (recorded before racing was switched on) change nothing.
    more = {cell: dict(runs) for cell, runs in RACE.items()}
    more["C"][4], more["D"][4], more["E"][4] = 44.0, 45.0, 60.0
    assert race(more, SETTINGS) == full


def test_max_stops_the_race_and_a_raised_max_goes_on():
    stopped = race(_rounds(RACE, 3), RaceSettings(min_rounds=3, max_rounds=3, equivalent_within=0.01))
    assert stopped.finished == "max reached: 3 rounds" and stopped.next_round is None
    assert stopped.tests[0].alpha == pytest.approx(0.05)  # one look spends it all
    # B 4 % behind A: 6 rounds could call it worse (3 cannot), so a raised max goes on.
    behind = dict(_rounds(RACE, 3), B={r: RACE["A"][r] * 1.04 * (1 + 0.003 * (-1) ** r) for r in (1, 2, 3)})
    assert race(behind, RaceSettings(min_rounds=3, max_rounds=3, equivalent_within=0.01)).finished == "max reached: 3 rounds"
    raised = race(behind, RaceSettings(min_rounds=3, max_rounds=6, equivalent_within=0.01))
    assert [d.cell for d in raised.drops] == [d.cell for d in stopped.drops]
    assert raised.finished is None and raised.next_round == 4
    # 4 looks spend less each than 1: a cell dropped at alpha 5 % may race again, its missing round run first.
    near = dict(_rounds(RACE, 3), C={r: RACE["A"][r] * 1.05 * (1 + 0.003 * (-1) ** r) for r in (1, 2, 3)})
    once = race(near, RaceSettings(min_rounds=3, max_rounds=3, equivalent_within=0.01))
    again = race(near, RaceSettings(min_rounds=3, max_rounds=10, equivalent_within=0.01))
    assert "C" in {d.cell for d in once.drops} and "C" in again.alive and again.next_round == 4


def test_a_failed_run_leaves_only_itself_out():
    failed = {cell: dict(runs) for cell, runs in RACE.items()}
    failed["C"][2] = None
    state = race(failed, SETTINGS)
    assert state.tests[0].df == 7  # one run fewer than 15; its round's other runs still count
    assert [(d.cell, d.round) for d in state.drops] == [("C", 3), ("D", 3), ("E", 3)]


def test_a_cell_that_always_fails_is_never_tested_and_never_dropped():
    always_failing = {"A": {1: 1.0, 2: 1.1, 3: 0.9}, "F": {1: None, 2: None, 3: None}}
    state = race(always_failing, RaceSettings(min_rounds=2, max_rounds=3))
    assert state.drops == ()
    assert state.finished == "max reached: 3 rounds" and state.best == "A"


EVEN = {
    "W": {1: 100.0, 2: 100.4, 3: 99.7},
    "X": {1: 100.3, 2: 99.8, 3: 100.2},
    "Y": {1: 99.9, 2: 100.1, 3: 100.5},
    "Z": {1: 100.2, 2: 100.0, 3: 99.8},
}


def test_the_race_ends_when_the_cells_left_are_equivalent_to_one_another():
    settings = RaceSettings(min_rounds=3, max_rounds=10, equivalent_within=0.02)
    state = race(EVEN, settings)
    assert state.drops == () and state.equivalent == ("W", "X", "Y", "Z") and state.margin == 0.02
    alpha = sequential.alpha_at(1, 8)
    assert state.finished == (f"any of these: W, X, Y, Z: they are equivalent within ±2 % (after round 3, every "
                              f"pair's {100 * (1 - 2 * alpha):.1f} % interval of the ratio inside the margin)")
    # Every pair's interval, from the same fit by statsmodels' formulas, lies inside ±2 % but not inside ±0.5 %.
    fit = _fit(EVEN, 3, list(EVEN))
    widest = 0.0
    for a in EVEN:
        for b in EVEN:
            if a < b:
                names = list(fit.params.index)
                row = np.zeros(len(names))
                row[names.index(f"C(cell)[{a}]")], row[names.index(f"C(cell)[{b}]")] = 1, -1
                low, high = np.squeeze(fit.t_test(row).conf_int(alpha=2 * alpha))
                widest = max(widest, abs(low), abs(high))
    assert math.log1p(0.005) < widest < math.log1p(0.02)
    # Within ±0.5 %: not shown, and the gaps seen (up to 0.3 %) would not fit inside it by round 10 either.
    tight = race(EVEN, RaceSettings(min_rounds=3, max_rounds=10, equivalent_within=0.005))
    assert tight.equivalent == () and tight.drops == () and tight.finished.startswith(
        "any of these: W, X, Y, Z: not told apart after round 3: the noise (0.33 % a run)")
    noisy = dict(EVEN, Y={1: 96.0, 2: 104.0, 3: 100.5})  # close means, but too noisy to say "within 2 %"
    shaky = race(noisy, settings)
    assert shaky.equivalent == () and shaky.finished.startswith("any of these: W, X, Y, Z: not told apart after round 3")


def test_without_a_margin_the_race_ends_on_the_default():
    state = race(RACE, RaceSettings(min_rounds=3, max_rounds=10))  # A and B, 2 % apart, are within 5 % by round 4
    assert state.margin == 0.05 and state.equivalent == ("A", "B") and state.rounds == 4
    assert state.finished.startswith("any of these: A, B: they are equivalent within ±5 % (after round 4")


def _two_factors(disk_at_4):
    """log_on (disk, ram) x data_files (1, 4), 3 rounds of little noise: the disk 1.3x the RAM disk with one data
    file, `disk_at_4` x with four; the data files do nothing."""
    rng = np.random.default_rng(5)
    truth = {("disk", 1): 1.3, ("disk", 4): disk_at_4, ("ram", 1): 1.0, ("ram", 4): 1.0}
    cells = {f"{log}-{files}": {"log_on": log, "data_files": files} for log, files in truth}
    values = {f"{log}-{files}": {r: t * math.exp(rng.normal(0, 0.01)) for r in range(1, 4)}
              for (log, files), t in truth.items()}
    return values, RaceSettings(min_rounds=2, max_rounds=3, equivalent_within=0.1, levels=levels_of(cells))


def test_a_level_worse_everywhere_goes_with_all_its_cells():
    values, settings = _two_factors(1.3)
    state = race(values, settings)
    assert {(d.cell, d.round) for d in state.drops} == {("disk-1", 2), ("disk-4", 2)}
    assert any(d.evidence.startswith("after round 2: log_on=disk is worse than log_on=ram in each of its 2 "
                                     "combinations of the other factors, the least of them 1.") for d in state.drops)
    assert state.finished.startswith('any of these: log_on=ram data_files=1 (ram-1), log_on=ram data_files=4 (ram-4): '
                                     'they are equivalent within ±10 %')


def test_a_level_worse_in_one_combination_only_is_not_dropped_as_a_level():
    values, settings = _two_factors(1.0)  # the disk costs nothing with four data files
    state = race(values, settings)
    assert [d.cell for d in state.drops] == ["disk-1"]
    assert "log_on=disk is worse" not in state.drops[0].evidence
    assert set(state.equivalent) == {"disk-4", "ram-1", "ram-4"}


def test_higher_is_better_races_the_same_way():
    throughput = {cell: {r: 1000.0 / v for r, v in runs.items()} for cell, runs in RACE.items()}
    state = race(throughput, RaceSettings(min_rounds=3, max_rounds=10, equivalent_within=0.01, lower_is_better=False))
    assert [(d.cell, d.round) for d in state.drops] == [("C", 3), ("D", 3), ("E", 3)] and state.best == "A"


def test_settings_are_validated():
    with pytest.raises(ValidationError):
        RaceSettings(min_rounds=4, max_rounds=3)
    with pytest.raises(ValidationError):
        RaceSettings(min_rounds=1)
    with pytest.raises(ValueError):
        race({}, SETTINGS)


class _File(RacingKeys):
    model_config = ConfigDict(extra="forbid")


def test_the_experiment_keys_give_the_race():
    assert _File.model_validate({}).race_settings() is None and _File.model_validate({}).most_repetitions == 3
    ranged = _File.model_validate({"race": True, "repetitions": {"min": 2, "max": 5}, "equivalent_within": "2%"})
    assert ranged.repetitions == RepetitionRange(min=2, max=5) and ranged.most_repetitions == 5
    assert ranged.race_settings() == RaceSettings(min_rounds=2, max_rounds=5, equivalent_within=0.02)
    five = _File.model_validate({"race": True, "repetitions": 5})
    assert five.race_settings() == RaceSettings(min_rounds=3, max_rounds=5)
    assert five.race_settings(lower_is_better=False).lower_is_better is False
    assert _File.model_validate({"race": True, "repetitions": 2}).race_settings() == RaceSettings(min_rounds=2, max_rounds=2)


@pytest.mark.parametrize("raw, key, message", [
    ({"repetitions": {"min": 3, "max": 10}}, "repetitions",
     'a { min, max } table is for racing: set race = true (or run with --race), add until = "settled", or give one number'),
    ({"race": True, "repetitions": {"min": 1, "max": 10}}, "repetitions", "min: expected an integer from 2 to 100, got 1"),
    ({"race": True, "repetitions": {"min": 4, "max": 3}}, "repetitions", "max (3) is below min (4)"),
    ({"race": True, "repetitions": {"min": 4}}, "repetitions", "max: missing"),
    ({"race": True, "repetitions": {"min": 4, "max": 5, "most": 6}}, "repetitions", "most: unknown key"),
    ({"race": True, "repetitions": 1}, "repetitions", "a race needs at least 2 repetitions"),
    ({"repetitions": 0}, "repetitions",
     'expected an integer from 1 to 100, or { min = 3, max = 10 } with race = true, or { max = 12, until = "settled" }, got 0'),
    ({"race": "yes"}, "race", 'expected true or false, got "yes"'),
    ({"race": 1}, "race", "expected true or false, got 1"),
    ({"race": True, "equivalent_within": 0.02}, "equivalent_within",
     'expected a percentage above 0 and at most 50, such as "2%", got 0.02'),
    ({"race": True, "equivalent_within": "80%"}, "equivalent_within",
     'expected a percentage above 0 and at most 50, such as "2%", got "80%"'),
])
def test_the_experiment_keys_say_what_is_wrong(raw, key, message):
    with pytest.raises(ValidationError) as caught:
        _File.model_validate(raw)
    error = caught.value.errors()[0]
    assert error["loc"] == (key,) and str(error["ctx"]["error"]) == message
