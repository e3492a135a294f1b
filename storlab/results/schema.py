"""The results store's tables: its own (the experiment, its cells, the runs with their figures, waits
and timeline, machine facts, failures, device capability) made by its migrations, one per schema
version, and each probe's, made by the probe's own (storlab.probes.kept). `tables()` reads every
table and column they make from a store made in memory, the one description of what a store holds:
a store read is checked against it (storlab.results.damage) and the export types its columns by it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from functools import lru_cache

from storlab.probes.kept import Probe
from storlab.results.dialects import SQLITE, Migration, PerDialect

# The probes' tables the store's own migrations made before each probe made its own (probe = table name).
_ADOPTED = "('waiting_tasks', 'io_sizes', 'traced_waits', 'file_io')"

# One entry per schema version; a store at version N runs MIGRATIONS[N:] to come up to date. Each is
# written once in SQLite's words (storlab.results.dialects gives PostgreSQL its own), or as a PerDialect.
MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE experiment (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        name TEXT NOT NULL,
        engine TEXT NOT NULL,
        source TEXT NOT NULL,
        identity TEXT NOT NULL,
        repetitions INTEGER NOT NULL,
        factors TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE facts (
        id INTEGER PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        comparable TEXT NOT NULL,
        body TEXT NOT NULL,
        recorded_at REAL NOT NULL
    );
    CREATE TABLE cells (
        id TEXT PRIMARY KEY,
        position INTEGER NOT NULL,
        label TEXT NOT NULL,
        factors TEXT NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        cell_id TEXT NOT NULL REFERENCES cells(id),
        repetition INTEGER NOT NULL,
        started_at REAL NOT NULL,
        elapsed_s REAL NOT NULL,
        rows INTEGER NOT NULL,
        transactions INTEGER NOT NULL,
        rows_per_s REAL NOT NULL,
        latency_p50_ms REAL NOT NULL,
        latency_p95_ms REAL NOT NULL,
        latency_p99_ms REAL NOT NULL,
        wait_source TEXT NOT NULL,
        wait_extras TEXT NOT NULL,
        engine_version TEXT NOT NULL,
        facts_id INTEGER NOT NULL REFERENCES facts(id),
        UNIQUE (cell_id, repetition)
    );
    CREATE TABLE waits (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        wait_type TEXT NOT NULL,
        wait_s REAL NOT NULL,
        wait_count INTEGER,
        signal_s REAL
    );
    CREATE TABLE timeline (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        t_s REAL NOT NULL,
        metric TEXT NOT NULL,
        value REAL NOT NULL
    );
    CREATE TABLE failures (
        id INTEGER PRIMARY KEY,
        cell_id TEXT NOT NULL,
        repetition INTEGER NOT NULL,
        at REAL NOT NULL,
        message TEXT NOT NULL
    );
    CREATE TABLE io_jobs (
        id INTEGER PRIMARY KEY,
        run_at REAL NOT NULL,
        target TEXT NOT NULL,
        job TEXT NOT NULL,
        rw TEXT NOT NULL,
        block_size INTEGER NOT NULL,
        iodepth INTEGER NOT NULL,
        iops REAL NOT NULL,
        mb_s REAL NOT NULL,
        lat_p50_ms REAL,
        lat_p99_ms REAL,
        lat_p999_ms REAL,
        flags TEXT NOT NULL,
        facts_id INTEGER REFERENCES facts(id)
    );
    CREATE INDEX waits_run ON waits(run_id);
    CREATE INDEX timeline_run ON timeline(run_id);
    """,
    # 2: each run's figures kept generically (name, value, unit), as each workload kind reports them;
    # the insert figures of schema 1 move there.
    """
    CREATE TABLE figures (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        name TEXT NOT NULL,
        value REAL NOT NULL,
        unit TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    INSERT INTO figures SELECT id, 'elapsed_s', elapsed_s, 's' FROM runs;
    INSERT INTO figures SELECT id, 'rows', rows, 'rows' FROM runs;
    INSERT INTO figures SELECT id, 'transactions', transactions, 'txn' FROM runs;
    INSERT INTO figures SELECT id, 'rows_per_s', rows_per_s, 'rows/s' FROM runs;
    INSERT INTO figures SELECT id, 'transactions_per_s', transactions / elapsed_s, 'txn/s' FROM runs WHERE elapsed_s > 0;
    INSERT INTO figures SELECT id, 'latency_p50_ms', latency_p50_ms, 'ms' FROM runs;
    INSERT INTO figures SELECT id, 'latency_p95_ms', latency_p95_ms, 'ms' FROM runs;
    INSERT INTO figures SELECT id, 'latency_p99_ms', latency_p99_ms, 'ms' FROM runs;
    ALTER TABLE runs DROP COLUMN elapsed_s;
    ALTER TABLE runs DROP COLUMN rows;
    ALTER TABLE runs DROP COLUMN transactions;
    ALTER TABLE runs DROP COLUMN rows_per_s;
    ALTER TABLE runs DROP COLUMN latency_p50_ms;
    ALTER TABLE runs DROP COLUMN latency_p95_ms;
    ALTER TABLE runs DROP COLUMN latency_p99_ms;
    """,
    # 3: the waiting tasks of each run, a table the waiting-task probe now makes itself (migration 10).
    "",
    # 4: what each run started from (checkpoint, sync, page cache, warm-up), and the race an
    # experiment declared (its settings, so `show` replays the same drops).
    """
    ALTER TABLE runs ADD COLUMN conditions TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE experiment ADD COLUMN race TEXT;
    """,
    # 5: the IO sizes of each run, a table the IO-size probe now makes itself (migration 10).
    "",
    # 6: the host that measured each run (a worker's --host; this machine's name for storlab run),
    # and the text of the SQL files the experiment names, so a worker needs nothing but the store.
    """
    ALTER TABLE runs ADD COLUMN host TEXT;
    ALTER TABLE experiment ADD COLUMN files TEXT;
    """,
    # 7: the seed each round's order of cells is drawn from (kept, so a resume runs the same orders),
    # how the answer reads the runs (reference levels, equivalence margin, until settled), and why
    # the runs stopped. An experiment from before has no seed: its runs went in the matrix order.
    """
    ALTER TABLE experiment ADD COLUMN order_seed INTEGER;
    ALTER TABLE experiment ADD COLUMN answer TEXT;
    ALTER TABLE experiment ADD COLUMN stopped TEXT;
    """,
    # 8: the time the engine's trace points measured in each wait, beside the sampled wait_s (their
    # waits by resource and the IO per file are the tables of the traced-wait and file-IO probes).
    """
    ALTER TABLE waits ADD COLUMN traced_s REAL;
    """,
    # 9: a device's throughput in MiB/s (2^20 bytes), as fio gives it and every size storlab reads, where
    # runs before kept 10^6-byte MB/s: the two were drawn on one axis 5 % apart.
    """
    UPDATE timeline SET value = value * 1000000.0 / 1048576 WHERE metric LIKE 'mb_s:%';
    """,
    # 10: each probe makes and changes its own tables (probes/kept.py), its version kept here under its
    # name. A store from before holds the tables migrations 3, 5 and 8 made: their probes are at 1.
    PerDialect(
        sqlite=f"""
        CREATE TABLE probe_versions (probe TEXT PRIMARY KEY, version INTEGER NOT NULL);
        INSERT INTO probe_versions SELECT name, 1 FROM sqlite_master WHERE type = 'table' AND name IN {_ADOPTED};
        """,
        postgresql=f"""
        CREATE TABLE probe_versions (probe TEXT PRIMARY KEY, version BIGINT NOT NULL);
        INSERT INTO probe_versions SELECT tablename, 1 FROM pg_tables
            WHERE schemaname = current_schema() AND tablename IN {_ADOPTED};
        """,
    ),
]


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # INTEGER, REAL, TEXT or BLOB: the storage its declared type gives it in SQLite (its affinity)
    nullable: bool


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    references: tuple[tuple[str, str, str], ...]  # (column, the table it names, that table's column)
    probe: str | None  # the probe that owns it; None: the store's own

    @property
    def per_run(self) -> bool:
        """A table of rows that each belong to one run."""
        return any(c.name == "run_id" for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


def affinity(declared: str) -> str:
    """SQLite's rules for the storage a declared type gives a column (its "type affinity"), NUMERIC
    read as REAL: a value of it is a number either way."""
    text = declared.upper()
    if "INT" in text:
        return "INTEGER"
    if any(word in text for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not text or "BLOB" in text:
        return "BLOB"
    return "REAL"


@lru_cache(maxsize=8)
def tables(probes: tuple[Probe, ...]) -> dict[str, Table]:
    """Every table the store's migrations and these probes' make, by name, in the order they are made."""
    with closing(sqlite3.connect(":memory:")) as db:
        owner: dict[str, str | None] = {}
        for migration in MIGRATIONS:
            for statement in SQLITE.statements(migration):
                db.execute(statement)
        owner.update({name: None for name in _names(db)})
        for probe in probes:
            for migration in probe.migrations:
                for statement in SQLITE.statements(migration):
                    db.execute(statement)
            owner.update({name: probe.name for name in _names(db) if name not in owner})
        return {name: Table(name, _columns(db, name), _references(db, name), probe) for name, probe in owner.items()}


def _names(db: sqlite3.Connection) -> list[str]:
    return [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]


def _columns(db: sqlite3.Connection, table: str) -> tuple[Column, ...]:
    # A primary key holds a value whatever it declares (an INTEGER one is the row's id).
    return tuple(Column(name, affinity(declared), not (notnull or pk))
                 for _, name, declared, notnull, _, pk in db.execute(f'PRAGMA table_info("{table}")'))


def _references(db: sqlite3.Connection, table: str) -> tuple[tuple[str, str, str], ...]:
    return tuple((row[3], row[2], row[4] or "id") for row in db.execute(f'PRAGMA foreign_key_list("{table}")'))
