"""PostgreSQL 15: a throwaway cluster per cell with the cell's layout, and its wait statistics.

Layout: the cluster's catalog on the first data placement, `initdb --waldir` on the log placement
(`--wal-segsize` is the log's growth: the unit in which new WAL is created and zero-filled), one
tablespace per data placement; a workload's table over N data files is N hash partitions. The
temporary files (sorts and hashes beyond work_mem) go to the temp placement's tablespace through
temp_tablespaces, in its pgsql_tmp directory.

What keeps the instance private (its socket directory, its port, no TCP address) is on the server's
command line, which outranks every configuration file: a line added to postgresql.auto.conf cannot
open it to the network.

The workload's sessions (`connect`) are the role `lab`, which owns what the workload makes and cannot
run a program, load a library or read a file of the server's; storlab's own work (`admin`: set-up,
the probes, checkpoints, cancels, the stall watchdog) is the superuser's, in the same database, and
the probes count the workload's sessions only.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import psycopg
from psycopg import sql

from storlab import interrupts, processes
from storlab.engines.base import ClientAddress, Table
from storlab.engines.postgres import session_counters
from storlab.engines.postgres.binaries import DEFAULT_VERSION, bin_dir, server_version, wait_sampling_installed
from storlab.engines.postgres.settings import conf_value, preload_libraries
from storlab.engines.postgres.traced_waits import DEFAULT_GROUPS, TEMP_READS, WITH_IO, WITH_READS, TracedWaitProbe
from storlab.errors import RunFailed, UserError
from storlab.lab import instances, os_users, owned, safe_files, server_process, templates, user_tools
from storlab.lab.layout import InstanceSpec, Placement
from storlab.probes.bpftrace import Tracing
from storlab.probes.recorders import SessionsSched
from storlab.sampler import Sampler
from storlab.probes.waits import Wait, WaitCapture, delta, is_benign

PORT = 55432  # the socket file's name only: the instance listens on no TCP address at all
SUPERUSER = "storlab"  # storlab's own work: set-up, probes, checkpoints, cancels, the stall watchdog
# The workload's sessions, the custom kind's SQL among them: a role that owns what the workload makes
# and nothing more (no superuser, no member of pg_execute_server_program or pg_read_server_files), so
# what an experiment submits cannot run a program or read a file of the server's.
WORKLOAD_ROLE = "lab"
DATABASE = "postgres"
SAMPLING_PERIOD_MS = 10
ACTIVITY_PERIOD_S = 0.05

# Idle waits: a session waiting for its client's next statement says nothing about storage.
BENIGN = frozenset({"Client:ClientRead", "Activity:*", "Extension:*"})

SERVER_VERSION = "SHOW server_version"
# The checkpoints done so far, by major version: 17 moved the counters to pg_stat_checkpointer, 18 counts
# those done apart from the timed ones skipped on an idle server (num_timed counts both).
CHECKPOINTS_DONE = {18: "SELECT num_done FROM pg_stat_checkpointer",
                    17: "SELECT num_timed + num_requested FROM pg_stat_checkpointer",
                    15: "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"}
# A checkpoint counts when it ends, a spread one up to checkpoint_completion_target of the cycle after it
# started: between, the checkpointer is out of its idle wait (writing, syncing, or pausing between writes).
CHECKPOINT_READING = ("SELECT ({done}), EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'checkpointer' "
                      "AND wait_event IS DISTINCT FROM 'CheckpointerMain')")
WAL_WRITTEN = "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"
CHECKPOINT_TIMEOUT = "SELECT current_setting('checkpoint_timeout'), setting::float FROM pg_settings WHERE name = 'checkpoint_timeout'"
CREATE_TABLESPACE = "CREATE TABLESPACE {name} LOCATION {path}"
WAIT_COLLECTOR_RUNNING = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_wait_sampling collector'"
CREATE_WAIT_SAMPLING = "CREATE EXTENSION IF NOT EXISTS pg_wait_sampling"
BACKEND_PID = "SELECT pg_backend_pid()"
CLIENT_SESSIONS = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND backend_type = 'client backend'"
WAIT_PROFILE = """
    SELECT event_type || ':' || event, sum(count)
    FROM pg_wait_sampling_profile
    WHERE pid = ANY(%s) AND event IS NOT NULL
    GROUP BY 1"""
# Who waits on what. A session waiting for a heavyweight lock is in wait Lock:<locktype> and has that
# lock ungranted in pg_locks, which names it: the relation (Lock:extend on lab_insert_3), or the lock's
# type ("transaction": a row another transaction holds). Lock waits are read from pg_locks itself, not
# matched to pg_stat_activity afterwards: a short wait is often over by then. The other waits come from
# pg_stat_activity; a session in IO:DataFileExtend names the relation whose extend lock it holds, and
# the WAL's waits name the WAL (in the reader). Only the workload's sessions' locks are looked at, and
# pg_locks is read once a reading: each read takes every lock-manager partition's lock, which the
# sessions need to take and release theirs.
WAITING_SESSIONS = """
    WITH locks AS MATERIALIZED (
        SELECT pid, locktype, relation, granted FROM pg_locks WHERE pid = ANY(%(sessions)s)),
    waiting AS MATERIALIZED (
        SELECT pid, 'Lock:' || locktype AS wait,
               coalesce(relation::regclass::text,
                        CASE locktype WHEN 'transactionid' THEN 'transaction' ELSE locktype END) AS resource
        FROM locks
        WHERE NOT granted)
    SELECT wait, resource FROM waiting
    UNION ALL
    SELECT a.wait_event_type || ':' || a.wait_event,
           CASE WHEN a.wait_event = 'DataFileExtend' THEN
                (SELECT l.relation::regclass::text FROM locks l
                 WHERE l.pid = a.pid AND l.granted AND l.locktype = 'extend' LIMIT 1)
           END
    FROM pg_stat_activity a
    WHERE a.pid = ANY(%(sessions)s) AND a.state = 'active' AND a.wait_event IS NOT NULL
      AND a.wait_event_type <> 'Lock' AND a.pid NOT IN (SELECT pid FROM waiting)"""
ACTIVITY_SAMPLE = """
    SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
    FROM pg_stat_activity
    WHERE pid = ANY(%s) AND state = 'active'"""

# The next transaction id to be assigned: every write transaction takes one, so it counts commits
# while a load procedure runs (the statistics views are flushed only when the procedure returns).
NEXT_XID = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
CANCEL = "SELECT pg_cancel_backend(pid) FROM unnest(%s::int[]) AS pid"
# Every statement of the workload's sessions, their connections and disconnections, in the stderr log
# with the prefix pgreplay reads, in English (workloads/captured_log.py): its connections and new
# sessions only, so the set-up before it is not logged. A backend takes its settings from the
# postmaster as it starts: a new session shows the prefix once the postmaster has read it again.
STATEMENT_LOG_PREFIX = "%m|%u|%d|%c|"
LOG_STATEMENTS = [
    f"ALTER SYSTEM SET log_line_prefix = '{STATEMENT_LOG_PREFIX}'",
    "ALTER SYSTEM SET lc_messages = 'C'",
    "ALTER SYSTEM SET log_connections = on",
    "ALTER SYSTEM SET log_disconnections = on",
    f"ALTER ROLE {WORKLOAD_ROLE} SET log_statement = 'all'",
    "SELECT pg_reload_conf()",
]
SHOW_LOG_PREFIX = "SHOW log_line_prefix"
RELOAD_S = 10.0
STATEMENT_LOG_BYTES = 256 * 2**20
CHECKPOINT = "CHECKPOINT"
SET_PARALLEL_WORKERS = "SET max_parallel_workers_per_gather = {workers}"
EXPLAIN = "EXPLAIN (FORMAT JSON) "
# A third of an initialized cluster's files are the template0 database, which nothing connects to
# (template1 stays: CREATE DATABASE copies it): every run copies the cluster, and creating a file
# costs about half a millisecond here.
TRIM_TEMPLATE = """UPDATE pg_database SET datistemplate = false WHERE datname = 'template0';
DROP DATABASE template0;
"""
# The workload's role, made once in the template: it may create schemas, trusted extensions and
# tables in the database, and tables in the public schema (PostgreSQL 15 no longer lets every role).
WORKLOAD_ROLE_SQL = f"""CREATE ROLE {WORKLOAD_ROLE} LOGIN;
GRANT CREATE ON DATABASE {DATABASE} TO {WORKLOAD_ROLE};
GRANT CREATE ON SCHEMA public TO {WORKLOAD_ROLE};
"""
GRANT_TABLESPACE = "GRANT CREATE ON TABLESPACE {name} TO " + WORKLOAD_ROLE
TABLE_BYTES = """
    SELECT CASE WHEN c.relkind = 'p'
                THEN (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree(c.oid))
                ELSE pg_total_relation_size(c.oid) END
    FROM pg_class c WHERE c.oid = %s::regclass"""
CREATE_TABLE = "CREATE TABLE {name} ({columns}) {tail}"
CREATE_PARTITION = (
    "CREATE TABLE {name}_{i} PARTITION OF {name} "
    "FOR VALUES WITH (MODULUS {n}, REMAINDER {i}) TABLESPACE {tablespace}"
)
CREATE_INDEX = "CREATE INDEX ON {table} ({key}) TABLESPACE {tablespace}"


def _tablespace(placement_name: str) -> str:
    return f"ts_{placement_name}".lower().replace("-", "_")


def _connect(socket_dir: Path, user: str = SUPERUSER) -> psycopg.Connection:
    conn = psycopg.connect(host=str(socket_dir), port=PORT, user=user, dbname=DATABASE, autocommit=True,
                           connect_timeout=server_process.CONNECT_TIMEOUT_S)
    conn.prepare_threshold = 0  # prepare on first use, as pgbench -M prepared does
    return conn


def _accepts(socket_dir: Path) -> bool:
    try:
        _connect(socket_dir).close()
        return True
    except psycopg.OperationalError:
        return False


class PostgresInstance:
    """A started cluster in its workspace (instances.Workspace), ready for a workload."""

    engine = "postgres"

    def __init__(self, spec: InstanceSpec, workspace: instances.Workspace, version: str, wait_sampling: bool, bins: Path):
        self.spec = spec
        self.bins = bins  # the server's binaries: its version's
        self.workspace = workspace
        self.clients = workspace.clients
        self.socket_dir = workspace.socket_dir
        self.roots = dict(workspace.roots)  # placement name -> the instance's own directory on it
        self.group = workspace.group  # its processes, and what holds them back (IO caps, memory)
        self.version = version
        self.wait_sampling = wait_sampling  # pg_wait_sampling's collector runs

    def connect(self) -> psycopg.Connection:
        """A workload session: the unprivileged role `lab`."""
        return _connect(self.socket_dir, WORKLOAD_ROLE)

    def admin(self) -> psycopg.Connection:
        """storlab's own session (probes, checkpoints, cancels): the superuser, in the workload's
        database (the probes name its relations); the probes count the workload's sessions only."""
        return _connect(self.socket_dir)

    def restart(self) -> None:
        """SIGINT: a fast, clean shutdown; then started again, its buffers empty."""
        self.workspace.restart(signal.SIGINT, functools.partial(_accepts, self.socket_dir), "PostgreSQL")

    def cpu_s(self) -> float:
        return processes.tree_cpu_s(self.workspace.server.pid)

    def session_id(self, conn: psycopg.Connection) -> int:
        return conn.execute(BACKEND_PID).fetchone()[0]

    def session_os_pids(self, sessions: list[int]) -> list[int]:
        return list(sessions)  # a PostgreSQL session is one OS process

    def client_address(self) -> ClientAddress:
        return ClientAddress(self.socket_dir, PORT, WORKLOAD_ROLE, DATABASE)

    def client_sessions(self, tag: str) -> list[int]:
        with self.admin() as conn:
            return [pid for (pid,) in conn.execute(CLIENT_SESSIONS, (tag,)).fetchall()]

    def create_table(self, conn: psycopg.Connection, table: Table) -> None:
        """One data file: a plain table; N: N hash partitions, each in its placement's tablespace."""
        files = self.spec.data_files
        if len(files) == 1:
            ts = _tablespace(files[0].name)
            conn.execute(CREATE_TABLE.format(name=table.name, columns=table.columns, tail=f"TABLESPACE {ts}"))
            if table.index_key:
                conn.execute(CREATE_INDEX.format(table=table.name, key=table.key, tablespace=ts))
            return
        conn.execute(CREATE_TABLE.format(name=table.name, columns=table.columns, tail=f"PARTITION BY HASH ({table.key})"))
        for i, placement in enumerate(files):
            ts = _tablespace(placement.name)
            conn.execute(CREATE_PARTITION.format(name=table.name, i=i, n=len(files), tablespace=ts))
            if table.index_key:
                conn.execute(CREATE_INDEX.format(table=f"{table.name}_{i}", key=table.key, tablespace=ts))

    def call_load(self, conn: psycopg.Connection, call: str, params: tuple) -> tuple[np.ndarray, np.ndarray]:
        """A PostgreSQL procedure hands its times back as two OUT arrays of epoch seconds."""
        starts, ends = conn.execute(call, params).fetchone()
        return np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)

    def table_bytes(self, conn: psycopg.Connection, name: str) -> int:
        return int(conn.execute(TABLE_BYTES, (name,)).fetchone()[0])

    def checkpoint(self) -> None:
        with self.admin() as conn:
            conn.execute(CHECKPOINT)

    def committed(self, conn: psycopg.Connection) -> int:
        return conn.execute(NEXT_XID).fetchone()[0]

    def checkpoint_reading(self, conn: psycopg.Connection) -> tuple[float, bool]:
        major = int(self.version.split(".")[0].split()[0])
        done = CHECKPOINTS_DONE[max(v for v in CHECKPOINTS_DONE if v <= major)]
        count, writing = conn.execute(CHECKPOINT_READING.format(done=done)).fetchone()
        return float(count), bool(writing)

    def checkpoint_cycle(self, conn: psycopg.Connection) -> tuple[str, str, float | None, float | None]:
        shown, seconds = conn.execute(CHECKPOINT_TIMEOUT).fetchone()
        return "checkpoint_timeout", shown, float(seconds), None

    def log_written(self, conn: psycopg.Connection) -> float:
        return float(conn.execute(WAL_WRITTEN).fetchone()[0])

    def cancel(self, sessions: list[int]) -> None:
        with self.admin() as conn:
            conn.execute(CANCEL, (sessions,))

    def log_position(self) -> int:
        return self.workspace.log_position()

    def logged_since(self, position: int, max_bytes: int) -> str:
        return self.workspace.logged_since(position, max_bytes)

    def log_statements(self) -> int:
        """From now on the server logs what captured_log reads of the workload's sessions; where its
        log is now (statements_logged_since reads from there)."""
        position = self.log_position()
        with self.admin() as conn:
            for statement in LOG_STATEMENTS:
                conn.execute(statement)
        deadline = time.monotonic() + RELOAD_S
        while True:
            with self.admin() as conn:
                if conn.execute(SHOW_LOG_PREFIX).fetchone()[0] == STATEMENT_LOG_PREFIX:
                    return position
            if time.monotonic() > deadline:
                raise RunFailed(f"the server did not take the statement log's settings within {RELOAD_S:g} s")
            time.sleep(0.05)

    def statements_logged_since(self, position: int) -> str:
        """The workload's sessions' lines (each with its continuation lines) the server logged after
        `position`, as pgreplay reads them; RunFailed when the server logged more than is read."""
        if self.log_position() - position > STATEMENT_LOG_BYTES:
            raise RunFailed(f"the server logged more than {STATEMENT_LOG_BYTES // 2**20} MB of statements: capture a "
                            "shorter load (fewer transactions, a shorter duration)")
        workload_lines, in_workload = [], False
        for line in self.logged_since(position, STATEMENT_LOG_BYTES).splitlines():
            if line.startswith("\t"):
                if in_workload:
                    workload_lines.append(line)
                continue
            parts = line.split("|", 4)
            in_workload = len(parts) == 5 and parts[1] == WORKLOAD_ROLE
            if in_workload:
                workload_lines.append(line)
        return "".join(line + "\n" for line in workload_lines)

    def temporary_files(self) -> dict[str, float]:
        with self.admin() as conn:
            session_counters.wait_for_exit(conn, session_counters.ROLE_SESSIONS, WORKLOAD_ROLE)
            return session_counters.temporary_files(conn)

    def wait_probe(self, tracing: Tracing = Tracing.ON) -> TracedWaitProbe:
        """The sampled waits, with the trace points' counts and per-file IO where bpftrace can run
        (and `tracing` asks for them: LWLock waits and writes from Tracing.IO, reads with Tracing.READS)."""
        sampled = WaitSamplingProbe(self) if self.wait_sampling else ActivityProbe(self)
        groups = {Tracing.READS: WITH_READS, Tracing.IO: WITH_IO}.get(tracing, DEFAULT_GROUPS)
        if self.spec.temp is not None and tracing in (Tracing.IO, Tracing.READS):
            groups = (*groups, TEMP_READS)
        return TracedWaitProbe(sampled, self, None if tracing is Tracing.OFF else "bpftrace", groups)

    def parallel_workers(self, conn: psycopg.Connection, workers: int) -> None:
        conn.execute(SET_PARALLEL_WORKERS.format(workers=int(workers)))

    def planned_workers(self, conn: psycopg.Connection, query: str) -> int:
        plan = conn.execute(EXPLAIN + query).fetchone()[0][0]["Plan"]
        return int(plan.get("Workers Planned", 0))

    def waiting_tasks_probe(self) -> "WaitingSessions":
        return WaitingSessions(self)


