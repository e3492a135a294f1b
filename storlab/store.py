"""The results store: one SQLite file in the results folder, schema versioned by PRAGMA user_version,
one transaction per finished run, so a crash loses at most the run that was under way."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from storlab.engines.base import Wait
from storlab.errors import UserError

FILENAME = "storlab.sqlite"

# One entry per schema version; a store at version N runs MIGRATIONS[N:] to come up to date.
MIGRATIONS = [
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
]


@dataclass
class RunRecord:
    id: int
    cell_id: str
    repetition: int
    elapsed_s: float
    rows: int
    rows_per_s: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    wait_source: str
    wait_extras: dict[str, float]
    engine_version: str
    facts_id: int


@dataclass
class CellRecord:
    id: str
    label: str
    factors: dict[str, Any]


def facts_digest(comparable: dict) -> str:
    return hashlib.sha256(json.dumps(comparable, sort_keys=True).encode()).hexdigest()[:16]


class Store:
    def __init__(self, db: sqlite3.Connection, folder: Path):
        self.db = db
        self.folder = folder

    @classmethod
    @contextmanager
    def open(cls, folder: Path, create: bool = True) -> Iterator["Store"]:
        folder = Path(folder)
        path = folder / FILENAME
        if not path.exists():
            if not create:
                raise UserError(f"{folder}: no storlab results here (expected {FILENAME})")
            folder.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None, timeout=30)
        try:
            # Only opening is the user's problem (a file that is not a store); an error while
            # recording is the lab's and must surface as itself.
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA foreign_keys=ON")
                store = cls(db, folder)
                store._migrate()
            except sqlite3.DatabaseError as exc:
                raise UserError(f"{path}: not a readable storlab store ({exc})") from None
            yield store
        finally:
            db.close()

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise UserError(f"{self.folder}: written by a newer storlab (schema {version}); upgrade storlab to read it")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            with self.transaction():
                for statement in filter(str.strip, script.split(";")):
                    self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {number}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- the experiment ----------------------------------------------------------------------

    def experiment(self) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT name, engine, source, identity, repetitions, factors FROM experiment"
        ).fetchone()
        if row is None:
            return None
        return {
            "name": row[0], "engine": row[1], "source": row[2], "identity": json.loads(row[3]),
            "repetitions": row[4], "factors": json.loads(row[5]),
        }

    def bind_experiment(self, name: str, engine: str, source: str, identity: dict, repetitions: int,
                        factors: dict[str, list], cells: list[tuple[str, str, dict]]) -> None:
        """Record the experiment the first time; afterwards accept it only if nothing but repetitions changed."""
        held = self.experiment()
        if held is not None and held["identity"] != identity:
            changed = _first_difference(held["identity"], identity)
            raise UserError(
                f"{self.folder}: holds results of a different experiment ({changed}); "
                "use another --out folder, or restore the file"
            )
        with self.transaction() as db:
            if held is None:
                db.execute(
                    "INSERT INTO experiment VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                    (name, engine, source, json.dumps(identity), repetitions, json.dumps(factors), time.time()),
                )
            else:
                db.execute("UPDATE experiment SET repetitions = ?, source = ?", (repetitions, source))
            for position, (cell_id, label, cell_factors) in enumerate(cells):
                db.execute(
                    "INSERT OR IGNORE INTO cells VALUES (?, ?, ?, ?)",
                    (cell_id, position, label, json.dumps(cell_factors)),
                )

    def cells(self) -> list[CellRecord]:
        return [
            CellRecord(cid, label, json.loads(factors))
            for cid, label, factors in self.db.execute("SELECT id, label, factors FROM cells ORDER BY position")
        ]

    # -- machine facts -----------------------------------------------------------------------

    def record_facts(self, body: dict, comparable: dict) -> int:
        digest = facts_digest(comparable)
        with self.transaction() as db:
            row = db.execute("SELECT id FROM facts WHERE digest = ?", (digest,)).fetchone()
            if row:
                db.execute("UPDATE facts SET body = ?, recorded_at = ? WHERE id = ?", (json.dumps(body), time.time(), row[0]))
                return row[0]
            return db.execute(
                "INSERT INTO facts (digest, comparable, body, recorded_at) VALUES (?, ?, ?, ?)",
                (digest, json.dumps(comparable), json.dumps(body), time.time()),
            ).lastrowid

    def facts(self) -> dict[int, dict]:
        """facts id -> {'comparable': ..., 'body': ...}"""
        return {
            fid: {"comparable": json.loads(comp), "body": json.loads(body)}
            for fid, comp, body in self.db.execute("SELECT id, comparable, body FROM facts ORDER BY id")
        }

    # -- runs --------------------------------------------------------------------------------

    def done(self) -> set[tuple[str, int]]:
        return {(c, r) for c, r in self.db.execute("SELECT cell_id, repetition FROM runs")}

    def record_run(self, cell_id: str, repetition: int, started_at: float, drive, capture,
                   engine_version: str, facts_id: int, timeline: list[tuple[float, str, float]]) -> int:
        """Everything about one finished run, in one transaction: all of it is kept, or none."""
        with self.transaction() as db:
            run_id = db.execute(
                """INSERT INTO runs (cell_id, repetition, started_at, elapsed_s, rows, transactions, rows_per_s,
                       latency_p50_ms, latency_p95_ms, latency_p99_ms, wait_source, wait_extras,
                       engine_version, facts_id)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (cell_id, repetition, started_at, drive.elapsed_s, drive.rows, drive.transactions, drive.rows_per_s,
                 drive.latency_ms(50), drive.latency_ms(95), drive.latency_ms(99), capture.source,
                 json.dumps(capture.extras), engine_version, facts_id),
            ).lastrowid
            db.executemany(
                "INSERT INTO waits VALUES (?, ?, ?, ?, ?)",
                [(run_id, w.wait_type, w.wait_s, w.wait_count, w.signal_s) for w in capture.waits],
            )
            db.executemany("INSERT INTO timeline VALUES (?, ?, ?, ?)", [(run_id, *p) for p in timeline])
        return run_id

    def record_failure(self, cell_id: str, repetition: int, message: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO failures (cell_id, repetition, at, message) VALUES (?, ?, ?, ?)",
                (cell_id, repetition, time.time(), message),
            )

    def runs(self) -> list[RunRecord]:
        rows = self.db.execute(
            """SELECT id, cell_id, repetition, elapsed_s, rows, rows_per_s, latency_p50_ms, latency_p95_ms,
                      latency_p99_ms, wait_source, wait_extras, engine_version, facts_id
               FROM runs ORDER BY id"""
        ).fetchall()
        return [RunRecord(*r[:10], json.loads(r[10]), *r[11:]) for r in rows]

    def waits(self, run_id: int) -> list[Wait]:
        return [
            Wait(t, s, c, sig)
            for t, s, c, sig in self.db.execute(
                "SELECT wait_type, wait_s, wait_count, signal_s FROM waits WHERE run_id = ?", (run_id,)
            )
        ]

    def timeline(self, run_id: int) -> list[tuple[float, str, float]]:
        return list(self.db.execute("SELECT t_s, metric, value FROM timeline WHERE run_id = ? ORDER BY t_s", (run_id,)))

    def failures(self) -> list[tuple[str, int, str]]:
        return list(self.db.execute("SELECT cell_id, repetition, message FROM failures ORDER BY id"))

    # -- device capability (storlab io) ------------------------------------------------------

    def record_io(self, results, target: str, facts: dict | None = None, comparable: dict | None = None) -> None:
        facts_id = self.record_facts(facts, comparable or facts) if facts is not None else None
        now = time.time()
        with self.transaction() as db:
            for result in results:
                row = result.as_row()
                db.execute(
                    """INSERT INTO io_jobs (run_at, target, job, rw, block_size, iodepth, iops, mb_s,
                           lat_p50_ms, lat_p99_ms, lat_p999_ms, flags, facts_id)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (now, target, row["job"], row["rw"], row["block_size"], row["iodepth"], row["iops"],
                     row["mb_s"], row["lat_p50_ms"], row["lat_p99_ms"], row["lat_p999_ms"],
                     json.dumps(row["flags"]), facts_id),
                )

    def io_jobs(self) -> list[dict[str, Any]]:
        cursor = self.db.execute(
            """SELECT run_at, target, job, rw, block_size, iodepth, iops, mb_s, lat_p50_ms, lat_p99_ms,
                      lat_p999_ms, flags FROM io_jobs ORDER BY id"""
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r), flags=json.loads(r[-1])) for r in cursor.fetchall()]


def _first_difference(old: Any, new: Any, path: str = "") -> str:
    """The first key whose value differs, as 'layout.data_files: [1, 2] -> [1, 2, 4]'."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    return f"{path or 'experiment'}: {json.dumps(old)} -> {json.dumps(new)}"
