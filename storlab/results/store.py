"""The results store: one SQLite file in the results folder, schema versioned by PRAGMA user_version,
one transaction per finished run, so a crash loses at most the run that was under way. The same store
speaks PostgreSQL for a fleet (storlab.shared_store opens it): every statement here is written once in
the SQL both dialects share (storlab.dialects)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import secrets
import sqlite3
import sys
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from storlab.errors import UserError
from storlab.probes.kept import Probe
from storlab.probes.registry import PROBES
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.dialects import SQLITE, Connection, Migration, PerDialect

FILENAME = "storlab.sqlite"
# The probes' tables the store's own migrations made before each probe made its own (probe = table name).
_ADOPTED = "('waiting_tasks', 'io_sizes', 'traced_waits', 'file_io')"

# One entry per schema version; a store at version N runs MIGRATIONS[N:] to come up to date. Each is
# written once in SQLite's words (storlab.dialects gives PostgreSQL its own), or as a PerDialect.
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


@dataclass
class RunRecord:
    id: int
    cell_id: str
    repetition: int
    started_at: float
    wait_source: str
    wait_extras: dict[str, float]
    engine_version: str
    facts_id: int
    figures: dict[str, float]  # name -> value, as the workload kind reported them
    conditions: dict[str, Any] = field(default_factory=dict)  # what the run started from (settle.py)
    host: str | None = None  # the host that measured it (None: recorded before storlab kept it)


@dataclass
class RunResult:
    """Everything one finished run hands to the store."""

    started_at: float
    figures: list[tuple[str, float, str]]  # (name, value, unit)
    capture: WaitCapture
    engine_version: str
    timeline: list[tuple[float, str, float]]  # (seconds on the run's axis, metric, value)
    conditions: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)  # what each probe of the registry recorded, by its name


@dataclass
class CellRecord:
    id: str
    label: str
    factors: dict[str, Any]


def _header(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(_SQLITE_MAGIC))


def _identity(path: Path) -> tuple[Path, int, int] | None:
    """The store file as it is now (path, device, inode); None when it is gone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return path, st.st_dev, st.st_ino


_FS_IOC_GETFLAGS = 0x80086601  # the kernel's inode flags (lsattr): 'i' immutable, 'a' append-only
_FLAGS = ((0x10, "immutable", "i"), (0x20, "append-only", "a"))


def _held(path: Path) -> int | None:
    """A read-only descriptor of the store file, None when it is missing (or a link: what opens it
    next says so)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None


def _locked(fd: int) -> str | None:
    """What keeps even root from writing the store file `fd` in place, though it opens: an immutable
    or append-only attribute. SQLite then opens the file read-only without a word, and the store's
    writes fail, or land only in its write-ahead log, which can never be written back. None if nothing."""
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)
    except OSError:  # a file system without these attributes
        return None
    found = [(what, letter) for flag, what, letter in _FLAGS if flags & flag]
    if not found:
        return None
    letters = "".join(letter for _, letter in found)
    return (f"the file is {' and '.join(what for what, _ in found)} (chattr +{letters}): nothing can write it "
            f"until chattr -{letters} clears that")


def _unwritable(folder: Path, exc: sqlite3.Error) -> str | None:
    """Why a store cannot be written, when the cause is the place and not the file: a read-only
    folder is not a damaged store."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or not os.access(folder, os.W_OK)
    except OSError:
        read_only = False
    if read_only or name.startswith("SQLITE_READONLY"):
        return f"the results folder {folder} is read-only"
    if name == "SQLITE_FULL":
        return f"the disk holding {folder} is full"
    return None


def facts_digest(comparable: dict) -> str:
    return hashlib.sha256(json.dumps(comparable, sort_keys=True).encode()).hexdigest()[:16]


# A store is recognised by what is inside, not by its file name: storlab's application id in the
# SQLite header (stores from before it was set: a schema version and these tables).
APPLICATION_ID = 0x53544C42  # "STLB"
SIGNATURE = {"experiment", "cells", "failures", "facts"}
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
NAME_MAX = 255
PATH_MAX = 4096


def check_folder(folder: Path) -> None:
    """A results folder that can exist: no over-long names, nothing in the way that is not a folder."""
    text = os.fsencode(str(folder))
    if not text:
        raise UserError("the results folder is an empty name; give a folder, or leave --out out")
    if len(text) >= PATH_MAX or any(len(os.fsencode(part)) > NAME_MAX for part in folder.parts):
        raise UserError(f"{str(folder)[:60]}…: the folder name is too long (at most {NAME_MAX} bytes a name, {PATH_MAX - 1} in all)")
    probe = folder
    while not (probe.exists() or probe.is_symlink()):
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{folder}: cannot be a results folder: {probe} is not a folder" if probe != folder
                        else f"{folder}: is not a folder")
    store = folder / FILENAME
    if store.exists() and not store.is_file():
        raise UserError(f"{store}: is not a file (a folder or device is in the way of storlab's results store)")


