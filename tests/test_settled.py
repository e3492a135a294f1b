"""The answer that opens with what each factor does, and the runs that stop when it is settled: rounds
in an order drawn from a kept seed, the factor table exactly as `show` prints it, `show --json` against
its schema, the forest plot first in the report, folders from before the seed still open, the keys of
the file, and `storlab run --until-settled` on a real PostgreSQL stopping and saying why."""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
from pathlib import Path

import jsonschema
import pytest

from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.experiment_record import AnswerSettings
from storlab.results.runs import RunResult
from storlab.results.schema import MIGRATIONS
from storlab.results.store import Store
from storlab.running import fleet
from storlab.labels import format_value
from tests.commands import invoke, storlab
from tests.experiments import random_insert
from tests.page_tables import tables

DATA = Path(__file__).parent / "data"
SCHEMA = json.loads(invoke("schema", "--answer").stdout)  # made from the answer's types


def quickstart_store(folder: Path, settling: dict | None = None, stopped: str | None = None) -> Path:
    """A results folder holding tests/data/quickstart_runs.json's 12 runs (3 rounds of the quickstart's
    2x2 design), recorded through the store as `storlab run` records runs."""
    data = json.loads((DATA / "quickstart_runs.json").read_text())
    cells: dict[str, dict] = {}
    for run in data["runs"]:
        cells.setdefault(matrix.cell_id(run["factors"]), run["factors"])
    labelled = [(cid, " ".join(f"{k.split('.', 1)[1]}={format_value(v)}" for k, v in f.items()), f)
                for cid, f in cells.items()]
    with Store.open(folder) as store:
        store.bind_experiment("quickstart", "postgres", "src", {"k": 1}, 3, data["factors"], labelled,
                              answer={"reference": {}, "equivalent_within": 0.05, "settling": settling})
        store.order_seed(7)
        facts = store.record_facts({"cpu": {"model": "test"}}, {})
        capture = WaitCapture("pg_wait_sampling", [Wait("IO:WALSync", 1.0), Wait("CPU", 1.0)])
        for run in data["runs"]:
            result = RunResult(0.0, [("elapsed_s", run["elapsed"], "s")], capture, "16", [])
            store.record_run(matrix.cell_id(run["factors"]), run["round"], result, facts)
        if stopped:
            store.record_stop(stopped)
    return folder


FACTOR_TABLE = """\
quickstart: what each factor does to elapsed s, 12 runs in 3 rounds, each in a random order (ratio: level / reference, geometric means)
 factor     ┃ level ┃ against ┃ ratio ┃      95 % CI ┃ adjusted p ┃ verdict                                                
━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━
 log_on     │ ram   │ disk    │ 0.53x │ [0.47, 0.60] │      5e-05 │ different: better                                      
 data_files │ 4     │ 1       │ 0.99x │ [0.87, 1.12] │      0.932 │ undecided: no effect beyond ±15 % can be ruled out yet 
no significant interaction: log_on x data_files (adjusted p 0.932)
noise: runs vary 8.7 % (residual CV, the rounds' drift taken out; 10 % takes about 15 rounds to tell, 5 % about 50); still hidden in it: data_files up to ±15 %
not settled after 3 rounds: log_on different, data_files undecided; more rounds would tell (repetitions, or until = "settled")

quickstart on postgres: elapsed s, mean ± 95 % CI
"""


# By default the interactions that are not significant and the noise are behind --details.
AT_A_GLANCE = "".join(line for line in FACTOR_TABLE.splitlines(keepends=True)
                      if not line.startswith(("no significant interaction: ", "noise: ")))


def test_show_opens_with_the_factor_table_exactly(tmp_path):
    folder = quickstart_store(tmp_path / "q")
    shown = invoke("show", folder)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith(AT_A_GLANCE), shown.stdout
    detailed = invoke("show", folder, "--details")
    assert detailed.exit_code == 0, detailed.output
    assert detailed.stdout.startswith(FACTOR_TABLE), detailed.stdout


