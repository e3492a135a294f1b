"""Screening designs: the fraction storlab picks for two-valued factors, what --dry-run says of it, its
factor table with the aliases beside each effect (Lenth's pseudo standard error for one round), the
follow-up that reuses its runs, and the error rates proven by simulation.

Each rate is measured over SIMS simulated screenings with a fixed seed (runs drifting from round to round
by 15 % and spreading by a CV of 5-20 %, tests/simulate.py). A method whose family-wise rate of a false
"different" among the null factors were exactly 5 % would pass `rate <= 0.05 + 2.6 se` (se at SIMS) with
probability 99.5 %; Holm over the main effects' t tests with the rounds as blocks passes it, testing each
factor at 5 % alone would not (7 or 15 nulls: about 25-50 %)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from storlab.answer import lenth
from storlab.answer.effects import Observation, analyse
from storlab.experiment import design
from tests import simulate
from tests.commands import invoke

SIMS = 2000
LIMIT = 0.05 + 2.6 * math.sqrt(0.05 * 0.95 / SIMS)
ALPHA = 0.05


def names(k: int) -> list[str]:
    return [f"f{i:02d}" for i in range(k)]


def planted(k: int, rounds: int):
    """A screening of k two-level factors: its observations, its chains, and the factors' values."""
    fraction = design.screening(names(k), 4)
    factors = {n: [0, 1] for n in names(k)}
    cells = design.levels_of(fraction, factors)
    observations = simulate.template(factors, rounds, design=cells)
    found = design.aliases(fraction.coded, fraction.factors)
    pairs = [chain[0] for chain in found.chains] if not found.partial_pairs else []
    return observations, factors, pairs, fraction


# Three real factors, f00 1.5x slower, f01 1.5x faster and f02 1.2x slower, and a real interaction of two factors
# that do nothing on their own (f03 and f04: 1.2x where they agree, 1/1.2x where they do not): resolution IV keeps
# it off every main effect. The rest do nothing.
REAL = ("f00", "f01", "f02")


def truth(levels: dict) -> float:
    ratio = (1.5 if levels["f00"] else 1.0) / (1.5 if levels["f01"] else 1.0) * (1.2 if levels["f02"] else 1.0)
    return ratio * (1.2 if levels["f03"] == levels["f04"] else 1 / 1.2)


def screen(k: int, rounds: int, seed: int):
    """SIMS simulated screenings: (any null factor called different, per sim; each real factor called different)."""
    observations, factors, pairs, _ = planted(k, rounds)
    rng = np.random.default_rng(seed)
    Y = simulate.responses(observations, truth, SIMS, rng)
    fits = simulate.Fits(observations, factors, pairs)
    est, se, p, inter = fits.tests(Y)
    adjusted = simulate.holm(np.vstack([p, inter]))[: len(p)]
    different = adjusted < ALPHA
    null = [i for i, (name, _) in enumerate(fits.labels) if name not in REAL]
    return different[null].any(axis=0), different[:3]


@pytest.mark.parametrize("k", [7, 15])
def test_a_screening_calls_null_factors_different_at_most_alpha_and_finds_a_1_5x_effect(k):
    said = []
    for rounds in (2, 3, 4):
        false, found = screen(k, rounds, seed=100 * k + rounds)
        rate = false.mean()
        said.append(f"  {rounds} rounds: false different among the {k - 3} nulls {100 * rate:.1f} %; found 1.5x "
                    f"{100 * found[0].mean():.1f} %, 1/1.5x {100 * found[1].mean():.1f} %, 1.2x {100 * found[2].mean():.1f} %")
        assert rate <= LIMIT, said[-1]
        assert found[0].mean() >= 0.95 and found[1].mean() >= 0.95, said[-1]
    print(f"\n{k} factors in {planted(k, 1)[3].cells} cells, CV 5-20 %, drift 15 %, {SIMS} screenings each:", *said, sep="\n")


