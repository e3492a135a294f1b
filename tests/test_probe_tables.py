"""Each probe owns its tables: the store makes and migrates them under the probe's name, writes what
the probe recorded with the run, in the same transaction, and reads it back through the probe; its
summary is its typed part of the answer, every export format carries its tables. A probe added to the
registry needs nothing else (the store, the runner, the answer and the export never name it)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from storlab.answer import analysis, compose
from storlab.errors import UserError
from storlab.probes import kept, pressure, registry, waiting_tasks
from storlab.probes.waits import Wait, WaitCapture, WaitingTask
from storlab.report import page
from storlab.results.runs import RunResult
from storlab.results.schema import MIGRATIONS
from storlab.results.store import Store
from tests.commands import invoke

DATA = Path(__file__).parent / "data"


def _write(db, run_id, found):
    db.executemany("INSERT INTO queue_depth (run_id, depth) VALUES (?, ?)", [(run_id, d) for d in found])


def _read(db, run_id):
    return [d for (d,) in db.execute("SELECT depth FROM queue_depth WHERE run_id = ? ORDER BY depth", (run_id,))]


CREATE = "CREATE TABLE queue_depth (run_id INTEGER NOT NULL REFERENCES runs(id), depth INTEGER NOT NULL);"
WIDEN = "ALTER TABLE queue_depth ADD COLUMN device TEXT;"


def queue_probe(*migrations: str) -> kept.Probe:
    return kept.Probe("queue_depth", migrations, _write, _read)


@pytest.fixture
def with_probe(monkeypatch):
    """The registry with one more probe, as a new module would add it (each call: another version of it)."""
    known = registry.PROBES

    def add(probe: kept.Probe) -> None:
        monkeypatch.setattr(registry, "PROBES", known + (probe,))  # everything reads the registry's
    return add


def run_result(**recorded) -> RunResult:
    return RunResult(0.0, [("elapsed_s", 1.0, "s")], WaitCapture("pg_wait_sampling", [Wait("IO:WALSync", 0.5)]), "15",
                     [], kept=recorded)


def bind(store: Store) -> int:
    store.bind_experiment("e", "postgres", "src", {"k": 1}, 2, {}, [("a", "all", {})])
    return store.record_facts({}, {})


def test_a_new_probe_gets_its_table_and_its_rows(tmp_path, with_probe):
    probe = queue_probe(CREATE)
    with_probe(probe)
    with Store.open(tmp_path) as store:
        facts = bind(store)
        run_id = store.record_run("a", 1, run_result(queue_depth=[3, 1, 2]), facts)
        store.record_run("a", 2, run_result(queue_depth=[7]), facts)
        assert store.kept(probe, run_id) == [1, 2, 3]
        assert store.db.execute("SELECT version FROM probe_versions WHERE probe = 'queue_depth'").fetchone() == (1,)


def test_a_new_probe_is_in_every_export_format_and_its_rows_are_checked(tmp_path, with_probe):
    with_probe(queue_probe(CREATE))
    with Store.open(tmp_path) as store:
        facts = bind(store)
        first = store.record_run("a", 1, run_result(queue_depth=[3, 1]), facts)
    for fmt in ("csv", "json", "parquet"):
        done = invoke("export", tmp_path, "--format", fmt)
        assert done.exit_code == 0, done.output
    assert (tmp_path / "queue_depth.csv").read_text() == f"run_id,depth\n{first},1\n{first},3\n"
    assert json.loads((tmp_path / "runs.json").read_text())[0]["queue_depth"] == [{"depth": 1}, {"depth": 3}]
    table = pq.read_table(tmp_path / "runs.parquet")
    assert str(table.schema.field("queue_depth").type) == "list<element: struct<depth: int64 not null>>"
    assert table.to_pylist()[0]["queue_depth"] == [{"depth": 1}, {"depth": 3}]
    with sqlite3.connect(tmp_path / "storlab.sqlite") as db:
        db.execute("UPDATE queue_depth SET depth = 'deep' WHERE depth = 3")
    refused = invoke("export", tmp_path, "--format", "json")
    assert refused.exit_code == 2
    assert refused.stderr == (f"storlab: {tmp_path}: the results store is damaged: table queue_depth (run_id {first}): "
                              'column depth holds "deep", not an integer\n')


def test_a_probes_next_migration_runs_once_on_a_store_it_made_before(tmp_path, with_probe):
    with_probe(queue_probe(CREATE))
    with Store.open(tmp_path) as store:
        bind(store)
    with_probe(queue_probe(CREATE, WIDEN))
    with Store.open(tmp_path) as store:  # twice: the second open finds it done
        pass
    with Store.open(tmp_path) as store:
        columns = [row[1] for row in store.db.execute("PRAGMA table_info(queue_depth)")]
        assert columns == ["run_id", "depth", "device"]
        assert store.db.execute("SELECT version FROM probe_versions WHERE probe = 'queue_depth'").fetchone() == (2,)


def test_a_store_whose_probe_a_newer_storlab_changed_is_refused(tmp_path, with_probe):
    with_probe(queue_probe(CREATE, WIDEN))
    with Store.open(tmp_path) as store:
        bind(store)
    with_probe(queue_probe(CREATE))
    for create in (True, False):
        with pytest.raises(UserError, match=r"probe queue_depth at version 2, where this storlab knows its tables up to version 1: written by a newer storlab"):
            with Store.open(tmp_path, create=create):
                pass


def test_a_store_from_before_the_probes_made_their_tables_keeps_its_rows(tmp_path):
    """A store at schema 9 holds the probes' tables the store's own migrations made: migration 10
    counts them as the probes' version 1, so nothing is made twice and every row stays."""
    with Store.open(tmp_path) as store:
        facts = bind(store)
        tasks = [WaitingTask("Lock:extend", "lab_insert_1", 0.5, 5)]
        run_id = store.record_run("a", 1, run_result(waiting_tasks=tasks), facts)
    with sqlite3.connect(tmp_path / "storlab.sqlite") as db:  # as storlab left it before migration 10
        db.execute("DROP TABLE probe_versions")
        db.execute("DROP TABLE pressure")
        db.execute("DROP TABLE pressure_unavailable")
        db.execute("DROP TABLE io_caps")
        db.execute("DROP TABLE memory_limit")
        db.execute("DROP TABLE io_buckets")
        db.execute("DROP TABLE checkpoints")
        db.execute("PRAGMA user_version = 9")
    with Store.open(tmp_path, create=False) as store:
        assert store.kept(waiting_tasks.PROBE, run_id) == tasks
        versions = dict(store.db.execute("SELECT probe, version FROM probe_versions"))
    # Each at version 1 as migration 10 counted it, then its later migrations (the pressure, limits and
    # checkpoints tables, dropped, made anew).
    assert versions == {probe.name: len(probe.migrations) for probe in registry.PROBES}
    with sqlite3.connect(tmp_path / "storlab.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)


def test_a_schema_3_store_gets_the_probes_tables_it_never_had(tmp_path):
    shutil.copytree(DATA / "explain", tmp_path / "explain")
    with Store.open(tmp_path / "explain" / "quickstart", create=False) as store:
        first = store.runs()[0].id
        assert store.kept(waiting_tasks.PROBE, first)  # kept from schema 3
        assert store.kept(pressure.PROBE, first) == pressure.Moved()  # made now, empty for runs before it


def test_pressure_moves_are_the_kernels_counters_in_seconds_and_mib(tmp_path):
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    (proc / "pressure" / "io").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n"
                                          "full avg10=0.00 avg60=0.00 avg300=0.00 total=500000\n")
    (proc / "vmstat").write_text("nr_dirtied 100\nnr_written 50\npgpgin 7\n")
    recording = pressure._Recording(proc)
    recording.start([], 0.0)
    (proc / "pressure" / "io").write_text("some avg10=1.00 avg60=0.00 avg300=0.00 total=3500000\n"
                                          "full avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\n")
    (proc / "vmstat").write_text(f"nr_dirtied {100 + 2**20 // pressure._PAGE * 3}\nnr_written 50\npgpgin 9\n")
    moved = recording.stop()
    assert moved.counters == pytest.approx({"io_some": 2.5, "io_full": 1.0, "nr_dirtied": 3.0, "nr_written": 0.0})
    assert moved.unavailable == {}
    shown = pressure.summary([kept.KeptCell("c1", "a", [1, 2], [moved, moved]),
                              kept.KeptCell("c2", "b", [1, 2], [moved, pressure.Moved()])])
    assert [(c.name, c.label, c.unit) for c in shown.counters] == [
        ("io_some", "IO some s", "s"), ("io_full", "IO full s", "s"), ("nr_dirtied", "dirtied MiB", "MiB"),
        ("nr_written", "written back MiB", "MiB")]
    (a, b) = shown.cells
    assert a.means == pytest.approx({"io_some": 2.5, "io_full": 1.0, "nr_dirtied": 3.0, "nr_written": 0.0})
    assert b.means == dict.fromkeys(["io_some", "io_full", "nr_dirtied", "nr_written"])  # not in every run: unknown
    assert shown.unavailable == {}