def test_the_ranking_agrees_with_the_factor_table(tmp_path):
    shown = invoke("show", quickstart_store(tmp_path / "q")).stdout
    ranking = shown[len(AT_A_GLANCE):]
    # log on RAM is different (better): both disk cells are worse than the best, paired by round
    assert ranking.count("(worse)") == 2 and "paired by round" in ranking
    compared = invoke("compare", tmp_path / "q").stdout
    assert "paired by round" in compared


def test_a_stopped_experiment_says_why(tmp_path):
    why = "settled after 3 rounds: log_on different, data_files equivalent"
    folder = quickstart_store(tmp_path / "q", {"min_rounds": 2, "max_rounds": 12, "budget_s": None}, why)
    shown = invoke("show", folder)
    assert why in shown.stdout
    # until settled, the interval is the one the look at round 3 (look 2 of 11) spends: wider than 95 %
    assert "95 % CI" not in shown.stdout.split("\n\n")[0]


@pytest.mark.parametrize("make", ["quickstart", "explain", "settling"])
def test_show_json_validates_against_its_schema(tmp_path, make):
    if make == "explain":
        shutil.copytree(DATA / "explain", tmp_path / "results")
        folder = tmp_path / "results" / "quickstart"
    else:
        settling = {"min_rounds": 2, "max_rounds": 12, "budget_s": 600.0} if make == "settling" else None
        folder = quickstart_store(tmp_path / "q", settling, "max reached" if settling else None)
    done = invoke("show", folder, "--json")
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    jsonschema.validate(answer, SCHEMA)
    if make == "quickstart":
        effects = answer["factor_effects"]["effects"]
        assert [(e["factor"], e["level"], e["verdict"]) for e in effects] == \
            [("log_on", "ram", "different"), ("data_files", 4, "undecided")]
        assert answer["settled"] is False and answer["noise"]["hidden"] == {"data_files": pytest.approx(0.15, abs=0.01)}
        assert [r["verdict"] for r in answer["ranking"]][0] == "best" and answer["experiment"]["order_seed"] == 7
    if make == "settling":
        assert answer["until_settled"]["max_rounds"] == 12 and answer["stopped"] == "max reached"
        assert answer["factor_effects"]["look"] == 2 and answer["factor_effects"]["max_looks"] == 11


def test_the_schema_refuses_what_is_not_an_answer(tmp_path):
    answer = json.loads(invoke("show", quickstart_store(tmp_path / "q"), "--json").stdout)
    answer["factor_effects"]["effects"][0]["verdict"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer, SCHEMA)


def test_every_key_of_the_answer_is_documented():
    """docs/answer-json.md has a row for every key `show --json` gives: a field added to the answer is
    documented with it."""
    doc = (Path(__file__).parent.parent / "docs" / "answer-json.md").read_text()
    heads = [row.split(" | ")[0] for row in doc.splitlines() if row.startswith("| `")]
    documented = {key for head in heads for key in re.findall(r"`([a-z_]+)(?:\[\])?`", head)}
    assert [key for key in SCHEMA["properties"] if key not in documented] == []


