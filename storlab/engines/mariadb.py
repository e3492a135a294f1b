"""MariaDB 10.11 adapter: a throwaway server per cell with the cell's layout, and its wait statistics.

Layout, fixed when the instance is installed (`innodb_page_size` cannot change afterwards):
- the datadir (catalog, undo, the default system tablespace) on the first data placement;
- the redo log (`innodb_log_group_home_dir`, one circular file of `innodb_log_file_size`) on the log
  placement;
- file_kind "partitions" (file-per-table): N data files are N partitions of the table, each with
  `DATA DIRECTORY` on its placement; one data file is a plain table in the datadir. The partitions are
  N equal ranges of the random key, not `PARTITION BY KEY`: KEY's hash modulo a power of two is skewed
  in 10.11 (8 partitions of 16,000 random UUIDs held 1,340 to 4,028 rows; UUID() v1 keys all 16,000 in
  one), so 1, 2, 4, 8, 16 files would not share the inserts as the seeds' files do;
- file_kind "system-tablespace" (no file-per-table): N files ibdata1..N in `innodb_data_file_path`, by
  absolute path on their placements, the last one autoextending. InnoDB fills them in order, not
  proportionally: ibdata2 gets pages only once ibdata1 is full. That is not SQL Server's proportional fill.

The server listens on its own unix socket only (skip-networking), reads only its own my.cnf, and has
performance_schema on with the synch and file IO instruments enabled (they can only be turned on at
start). The workload runs as SQL user `lab`; the probe reads as `root`, so its own waits are not counted.
"""

from __future__ import annotations

import shutil
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pymysql

from storlab import instances
from storlab.engines.base import InstanceSpec, Wait, WaitCapture
from storlab.errors import RunFailed, UserError
from storlab.probes import sched_delta, sched_time
from storlab.waits import delta, is_benign

SOCKET = "mysqld.sock"
ADMIN_USER = "root"  # passwordless (installed with --auth-root-authentication-method=normal)
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
SESSION_THREADS = "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID IN %s"
WAITS_BY_USER = """
    SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT
    FROM performance_schema.events_waits_summary_by_user_by_event_name
    WHERE USER = %s AND COUNT_STAR > 0"""
GLOBAL_STATUS = "SHOW GLOBAL STATUS WHERE Variable_name IN %s"

# The seeds' table: a random UUID key InnoDB clusters on, 160 bytes of defaults per row.
SEEDS_TABLE = """
    CREATE TABLE lab_insert (
        c1 UUID NOT NULL PRIMARY KEY,
        c2 DATETIME DEFAULT CURRENT_TIMESTAMP,
        c3 CHAR(111) DEFAULT 'a',
        c4 INT DEFAULT 1,
        c5 INT DEFAULT 2,
        c6 BIGINT DEFAULT 42
    ) ENGINE=InnoDB{tail}"""
SEEDS_PARTITIONS = " PARTITION BY RANGE COLUMNS (c1) ({partitions})"
SEEDS_PARTITION = "PARTITION p{i} VALUES LESS THAN ({bound}) DATA DIRECTORY = '{path}'"
# A random (version 4) UUID. MariaDB's UUID() is version 1 (time-based) and the UUID type stores it in
# an index-friendly order, so UUID() keys arrive in ascending order: appends, not the seeds' random
# inserts. 10.11 has no UUID_v4(); this builds one from 16 random bytes (version and variant bits set).
RANDOM_UUID = "INSERT(INSERT(HEX(RANDOM_BYTES(16)), 13, 1, '4'), 17, 1, HEX(8 + FLOOR(RAND() * 4)))"
# Rows generated in the server, one statement per transaction. The Sequence engine's table names
# carry the row count and a table name cannot be a parameter: one statement per validated batch size.
RANDOM_INSERT = "INSERT INTO lab_insert (c1) SELECT " + RANDOM_UUID + " FROM seq_1_to_{rows}"


def binaries() -> tuple[Path, Path]:
    """The server and its installer, from the distribution's mariadb-server package."""
    server = Path("/usr/sbin/mariadbd")
    if not server.exists():
        found = shutil.which("mariadbd")
        if not found:
            raise RunFailed("MariaDB server not found (install the mariadb-server package)")
        server = Path(found)
    installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if not installer:
        raise RunFailed("mariadb-install-db not found (install the mariadb-server package)")
    return server, Path(installer)


def _option_value(value: Any) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    text = str(value)
    if any(c.isspace() for c in text) or any(c in text for c in "#'\"\\"):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


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