class WaitingSessions:
    """Each waiting session's wait and what it waits on (WAITING_SESSIONS says how). Buffer and other
    LWLock waits name nothing PostgreSQL tells. Read in autocommit, so each reading is fresh (inside a
    transaction pg_stat_activity's snapshot would stay frozen)."""

    def __init__(self, instance: PostgresInstance):
        self.instance = instance
        self.conn: psycopg.Connection | None = None

    def open(self, sessions: list[int]) -> None:
        self.sessions = sessions
        self.conn = self.instance.admin()

    def read(self) -> list[tuple[str, str]]:
        return [(name, resource or ("WAL" if "WAL" in name else ""))
                for name, resource in self.conn.execute(WAITING_SESSIONS, {"sessions": self.sessions}).fetchall()
                if not is_benign(name, BENIGN)]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class WaitSamplingProbe:
    """pg_wait_sampling's in-server profile (10 ms), restricted to the workload's sessions. Its
    collector records no on-CPU samples, so CPU comes from the sessions' /proc schedstat."""

    source = "pg_wait_sampling"

    def __init__(self, instance: PostgresInstance):
        self.instance = instance
        self.conn: psycopg.Connection | None = None

    def _profile(self) -> dict[str, float]:
        return {name: float(n) for name, n in self.conn.execute(WAIT_PROFILE, (self.sessions,)).fetchall()}

    def start(self, sessions: list[int]) -> None:
        self.sessions = sessions
        self.conn = self.instance.admin()
        self.before = self._profile()
        self.sched = SessionsSched(sessions)

    def _seconds(self) -> dict[str, float]:
        return {name: n * SAMPLING_PERIOD_MS / 1000 for name, n in delta(self.before, self._profile()).items()
                if not is_benign(name, BENIGN)}

    def so_far(self) -> dict[str, float]:
        seconds = self._seconds()
        sched = self.sched.since_start()
        if sched is not None:
            seconds["CPU"] = sched.cpu_s
        return seconds

    def stop(self) -> WaitCapture:
        try:
            seconds = self._seconds()
        finally:
            self.conn.close()
        sched = self.sched.since_start()
        waits = [Wait(name, s) for name, s in seconds.items()]
        extras = {}
        if sched is not None:
            waits.append(Wait("CPU", sched.cpu_s))
            extras = {"sessions_cpu_s": sched.cpu_s, "sessions_runqueue_s": sched.runqueue_s}
        return WaitCapture(self.source, waits, extras)


