"""MariaDB 10.11: a throwaway server per cell with the cell's layout, and its wait statistics.

Layout, fixed when the instance is installed (`innodb_page_size` cannot change afterwards):
- the datadir (catalog, undo, the default system tablespace) on the first data placement;
- the redo log (`innodb_log_group_home_dir`, one circular file of `innodb_log_file_size`) on the log
  placement;
- the temporary files on the temp placement, when the layout names one: the server's `tmpdir` (a
  sort's merge chunks, implicit temporary tables that outgrew memory) and InnoDB's temporary
  tablespace (`innodb_temp_data_file_path`, ibtmp1: explicit temporary tables' pages);
- file_kind "partitions" (file-per-table): N data files are N partitions of a workload's table, each
  with `DATA DIRECTORY` on its placement; one data file is a plain table in the datadir. A random UUID
  key is cut into N equal ranges, not `PARTITION BY KEY`: KEY's hash modulo a power of two is skewed
  in 10.11 (8 partitions of 16,000 random UUIDs held 1,340 to 4,028 rows; UUID() v1 keys all 16,000 in
  one), so 1, 2, 4, 8, 16 files would not share the inserts as the seeds' files do. A serial key is
  hashed: consecutive values go round the partitions;
- file_kind "system-tablespace" (no file-per-table): N files ibdata1..N in `innodb_data_file_path`, by
  absolute path on their placements, the last one autoextending. InnoDB fills them in order, not
  proportionally: ibdata2 gets pages only once ibdata1 is full. That is not SQL Server's proportional fill.

The server listens on its own unix socket only (skip-networking and the socket on its command line,
which outranks every option file), reads only its own my.cnf, and has
performance_schema on with the synch and file IO instruments enabled (they can only be turned on at
start). The workload runs as SQL user `lab`, which anyone who reaches the socket may use (a load
generator runs as the OS user storlab-client); storlab's own sessions (set-up, the probes, whose own
waits are then not counted) use the account named as storlab's OS user (root, when run as root),
which the server lets in only from that OS user (unix_socket authentication, as installed).
"""

from __future__ import annotations

import functools
import signal
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pymysql

from storlab import interrupts, processes
from storlab.engines.base import ClientAddress, Table
from storlab.engines.mariadb.binaries import binaries, server_version
from storlab.engines.mariadb.file_io import FileSummaryProbe
from storlab.engines.mariadb.general_log import HEADER, escape
from storlab.engines.mariadb.settings import conf_value
from storlab.errors import RunFailed, UserError
from storlab.lab import instances, os_users, owned, safe_files, server_process, templates, user_tools
from storlab.lab.layout import InstanceSpec
from storlab.probes.bpftrace import Tracing
from storlab.probes.recorders import SessionsSched
from storlab.probes.waits import Wait, WaitCapture, delta, is_benign

SOCKET = "mysqld.sock"
WORKLOAD_USER = "lab"  # the workload's sessions; the wait probe counts this user's waits only
DATABASE = "lab"
# Every system-tablespace file but the last is created at this size; the last one autoextends.
SYSTEM_FILE_SIZE = "12M"
# The sessions that wait for the client's next statement, and logical waits that nest over the real
# ones (a row read through the handler contains the file read it caused): counting them counts twice.
BENIGN = frozenset({"idle", "wait/io/table/sql/handler", "wait/lock/table/sql/handler"})
# The redo log is not instrumented as a wait in 10.11: its counters stand beside the wait table.
# (Innodb_os_log_fsyncs is gone since 10.8; it is asked for, and reported if a server has it.)
LOG_COUNTERS = ("Innodb_log_waits", "Innodb_log_writes", "Innodb_log_write_requests",
                "Innodb_os_log_written", "Innodb_os_log_fsyncs", "Innodb_data_fsyncs")
LOG_PREFIX = "log."