def test_the_terminal_the_json_and_the_report_show_the_same_answer(tmp_path):
    """One answer, three renderers: every figure of the factor table and the ranking, and every line
    the answer says, is in the terminal's text and the report's page as the JSON holds it: at a glance
    the verdicts, the best cell, the significant interactions and a line per kind of warning; the
    noise, the other interactions and the notes under `show --details`; each warning a row of the
    report's table of them."""
    folder = quickstart_store(tmp_path / "q")
    answer = json.loads(invoke("show", folder, "--json").stdout)
    shown = " ".join(invoke("show", folder).stdout.split())
    detailed = " ".join(invoke("show", folder, "--details").stdout.split())
    assert invoke("report", folder).exit_code == 0
    raw = (folder / "report.html").read_text()
    page = html.unescape(" ".join(raw.split()))
    factors = answer["factor_effects"]
    significant = [line for line, i in zip(factors["interaction_lines"], factors["interactions"]) if i["significant"]]
    glance = [e["said"] for e in factors["effects"]] + answer["best"] + [answer["status"]] + significant
    details = answer["notes"] + [answer["noise"]["line"]] + factors["interaction_lines"] + answer["noise"]["cells"]
    numbers = [f"{e['ratio']:.2f}x" for e in factors["effects"]]
    numbers += [f"[{e['ci_low']:.2f}, {e['ci_high']:.2f}]" for e in factors["effects"]]
    numbers += [f"{r['mean']:.3f} ± {r['ci_half_width']:.3f}" for r in answer["ranking"]]
    numbers += [f"{r['distance_percent']:+.1f} % ({r['verdict']})" for r in answer["ranking"][1:]]
    assert answer["concerns"] and answer["notes"] and answer["noise"]["line"] and factors["interaction_lines"]
    for text in glance + numbers:
        text = " ".join(text.split())
        assert text in shown, text
        assert text in detailed, text
    for text in details:
        text = " ".join(text.split())
        assert text not in shown, text  # one screen: behind --details
        assert text in detailed, text
    for text in [e["said"] for e in factors["effects"]] + answer["best"] + [answer["status"]] + numbers \
            + answer["notes"] + [answer["noise"]["line"]] + factors["interaction_lines"]:
        text = " ".join(text.split())
        assert text in page, text
    # The warnings: a line each at a glance (each noisy cell's sentence under --details), a row each in
    # the report.
    for text in [c["line"] for c in answer["concerns"]]:
        assert " ".join(text.split()) in shown, text
    labels = answer["labels"]
    assert tables(raw)["What to keep in mind"][1:] == [
        [c["kind"], ", ".join(f"{labels[cell]} ({cell})" for cell in c["cells"]),
         "—" if c["runs"] is None else f"{c['runs']} of {c['of_runs']}", c["meaning"]] for c in answer["concerns"]]


def test_report_opens_with_the_forest_plot(tmp_path):
    folder = quickstart_store(tmp_path / "q")
    done = invoke("report", folder)
    assert done.exit_code == 0, done.output
    page = (folder / "report.html").read_text()
    assert page.index("What each factor does") < page.index("<h2>", page.index("What each factor does") + 1)
    assert page.index("What each factor does") < page.index("Ranking")
    assert "<svg" in page.split("What each factor does")[1].split("<h2>")[0]
    assert "undecided: no effect beyond ±15 % can be ruled out yet" in page
    assert (folder / "factor_effects.png").stat().st_size > 0