def test_the_numpy_fits_of_a_screening_are_analyse_s():
    observations, factors, pairs, fraction = planted(7, 2)
    rng = np.random.default_rng(5)
    y = simulate.responses(observations, truth, 1, rng)[:, 0]
    runs = [Observation(o.cell, o.round, o.factors, 10 * math.exp(v)) for o, v in zip(observations, y)]
    chains = design.aliases(fraction.coded, fraction.factors).chains
    answer = analyse(runs, factors, pairs=pairs, aliased={c[0]: c[1:] for c in chains})
    est, se, p, inter = simulate.Fits(observations, factors, pairs).tests(y[:, None])
    assert np.exp(est[:, 0]) == pytest.approx([e.ratio for e in answer.effects])
    assert p[:, 0] == pytest.approx([e.p_value for e in answer.effects])
    assert [i.factors for i in answer.interactions] == [c[0] for c in chains]
    assert answer.interactions[0].aliases == tuple(chains[0][1:])


def lenth_screen(k: int, seed: int):
    """SIMS screenings of one round each, judged as effects.analyse judges them: Lenth's PSE, Holm."""
    observations, factors, _, fraction = planted(k, 1)
    rng = np.random.default_rng(seed)
    Y = simulate.responses(observations, truth, SIMS, rng)
    basis = np.column_stack([lenth.contrasts(fraction.coded, e) for e in np.eye(fraction.cells)])
    C = basis @ Y  # contrasts x sims: linear in the runs
    t = C[:k] / lenth.pseudo_se(C.T)[None, :]
    null = lenth._null(C.shape[0])
    p = (1 + len(null) - np.searchsorted(null, np.abs(t), side="left")) / (1 + len(null))
    different = simulate.holm(p) < ALPHA
    return different[3:].any(axis=0), different[:3]


@pytest.mark.parametrize("k", [7, 15])
def test_one_round_judged_by_lenth_calls_null_factors_different_at_most_alpha(k):
    false, found = lenth_screen(k, seed=k)
    print(f"\none round of {k} factors, Lenth's PSE: false different among the {k - 3} nulls {100 * false.mean():.1f} %; "
          f"found 1.5x {100 * found[0].mean():.1f} %, 1/1.5x {100 * found[1].mean():.1f} %, 1.2x {100 * found[2].mean():.1f} %")
    assert false.mean() <= LIMIT


def test_lenth_in_analyse_matches_the_vectorised_reading():
    observations, factors, _, fraction = planted(7, 1)
    rng = np.random.default_rng(11)
    y = simulate.responses(observations, truth, 1, rng)[:, 0]
    runs = [Observation(o.cell, o.round, o.factors, 10 * math.exp(v)) for o, v in zip(observations, y)]
    answer = analyse(runs, factors, lenth_if_once=True)
    c = lenth.contrasts(fraction.coded, y)
    pse = lenth.pseudo_se(c)[0]
    assert [math.log(e.ratio) for e in answer.effects] == pytest.approx(c[:7])
    assert [e.p_value for e in answer.effects] == pytest.approx([lenth.p_value(x / pse, 15) for x in c[:7]])
    assert "Lenth" in answer.method and answer.interactions == [] and answer.rounds == 1
    # the contrasts of a regular fraction are its main effects and its interaction chains, all orthogonal
    assert len(c) == 15 and c[0] == pytest.approx(y[fraction.coded[:, 0] > 0].mean() - y[fraction.coded[:, 0] < 0].mean())


def test_lenth_reference_distribution_is_ye_and_hamada_s():
    # Ye and Hamada (2000), Table 1: the individual error rate's 5 % critical value of Lenth's t for 15 contrasts, 2.16
    assert lenth.quantile(0.95, 15) == pytest.approx(2.16, abs=0.03)
    assert lenth.p_value(lenth.quantile(0.95, 15), 15) == pytest.approx(0.05, abs=0.003)


# -- the design storlab picks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k, resolution, cells, word", [
    (7, 4, 16, 4), (8, 4, 16, 4), (6, 4, 16, 4), (5, 4, 16, 5), (4, 4, 8, 4), (5, 5, 16, 5), (7, 5, 64, None),
    (9, 4, 24, None), (11, 4, 24, None), (15, 4, 32, 4), (7, 3, 8, 3), (11, 3, 12, None), (3, 4, 8, None)])
def test_the_fewest_cells_at_the_resolution_asked(k, resolution, cells, word):
    fraction = design.screening(names(k), resolution)
    assert fraction.cells == cells and fraction.resolution == word
    assert (fraction.coded[0] == -1).all()  # the first cell is every factor's reference: a follow-up shares it
    assert (fraction.coded.T @ fraction.coded == np.eye(k) * cells).all()  # every main effect orthogonal to the others
    found = design.aliases(fraction.coded, fraction.factors)
    if resolution >= 4:  # no main effect aliased with a two-factor interaction, not even partly
        assert all(len(t) == 3 for terms in found.main.values() for t in terms)
        assert all(not part.get(2) for part in found.partial.values())


