"""A damaged or tampered store is one line naming the store, the table and what is wrong, exit 2, no
traceback, from every command that reads it; a headline figure of 0 or below still answers, the
factor analysis said to be unavailable. Each case tampers a copy of tests/data/explain/quickstart (a
real PostgreSQL run, recorded by tests/data/record-explain.sh), brought up to date first. The fleet's
worker skipping an experiment it cannot read is in tests/test_fleet.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from storlab.results.folder_store import FILENAME
from storlab.results.store import Store
from tests.commands import invoke

DATA = Path(__file__).parent / "data"
READERS = [["show"], ["show", "--json"], ["compare"], ["report"], ["waits"], ["waits", "--resources", "--files"],
           ["export", "--format", "csv"], ["export", "--format", "json"], ["export", "--format", "parquet"]]


@pytest.fixture
def store(tmp_path) -> Path:
    folder = tmp_path / "results" / "quickstart"
    shutil.copytree(DATA / "explain" / "quickstart", folder)
    with Store.open(folder):  # brought up to date: the tampering below is of today's tables
        pass
    return folder


def tamper(folder: Path, *statements: str) -> None:
    with sqlite3.connect(folder / FILENAME) as db:
        for sql in statements:
            db.execute(sql)


@pytest.mark.parametrize("statements, what", [
    (["UPDATE experiment SET files = '[1,2]'"],
     "the results store is damaged: table experiment: files: expected an object, got [1, 2]"),
    (["UPDATE experiment SET answer = '{\"settling\": {\"min_rounds\": 5, \"max_rounds\": 3}}'"],
     "the results store is damaged: table experiment: answer.settling: max_rounds (3) is below min_rounds (5), "
     "got {\"min_rounds\": 5, \"max_rounds\": 3}"),
    (["UPDATE experiment SET name = '../../etc'"],
     "the results store is damaged: table experiment: name: expected 1 to 64 letters, digits, '-', '_' or '.', "
     "got \"../../etc\""),
    (["INSERT INTO probe_versions VALUES ('io_sizes', 999) ON CONFLICT (probe) DO UPDATE SET version = 999"],
     "table probe_versions: probe io_sizes at version 999, where this storlab knows its tables up to version 1: "
     "written by a newer storlab (upgrade storlab to read it), or damaged"),
    (["UPDATE figures SET value = 'abc' WHERE run_id = 3 AND name = 'rows'"],
     "the results store is damaged: table figures (run_id 3): column value holds \"abc\", not a number"),
    (["UPDATE waits SET wait_count = 'many' WHERE run_id = 2"],
     "the results store is damaged: table waits (run_id 2): column wait_count holds \"many\", not an integer"),
    (["DROP TABLE waits"], "the results store is damaged: table waits is missing"),
    (["DROP TABLE waiting_tasks"], "the results store is damaged: table waiting_tasks is missing"),
    (["UPDATE figures SET value = 'NaN' WHERE run_id = 2 AND name = 'elapsed_s'"],
     "the results store is damaged: table figures (run_id 2): column value holds \"NaN\", not a finite number"),
    (["UPDATE figures SET value = 9e999 WHERE run_id = 2 AND name = 'elapsed_s'"],
     "the results store is damaged: table figures (run_id 2): column value holds inf, not a finite number"),
    (["UPDATE runs SET wait_extras = '{\"sessions_cpu_s\": \"x\"}' WHERE id = 4"],
     "the results store is damaged: table runs (id 4): column wait_extras: sessions_cpu_s: expected a number, got \"x\""),
    (["PRAGMA foreign_keys = OFF", "UPDATE runs SET cell_id = 'gone' WHERE id = 5"],
     "the results store is damaged: table runs (id 5): column cell_id names \"gone\", which table cells does not hold"),
])
def test_a_damaged_store_is_one_line_from_every_reader(store, statements, what):
    tamper(store, *statements)
    for command in READERS:
        done = invoke(command[0], store, *command[1:])
        assert done.exit_code == 2, (command, done.output)
        assert done.stderr == f"storlab: {store}: {what}\n", command
        assert done.stdout == "" and "Traceback" not in done.output
    assert not [p for p in store.iterdir() if p.name != FILENAME]  # nothing written beside it


def test_a_damaged_store_is_refused_before_a_run_starts(store, write_experiment, lab_dir):
    tamper(store, "DROP TABLE timeline")
    source = write_experiment(f'name = "quickstart"\nengine = "postgres"\n[placements]\ndisk = "{lab_dir}"\n'
                              '[layout]\ndata_on = "disk"\n[workload]\nkind = "random-insert"\n')
    done = invoke("run", source, "--out", store)
    assert done.exit_code == 2
    assert done.stderr == f"storlab: {store}: the results store is damaged: table timeline is missing\n"
    assert list(lab_dir.iterdir()) == []  # nothing started


@pytest.mark.parametrize("value", ["0", "-1e308"])
def test_a_headline_of_zero_or_below_answers_without_the_factor_analysis(store, value):
    tamper(store, f"UPDATE figures SET value = {value} WHERE name = 'elapsed_s'")
    unavailable = ("explain: what each factor does: unavailable: elapsed s is 0 or below in 8 of 8 runs, and a "
                   "ratio of geometric means needs every figure above 0")
    said = {}
    for command in READERS:
        done = said[" ".join(command)] = invoke(command[0], store, *command[1:])
        assert done.exit_code == 0, (command, done.output)
        assert done.stderr == "" and "Traceback" not in done.output, command
    shown = said["show"]
    assert shown.stdout.startswith(unavailable + "\n")
    assert "verdicts: no verdicts: elapsed s is 0 or below in 8 of 8 runs" in shown.stdout
    answer = json.loads(said["show --json"].stdout)
    assert answer["factor_effects"] is None and answer["status"] == unavailable
    assert [r["verdict"] for r in answer["ranking"]] == ["best", "no verdict", "no verdict", "no verdict"]
    assert unavailable in (store / "report.html").read_text()


def test_a_headline_of_zero_in_one_run_leaves_the_others_ranked(store):
    tamper(store, "UPDATE figures SET value = 0 WHERE name = 'elapsed_s' AND run_id = 1")
    shown = invoke("show", store)
    assert shown.exit_code == 0, shown.output
    assert "unavailable: elapsed s is 0 or below in 1 of 8 runs" in shown.stdout
    assert "% (no verdict)" in shown.stdout and "better than the worst cell" not in shown.stdout
