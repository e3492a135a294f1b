"""The results folder: a store is recognised by what it holds, read commands never write, a damaged
store is one line from every command, report and export never replace a file storlab did not write,
and user strings are shown literally (no rich markup, no math text), every cell with its own label."""

from __future__ import annotations

import sqlite3
from html import escape as html_escape
from pathlib import Path

import pytest

from storlab.labels import format_value
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.folder_store import FILENAME
from storlab.results.runs import RunResult
from storlab.results.store import Store
from tests.commands import invoke

READ_COMMANDS = [["show"], ["waits"], ["compare"]]
WRITING_COMMANDS = [["report"], ["export", "--format", "csv"], ["export", "--format", "json"]]
VALUES = ["[/]", "$x$", "[red]", "[blue]"]



def make_store(folder: Path, values=VALUES) -> Path:
    """A store as `storlab run` leaves it: one cell per value of a string factor, two runs each."""
    cells = [(f"c{i}", f"application_name={format_value(v)}", {"engine_settings.application_name": v})
             for i, v in enumerate(values)]
    with Store.open(folder) as store:
        store.bind_experiment("lit", "postgres", "src", {"k": 1}, 2, {"engine_settings.application_name": values}, cells)
        facts = store.record_facts({"paths": {"/var/tmp/[x]": {"device": "$d$"}}}, {})
        capture = WaitCapture("pg_wait_sampling", [Wait("IO:[/]WALWrite $w$", 1.0), Wait("CPU", 1.0)])
        for i, (cell_id, _, _) in enumerate(cells):
            for rep in (1, 2):
                elapsed = 1.0 + i / 10 + rep / 100
                figures = [("elapsed_s", elapsed, "s"), ("rows_per_s", 3000 / elapsed, "rows/s")]
                store.record_run(cell_id, rep, RunResult(0.0, figures, capture, "15", [(0.0, "rows_per_s", 10.0)]), facts)
        store.record_failure("c0", 3, "FATAL: [bold]no[/] $money$")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_labels_of_different_values_always_differ():
    pairs = [("1", 1), ("True", True), ("1.0", 1.0), ("disk:7+ram:1", {"disk": 7, "ram": 1}), ("[red]", "[blue]"),
             ("a b", "a"), ("x=1 y=2", "x=1"), ("", " "), ('"a"', "a")]
    for a, b in pairs:
        assert format_value(a) != format_value(b), (a, b)
    assert format_value("256MB") == "256MB" and format_value({"disk": 7, "ram": 1}) == "disk:7+ram:1"


def test_user_strings_are_shown_literally(tmp_path):
    folder = make_store(tmp_path / "r")
    shown = invoke("show", folder)
    assert shown.exit_code == 0, shown.output
    labels = [f"application_name={format_value(v)}" for v in VALUES]
    assert labels == ['application_name="[/]"', 'application_name="$x$"', 'application_name="[red]"',
                      'application_name="[blue]"']
    for label in labels:
        assert label in shown.stdout
    assert "failed run: cell c0 repetition 3: FATAL: [bold]no[/] $money$" in shown.stdout
    detailed = invoke("show", folder, "--details")  # the machine's paths: behind --details
    assert detailed.exit_code == 0, detailed.output
    assert all(label in detailed.stdout for label in labels)
    assert "failed run: cell c0 repetition 3: FATAL: [bold]no[/] $money$" in detailed.stdout
    assert "/var/tmp/[x]: $d$" in detailed.stdout
    waits = invoke("waits", folder)
    assert waits.exit_code == 0 and 'application_name="[blue]" (c3)' in waits.stdout
    assert "IO:[/]WALWrite $w$" in waits.stdout
    compare = invoke("compare", folder)
    assert compare.exit_code == 0 and 'elapsed s against application_name="[/]" (c0)' in compare.stdout
    report = invoke("report", folder)
    assert report.exit_code == 0, report.output
    html = (folder / "report.html").read_text()
    assert all(html_escape(label) in html for label in labels) and "$money$" in html


def test_an_empty_storlab_sqlite_is_no_results_and_stays_empty(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / FILENAME).touch()
    for command in READ_COMMANDS + WRITING_COMMANDS:
        result = invoke(*command, folder)
        assert result.exit_code == 2
        assert result.stderr == f"storlab: {folder}: no storlab results here (expected {FILENAME})\n"
    assert snapshot(folder) == {FILENAME: b""}