SERVER_VERSION = "SELECT VERSION()"
CONNECTION_ID = "SELECT CONNECTION_ID()"
CREATE_DATABASE = f"CREATE DATABASE {DATABASE}"
CREATE_WORKLOAD_USER = f"CREATE USER '{WORKLOAD_USER}'@'localhost'"
GRANT_WORKLOAD_USER = f"GRANT ALL ON {DATABASE}.* TO '{WORKLOAD_USER}'@'localhost'"
WORKLOAD_SESSIONS = "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s"
SESSION_THREADS = "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID IN %s"
WAITS_BY_USER = """
    SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT
    FROM performance_schema.events_waits_summary_by_user_by_event_name
    WHERE USER = %s AND COUNT_STAR > 0"""
GLOBAL_STATUS = "SHOW GLOBAL STATUS WHERE Variable_name IN %s"
# Who waits on what: each session's waits now, nested (a row read through the handler holds the latch
# or file read it caused); END_EVENT_ID is NULL while a wait is in progress.
# The threads are looked up once: joining `threads` at each reading, 20 readings a second cut 16
# inserting sessions to a third to a half of their throughput in some loads (benchmarks/probe_overhead.py
# --probes waiting_tasks:x10); without the join, none.
SESSION_THREAD_IDS = "SELECT THREAD_ID FROM performance_schema.threads WHERE PROCESSLIST_ID IN %s"
LIVE_SESSIONS = "SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN %s"
WAITING_SESSIONS = """
    SELECT THREAD_ID, EVENT_ID, END_EVENT_ID, NESTING_EVENT_ID, EVENT_NAME, OBJECT_TYPE, OBJECT_NAME
    FROM performance_schema.events_waits_current
    WHERE THREAD_ID IN %s"""

# What went to temporary files, server-wide: implicit temporary tables that outgrew memory (written in
# tmpdir), temporary files (a sort's merge chunks among them) and the merge passes of sorts over
# sort_buffer_size. Counted as they happen, so read at once.
TEMPORARY_COUNTERS = {"Created_tmp_disk_tables": "tmp_disk_tables", "Created_tmp_files": "tmp_files",
                      "Sort_merge_passes": "sort_merge_passes"}
# Commits counted server-wide, statements inside stored procedures included: a load's progress.
COMMITS = "SHOW GLOBAL STATUS LIKE 'Com_commit'"
# InnoDB checkpoints as its redo log fills (and its page cleaner flushes): no count of them, but the LSN
# of the last one moves each time one is made.
LAST_CHECKPOINT = "SHOW GLOBAL STATUS LIKE 'Innodb_lsn_last_checkpoint'"
LOG_FILE_SIZE = "SELECT @@innodb_log_file_size"
REDO_WRITTEN = "SHOW GLOBAL STATUS LIKE 'Innodb_lsn_current'"
CANCEL = "KILL QUERY {session}"
# storlab capture: the general log as a table, its stamps in microseconds (the file log stamps whole
# seconds). The dump keeps the workload user's sessions, in the order the table holds them (logged order).
GENERAL_LOG_ON = ("SET GLOBAL general_log = OFF", "SET GLOBAL log_output = 'TABLE'", "TRUNCATE TABLE mysql.general_log",
                  "SET GLOBAL general_log = ON")
GENERAL_LOG_OFF = "SET GLOBAL general_log = OFF"
GENERAL_LOG_DUMP = """
    SELECT DATE_FORMAT(event_time, '%%Y-%%m-%%d %%H:%%i:%%s.%%f'), thread_id, command_type,
           CONVERT(argument USING utf8mb4)
    FROM mysql.general_log
    WHERE thread_id IN (SELECT thread_id FROM mysql.general_log WHERE command_type = 'Connect' AND argument LIKE %s)"""
# What the workload prepared, written out: FOR EXPORT flushes a table's dirty pages now (waiting for
# InnoDB's page cleaner to empty the whole buffer pool takes seconds: it works once a second).
WORKLOAD_TABLES = ("SELECT TABLE_NAME FROM information_schema.TABLES "
                   f"WHERE TABLE_SCHEMA = '{DATABASE}' AND ENGINE = 'InnoDB'")
