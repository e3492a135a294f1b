"""Every table of every run in every export format, read back equal to what the store holds: a real
short run on PostgreSQL (its probes traced where bpftrace can), exported as csv, json and parquet,
each table compared with the store's own rows read by sqlite3, each probe's table among them."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import tempfile
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from storlab.results.folder_store import FILENAME
from tests.commands import storlab
from tests.experiments import random_insert

pytestmark = pytest.mark.engine

EXPERIMENT = random_insert("export", repetitions="1", data_files="[1, 2]", log_on='"disk"', connections=4,
                           rows="5000", batch=10)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """One real run per cell into a results folder, made once for the module."""
    lab = Path(tempfile.mkdtemp(prefix="storlab-test-", dir="/var/tmp"))
    try:
        (lab / "disk").mkdir(parents=True)
        for path in (lab, lab / "disk"):
            path.chmod(0o755)
        source = lab / "export.toml"
        source.write_text(textwrap.dedent(EXPERIMENT.format(disk=lab / "disk")))
        out = tmp_path_factory.mktemp("export") / "results"
        env = {**os.environ, "STORLAB_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
        done = storlab("run", source, "--out", out, "--trace-io", env=env)  # every probe's table filled
        assert done.returncode == 0, done.stderr
        yield out
    finally:
        shutil.rmtree(lab, ignore_errors=True)


@pytest.fixture
def store(recorded, tmp_path) -> Path:
    shutil.copytree(recorded, tmp_path / "results")
    return tmp_path / "results"


def held(folder: Path) -> dict[str, tuple[list[str], list[str], list[tuple]]]:
    """Every table of the store with rows of runs: (its columns, their declared types, its rows in the
    order of their values), as sqlite3 reads it."""
    with sqlite3.connect(folder / FILENAME) as db:
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        found = {}
        for name in names:
            info = db.execute(f'PRAGMA table_info("{name}")').fetchall()
            columns = [row[1] for row in info]
            if "run_id" not in columns or name == "figures":  # a run's figures are the runs' columns
                continue
            quoted = ", ".join(f'"{c}"' for c in columns)
            found[name] = (columns, [row[2] for row in info], db.execute(f'SELECT {quoted} FROM "{name}" ORDER BY {quoted}').fetchall())
        return found


def runs_held(folder: Path) -> list[dict]:
    """Each run as the store holds it: its row, its cell's factors, its figures and wait counters."""
    with sqlite3.connect(folder / FILENAME) as db:
        factors = {cid: json.loads(f) for cid, f in db.execute("SELECT id, factors FROM cells")}
        figures: dict[int, dict] = {}
        for run_id, name, value in db.execute("SELECT run_id, name, value FROM figures"):
            figures.setdefault(run_id, {})[name] = value
        return [{"run_id": run_id, "cell": cell, **{k.split(".", 1)[1]: v for k, v in factors[cell].items()},
                 "repetition": rep, **figures[run_id], "started_at": started, "engine_version": version,
                 "wait_source": source, "host": host, **json.loads(extras)}
                for run_id, cell, rep, started, version, source, host, extras in db.execute(
                    "SELECT id, cell_id, repetition, started_at, engine_version, wait_source, host, wait_extras "
                    "FROM runs ORDER BY id")]


def test_the_run_filled_the_tables_a_round_trip_reads(recorded):
    tables = held(recorded)
    assert {"waits", "timeline", "waiting_tasks", "io_sizes", "traced_waits", "file_io", "pressure"} <= set(tables)
    full = ["waits", "timeline", "pressure"] + (["traced_waits", "file_io"] if shutil.which("bpftrace") else [])
    assert all(tables[name][2] for name in full), {name: len(tables[name][2]) for name in tables}
    assert len(runs_held(recorded)) == 2


def _typed(text: str, declared: str) -> object:
    """A CSV field as its column's declared type reads it; an empty field of a number is NULL."""
    if declared == "TEXT":
        return text
    if text == "":
        return None
    return int(text) if declared == "INTEGER" else float(text)


def test_csv_is_a_file_per_table_equal_to_the_store(store):
    done = storlab("export", store, "--format", "csv")
    assert done.returncode == 0, done.stderr
    tables = held(store)
    assert sorted(done.stdout.splitlines()) == sorted(f"wrote {store / name}.csv" for name in ["runs", *tables])
    for name, (columns, declared, rows) in tables.items():
        with open(store / f"{name}.csv", newline="") as f:
            read = list(csv.reader(f))
        assert read[0] == columns, name
        assert [tuple(_typed(v, t) for v, t in zip(row, declared)) for row in read[1:]] == rows, name
    with open(store / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    expected = runs_held(store)
    assert [sorted(r) for r in runs] == [sorted(e) for e in expected] and list(runs[0])[:2] == ["run_id", "cell"]
    for run, want in zip(runs, expected):
        assert {k: type(v)(run[k]) if v is not None else (run[k] or None) for k, v in want.items()} == want


def test_json_carries_every_table_of_each_run_equal_to_the_store(store):
    done = storlab("export", store, "--format", "json")
    assert done.returncode == 0, done.stderr
    runs = json.loads((store / "runs.json").read_text())
    tables = held(store)
    for name, (columns, _, rows) in tables.items():
        read = [(run["run_id"], *(row[c] for c in columns[1:])) for run in runs for row in run[name]]
        assert read == rows, name
    assert [{k: v for k, v in run.items() if k not in tables} for run in runs] == runs_held(store)


def test_parquet_carries_every_table_of_each_run_typed_and_equal_to_the_store(store):
    done = storlab("export", store, "--format", "parquet")
    assert done.returncode == 0, done.stderr
    table = pq.read_table(store / "runs.parquet")
    tables = held(store)
    types = {"INTEGER": "int64", "REAL": "double", "TEXT": "string"}
    runs = table.to_pylist()
    for name, (columns, declared, rows) in tables.items():
        struct = table.schema.field(name).type.value_type
        assert [(f.name, str(f.type)) for f in struct] == [(c, types[t]) for c, t in zip(columns[1:], declared[1:])]
        read = [(run["run_id"], *(row[c] for c in columns[1:])) for run in runs for row in run[name]]
        assert read == rows, name
    assert str(table.schema.field("host").type) == "string" and str(table.schema.field("data_files").type) == "int64"
    flat = [{k: v for k, v in run.items() if k not in tables} for run in runs]
    for run in flat:
        run["started_at"] = run["started_at"].timestamp()
    expected = runs_held(store)
    assert [r.pop("started_at") for r in flat] == pytest.approx([e.pop("started_at") for e in expected], abs=1e-6)
    assert flat == expected