def test_seven_factors_are_the_minimum_aberration_fraction_in_16_cells():
    fraction = design.screening(names(7), 4)
    assert "minimum aberration" in fraction.method and "2^(7-3)" in fraction.method
    found = design.aliases(fraction.coded, fraction.factors)
    # 2^(7-3)'s defining relation: 7 words, all of length four, so 21 two-factor interactions in 7 chains of 3 and
    # each main effect aliased with the 4 three-factor interactions of the words it is in
    assert sorted(len(c) for c in found.chains) == [3] * 7
    assert all(len(terms) == 4 for terms in found.main.values())


def test_resolution_five_beyond_the_search_is_refused():
    with pytest.raises(ValueError, match="ask resolution = 4"):
        design.screening(names(9), 5)


def test_without_holm_the_nulls_would_be_called_different_too_often():
    """The simulation can fail: each factor tested at 5 % alone calls some null different far more often."""
    observations, factors, pairs, _ = planted(15, 2)
    Y = simulate.responses(observations, truth, SIMS, np.random.default_rng(3))
    fits = simulate.Fits(observations, factors, pairs)
    _, _, p, _ = fits.tests(Y)
    null = [i for i, (name, _) in enumerate(fits.labels) if name not in REAL]
    assert (p[null] < ALPHA).any(axis=0).mean() > 3 * LIMIT


# -- the file, --dry-run, show and the follow-up -----------------------------------------------------------------

SEVEN = """\
name = "screen7"
engine = "postgres"
repetitions = 2
design = "screening"

[placements]
disk = "{disk}"
ram = "tmpfs"

[layout]
log_on = ["disk", "ram"]
data_files = [1, 4]
temp_on = ["disk", "ram"]
data_on = "disk"

[workload]
kind = "random-insert"
connections = 2
rows_per_connection = 1000
batch = 10

[engine_settings]
work_mem = ["4MB", "64MB"]
random_page_cost = [1.1, 4]
jit = ["off", "on"]
wal_compression = ["off", "pglz"]
"""


def test_dry_run_prints_the_design_its_aliases_and_the_runs_against_the_full_factorial(lab_root):
    path = lab_root / "s.toml"
    path.write_text(SEVEN.format(disk=lab_root / "disk"))
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("a screening of 7 factors in 16 cells (the full factorial: 128), resolution IV: a regular "
                          "fraction 2^(7-3) of minimum aberration")
    assert "    data_files = log_on x work_mem x wal_compression = " in out
    assert "  two-factor interactions in 7 aliased chains (the answer fits each chain as one term):" in out
    assert "screen7: 16 cells x 2 repetitions on postgres (32 runs; the full factorial's: 256)" in out
    assert out.count("  cell ") == 16 and "32 runs to do" in out


@pytest.mark.parametrize("old, new, said", [
    ('data_files = [1, 4]', 'data_files = [1, 2, 4]',
     "s.toml:12: layout.data_files: data_files has 3 values; a screening takes factors of two values (a two-level fraction; "
     "three-level factors through a definitive screening design are not supported): give it two, or run design = \"full\""),
    ('design = "screening"', 'design = "half"',
     's.toml:4: design: expected "full", "screening" or a table such as { kind = "follow-up", factors = ["log_on"] }, got "half"'),
    ('design = "screening"', 'design = { kind = "screening", resolution = 6 }', 's.toml:4: design.resolution: expected 3, 4 or 5, got 6'),
    ('design = "screening"', 'design = { kind = "screening", resolution = 5 }\nrace = true',
     's.toml:4: design: a race drops cells and a screening needs all of its cells; race its follow-up\'s cells with design = '
     '"full" and race = true'),
    ('design = "screening"', 'design = { kind = "follow-up", factors = ["log_in"] }',
     's.toml:4: design: factors: "log_in" is not a factor (factors: data_files, log_on, temp_on, work_mem, random_page_cost, '
     'jit, wal_compression)'),
])
def test_a_design_the_file_cannot_have_is_one_line_and_exit_2(lab_root, old, new, said):
    path = lab_root / "s.toml"
    path.write_text(SEVEN.format(disk=lab_root / "disk").replace(old, new))
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 2 and result.stderr == f"storlab: {said}\n", result.stderr