@pytest.mark.parametrize("old", ["explain/quickstart", "store-v1"])
def test_a_folder_from_before_the_seed_opens_and_migrates(tmp_path, old):
    shutil.copytree(DATA / old, tmp_path / "old")
    with sqlite3.connect(tmp_path / "old" / "storlab.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] < len(MIGRATIONS)
    shown = invoke("show", tmp_path / "old")
    assert shown.exit_code == 0, shown.output
    assert "random order" not in shown.stdout  # its runs went in the matrix order
    with sqlite3.connect(tmp_path / "old" / "storlab.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    with Store.open(tmp_path / "old", create=False) as store:
        held = store.experiment()
        assert held is None or (held.order_seed is None and held.answer == AnswerSettings() and held.stopped is None)


# -- the order of each round ----------------------------------------------------------------------------

BODY = """
name = "order"
engine = "postgres"
repetitions = 4
[placements]
disk = "./disk"
ram = "tmpfs"
[layout]
data_files = [1, 2, 4, 8]
log_on = ["disk", "ram"]
data_on = "disk"
[workload]
kind = "random-insert"
"""


def test_each_round_has_its_own_order_drawn_from_the_seed(write_experiment):
    cells = matrix.cells(experiment.load(write_experiment(BODY), check_placements=False))
    orders = [[c.id for c in matrix.round_order(cells, 42, rnd)] for rnd in range(1, 5)]
    assert all(sorted(o) == sorted(c.id for c in cells) for o in orders)
    assert len({tuple(o) for o in orders}) == 4  # not the same order every round
    assert orders == [[c.id for c in matrix.round_order(cells, 42, rnd)] for rnd in range(1, 5)]  # a resume draws it again
    assert [c.id for c in matrix.round_order(cells, None, 1)] == [c.id for c in cells]  # no seed: the matrix order
    plan = matrix.plan(cells, 2, {(orders[0][0], 1)}, 42)
    assert [c.id for c, rep in plan if rep == 1] == orders[0][1:] and [c.id for c, rep in plan if rep == 2] == orders[1]


def test_the_cells_of_one_device_format_stay_together(write_experiment, lab_root):
    body = BODY.replace('disk = "./disk"', 'disk = "./disk"\nfast = { loop = "1GB", fs = ["ext4", "xfs"] }')
    cells = matrix.cells(experiment.load(write_experiment(body), check_placements=False))
    for rnd in range(1, 6):
        formats = [c.factors["placements.fast.fs"] for c in matrix.round_order(cells, 3, rnd)]
        assert formats.count(formats[0]) == len(formats) // 2 and len(set(formats[: len(formats) // 2])) == 1


def test_the_seed_is_drawn_once_and_kept_unless_the_file_fixes_it(tmp_path):
    with Store.open(tmp_path / "r") as store:
        store.bind_experiment("e", "postgres", "src", {"k": 1}, 2, {}, [])
        seed = store.order_seed()
        assert store.order_seed() == seed and 0 <= seed < 2**31
        assert store.order_seed(5) == 5 and store.order_seed() == 5


# -- the keys of the file --------------------------------------------------------------------------------


def load(write_experiment, extra: str, until_settled: bool = False, body: str = BODY):
    text = body.replace("repetitions = 4\n", extra + "\n")
    return experiment.load(write_experiment(text), check_placements=False, until_settled=until_settled)


def error(write_experiment, extra: str, **kwargs) -> str:
    with pytest.raises(UserError) as caught:
        load(write_experiment, extra, **kwargs)
    return str(caught.value).split(": ", 1)[1]


def test_until_settled_keys(write_experiment):
    exp = load(write_experiment, 'repetitions = { max = 12, until = "settled", budget = "10m" }')
    settling = exp.settling()
    assert (settling.min_rounds, settling.max_rounds, settling.budget_s) == (2, 12, 600)
    assert exp.repetitions == 12 and exp.race() is None
    assert exp.answer_settings() == {"reference": {"data_files": 1, "log_on": "disk"}, "equivalent_within": 0.05,
                                     "settling": {"min_rounds": 2, "max_rounds": 12, "budget_s": 600,
                                                  "shortest_s": None, "longest_s": None}}
    flagged = load(write_experiment, "repetitions = 6", until_settled=True)
    assert (flagged.settling().min_rounds, flagged.settling().max_rounds) == (2, 6)
    named = load(write_experiment, 'repetitions = 3\nequivalent_within = "2%"\nreference = { log_on = "ram" }\norder_seed = 9')
    assert named.answer_settings()["reference"] == {"data_files": 1, "log_on": "ram"}
    assert named.answer_settings()["equivalent_within"] == 0.02 and named.model.order_seed == 9
    assert named.settling() is None
    # how the answer reads the runs is not what is measured: the same results folder takes them
    assert named.identity() == load(write_experiment, "repetitions = 3").identity()
    raced = load(write_experiment, 'race = true\nrepetitions = { max = 8, until = "settled" }')
    assert raced.race().min_rounds == 3 and raced.settling().min_rounds == 2


@pytest.mark.parametrize("extra, message", [
    ('repetitions = { max = 12, until = "done" }', 'repetitions: until: expected "settled"'),
    ('repetitions = { max = 12, until = "settled", budget = "10" }', "repetitions: budget: expected a duration"),
    ('repetitions = { max = 12, budget = "10m" }', "repetitions: a { min, max } table is for racing"),
    ('repetitions = { min = 4, max = 3, until = "settled" }', "repetitions: max (3) is below min (4)"),
    ('repetitions = 3\nreference = { log = "ram" }', "reference.log: not a factor (factors: data_files, log_on)"),
    ('repetitions = 3\nreference = { log_on = "nvme" }', 'reference.log_on: "nvme" is not one of its values'),
    ('repetitions = 3\norder_seed = -1', "order_seed: expected an integer from 0 to"),
    ('repetitions = 3\nequivalent_within = 0.05', "equivalent_within: expected a percentage"),
])
def test_bad_keys_are_one_line_naming_the_key(write_experiment, extra, message):
    assert error(write_experiment, extra).startswith(message)


PGBENCH = BODY.replace('kind = "random-insert"', 'kind = "pgbench"\nscale = 1\nduration_s = 10').replace(
    "data_files = [1, 2, 4, 8]\n", "")


def test_run_length_keys(write_experiment):
    """A bound not given is the declared duration_s; the store keeps both with until settled."""
    planned = load(write_experiment, 'repetitions = { max = 12, until = "settled", run_length = { max = "2m" } }',
                   body=PGBENCH)
    settling = planned.settling()
    assert (settling.shortest_s, settling.longest_s, settling.plans_length) == (10, 120, True)
    assert planned.answer_settings()["settling"]["longest_s"] == 120
    both = load(write_experiment, 'repetitions = { max = 12, until = "settled", run_length = { min = "5s", max = "1m" } }',
                body=PGBENCH)
    assert (both.settling().shortest_s, both.settling().longest_s) == (5, 60)
    plain = load(write_experiment, 'repetitions = { max = 12, until = "settled" }', body=PGBENCH)
    assert not plain.settling().plans_length  # without run_length every round runs the declared length, as before


@pytest.mark.parametrize("extra, body, message", [
    ('repetitions = { max = 6, until = "settled", run_length = { max = "2m" } }', BODY,
     'repetitions.run_length: "random-insert" runs a fixed amount of work, not for a duration'),
    ('repetitions = { max = 6, run_length = { max = "2m" } }', PGBENCH, "repetitions: a { min, max } table is for racing"),
    ('race = true\nrepetitions = { max = 6, run_length = { max = "2m" } }', PGBENCH,
     'repetitions: run_length: only with until = "settled"'),
    ('repetitions = { max = 6, until = "settled", run_length = {} }', PGBENCH,
     "repetitions: run_length: expected min, max or both"),
    ('repetitions = { max = 6, until = "settled", run_length = { max = "5s" } }', PGBENCH,
     "repetitions.run_length: max: the declared duration_s (10 s), the first rounds' length, is above it (5 s)"),
    ('repetitions = { max = 6, until = "settled", run_length = { max = "90.5s" } }', PGBENCH,
     "repetitions: run_length.max: expected whole seconds"),
    ('repetitions = { max = 6, until = "settled", run_length = { max = "2h" } }', PGBENCH,
     "repetitions.run_length: max: 7200 s is longer than a run's 3600 s"),
    ('repetitions = { max = 6, until = "settled", run_length = { most = "2m" } }', PGBENCH,
     "repetitions: run_length.most: unknown key"),
])
def test_bad_run_lengths_are_one_line_naming_the_key(write_experiment, extra, body, message):
    assert error(write_experiment, extra, body=body).startswith(message)


def test_a_run_length_needs_one_declared_duration(write_experiment):
    swept = PGBENCH.replace("duration_s = 10", "duration_s = [10, 20]")
    assert error(write_experiment, 'repetitions = { max = 6, until = "settled", run_length = { max = "2m" } }',
                 body=swept).startswith("repetitions.run_length: planned from one declared length")


def test_until_settled_flag_on_one_repetition_is_refused(write_experiment):
    assert error(write_experiment, "repetitions = 1", until_settled=True) == \
        "repetitions: max: expected an integer from 2 to 100, got 1"


def test_until_settled_needs_a_factor(write_experiment):
    single = BODY.replace("[1, 2, 4, 8]", "1").replace('["disk", "ram"]', '"ram"')
    with pytest.raises(UserError, match="needs a factor to settle"):
        load(write_experiment, "repetitions = 4", until_settled=True, body=single)


def test_submit_refuses_until_settled_in_one_line(write_experiment):
    exp = load(write_experiment, 'repetitions = { max = 12, until = "settled" }')
    with pytest.raises(UserError, match="a fleet's fixed queue cannot"):
        fleet.submit(exp, None)


# -- storlab run --until-settled on a real PostgreSQL -----------------------------------------------------

TINY = random_insert("settles", data_files=None)


def stored(folder: Path) -> tuple[list[tuple[str, int]], str | None]:
    with sqlite3.connect(folder / "storlab.sqlite") as db:
        runs = sorted(db.execute("SELECT cell_id, repetition FROM runs").fetchall())
        return runs, db.execute("SELECT stopped FROM experiment").fetchone()[0]


@pytest.mark.engine
def test_run_until_settled_stops_once_settled_and_says_why(write_experiment, lab_dir, tmp_path):
    # 20 times the rows: a difference no noise hides, settled long before 6 rounds
    path = write_experiment(TINY.format(reps=6, disk=lab_dir, rows="[2000, 40000]"), "settles.toml")
    out = tmp_path / "r"
    done = storlab("run", str(path), "--no-trace", "--until-settled", "--out", str(out))
    assert done.returncode == 0, done.stderr
    runs, why = stored(out)
    rounds = max(rep for _, rep in runs)
    assert why.startswith(f"settled after {rounds} rounds: rows_per_connection different") and rounds < 6
    assert len(runs) == 2 * rounds and why in done.stdout
    again = storlab("run", str(path), "--no-trace", "--until-settled", "--out", str(out))
    assert again.returncode == 0 and why in again.stdout
    assert stored(out) == (runs, why)  # a settled experiment takes no more runs


@pytest.mark.engine
def test_run_until_settled_stops_when_its_budget_is_spent(write_experiment, lab_dir, tmp_path):
    # A factor that cannot matter to these inserts (a statement timeout none comes near) and a margin no two
    # rounds of real runs can show equivalence within: one second is spent after the first two rounds, and
    # the answer is not settled then unless the look's test calls the null factor different, which it may
    # only at the alpha the first of 99 looks spends (0.09 %). (1 and 2 data files, as it was, really differ
    # at 1,000 rows a session: one run in a two-worker suite settled them different.)
    body = TINY.format(reps='{ max = 100, until = "settled", budget = "1s" }', disk=lab_dir, rows=1000)
    body = body.replace('engine = "postgres"', 'engine = "postgres"\nequivalent_within = "0.1%"')
    path = write_experiment(body + '\n[engine_settings]\nstatement_timeout = ["1h", "2h"]\n', "budget.toml")
    out = tmp_path / "r"
    done = storlab("run", str(path), "--no-trace", "--out", str(out))
    assert done.returncode == 0, done.stderr
    runs, why = stored(out)
    assert why.startswith("budget spent: 1 s after 2 rounds, not settled: statement_timeout ") and len(runs) == 4
    shown = storlab("show", str(out))
    assert why in shown.stdout


def test_storlab_schema_has_the_keys():
    schema = json.loads(invoke("schema").stdout)
    assert {"reference", "order_seed", "equivalent_within", "repetitions"} <= set(schema["properties"])
    assert {"min", "max", "until", "budget", "run_length"} == set(schema["$defs"]["RepetitionRange"]["properties"])
    assert {"min", "max"} == set(schema["$defs"]["RunLength"]["properties"])