class ActivityProbe:
    """Sampling pg_stat_activity every 50 ms from a separate autocommit connection (its snapshot is
    frozen inside a transaction), on a server without pg_wait_sampling (PostgreSQL 18's wheel). Samples
    give time, not counts; CPU = active with no wait event. Its cost: benchmarks/probe_overhead.py
    --postgres-version 18."""

    source = f"pg_stat_activity sampled every {ACTIVITY_PERIOD_S * 1000:.0f} ms (no pg_wait_sampling)"

    def __init__(self, instance: PostgresInstance):
        self.instance = instance
        self.totals: dict[str, float] = {}
        self._lock = threading.Lock()

    def _record(self, weight_s: float) -> None:
        for (name,) in self.conn.execute(ACTIVITY_SAMPLE, (self.sessions,)).fetchall():
            with self._lock:
                self.totals[name] = self.totals.get(name, 0.0) + weight_s

    def so_far(self) -> dict[str, float]:
        with self._lock:
            return {name: s for name, s in self.totals.items() if not is_benign(name, BENIGN)}

    def start(self, sessions: list[int]) -> None:
        self.sessions = sessions
        self.conn = self.instance.admin()
        self.sched = SessionsSched(sessions)
        self.sampler = Sampler(ACTIVITY_PERIOD_S, self._record)
        self.sampler.start()

    def stop(self) -> WaitCapture:
        self.sampler.stop()
        self.conn.close()
        if self.sampler.error is not None:
            raise RunFailed(f"pg_stat_activity sampler failed: {self.sampler.error}")
        sched = self.sched.since_start()
        extras = {} if sched is None else {"sessions_cpu_s": sched.cpu_s, "sessions_runqueue_s": sched.runqueue_s}
        waits = [Wait(name, s) for name, s in self.totals.items() if not is_benign(name, BENIGN)]
        return WaitCapture(self.source, waits, extras)