FLUSH_FOR_EXPORT = "FLUSH TABLES {tables} FOR EXPORT"
UNLOCK_TABLES = "UNLOCK TABLES"
# InnoDB's sizes are statistics: ANALYZE first so they describe the table as it is now.
ANALYZE = "ANALYZE TABLE {name}"
TABLE_BYTES = ("SELECT coalesce(sum(DATA_LENGTH + INDEX_LENGTH), 0) FROM information_schema.TABLES "
               "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s")
CREATE_TABLE = "CREATE TABLE {name} ({columns}) ENGINE=InnoDB{tail}"
RANGE_PARTITIONS = " PARTITION BY RANGE COLUMNS ({key}) ({partitions})"
RANGE_PARTITION = "PARTITION p{i} VALUES LESS THAN ({bound}) DATA DIRECTORY = '{path}'"
HASH_PARTITIONS = " PARTITION BY HASH ({key}) ({partitions})"
HASH_PARTITION = "PARTITION p{i} DATA DIRECTORY = '{path}'"


def range_bounds(n: int) -> list[str]:
    """The n - 1 upper bounds that cut random UUIDs into n equal ranges. 10.11 compares a UUID from
    its last group (index-friendly order for time-based UUIDs), a later server may compare from the
    first: each bound cuts both groups at the same fraction, so the ranges are equal in either order."""
    return [f"{i * 2**32 // n:08x}-0000-4000-8000-{i * 2**48 // n:012x}" for i in range(1, n)]