class MariadbInstance:
    engine = "mariadb"

    def __init__(self, spec: InstanceSpec, socket: Path, table_dirs: dict[str, Path], version: str = ""):
        self.spec = spec
        self.socket = socket
        self.table_dirs = table_dirs  # data placement name -> where its partitions' files go
        self.version = version
        self._statements: dict[int, tuple[str, tuple]] = {}

    def _connect(self, user: str, database: str | None) -> Connection:
        return Connection(pymysql.connect(unix_socket=str(self.socket), user=user, database=database,
                                          autocommit=True, connect_timeout=10))

    def connect(self) -> Connection:
        """A workload session: the `lab` user, in the `lab` database."""
        return self._connect(WORKLOAD_USER, DATABASE)

    def admin(self) -> Connection:
        """The probe's and set-up's session: root, whose waits the probe never counts."""
        return self._connect(ADMIN_USER, None)

    def session_id(self, conn: Connection) -> int:
        return int(conn.execute(CONNECTION_ID).fetchone()[0])

    def session_os_pids(self, sessions: list[int]) -> list[int]:
        """The OS thread of each session (one thread per connection): /proc/<tid>/schedstat is per thread."""
        if not sessions:
            return []
        with self.admin() as conn:
            rows = conn.execute(SESSION_THREADS, (tuple(sessions),)).fetchall()
        return [int(tid) for (tid,) in rows if tid is not None]

    def random_insert_setup(self) -> list[str]:
        files = self.spec.data_files
        if self.spec.file_kind == "system-tablespace" or len(files) == 1:
            # The system tablespace, or one file-per-table file: in the datadir, on data_files[0].
            return [SEEDS_TABLE.format(tail="")]
        bounds = [f"'{b}'" for b in range_bounds(len(files))] + ["MAXVALUE"]
        partitions = ", ".join(
            SEEDS_PARTITION.format(i=i, bound=bound, path=_sql_text(self.table_dirs[p.name]))
            for i, (p, bound) in enumerate(zip(files, bounds))
        )
        return [SEEDS_TABLE.format(tail=SEEDS_PARTITIONS.format(partitions=partitions))]

    def random_insert_statement(self, batch: int) -> tuple[str, tuple]:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        statement = self._statements.get(batch)
        if statement is None:
            statement = self._statements[batch] = (RANDOM_INSERT.format(rows=batch), ())
        return statement

    def wait_probe(self) -> "PerformanceSchemaProbe":
        return PerformanceSchemaProbe(self)


class PerformanceSchemaProbe:
    """The workload user's waits from performance_schema (real counts, picosecond times) as a delta
    between start and stop. Background threads have no user and the probe reads as another user, so
    neither is counted. CPU and run-queue time come from the sessions' threads in /proc; the redo-log
    counters (global: they include background writes) go into extras as log.*."""

    source = "performance_schema"

    def __init__(self, instance: MariadbInstance):
        self.instance = instance

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
        self.sched_before = sched_time(self.threads)

    def stop(self) -> WaitCapture:
        sched = sched_delta(self.sched_before, sched_time(self.threads))
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


def _options(spec: InstanceSpec, datadir: Path, socket_dir: Path, redo: Path, table_dirs: dict[str, Path],
             connections: int) -> list[tuple[str, Any]]:
    """my.cnf's [mysqld] lines, in order; the experiment's engine_settings last, so they win."""
    system = spec.file_kind == "system-tablespace"
    options: list[tuple[str, Any]] = [
        ("datadir", datadir),
        ("socket", socket_dir / SOCKET),
        ("pid-file", socket_dir / "mysqld.pid"),
        ("skip-networking", True),  # no TCP at all: the standard port is never touched
        ("skip-name-resolve", True),
        ("max_connections", max(100, connections + 10)),
        ("innodb_log_group_home_dir", redo),
        ("innodb_file_per_table", not system),
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
    options += list(spec.settings.items())
    return options


def write_config(path: Path, options: list[tuple[str, Any]]) -> None:
    lines = ["# Written by storlab for one throwaway instance; no other option file is read.", "[mysqld]"]
    for key, value in options:
        if value == "" and key == "innodb_data_home_dir":
            lines.append(f"{key} =")
        else:
            lines.append(f"{key} = {_option_value(value)}")
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)  # mariadbd ignores a world-writable option file


@contextmanager
def provision(spec: InstanceSpec, keep: bool, connections: int) -> Iterator[MariadbInstance]:
    """Install, start and yield an instance; stopped (and removed unless `keep`) on every way out."""
    server_bin, installer = binaries()
    placements = {p.name: p.path for p in [*spec.data_placements, spec.log]}
    with instances.workspace("mariadb", placements, keep, signal.SIGTERM) as ws:  # SIGTERM: clean shutdown
        home = ws.roots[spec.home.name]
        datadir = instances.make_server_dir(home / "datadir", ws.user)
        redo = instances.make_server_dir(ws.roots[spec.log.name] / "redo", ws.user)
        kind_dir = "ibdata" if spec.file_kind == "system-tablespace" else "tables"
        table_dirs = {p.name: instances.make_server_dir(ws.roots[p.name] / kind_dir, ws.user)
                      for p in spec.data_placements}
        config = home / "my.cnf"
        write_config(config, _options(spec, datadir, ws.socket_dir, redo, table_dirs, connections))
        # --defaults-file first: /etc/mysql's option files are then never read.
        instances.run_as(
            ws.user,
            [str(installer), f"--defaults-file={config}", "--auth-root-authentication-method=normal",
             "--skip-test-db", "--skip-name-resolve"],
            "mariadb-install-db", cwd=home,
        )
        server = ws.start([str(server_bin), f"--defaults-file={config}"], home)
        instance = MariadbInstance(spec, ws.socket_dir / SOCKET, table_dirs)

        def accepts() -> bool:
            try:
                instance.admin().close()
                return True
            except pymysql.err.OperationalError:
                return False

        server.wait_ready(accepts, "MariaDB")
        with instance.admin() as conn:
            instance.version = conn.execute(SERVER_VERSION).fetchone()[0]
            conn.execute(CREATE_DATABASE)
            conn.execute(CREATE_WORKLOAD_USER)
            conn.execute(GRANT_WORKLOAD_USER)
        yield instance