def _write_authentication(home: Path, server_user: str) -> list[str]:
    """Who may open which session, in files of storlab's own (beside the instance's directories, root's):
    the superuser (storlab's own sessions) only from storlab's OS user and the servers' (peer
    authentication), the workload's role from whoever reaches the socket (its load generators, as the
    OS user storlab-client); the server's options that name them."""
    admins = dict.fromkeys([os_users.current_user().name, server_user])
    hba, ident = home / "pg_hba.conf", home / "pg_ident.conf"
    safe_files.write_new(hba, f"local all {SUPERUSER} peer map=storlab\nlocal all all trust\n")
    safe_files.write_new(ident, "".join(f"storlab {name} {SUPERUSER}\n" for name in admins))
    return ["-c", f"hba_file={hba}", "-c", f"ident_file={ident}"]


def _private(socket_dir: Path) -> list[str]:
    """The server's command-line options that keep it private: its own socket directory and port, and
    no TCP address at all."""
    return ["-c", f"port={PORT}", "-c", "listen_addresses=", "-c", f"unix_socket_directories={socket_dir}"]


def _settings(spec: InstanceSpec, preload_wait_sampling: bool, connections: int) -> dict:
    conf = {
        "max_connections": max(100, connections + 10),
        "logging_collector": False,
    }
    if spec.temp is not None:
        # Named before the tablespace exists: the server takes a name from its files on faith, and
        # every session opened after provision() made the tablespace finds it.
        conf["temp_tablespaces"] = _tablespace(spec.temp.name)
    if preload_wait_sampling:
        conf.update({
            "shared_preload_libraries": "pg_wait_sampling",
            "pg_wait_sampling.profile_period": SAMPLING_PERIOD_MS,
            "pg_wait_sampling.profile_pid": True,
            "pg_wait_sampling.profile_queries": False,
        })
    if spec.log_size_bytes:
        # The experiment's check keeps log_size at two WAL segments or more, as the server requires.
        mb = spec.log_size_bytes // 2**20
        conf.update({"min_wal_size": f"{mb}MB", "max_wal_size": f"{max(2 * mb, 1024)}MB"})
    for key, value in spec.settings.items():
        if preload_wait_sampling and key.lower() == "shared_preload_libraries":
            key, value = "shared_preload_libraries", preload_libraries(value)
        conf[key] = value
    return conf