def _sql_text(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace("'", "''")


class Connection:
    """A PyMySQL connection in autocommit with the small surface storlab uses; `cursor()` is the
    driver's hot path, straight to PyMySQL."""

    __slots__ = ("raw",)

    def __init__(self, raw: pymysql.connections.Connection):
        self.raw = raw

    def cursor(self) -> pymysql.cursors.Cursor:
        return self.raw.cursor()

    def execute(self, sql: str, params: Any = None) -> pymysql.cursors.Cursor:
        cursor = self.raw.cursor()
        cursor.execute(sql, params)
        return cursor

    def close(self) -> None:
        if self.raw.open:
            self.raw.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _admin() -> str:
    """storlab's own account: its OS user's name, let in by unix_socket authentication from that user only."""
    return os_users.current_user().name


def _connect(socket: Path, user: str, database: str | None) -> Connection:
    return Connection(pymysql.connect(unix_socket=str(socket), user=user, database=database,
                                      autocommit=True, connect_timeout=server_process.CONNECT_TIMEOUT_S))


def _accepts(socket: Path) -> bool:
    try:
        _connect(socket, _admin(), None).close()
        return True
    except pymysql.err.OperationalError:
        return False


class MariadbInstance:
    """A started server in its workspace (instances.Workspace), ready for a workload."""

    engine = "mariadb"

    def __init__(self, spec: InstanceSpec, workspace: instances.Workspace, table_dirs: dict[str, Path], version: str):
        self.spec = spec
        self.workspace = workspace
        self.clients = workspace.clients
        self.socket = workspace.socket_dir / SOCKET
        self.roots = dict(workspace.roots)  # placement name -> the instance's own directory on it
        self.group = workspace.group  # its processes, and what holds them back (IO caps, memory)
        self.table_dirs = table_dirs  # data placement name -> where its partitions' files go
        self.version = version

    def _connect(self, user: str, database: str | None) -> Connection:
        return _connect(self.socket, user, database)

    def restart(self) -> None:
        """SIGTERM: a clean shutdown; then started again, its buffer pool empty."""
        self.workspace.restart(signal.SIGTERM, functools.partial(_accepts, self.socket), "MariaDB")

    def cpu_s(self) -> float:
        return processes.tree_cpu_s(self.workspace.server.pid)

    def connect(self) -> Connection:
        """A workload session: the `lab` user, in the `lab` database."""
        return self._connect(WORKLOAD_USER, DATABASE)

    def admin(self) -> Connection:
        """The probe's and set-up's session: root, whose waits the probe never counts."""
        return self._connect(_admin(), None)

    def session_id(self, conn: Connection) -> int:
        return int(conn.execute(CONNECTION_ID).fetchone()[0])

    def client_address(self) -> ClientAddress:
        return ClientAddress(self.socket, None, WORKLOAD_USER, DATABASE)

    def client_sessions(self, tag: str) -> list[int]:
        with self.admin() as conn:
            return [int(session) for (session,) in conn.execute(WORKLOAD_SESSIONS, (WORKLOAD_USER,)).fetchall()]

    def session_os_pids(self, sessions: list[int]) -> list[int]:
        """The OS thread of each session (one thread per connection): /proc/<tid>/schedstat is per thread."""
        if not sessions:
            return []
        with self.admin() as conn:
            rows = conn.execute(SESSION_THREADS, (tuple(sessions),)).fetchall()
        return [int(tid) for (tid,) in rows if tid is not None]

    def create_table(self, conn: Connection, table: Table) -> None:
        """In the system tablespace, or one file-per-table file in the datadir (on data_files[0]),
        or N partitions with DATA DIRECTORY on their placements: equal ranges of a random UUID key,
        a hash of a serial key (consecutive values go round the partitions)."""
        files = self.spec.data_files
        if self.spec.file_kind == "system-tablespace" or len(files) == 1:
            conn.execute(CREATE_TABLE.format(name=table.name, columns=table.columns, tail=""))
            return
        paths = [_sql_text(self.table_dirs[p.name]) for p in files]
        if table.key_kind == "uuid":
            bounds = [f"'{b}'" for b in range_bounds(len(files))] + ["MAXVALUE"]
            parts = ", ".join(RANGE_PARTITION.format(i=i, bound=b, path=path)
                              for i, (path, b) in enumerate(zip(paths, bounds)))
            tail = RANGE_PARTITIONS.format(key=table.key, partitions=parts)
        else:
            parts = ", ".join(HASH_PARTITION.format(i=i, path=path) for i, path in enumerate(paths))
            tail = HASH_PARTITIONS.format(key=table.key, partitions=parts)
        conn.execute(CREATE_TABLE.format(name=table.name, columns=table.columns, tail=tail))

    def call_load(self, conn: Connection, call: str, params: tuple) -> tuple[np.ndarray, np.ndarray]:
        """A MariaDB procedure hands its times back as its last result set: (started, committed) rows."""
        cursor = conn.cursor()
        cursor.execute(call, params)
        rows = cursor.fetchall()
        while cursor.nextset():
            pass
        times = np.asarray(rows, dtype=float).reshape(-1, 2)
        return times[:, 0], times[:, 1]

    def table_bytes(self, conn: Connection, name: str) -> int:
        conn.execute(ANALYZE.format(name=name)).fetchall()
        return int(conn.execute(TABLE_BYTES, (name,)).fetchone()[0])

    def checkpoint(self) -> None:
        with self.admin() as conn:
            tables = [f"{DATABASE}.{name}" for (name,) in conn.execute(WORKLOAD_TABLES).fetchall()]
            if tables:
                conn.execute(FLUSH_FOR_EXPORT.format(tables=", ".join(tables)))
                conn.execute(UNLOCK_TABLES)

    def committed(self, conn: Connection) -> int:
        return int(conn.execute(COMMITS).fetchone()[1])

    def checkpoint_reading(self, conn: Connection) -> tuple[float, bool]:
        return float(conn.execute(LAST_CHECKPOINT).fetchone()[1]), False

    def checkpoint_cycle(self, conn: Connection) -> tuple[str, str, float | None, float | None]:
        size = int(conn.execute(LOG_FILE_SIZE).fetchone()[0])
        return "innodb_log_file_size", f"{size / 2**20:g}MB", None, float(size)

    def log_written(self, conn: Connection) -> float:
        return float(conn.execute(REDO_WRITTEN).fetchone()[1])

    def cancel(self, sessions: list[int]) -> None:
        with self.admin() as conn:
            for session in sessions:
                try:
                    conn.execute(CANCEL.format(session=int(session)))
                except pymysql.err.OperationalError:
                    pass  # the session has already ended

    def log_position(self) -> int:
        return self.workspace.log_position()

    def logged_since(self, position: int, max_bytes: int) -> str:
        return self.workspace.logged_since(position, max_bytes)

    def log_statements(self) -> int:
        """The general log on, written as a table (its stamps in microseconds), empty."""
        with self.admin() as conn:
            for statement in GENERAL_LOG_ON:
                conn.execute(statement)
        return 0

    def statements_logged_since(self, position: int) -> str:
        """The general log off, and the workload's sessions' events dumped as the replay reads them
        (general_log.py: `mariadb --batch`'s header, fields and escapes)."""
        with self.admin() as conn:
            conn.execute(GENERAL_LOG_OFF)
            rows = conn.execute(GENERAL_LOG_DUMP, (f"{WORKLOAD_USER}@%",)).fetchall()
        return HEADER + "\n" + "".join(f"{stamp}\t{thread}\t{command}\t{escape(argument or '')}\n"
                                        for stamp, thread, command, argument in rows)

    def temporary_files(self) -> dict[str, float]:
        with self.admin() as conn:
            rows = conn.execute(GLOBAL_STATUS, (tuple(TEMPORARY_COUNTERS),)).fetchall()
        return {TEMPORARY_COUNTERS[name]: float(value) for name, value in rows}

    def wait_probe(self, tracing: Tracing = Tracing.ON) -> FileSummaryProbe:
        """The workload's waits, with the IO of each file of the instance (performance_schema: nothing
        to trace, whatever `tracing` says)."""
        return FileSummaryProbe(PerformanceSchemaProbe(self), self)

    def parallel_workers(self, conn: Connection, workers: int) -> None:
        pass  # MariaDB runs a query on one thread

    def planned_workers(self, conn: Connection, query: str) -> int:
        return 0

    def waiting_tasks_probe(self) -> "WaitingSessions":
        return WaitingSessions(self)


class WaitingSessions:
    """Each waiting session's innermost wait in progress and what it waits on: the file for file IO
    (its name: lab_insert#P#p3.ibd, ibdata2, ib_logfile0), else the object the wait names, else the
    table of the handler call it is nested in (a latch taken while inserting into lab_insert). A
    session whose innermost wait is a logical one (the handler itself) or idle is working or idle,
    not waiting. Read as root, so the reader's own waits are never among them."""

    def __init__(self, instance: MariadbInstance):
        self.instance = instance
        self.conn: Connection | None = None

    def open(self, sessions: list[int]) -> None:
        """The sessions' threads; a session that has ended since it was found (a replayed one that
        quit) has none, and is not missed: the threads are read first, the sessions still there after."""
        self.conn = self.instance.admin()
        self.threads = ()
        if not sessions:
            return
        self.threads = tuple(t for (t,) in self.conn.execute(SESSION_THREAD_IDS, (tuple(sessions),)).fetchall())
        alive = self.conn.execute(LIVE_SESSIONS, (tuple(sessions),)).fetchall()
        if len(self.threads) < len(alive):
            raise RunFailed(f"performance_schema.threads lists {len(self.threads)} of the workload's "
                            f"{len(alive)} sessions: their waits cannot be read")

    def read(self) -> list[tuple[str, str]]:
        if not self.threads:
            return []
        threads: dict[int, list[tuple]] = {}
        for row in self.conn.execute(WAITING_SESSIONS, (self.threads,)).fetchall():
            threads.setdefault(row[0], []).append(row)
        return [found for rows in threads.values() if (found := _waiting_on(rows)) is not None]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _waiting_on(rows: list[tuple]) -> tuple[str, str] | None:
    """(wait, resource) of one thread's innermost wait in progress, None when that is not a real wait."""
    in_progress = [r for r in rows if r[2] is None]
    if not in_progress:
        return None
    _, _, _, nesting, name, object_type, object_name = max(in_progress, key=lambda r: r[1])
    if is_benign(name, BENIGN):
        return None
    if object_name:
        return name, Path(object_name).name if object_type == "FILE" else object_name
    outer = [r for r in rows if r[1] == nesting and r[5] == "TABLE" and r[6]]
    return name, outer[0][6] if outer else ""


class PerformanceSchemaProbe:
    """The workload user's waits from performance_schema (real counts, picosecond times) as a delta
    between start and stop. Background threads have no user and the probe reads as another user, so
    neither is counted. CPU and run-queue time come from the sessions' threads in /proc; the redo-log
    counters (global: they include background writes) go into extras as log.*."""

    source = "performance_schema"

    def __init__(self, instance: MariadbInstance):
        self.instance = instance
        self.conn: Connection | None = None

    def so_far(self) -> dict[str, float]:
        """The summary counts a wait when it ends: a long wait lands in the interval it ends in."""
        if self.conn is None:
            self.conn = self.instance.admin()
        times = {name: float(ps or 0) for name, _, ps in self.conn.execute(WAITS_BY_USER, (WORKLOAD_USER,)).fetchall()}
        seconds = {name: ps / 1e12 for name, ps in delta(self.times, times).items() if not is_benign(name, BENIGN)}
        sched = self.sched.since_start()
        if sched is not None:
            seconds["CPU"] = sched.cpu_s
        return seconds

    def _read(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        with self.instance.admin() as conn:
            rows = conn.execute(WAITS_BY_USER, (WORKLOAD_USER,)).fetchall()
            status = conn.execute(GLOBAL_STATUS, (LOG_COUNTERS,)).fetchall()
        counts = {name: float(n) for name, n, _ in rows}
        times = {name: float(ps or 0) for name, _, ps in rows}
        return counts, times, {name: float(value) for name, value in status}

    def start(self, sessions: list[int]) -> None:
        self.threads = self.instance.session_os_pids(sessions)
        self.counts, self.times, self.status = self._read()
        self.sched = SessionsSched(self.threads)

    def stop(self) -> WaitCapture:
        if self.conn is not None:
            self.conn.close()
        sched = self.sched.since_start()
        counts, times, status = self._read()
        moved = delta(self.counts, counts)
        waited = delta(self.times, times)
        waits = [
            Wait(name, waited.get(name, 0.0) / 1e12, int(n))
            for name, n in moved.items()
            if not is_benign(name, BENIGN)
        ]
        extras = {LOG_PREFIX + name: value - self.status.get(name, 0.0) for name, value in status.items()}
        if sched is not None:
            waits.append(Wait("CPU", sched.cpu_s))
            extras.update(sessions_cpu_s=sched.cpu_s, sessions_runqueue_s=sched.runqueue_s)
        return WaitCapture(self.source, waits, extras)


def _system_data_file_path(spec: InstanceSpec, dirs: dict[str, Path]) -> str:
    """ibdata1..N by absolute path (innodb_data_home_dir is then empty), each on its placement."""
    parts = []
    for i, placement in enumerate(spec.data_files, start=1):
        path = dirs[placement.name] / f"ibdata{i}"
        if any(c in str(path) for c in ":;\"'#") or any(c.isspace() for c in str(path)):
            raise UserError(
                f"placement {placement.name}: {path} cannot be named in innodb_data_file_path "
                "(no ':', ';', quotes, '#' or spaces); choose another directory"
            )
        size = SYSTEM_FILE_SIZE + (":autoextend" if i == len(spec.data_files) else "")
        parts.append(f"{path}:{size}")
    return ";".join(parts)


def _private(socket_dir: Path) -> list[str]:
    """The server's command-line options that keep it private: its own socket, no TCP at all (the
    standard port is never touched). After --defaults-file, so they outrank the option file."""
    return [f"--socket={socket_dir / SOCKET}", "--skip-networking"]


def temp_folder_problem(folder: Path) -> str | None:
    """innodb_temp_data_file_path names the temporary tablespace's file by its path, between ':' and ';'."""
    if any(c in str(folder) for c in ":;\"'#") or any(c.isspace() for c in str(folder)):
        return (f"{folder} cannot be named in innodb_temp_data_file_path (no ':', ';', quotes, '#' or spaces): choose "
                "another directory for layout.temp_on's placement")
    return None


def _temporary(temp_dir: Path) -> list[tuple[str, Any]]:
    """The temporary files in `temp_dir`: the server's (tmpdir: a sort's merge chunks, implicit temporary
    tables on disk) and InnoDB's temporary tablespace (ibtmp1, by absolute path)."""
    problem = temp_folder_problem(temp_dir)  # refused when the experiment loaded; here for a caller that did not load one
    if problem:
        raise UserError(problem)
    return [("tmpdir", temp_dir), ("innodb_temp_data_file_path", f"{temp_dir / 'ibtmp1'}:{SYSTEM_FILE_SIZE}:autoextend")]


def _options(spec: InstanceSpec, datadir: Path, socket_dir: Path, redo: Path, table_dirs: dict[str, Path],
             connections: int, temp_dir: Path | None = None) -> list[tuple[str, Any]]:
    """my.cnf's [mysqld] lines, in order; the experiment's engine_settings last, so they win."""
    system = spec.file_kind == "system-tablespace"
    options: list[tuple[str, Any]] = [
        ("datadir", datadir),
        ("pid-file", socket_dir / "mysqld.pid"),
        ("skip-name-resolve", True),
        ("max_connections", max(100, connections + 10)),
        ("innodb_log_group_home_dir", redo),
        ("innodb_file_per_table", not system),
        # Auto-increment values without the statement-long AUTO-INC table lock of the default mode 1,
        # which serialises concurrent INSERT ... SELECT and deadlocks them across partitions. Safe
        # with no binary log (storlab's instances have none); SQL Server's IDENTITY takes no such lock.
        ("innodb_autoinc_lock_mode", 2),
        # Each cell starts cold: no buffer-pool dump from the install or the previous start.
        ("innodb_buffer_pool_load_at_startup", False),
        ("innodb_buffer_pool_dump_at_shutdown", False),
        ("performance_schema", True),
        ("performance-schema-instrument", "wait/synch/%=ON"),
        ("performance-schema-instrument", "wait/io/file/%=ON"),
        ("performance-schema-consumer-events-waits-current", True),
        ("performance-schema-consumer-events-waits-history", True),
    ]
    if system:
        options += [("innodb_data_home_dir", ""), ("innodb_data_file_path", _system_data_file_path(spec, table_dirs))]
    if spec.page_size:
        options.append(("innodb_page_size", spec.page_size))
    if spec.log_size_bytes:
        options.append(("innodb_log_file_size", spec.log_size_bytes))
    if temp_dir is not None:
        options += _temporary(temp_dir)
    options += list(spec.settings.items())
    return options


def write_config(path: Path, options: list[tuple[str, Any]]) -> None:
    lines = ["# Written by storlab for one throwaway instance; no other option file is read.", "[mysqld]"]
    for key, value in options:
        if value == "" and key == "innodb_data_home_dir":
            lines.append(f"{key} =")
        else:
            lines.append(f"{key} = {conf_value(value)}")
    safe_files.write_new(path, "\n".join(lines) + "\n", 0o644)  # mariadbd ignores a world-writable option file


def _template(server_bin: Path, installer: Path, spec: InstanceSpec, connections: int) -> Path | None:
    """An installed datadir and redo log for this server and these install-time choices (page size,
    redo log size, and the settings, some of which InnoDB fixes at install), made once: each run
    copies it instead of running mariadb-install-db. None for system-tablespace files, whose paths
    on the cell's placements are written into the system tablespace at install."""
    if spec.file_kind == "system-tablespace":
        return None
    options = {"server": server_version(server_bin), "installer": str(installer), "page_size": spec.page_size,
               "log_size": spec.log_size_bytes, "settings": {k: str(v) for k, v in sorted(spec.settings.items())},
               "admin": _admin()}

    def build(into: Path) -> None:
        user = os_users.server_user()
        datadir = owned.make_server_dir(into / "datadir", user)
        redo = owned.make_server_dir(into / "redo", user)
        config = into / "my.cnf"
        write_config(config, _options(spec, datadir, into, redo, {}, connections))
        _install(installer, config, user, into)

    return templates.template("mariadb", options, build)


def _install(installer: Path, config: Path, user: os_users.OsUser, cwd: Path) -> None:
    # --defaults-file first: /etc/mysql's option files are then never read. storlab's account is let in
    # from its own OS user only (no password anyone could use).
    user_tools.run_as(
        user,
        [str(installer), f"--defaults-file={config}", "--auth-root-authentication-method=socket",
         f"--auth-root-socket-user={_admin()}", "--skip-test-db", "--skip-name-resolve"],
        "mariadb-install-db", cwd=cwd,
    )


@interrupts.owning
def provision(engine: instances.Server, spec: InstanceSpec, keep: bool, connections: int) -> Iterator[MariadbInstance]:
    """Install (or copy the template), start and yield an instance; stopped (and removed unless `keep`)
    on every way out. A throwaway instance is killed (nothing of it is kept, so no flush is owed); a
    kept one gets a clean shutdown."""
    server_bin, installer = binaries()
    stop = signal.SIGTERM if keep else signal.SIGKILL
    with instances.workspace(engine, spec.placements, keep, stop, spec.settings, spec.caps,
                             spec.memory_bytes) as ws:
        # Inside the workspace: a setting the installer refuses is told in the installer's words.
        with ws.doing("the template datadir"):
            template = _template(server_bin, installer, spec, connections)
        home = ws.roots[spec.home.name]
        datadir, redo = home / "datadir", ws.roots[spec.log.name] / "redo"
        if template is not None:
            with ws.doing(f"copying the template datadir to {datadir}"):
                templates.copy(template / "datadir", datadir, preallocated=True)
            with ws.doing(f"copying the template redo log to {redo}"):
                templates.copy(template / "redo", redo, preallocated=True)
        else:
            owned.make_server_dir(datadir, ws.user)
            owned.make_server_dir(redo, ws.user)
        kind_dir = "ibdata" if spec.file_kind == "system-tablespace" else "tables"
        table_dirs = {p.name: owned.make_server_dir(ws.roots[p.name] / kind_dir, ws.user)
                      for p in spec.data_placements}
        temp_dir = owned.make_server_dir(ws.roots[spec.temp.name] / "tmp", ws.user) if spec.temp else None
        config = home / "my.cnf"
        write_config(config, _options(spec, datadir, ws.socket_dir, redo, table_dirs, connections, temp_dir))
        if template is None:
            with ws.doing("mariadb-install-db"):
                _install(installer, config, ws.user, home)
        with ws.doing("MariaDB's start"):
            server = ws.start([str(server_bin), f"--defaults-file={config}", *_private(ws.socket_dir)])
            server.wait_answer(functools.partial(_accepts, ws.socket_dir / SOCKET), "MariaDB")
            conn = _connect(ws.socket_dir / SOCKET, _admin(), None)
        with conn:
            version = _set_up(ws, conn, SERVER_VERSION).fetchone()[0]
            for statement in (CREATE_DATABASE, CREATE_WORKLOAD_USER, GRANT_WORKLOAD_USER):
                _set_up(ws, conn, statement)
        yield MariadbInstance(spec, ws, table_dirs, version)


def _set_up(ws: instances.Workspace, conn: Connection, statement: str) -> pymysql.cursors.Cursor:
    """One of storlab's first statements to the server: the set-up's step while it runs."""
    with ws.doing(statement):
        return conn.execute(statement)
