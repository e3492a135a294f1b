import math
import random

import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from storlab.answer.effects import Observation, analyse
from storlab.answer.stats import (
    TOO_FEW_RUNS,
    against_baseline_paired,
    against_best_paired,
    blocked_anova,
    describe_outliers,
    holm,
    noise_warning,
    repetitions_needed_paired,
    summarize,
)


def test_summary_confidence_interval():
    s = summarize([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s.mean == 11 and s.median == 11
    # t(0.975, 4) = 2.776; stdev = 1.5811
    assert s.half_width == pytest.approx(2.776 * 1.5811 / math.sqrt(5), rel=1e-3)
    assert s.cv == pytest.approx(1.5811 / 11, rel=1e-3)
    assert summarize([1, 1, 1, 1, 50]).outliers == (4,)


def test_holm_adjusts_step_down():
    # sorted: 0.01 x 4 = 0.04, 0.03 x 3 = 0.09, 0.04 x 2 = 0.08 -> kept at 0.09 (monotone), 0.5 x 1
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([]) == []
    p = [0.001, 0.2, 0.03, 0.5, 0.04, 0.3, 0.6, 0.012]
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))


def test_against_best_paired_when_higher_is_better():
    verdicts = against_best_paired({"a": {1: 100.0, 2: 101.0, 3: 99.0}, "b": {1: 80.0, 2: 81.0, 3: 79.0}},
                                   lower_is_better=False)
    assert verdicts.reference == "a"
    assert verdicts.cells["b"].verdict == "worse" and verdicts.cells["b"].change_percent == pytest.approx(-20.0, abs=0.1)
    assert verdicts.correction == "one comparison against the best, paired by round: nothing to correct"


def test_against_baseline_paired_says_better_and_worse_under_holm():
    rounds = {1: 1.0, 2: 1.3, 3: 0.8}  # the machine's mood of each round, shared by its runs
    values = {name: {r: level * mood * (1 + 0.01 * (-1) ** (r + i)) for r, mood in rounds.items()}
              for i, (name, level) in enumerate({"base": 10.0, "fast": 8.0, "slow": 12.0, "same": 10.02}.items())}
    verdicts = against_baseline_paired(values, "base")
    assert {c: v.verdict for c, v in verdicts.cells.items()} == {
        "fast": "better", "slow": "worse", "same": "not significant",
    }
    assert verdicts.correction == "Holm over 3 comparisons against the baseline, paired by round"
    with pytest.raises(KeyError):
        against_baseline_paired({"a": {1: 1.0, 2: 2.0}}, "b")


def test_a_noisy_cell_gets_a_warning_that_its_spread_includes_the_rounds_drift():
    assert noise_warning(0.09, 3) == ("noisy: its 3 runs vary 9.0 %, above 5 % (the rounds' drift included: the "
                                      "verdicts compare cells round by round, which takes it out)")
    assert noise_warning(0.05, 3) is None  # at the threshold: not above it
    assert noise_warning(0.09, 1) is None and noise_warning(math.nan, 3) is None


def test_outliers_are_described_not_dropped():
    # sorted 40.2 40.5 40.8 41.0 55.3: quartiles 40.5 and 41.0, fences 39.75 and 41.75
    values = [41.0, 40.2, 40.8, 40.5, 55.3]
    assert describe_outliers(values) == (
        "outlier kept in the figures: repetition 5 (55.3 s), outside 39.75-41.75 s (1.5 IQR beyond the quartiles)"
    )
    assert describe_outliers(values, repetitions=[3, 4, 5, 6, 7], unit="rows/s").startswith(
        "outlier kept in the figures: repetition 7 (55.3 rows/s)"
    )
    assert describe_outliers([10.0, 30.0, 10.1, 9.9, 10.0, 10.2, 1.0]).startswith(
        "outliers kept in the figures: repetition 2 (30 s), repetition 7 (1 s), outside"
    )
    assert describe_outliers([10.0, 10.2, 9.9]) is None


# -- paired by round -------------------------------------------------------------------------------------

# The log on disk and on RAM, three rounds whose moods differ by up to 90 %: RAM is about 0.53x in each.
DISK = {1: 2.40, 2: 3.60, 3: 1.90}
RAM = {1: 1.25, 2: 1.95, 3: 0.98}