def _wal_segsize(spec: InstanceSpec) -> list[str]:
    return [f"--wal-segsize={spec.log_growth_bytes // 2**20}"] if spec.log_growth_bytes else []


def _template(bins: Path, spec: InstanceSpec) -> Path:
    """An initialized cluster for this server and WAL segment size (the only choices initdb fixes),
    made once: each run copies it instead of running initdb. Its pg_wal is a separate directory."""
    options = {"server": server_version(bins), "bin": str(bins), "wal_segsize_mb": (spec.log_growth_bytes or 16 * 2**20) // 2**20,
               "databases": "postgres, template1", "workload_role": WORKLOAD_ROLE}

    def build(into: Path) -> None:
        user = os_users.server_user()
        user_tools.run_as(
            user,
            [str(bins / "initdb"), "-D", str(into / "pgdata"), "--waldir", str(into / "wal"), *_wal_segsize(spec),
             "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--locale=C"],
            "initdb", cwd=into,
        )
        user_tools.run_as(
            user, [str(bins / "postgres"), "--single", "-D", str(into / "pgdata"), "-c", "exit_on_error=true", DATABASE],
            "postgres --single", cwd=into, input=TRIM_TEMPLATE + WORKLOAD_ROLE_SQL,
        )

    return templates.template("postgres", options, build)