def fill(path: Path, folder: Path, rounds: int, seed: int = 1) -> None:
    """Simulated runs of every cell the file's design names, recorded through the store as `storlab run` does."""
    from storlab.experiment import file as experiment, matrix
    from storlab.probes.waits import Wait, WaitCapture
    from storlab.results.runs import RunResult
    from storlab.results.store import Store

    exp = experiment.load(path, check_placements=False)
    cells = matrix.cells(exp)
    rng = np.random.default_rng(seed)
    with Store.open(folder) as store:
        store.bind_experiment(exp.name, exp.engine, exp.source, exp.identity(), exp.repetitions, exp.factors,
                              [(c.id, c.label, c.factors) for c in cells], answer=exp.answer_settings())
        store.order_seed(7)
        facts = store.record_facts({"cpu": {"model": "test"}}, {})
        done = store.done()
        for rnd in range(1, rounds + 1):
            mood = rng.lognormal(0, 0.1)
            for c in cells:
                if (c.id, rnd) in done:
                    continue
                f = c.factors
                value = 10 * (0.55 if f["layout.log_on"] == "ram" else 1) * (1.3 if f["layout.data_files"] == 4 else 1)
                result = RunResult(0.0, [("elapsed_s", value * mood * rng.lognormal(0, 0.05), "s")],
                                   WaitCapture("pg_wait_sampling", [Wait("IO:WALSync", 1.0)]), "15", [])
                store.record_run(c.id, rnd, result, facts)


def test_show_says_the_design_beside_each_effect_and_names_the_follow_up(lab_root):
    path = lab_root / "s.toml"
    path.write_text(SEVEN.format(disk=lab_root / "disk"))
    fill(path, lab_root / "r", 2)
    shown = invoke("show", str(lab_root / "r"))
    assert shown.exit_code == 0, shown.output
    assert "named: data_files, log_on" in shown.stdout
    assert 'settle them: design = { kind = "follow-up", factors = ["data_files", "log_on"] }' in shown.stdout
    answer = json.loads(invoke("show", str(lab_root / "r"), "--json").stdout)
    import jsonschema

    jsonschema.validate(answer, json.loads(invoke("schema", "--answer").stdout))
    design_part = answer["design"]
    assert (design_part["kind"], design_part["cells"], design_part["full_cells"], design_part["runs"],
            design_part["full_runs"], design_part["resolution"]) == ("screening", 16, 128, 32, 256, 4)
    assert design_part["named"] == ["data_files", "log_on"] and design_part["shared"] == 1
    assert len(design_part["chains"]) == 7 and len(design_part["aliased_with"]["log_on"]) == 4
    assert [p["factor"] for p in design_part["points"]][-2:] == ["data_files", "log_on"]  # the largest effects last
    effects = {e["factor"]: e for e in answer["factor_effects"]["effects"]}
    assert effects["log_on"]["verdict"] == "different" and effects["log_on"]["aliases"].startswith("log_on = ")
    assert all(i["aliases"] for i in answer["factor_effects"]["interactions"])


def test_the_follow_up_runs_the_named_factors_reusing_the_screening_s_cell(lab_root):
    path = lab_root / "s.toml"
    text = SEVEN.format(disk=lab_root / "disk")
    path.write_text(text)
    fill(path, lab_root / "r", 2)
    path.write_text(text.replace('design = "screening"', 'design = { kind = "follow-up", factors = ["data_files", "log_on"] }'))
    planned = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "r"))
    assert planned.exit_code == 0, planned.output
    # 4 cells x 2 rounds, less the 2 runs of the cell the screening shares (every factor at its reference)
    assert "6 runs to do (32 already in" in planned.stdout
    fill(path, lab_root / "r", 2, seed=2)
    answer = json.loads(invoke("show", str(lab_root / "r"), "--json").stdout)
    assert answer["design"]["kind"] == "follow-up" and answer["design"]["shared"] == 1
    assert answer["design"]["runs"] == 38
    factors = answer["factor_effects"]
    # the follow-up's rounds are blocks of their own, after the screening's two
    assert factors["rounds"] == 4 and factors["settled"] and answer["rounds"] == 2
    assert [i["factors"] for i in factors["interactions"]] == [["data_files", "log_on"]]
    assert answer["status"] == "settled after 2 rounds: data_files different, log_on different"
