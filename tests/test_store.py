"""The results store and the analysis on top of it, with runs written as the runner writes them."""

import shutil
import sqlite3
from pathlib import Path

import pytest

from storlab.answer import analysis
from storlab.errors import UserError
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.runs import RunResult
from storlab.results.schema import MIGRATIONS
from storlab.results.store import Store

V1_STORE = Path(__file__).parent / "data" / "store-v1"


def result(elapsed: float, capture: WaitCapture, timeline=()) -> RunResult:
    figures = [("elapsed_s", elapsed, "s"), ("rows", 3000.0, "rows"), ("rows_per_s", 3000 / elapsed, "rows/s")]
    return RunResult(0.0, figures, capture, "15", list(timeline))


FACTS = {"cpu": {"governor": "performance"}}
OTHER = {"cpu": {"governor": "powersave"}}


def bind(store: Store) -> None:
    store.bind_experiment("e", "postgres", "src", {"k": 1}, 2, {"layout.data_files": [1, 2]},
                          [("a", "data_files=1", {"layout.data_files": 1}), ("b", "data_files=2", {"layout.data_files": 2})])


def test_schema_version_and_refusals(tmp_path):
    with Store.open(tmp_path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        bind(store)
        with pytest.raises(UserError, match=r"different experiment \(k: 1 -> 2\)"):
            store.bind_experiment("e", "postgres", "src", {"k": 2}, 2, {}, [])
    with sqlite3.connect(tmp_path / "storlab.sqlite") as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(UserError, match="newer storlab"):
        with Store.open(tmp_path):
            pass


def test_a_run_is_recorded_whole_or_not_at_all(tmp_path):
    with Store.open(tmp_path) as store:
        bind(store)
        fid = store.record_facts(FACTS, FACTS)
        broken = WaitCapture("pg_stat_activity", [Wait("IO:DataFileRead", 1.0)])
        with pytest.raises(sqlite3.IntegrityError):
            store.record_run("a", 1, result(1.0, broken, [(0.0, "rows_per_s", 1.0), (0.0, None, 1.0)]), fid)
        assert store.runs() == [] and store.db.execute("SELECT count(*) FROM waits").fetchone()[0] == 0


def test_runs_on_other_machine_facts_are_set_aside(tmp_path):
    with Store.open(tmp_path) as store:
        bind(store)
        same = store.record_facts(FACTS, FACTS)
        other = store.record_facts(OTHER, OTHER)
        capture = WaitCapture("pg_wait_sampling", [Wait("Lock:extend", 3.0), Wait("CPU", 1.0)])
        for rep, elapsed in enumerate([1.0, 1.1], 1):
            store.record_run("a", rep, result(elapsed, capture), same)
            store.record_run("b", rep, result(elapsed * 2, capture), same)
        store.record_run("a", 3, result(9.0, capture), other)
        results = analysis.load(store)
    assert len(results.set_aside) == 1
    assert results.facts_notes == ["1 runs recorded on other machine facts are set aside: cpu.governor: performance -> powersave"]
    ranking = results.ranking()
    assert [r.result.cell.id for r in ranking] == ["a", "b"]
    assert ranking[0].result.headline.mean == pytest.approx(1.05)
    assert ranking[1].distance_percent == pytest.approx(100.0)
    assert ranking[0].result.top_wait == "Lock:extend 75 %"


def test_a_schema_1_store_opens_with_its_figures(tmp_path):
    """A results folder written by storlab before figures were stored generically (kept as test data)."""
    folder = tmp_path / "v1"
    shutil.copytree(V1_STORE, folder)
    with Store.open(folder) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        runs = store.runs()
        results = analysis.load(store)
    assert len(runs) == 4
    for run in runs:
        assert set(run.figures) == {"elapsed_s", "rows", "transactions", "rows_per_s", "transactions_per_s",
                                    "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"}
        assert run.figures["rows"] == 8000 and run.figures["rows_per_s"] == pytest.approx(8000 / run.figures["elapsed_s"])
    assert [f.name for f in results.figures][:3] == ["elapsed_s", "rows_per_s", "latency_p99_ms"]
    assert [c.headline.n for c in results.cells] == [2, 2]


def test_device_throughput_written_in_decimal_megabytes_reads_as_mib(tmp_path):
    """Runs recorded before MiB/s kept a device's throughput in 10^6-byte MB/s: the migration converts it."""
    folder = tmp_path / "quickstart"
    shutil.copytree(V1_STORE.parent / "explain" / "quickstart", folder)
    query = "SELECT run_id, t_s, metric, value FROM timeline WHERE metric LIKE 'mb_s:%' ORDER BY 1, 2, 3"
    with sqlite3.connect(folder / "storlab.sqlite") as db:
        before = db.execute(query).fetchall()
    with Store.open(folder) as store:
        after = store.db.execute(query).fetchall()
    assert before and len(after) == len(before)
    for old, new in zip(before, after):
        assert new[3] == pytest.approx(old[3] * 1e6 / 2**20)