def _tablespace_placements(spec: InstanceSpec) -> list[Placement]:
    """One tablespace on each placement that holds data or the temporary files (the workload's role may
    create in each: a temporary file is created in temp_tablespaces by the session that needs it)."""
    temp = [spec.temp] if spec.temp is not None and spec.temp.name not in {p.name for p in spec.data_placements} else []
    return [*spec.data_placements, *temp]


def tablespace_problem(folder: Path) -> str | None:
    """Why `folder` cannot hold a tablespace's directory: PostgreSQL refuses a ' in its location."""
    if "'" in str(folder):
        return (f"{folder} cannot hold a tablespace (PostgreSQL refuses a ' in a tablespace's location); "
                "choose another directory")
    return None


@interrupts.owning
def provision(engine: instances.Server, spec: InstanceSpec, keep: bool, connections: int) -> Iterator[PostgresInstance]:
    """Create, start and yield an instance; stopped (and removed unless `keep`) on every way out. A
    throwaway instance gets an immediate shutdown (no checkpoint: nothing of it is kept); a kept one a
    fast shutdown, so its files are consistent."""
    bins = bin_dir(spec.engine_version or DEFAULT_VERSION)
    for placement in _tablespace_placements(spec):  # refused when the experiment loaded; here for a caller that did not load one
        problem = tablespace_problem(placement.path)
        if problem:
            raise UserError(f"placement {placement.name}: {problem}")
    stop = signal.SIGINT if keep else signal.SIGQUIT
    with instances.workspace(engine, spec.placements, keep, stop, spec.settings, spec.caps,
                             spec.memory_bytes) as ws:
        with ws.doing("the template cluster"):
            template = _template(bins, spec)
        home = ws.roots[spec.home.name]
        pgdata, wal = home / "pgdata", ws.roots[spec.log.name] / "wal"
        with ws.doing(f"copying the template cluster to {home}"):
            templates.copy(template / "pgdata", pgdata)
        # As the server will see it (through a delay layer too): its shared memory names it, and after a
        # kill -9 the layer's mount no longer shows it to `storlab clean`.
        seen = os.stat(pgdata, follow_symlinks=False)
        ws.manifest.data_dirs.append([seen.st_dev, seen.st_ino, seen.st_uid])
        ws.manifest.save()
        with ws.doing(f"copying the template's WAL to {wal}"):
            templates.copy(template / "wal", wal)
        (pgdata / "pg_wal").unlink()  # the template's link to its own WAL directory
        (pgdata / "pg_wal").symlink_to(wal)
        preload = wait_sampling_installed(bins)
        safe_files.append(pgdata / "postgresql.auto.conf",
                          "".join(f"{key} = {conf_value(value)}\n" for key, value in _settings(spec, preload, connections).items()))
        wait_sampling = False
        with ws.doing("PostgreSQL's start"):
            server = ws.start([str(bins / "postgres"), "-D", str(pgdata), *_private(ws.socket_dir),
                               *_write_authentication(home, ws.user.name)])
            server.wait_answer(functools.partial(_accepts, ws.socket_dir), "PostgreSQL")
            conn = _connect(ws.socket_dir)
        with conn:
            version = _set_up(ws, conn, SERVER_VERSION).fetchone()[0]
            for placement in _tablespace_placements(spec):
                location = owned.make_server_dir(ws.roots[placement.name] / "tablespace", ws.user)
                name = sql.SQL(_tablespace(placement.name))
                _set_up(ws, conn, sql.SQL(CREATE_TABLESPACE).format(name=name, path=sql.Literal(str(location))))
                _set_up(ws, conn, sql.SQL(GRANT_TABLESPACE).format(name=name))
            # Only with the collector running: its reset and views have crashed backends without it.
            if preload and _set_up(ws, conn, WAIT_COLLECTOR_RUNNING).fetchone()[0] > 0:
                _set_up(ws, conn, CREATE_WAIT_SAMPLING)
                wait_sampling = True
        yield PostgresInstance(spec, ws, version, wait_sampling, bins)


def _set_up(ws: instances.Workspace, conn: psycopg.Connection, statement: str | sql.Composable) -> psycopg.Cursor:
    """One of storlab's first statements to the server: the set-up's step while it runs."""
    with ws.doing(statement if isinstance(statement, str) else statement.as_string(conn)):
        return conn.execute(statement)