def test_an_sqlite_file_without_storlab_tables_is_not_a_store(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    with sqlite3.connect(folder / FILENAME) as db:
        db.execute("CREATE TABLE notes (text)")
    before = snapshot(folder)
    for command in READ_COMMANDS + WRITING_COMMANDS:
        result = invoke(*command, folder)
        assert result.exit_code == 2
        assert result.stderr == (f"storlab: {folder / FILENAME}: not a storlab results store (an SQLite database with "
                                 "other tables)\n")
    assert snapshot(folder) == before
    with sqlite3.connect(tmp_path / "empty.sqlite") as db:  # an SQLite file with no table at all
        db.execute("PRAGMA user_version = 0")
    (folder / FILENAME).write_bytes((tmp_path / "empty.sqlite").read_bytes() + b"\0" * 4096)
    assert invoke("show", folder).stderr == f"storlab: {folder}: no storlab results here ({FILENAME} holds no storlab store)\n"


def test_read_commands_never_write(tmp_path):
    folder = make_store(tmp_path / "r")
    before = snapshot(folder)
    assert list(before) == [FILENAME]  # at rest, a store is one file
    for command in READ_COMMANDS:
        assert invoke(*command, folder).exit_code == 0
    assert snapshot(folder) == before
    for command in WRITING_COMMANDS:
        assert invoke(*command, folder).exit_code == 0
    assert snapshot(folder)[FILENAME] == before[FILENAME]


def test_a_damaged_store_is_one_line_from_every_command(tmp_path, write_experiment, lab_dir):
    folder = make_store(tmp_path / "r", values=[f"v{i}" for i in range(200)])
    path = folder / FILENAME
    data = bytearray(path.read_bytes())
    assert len(data) > 8 * 4096
    data[4 * 4096: 6 * 4096] = b"\xa5" * (2 * 4096)  # pages in the middle, the header intact
    path.write_bytes(bytes(data))
    experiment = write_experiment(f'name = "lit"\nengine = "postgres"\n[placements]\ndisk = "{lab_dir}"\n'
                                  '[layout]\ndata_on = "disk"\n[workload]\nkind = "random-insert"\n')
    for command in READ_COMMANDS + WRITING_COMMANDS + [["run", experiment, "--dry-run", "--out"], ["run", experiment, "--out"]]:
        result = invoke(*command, folder)
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith(f"storlab: {path}: the results store is damaged: "), (command, result.stderr)
        assert result.stderr.count("\n") == 1
    assert list(lab_dir.iterdir()) == []  # nothing started


@pytest.mark.parametrize("command, name", [(["report"], "report.html"), (["export", "--format", "csv"], "runs.csv"),
                                           (["export", "--format", "csv"], "pressure.csv"),
                                           (["export", "--format", "json"], "runs.json"),
                                           (["export", "--format", "parquet"], "runs.parquet")])
def test_report_and_export_never_replace_a_file_storlab_did_not_write(tmp_path, command, name):
    folder = make_store(tmp_path / "r")
    mine = folder / name
    mine.write_text("my own notes")
    refused = invoke(*command, folder)
    assert refused.exit_code == 2
    assert refused.stderr == (f"storlab: {mine}: already there and not written by storlab (or changed since); "
                              "move it away, storlab will not replace it\n")
    assert mine.read_text() == "my own notes" and snapshot(folder).keys() == {FILENAME, name}  # nothing else written
    mine.unlink()
    assert invoke(*command, folder).exit_code == 0
    assert invoke(*command, folder).exit_code == 0  # its own file, unchanged: replaced
    mine.write_bytes(mine.read_bytes() + b"edited")
    assert invoke(*command, folder).exit_code == 2 and mine.read_bytes().endswith(b"edited")


def test_out_folders_that_cannot_be(tmp_path, write_experiment, lab_dir):
    experiment = write_experiment(f'name = "o"\nengine = "postgres"\n[placements]\ndisk = "{lab_dir}"\n'
                                  '[layout]\ndata_on = "disk"\n[workload]\nkind = "random-insert"\n')
    (tmp_path / "file").write_text("x")
    long_name = "a" * 300
    cases = [
        ("", "storlab: --out: an empty folder name; give a folder, or leave --out out"),
        (tmp_path / "file" / "r", f"storlab: {tmp_path}/file/r: cannot be a results folder: {tmp_path}/file is not a folder"),
        (tmp_path / "file", f"storlab: {tmp_path}/file: is not a folder"),
        (tmp_path / long_name, f"storlab: {str(tmp_path / long_name)[:60]}…: the folder name is too long (at most "
                               "255 bytes a name, 4095 in all)"),
    ]
    for out, expected in cases:
        for command in (["run", experiment, "--dry-run", "--out", out], ["run", experiment, "--out", out],
                        ["io", lab_dir, "--out", out]):
            result = invoke(*command)
            assert result.exit_code == 2, (command, result.output)
            assert result.stderr == expected + "\n"
    assert list(Path.cwd().glob(FILENAME)) == []