def test_paired_by_round_the_log_on_ram_is_better_where_unpaired_it_is_not():
    unpaired = sps.ttest_ind(list(DISK.values()), list(RAM.values()), equal_var=False).pvalue
    paired = against_best_paired({"disk": DISK, "ram": RAM})
    assert unpaired > 0.05
    assert paired.reference == "ram" and paired.cells["disk"].verdict == "worse"
    ratios = [DISK[r] / RAM[r] for r in DISK]
    geometric = math.exp(sum(map(math.log, ratios)) / 3)
    assert paired.cells["disk"].change_percent == pytest.approx(100 * (geometric - 1))
    logs = [math.log(r) for r in ratios]
    assert paired.cells["disk"].p_value == pytest.approx(sps.ttest_1samp(logs, 0).pvalue)
    assert paired.correction == "one comparison against the best, paired by round: nothing to correct"


def test_paired_leaves_out_rounds_one_side_misses_and_needs_two_in_common():
    values = {"a": {1: 10.0, 2: 11.0, 3: 10.5, 4: None}, "b": {1: 12.0, 2: 13.1, 4: 12.0}, "c": {3: 9.0, 4: 9.0}}
    verdicts = against_baseline_paired(values, "a")
    assert verdicts.cells["b"].change_percent == pytest.approx(100 * (math.sqrt(12 / 10 * 13.1 / 11) - 1))
    assert verdicts.cells["c"].verdict == TOO_FEW_RUNS and math.isnan(verdicts.cells["c"].p_value)
    assert verdicts.comparisons == 1
    with pytest.raises(KeyError):
        against_baseline_paired(values, "z")


def test_paired_ranking_agrees_with_the_factor_table():
    """Two cells in complete rounds: the ranking's change is the factor table's ratio, and the verdicts agree."""
    runs = [Observation(cell, r, {"log_on": cell}, v)
            for cell, by in (("disk", DISK), ("ram", RAM)) for r, v in by.items()]
    (effect,) = analyse(runs, {"log_on": ["disk", "ram"]}).effects
    paired = against_baseline_paired({"disk": DISK, "ram": RAM}, "disk")
    assert paired.cells["ram"].change_percent == pytest.approx(100 * (effect.ratio - 1))
    assert paired.cells["ram"].p_value == pytest.approx(effect.p_value)
    assert (paired.cells["ram"].verdict == "better") == (effect.verdict == "different" and effect.better)


def test_the_blocked_gate_is_the_two_way_anova():
    logs = {"a": {1: 0.1, 2: 0.3, 3: 0.2}, "b": {1: 0.2, 2: 0.5, 3: 0.2}, "c": {1: 0.0, 2: 0.35, 3: 0.1}}
    y = [[logs[c][r] for c in logs] for r in (1, 2, 3)]
    # two-way ANOVA without replication, by hand: F = (SS cells / 2) / (SS residual / 4)
    grand = sum(map(sum, y)) / 9
    cell_means = [sum(row[i] for row in y) / 3 for i in range(3)]
    round_means = [sum(row) / 3 for row in y]
    ss_cells = 3 * sum((m - grand) ** 2 for m in cell_means)
    ss_resid = sum((y[r][i] - cell_means[i] - round_means[r] + grand) ** 2 for r in range(3) for i in range(3))
    assert blocked_anova(logs) == pytest.approx(sps.f.sf((ss_cells / 2) / (ss_resid / 4), 2, 4))


@pytest.mark.parametrize("cells,rounds", [(8, 3), (8, 10), (16, 5)])
def test_paired_false_discoveries_among_identical_cells_stay_at_5_percent(cells, rounds):
    """Identical cells, rounds drifting by 15 %, each run's CV 5-20 %: at least one cell called worse (or
    better) than the best in at most 5 % of 600 experiments, with the Monte Carlo error of a method at
    exactly 5 % allowed (2.6 se = 2.3 points)."""
    rng = random.Random(cells * 100 + rounds)
    wrong = 0
    for _ in range(600):
        sigma = math.sqrt(math.log1p(rng.uniform(0.05, 0.20) ** 2))
        mood = [rng.gauss(0, 0.15) for _ in range(rounds)]
        values = {f"c{i}": {r + 1: math.exp(mood[r] + rng.gauss(0, sigma)) for r in range(rounds)}
                  for i in range(cells)}
        wrong += any(v.significant for v in against_best_paired(values).cells.values())
    assert wrong / 600 <= 0.05 + 2.6 * math.sqrt(0.05 * 0.95 / 600)


def test_repetitions_needed_paired_matches_statsmodels_and_the_simulation():
    for cv, difference in ((0.045, 0.10), (0.045, 0.05), (0.10, 0.10)):
        n = TTestPower().solve_power(effect_size=difference / (math.sqrt(2) * cv), alpha=0.05, power=0.8)
        assert repetitions_needed_paired(cv, difference) == math.ceil(n)
    # CV 10 % of which 80 % is the round's (tests/test_effects.py simulates 6 rounds): 6 rounds
    assert repetitions_needed_paired(math.sqrt(0.2) * 0.1, 0.10) == 6