def exists(folder: Path) -> bool:
    """Whether a folder holds a non-empty storlab.sqlite (what it holds is checked when opened)."""
    check_folder(folder)
    path = folder / FILENAME
    return path.is_file() and path.stat().st_size > 0


class UserVersion:
    """SQLite keeps the schema's version in its header (PRAGMA user_version)."""

    def lock(self, db: Connection) -> None:
        """BEGIN IMMEDIATE already holds the only write lock."""

    def get(self, db: Connection) -> int:
        return db.execute("PRAGMA user_version").fetchone()[0]

    def set(self, db: Connection, version: int) -> None:
        db.execute(f"PRAGMA user_version = {int(version)}")


class Store:
    """One experiment's results. `folder`: where files beside the store go (report, export); `where`:
    how messages name the store."""

    def __init__(self, db: Connection, folder: Path, where: str | None = None, versioning=None):
        self.db = db
        self.folder = folder
        self.where = where or str(folder)
        self.versioning = versioning or UserVersion()
        self.another = "use another --out folder, or restore the file"  # where a different experiment goes
        self.experiment_id: int | None = None  # its id in a shared store's catalogue
        self.file: tuple[Path, int, int] | None = None  # a folder's store file, (path, device, inode)
        self._held: int | None = None  # a descriptor of it while a writer has it open (Store.open)
        self._depth = 0

    @classmethod
    @contextmanager
    def open(cls, folder: Path, create: bool = True) -> Iterator["Store"]:
        """`create`: the store `storlab run` and `storlab io` write (made when missing). Otherwise the
        store is opened read-only and must be a storlab store: read commands never write, and an empty
        or foreign storlab.sqlite is "no storlab results here". A damaged store is one clear line."""
        folder = Path(folder)
        path = folder / FILENAME
        if create:
            check_folder(folder)
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"{folder}: cannot make the results folder: {exc.strerror}") from None
        elif not exists(folder):
            raise UserError(f"{folder}: no storlab results here (expected {FILENAME})")
        fresh = not path.exists() or path.stat().st_size == 0
        if not fresh and _header(path) != _SQLITE_MAGIC:
            raise UserError(f"{path}: not a storlab results store (not an SQLite file)")
        # Held from before SQLite opens the file to after it closes it: closing any descriptor of a
        # file drops every lock the process holds on it (POSIX), SQLite's too, so the file is never
        # opened and closed by its name meanwhile (another process would then think itself the store's
        # last user, and move the write-ahead log away under this one).
        held = _held(path) if create else None
        try:
            locked = _locked(held) if held is not None else None
            if locked:
                raise UserError(f"{path}: cannot write the results store: {locked}")
            try:
                db = sqlite3.connect(path, isolation_level=None, timeout=30) if create else \
                    sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, isolation_level=None, timeout=30)
            except sqlite3.Error as exc:
                raise UserError(f"{path}: cannot open the results store: {_unwritable(folder, exc) or exc}") from None
            if create and held is None:
                held = _held(path)  # made just now, by SQLite
            store = None
            try:
                try:
                    store = cls(Connection(db, SQLITE), folder)
                    store._held = held
                    store._recognise(path, create)
                    if create:
                        db.execute("PRAGMA journal_mode=WAL")  # readers while a run writes
                    db.execute("PRAGMA foreign_keys=ON")
                    if create:
                        store._migrate()
                    store.file = _identity(path)
                except sqlite3.DatabaseError as exc:
                    unwritable = _unwritable(folder, exc)
                    raise UserError(f"{path}: cannot write the results store: {unwritable}" if unwritable
                                    else f"{path}: the results store is damaged: {exc}") from None
                try:
                    yield store
                except sqlite3.DatabaseError as exc:
                    if getattr(exc, "sqlite_errorname", None) in _DAMAGED:
                        raise UserError(f"{path}: the results store is damaged: {exc}") from None
                    unwritable = _unwritable(folder, exc)
                    if unwritable:
                        raise UserError(f"{path}: cannot write the results store: {unwritable}") from None
                    raise
                if create:
                    try:  # at rest a store is one file, which read-only readers then leave alone
                        db.execute("PRAGMA journal_mode=DELETE")
                    except sqlite3.OperationalError:
                        pass  # a reader is on it: it stays in WAL mode until the next close
            finally:
                db.close()
                if store is not None and store.db.raw is not db:  # an older store read in memory
                    store.db.close()
        finally:
            if held is not None:
                os.close(held)

    def _recognise(self, path: Path, create: bool) -> None:
        """A storlab store, or (for `create`) an empty database to make one in; anything else is refused."""
        tables = {name for (name,) in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ours = self.db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        if not tables and not ours:
            if not create:
                raise UserError(f"{self.folder}: no storlab results here ({FILENAME} holds no storlab store)")
            self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            return
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if not ours and not (version >= 1 and SIGNATURE <= tables):
            raise UserError(f"{path}: not a storlab results store (an SQLite database with other tables)")
        check = self.db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise UserError(f"{path}: the results store is damaged: {check}")
        if version > len(MIGRATIONS):
            raise UserError(f"{self.folder}: written by a newer storlab (schema {version}); upgrade storlab to read it")
        if create and not ours:
            self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # a store from before the id
        newer = self._newer_probe(version)
        if newer:
            raise UserError(f"{self.folder}: written by a newer storlab ({newer}); upgrade storlab to read it")
        if not create and (version < len(MIGRATIONS) or self._probes_behind()):
            # An older store is brought up to date once, the one write a read command makes; where
            # storlab cannot write (a read-only folder), a copy in memory is, and the folder is left alone.
            try:
                with closing(sqlite3.connect(path, isolation_level=None, timeout=30)) as upgrade:
                    Store(Connection(upgrade, SQLITE), self.folder)._migrate()
            except sqlite3.OperationalError as exc:
                if _unwritable(self.folder, exc) is None:
                    raise
                copy = sqlite3.connect(":memory:", isolation_level=None)
                self.db.raw.backup(copy)
                self.db = Connection(copy, SQLITE)
                self._migrate()

    def _migrate(self) -> None:
        """One step per transaction; the version is read again under the lock, so two processes
        opening one store at once migrate it once."""
        while True:
            with self.transaction():
                self.versioning.lock(self.db)
                version = self.versioning.get(self.db)
                if version > len(MIGRATIONS):
                    raise UserError(f"{self.where}: written by a newer storlab (schema {version}); upgrade storlab to read it")
                if version == len(MIGRATIONS):
                    break
                for statement in self.db.dialect.statements(MIGRATIONS[version]):
                    self.db.execute(statement)
                self.versioning.set(self.db, version + 1)
        for probe in PROBES:
            with self.transaction():
                self.versioning.lock(self.db)
                held = self._probe_versions().get(probe.name, 0)
                if held > len(probe.migrations):
                    raise UserError(f"{self.where}: written by a newer storlab (probe {probe.name} at {held}); "
                                    "upgrade storlab to read it")
                for migration in probe.migrations[held:]:
                    for statement in self.db.dialect.statements(migration):
                        self.db.execute(statement)
                if held < len(probe.migrations):
                    self.db.execute("INSERT INTO probe_versions (probe, version) VALUES (?, ?) ON CONFLICT (probe) "
                                    "DO UPDATE SET version = excluded.version", (probe.name, len(probe.migrations)))

    def _probe_versions(self) -> dict[str, int]:
        """Each probe's version of its own tables (none before the store's migration 10)."""
        if self.versioning.get(self.db) < len(MIGRATIONS):
            return {}
        return dict(self.db.execute("SELECT probe, version FROM probe_versions"))

    def _probes_behind(self) -> bool:
        held = self._probe_versions()
        return any(held.get(p.name, 0) < len(p.migrations) for p in PROBES)

    def _newer_probe(self, version: int) -> str | None:
        """A probe whose tables a newer storlab changed (a probe this one does not know is left alone:
        its table is simply not read)."""
        if version < len(MIGRATIONS):
            return None
        known = {p.name: len(p.migrations) for p in PROBES}
        for name, held in self._probe_versions().items():
            if name in known and held > known[name]:
                return f"probe {name} at {held}"
        return None

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction; a transaction opened inside another is part of it (the fleet records a
        run and closes its claim at once)."""
        if self._depth:
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        self.db.execute(self.db.dialect.begin)
        self._depth = 1
        try:
            yield self.db
        except BaseException:
            self._depth = 0
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.OperationalError:
                pass  # SQLite rolled it back itself (a full disk does): the first error is the one to tell
            raise
        self._depth = 0
        self.db.execute("COMMIT")

    @contextmanager
    def _keeping(self, what: str) -> Iterator[None]:
        """Writes `what` into a folder's store, or says in one line (UserError) that it could not, and
        why: the file was deleted or replaced under the run (its writes would go nowhere), or cannot be
        written (read-only, full). `what` carries the run's figures, so they are not lost unsaid."""
        self._still_there(what)
        locked = _locked(self._held) if self._held is not None and self.file is not None else None
        if locked:
            raise UserError(f"{self.file[0]}: could not record {what}: {locked}; stopped (the runs recorded "
                            "before it are kept)")
        try:
            yield
        except sqlite3.OperationalError as exc:
            if self.file is None:
                raise
            reason = _unwritable(self.folder, exc) or f"{exc}"
            raise UserError(f"{self.file[0]}: could not record {what}: {reason}; stopped (the runs recorded "
                            "before it are kept)") from None
        self._still_there(what)

    def _still_there(self, what: str) -> None:
        if self.file is None:
            return
        path, device, inode = self.file
        now = _identity(path)
        if now is None or now[1:] != (device, inode):
            how = "deleted" if now is None else "replaced"
            raise UserError(f"{path}: the results store was {how} while storlab ran; {what} is not in it; "
                            "stopped (run the same command to start the folder again)")

    # -- the experiment ----------------------------------------------------------------------

    def experiment(self) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT name, engine, source, identity, repetitions, factors, race, files, order_seed, answer, stopped "
            "FROM experiment"
        ).fetchone()
        if row is None:
            return None
        return {
            "name": row[0], "engine": row[1], "source": row[2], "identity": json.loads(row[3]),
            "repetitions": row[4], "factors": json.loads(row[5]), "race": json.loads(row[6]) if row[6] else None,
            "files": json.loads(row[7] or "{}"), "order_seed": row[8], "answer": json.loads(row[9] or "{}"),
            "stopped": row[10],
        }

    def bind_experiment(self, name: str, engine: str, source: str, identity: dict, repetitions: int,
                        factors: dict[str, list], cells: list[tuple[str, str, dict]], race: dict | None = None,
                        files: dict[str, str] | None = None, answer: dict | None = None) -> None:
        """Record the experiment the first time; afterwards accept it only if nothing but its repetitions,
        its race (how many runs, which cells get them) and how the answer reads the runs changed.
        `files`: the text of the SQL files it names; `answer`: reference levels, margin, until settled."""
        held = self.experiment()
        if held is not None and _without_none(held["identity"]) != _without_none(identity):
            changed = _first_difference(_without_none(held["identity"]), _without_none(identity))
            raise UserError(
                f"{self.where}: holds results of a different experiment ({changed}); {self.another}"
            )
        with self.transaction() as db:
            if held is None:
                db.execute(
                    """INSERT INTO experiment (id, name, engine, source, identity, repetitions, factors, created_at, race,
                                               files, answer)
                       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (name, engine, source, json.dumps(identity), repetitions, json.dumps(factors), time.time(),
                     json.dumps(race) if race else None, json.dumps(files or {}), json.dumps(answer or {})),
                )
            else:
                db.execute("UPDATE experiment SET repetitions = ?, source = ?, race = ?, answer = ?",
                           (repetitions, source, json.dumps(race) if race else None, json.dumps(answer or {})))
                if files:
                    db.execute("UPDATE experiment SET files = ?", (json.dumps(files),))
            db.executemany(
                "INSERT INTO cells (id, position, label, factors) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(cell_id, position, label, json.dumps(cell_factors))
                 for position, (cell_id, label, cell_factors) in enumerate(cells)],
            )

    def order_seed(self, fixed: int | None = None) -> int:
        """The seed each round's order is drawn from: the file's (`fixed`), else the one kept, else a new
        one drawn now and kept, so a resume, a race and the fleet run every round in the same order."""
        with self.transaction() as db:
            held = db.execute("SELECT order_seed FROM experiment").fetchone()
            if held is None:
                raise UserError(f"{self.where}: no experiment recorded here yet")
            seed = fixed if fixed is not None else held[0]
            if seed is None:
                seed = secrets.randbelow(2**31)
            if seed != held[0]:
                db.execute("UPDATE experiment SET order_seed = ?", (seed,))
        return seed

    def record_stop(self, why: str | None) -> None:
        """Why the runs stopped (settled, max reached, budget spent); None while more runs may come."""
        with self.transaction() as db:
            db.execute("UPDATE experiment SET stopped = ?", (why,))

    def cells(self) -> list[CellRecord]:
        return [
            CellRecord(cid, label, json.loads(factors))
            for cid, label, factors in self.db.execute("SELECT id, label, factors FROM cells ORDER BY position")
        ]

    # -- machine facts -----------------------------------------------------------------------

    def record_facts(self, body: dict, comparable: dict) -> int:
        digest = facts_digest(comparable)
        with self.transaction() as db:
            # One statement: two processes of one machine (a worker and `storlab run --store`) may
            # record the same facts at once, and a look before the insert would let both insert.
            return db.execute(
                "INSERT INTO facts (digest, comparable, body, recorded_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (digest) DO UPDATE SET body = excluded.body, recorded_at = excluded.recorded_at "
                "RETURNING id",
                (digest, json.dumps(comparable), json.dumps(body), time.time()),
            ).fetchone()[0]

    def facts(self) -> dict[int, dict]:
        """facts id -> {'comparable': ..., 'body': ...}"""
        return {
            fid: {"comparable": json.loads(comp), "body": json.loads(body)}
            for fid, comp, body in self.db.execute("SELECT id, comparable, body FROM facts ORDER BY id")
        }

    # -- runs --------------------------------------------------------------------------------

    def done(self) -> set[tuple[str, int]]:
        return {(c, r) for c, r in self.db.execute("SELECT cell_id, repetition FROM runs")}

    def record_run(self, cell_id: str, repetition: int, result: RunResult, facts_id: int,
                   host: str | None = None) -> int:
        """Everything about one finished run, in one transaction: all of it is kept, or none. `host`:
        the host that measured it (by default this machine)."""
        capture = result.capture
        figures = ", ".join(f"{name} {value:g} {unit}" for name, value, unit in result.figures)
        with self._keeping(f"run {repetition} of cell {cell_id} ({figures})"), self.transaction() as db:
            run_id = db.execute(
                """INSERT INTO runs (cell_id, repetition, started_at, wait_source, wait_extras, engine_version, facts_id,
                                     host, conditions)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                (cell_id, repetition, result.started_at, capture.source, json.dumps(capture.extras),
                 result.engine_version, facts_id, host or platform.node(), json.dumps(result.conditions)),
            ).fetchone()[0]
            db.executemany("INSERT INTO figures (run_id, name, value, unit) VALUES (?, ?, ?, ?)",
                           [(run_id, *f) for f in result.figures])
            db.executemany(
                "INSERT INTO waits (run_id, wait_type, wait_s, wait_count, signal_s, traced_s) VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, w.wait_type, w.wait_s, w.wait_count, w.signal_s, w.traced_s) for w in capture.waits],
            )
            db.executemany("INSERT INTO timeline (run_id, t_s, metric, value) VALUES (?, ?, ?, ?)",
                           [(run_id, *p) for p in result.timeline])
            for probe in PROBES:
                if probe.name in result.kept:
                    probe.write(db, run_id, result.kept[probe.name])
        return run_id

    def record_failure(self, cell_id: str, repetition: int, message: str) -> None:
        with self._keeping(f"the failure of run {repetition} of cell {cell_id} ({message})"), self.transaction() as db:
            db.execute(
                "INSERT INTO failures (cell_id, repetition, at, message) VALUES (?, ?, ?, ?)",
                (cell_id, repetition, time.time(), message),
            )

    def runs(self) -> list[RunRecord]:
        figures: dict[int, dict[str, float]] = {}
        for run_id, name, value in self.db.execute("SELECT run_id, name, value FROM figures"):
            figures.setdefault(run_id, {})[name] = value
        rows = self.db.execute(
            """SELECT id, cell_id, repetition, started_at, wait_source, wait_extras, engine_version, facts_id, host,
                      conditions
               FROM runs ORDER BY id"""
        ).fetchall()
        return [RunRecord(*r[:5], json.loads(r[5]), *r[6:8], figures.get(r[0], {}), json.loads(r[9]), r[8]) for r in rows]

    def units(self) -> dict[str, str]:
        """Each figure's unit, as recorded."""
        return dict(self.db.execute("SELECT DISTINCT name, unit FROM figures"))

    def waits(self, run_id: int) -> list[Wait]:
        return [
            Wait(t, s, c, sig, traced)
            for t, s, c, sig, traced in self.db.execute(
                "SELECT wait_type, wait_s, wait_count, signal_s, traced_s FROM waits WHERE run_id = ?", (run_id,)
            )
        ]

    def kept(self, probe: Probe, run_id: int) -> Any:
        """What one probe recorded in one run, as it reads it back."""
        return probe.read(self.db, run_id)

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


def _without_none(value: Any) -> Any:
    """An identity with unset keys left out: folders written before a key existed stored it as null."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def _first_difference(old: Any, new: Any, path: str = "") -> str:
    """The first key whose value differs, as 'layout.data_files: [1, 2] -> [1, 2, 4]'."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    return f"{path or 'experiment'}: {json.dumps(old)} -> {json.dumps(new)}"
