"""The results store and the analysis on top of it, with runs written as the runner writes them."""

import sqlite3

import numpy as np
import pytest

from storlab import analysis
from storlab.engines.base import Wait, WaitCapture
from storlab.errors import UserError
from storlab.store import MIGRATIONS, Store
from storlab.workloads import DriveResult


def drive(elapsed: float) -> DriveResult:
    lat = np.array([0.01, 0.02, 0.03])
    return DriveResult(elapsed, 3000, 3, lat, np.array([0.1, 0.5, elapsed]), 0.0)


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
            store.record_run("a", 1, 0.0, drive(1.0), broken, "15", fid, [(0.0, "rows_per_s", 1.0), (0.0, None, 1.0)])
        assert store.runs() == [] and store.db.execute("SELECT count(*) FROM waits").fetchone()[0] == 0


def test_runs_on_other_machine_facts_are_set_aside(tmp_path):
    with Store.open(tmp_path) as store:
        bind(store)
        same = store.record_facts(FACTS, FACTS)
        other = store.record_facts(OTHER, OTHER)
        capture = WaitCapture("pg_wait_sampling", [Wait("Lock:extend", 3.0), Wait("CPU", 1.0)])
        for rep, elapsed in enumerate([1.0, 1.1], 1):
            store.record_run("a", rep, 0.0, drive(elapsed), capture, "15", same, [])
            store.record_run("b", rep, 0.0, drive(elapsed * 2), capture, "15", same, [])
        store.record_run("a", 3, 0.0, drive(9.0), capture, "15", other, [])
        results = analysis.load(store)
    assert len(results.set_aside) == 1
    assert results.facts_notes == ["1 runs recorded on other machine facts are set aside: cpu.governor: performance -> powersave"]
    ranking = results.ranking()
    assert [r.result.cell.id for r in ranking] == ["a", "b"]
    assert ranking[0].result.elapsed.mean == pytest.approx(1.05)
    assert ranking[1].slower_percent == pytest.approx(100.0)
    assert ranking[0].result.top_wait == "Lock:extend 75 %"