@pytest.mark.parametrize("text, why", [
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=12x\n", "line 1 is not as the kernel writes it: "
                                                             "'some avg10=0.00 avg60=0.00 avg300=0.00 total=12x'"),
    ("some avg10=0.00 total=5\nhalf total=7\n", "line 2 is not as the kernel writes it: 'half total=7'"),
    ("some total=5\n\n", "line 2 is not as the kernel writes it: ''"),
    ("some total=５\n", "line 1 is not as the kernel writes it: 'some total=５'"),
    ("", "no line 'some … total=N' in it"),
    ("x" * 100, f"line 1 is not as the kernel writes it: '{'x' * 60}…'"),
])
def test_a_malformed_pressure_file_makes_its_counters_unavailable_not_the_run_fail(tmp_path, text, why):
    """A file the probe cannot read as the kernel writes it: its counters are unavailable for the run,
    the reason kept with the run and shown in the report; the other files' counters are kept."""
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    (proc / "pressure" / "cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n")
    (proc / "vmstat").write_text("nr_dirtied 100\nnr_written 50\n")
    recording = pressure._Recording(proc)
    recording.start([], 0.0)
    (proc / "pressure" / "io").write_text(text)  # there at the run's end only: unavailable for the run
    moved = recording.stop()
    io = str(proc / "pressure" / "io")
    assert moved == pressure.Moved({"cpu_some": 0.0, "nr_dirtied": 0.0, "nr_written": 0.0}, {io: why})

    with Store.open(tmp_path) as store:
        facts = bind(store)
        run_id = store.record_run("a", 1, run_result(pressure=moved), facts)
        assert store.kept(pressure.PROBE, run_id) == moved
    with Store.open(tmp_path, create=False) as store:
        written = page.write(compose.compose(analysis.load(store, [])), store, store.folder).read_text()
    assert f"Unavailable in some runs: {io}: {why}." in written.replace("&#x27;", "'")


def test_a_malformed_vmstat_line_the_probe_keeps_is_unavailable(tmp_path):
    (tmp_path / "vmstat").write_text("pgpgin 7 extra\nnr_dirtied -3\nnr_written 50\n")
    found = pressure.read(tmp_path)
    assert found == pressure.Reading({}, {str(tmp_path / "vmstat"): "line 2 is not as the kernel writes it: 'nr_dirtied -3'"})


def test_the_machines_pressure_is_read_where_the_kernel_has_it():
    found = pressure.read()
    if not Path("/proc/pressure/io").exists():
        pytest.skip("this kernel keeps no pressure stall information")
    assert {"io_some", "io_full", "cpu_some", "nr_dirtied", "nr_written"} <= set(found.counters)
    assert found.unavailable == {}
