"""PostgreSQL 15 adapter: a throwaway cluster per cell with the cell's layout, and its wait statistics.

Layout: the cluster's catalog on the first data placement, `initdb --waldir` on the log placement,
one tablespace per data placement; N data files are N hash partitions of the table.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg

from storlab import instances
from storlab.engines.base import InstanceSpec, Wait, WaitCapture
from storlab.errors import RunFailed
from storlab.probes import Sampler, sched_delta, sched_time
from storlab.waits import delta, is_benign

PORT = 55432  # the socket file's name only: the instance listens on no TCP address at all
SUPERUSER = "storlab"
DATABASE = "postgres"
SAMPLING_PERIOD_MS = 10
ACTIVITY_PERIOD_S = 0.05

# Idle waits: a session waiting for its client's next statement says nothing about storage.
BENIGN = frozenset({"Client:ClientRead", "Activity:*", "Extension:*"})

SERVER_VERSION = "SHOW server_version"
CREATE_TABLESPACE = "CREATE TABLESPACE {name} LOCATION '{path}'"
WAIT_COLLECTOR_RUNNING = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_wait_sampling collector'"
CREATE_WAIT_SAMPLING = "CREATE EXTENSION IF NOT EXISTS pg_wait_sampling"
BACKEND_PID = "SELECT pg_backend_pid()"
WAIT_PROFILE = """
    SELECT event_type || ':' || event, sum(count)
    FROM pg_wait_sampling_profile
    WHERE pid = ANY(%s) AND event IS NOT NULL
    GROUP BY 1"""
ACTIVITY_SAMPLE = """
    SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
    FROM pg_stat_activity
    WHERE pid = ANY(%s) AND state = 'active'"""

# The seeds' table: a random GUID key, 160 bytes of defaults per row.
SEEDS_TABLE = """
    CREATE TABLE lab_insert (
        c1 uuid NOT NULL DEFAULT gen_random_uuid(),
        c2 timestamp DEFAULT now(),
        c3 char(111) DEFAULT 'a',
        c4 int DEFAULT 1,
        c5 int DEFAULT 2,
        c6 bigint DEFAULT 42
    ) {tail}"""
SEEDS_PARTITION = (
    "CREATE TABLE lab_insert_{i} PARTITION OF lab_insert "
    "FOR VALUES WITH (MODULUS {n}, REMAINDER {i}) TABLESPACE {tablespace}"
)
SEEDS_INDEX = "CREATE INDEX ON {table} (c1) TABLESPACE {tablespace}"
# Every column from its default, the rows generated in the server: one statement per transaction.
RANDOM_INSERT = "INSERT INTO lab_insert SELECT FROM generate_series(1, %s)"


def bin_dir() -> Path:
    """The newest installed server, preferring 15 (the version storlab's SQL is written for)."""
    preferred = Path("/usr/lib/postgresql/15/bin")
    if (preferred / "postgres").exists():
        return preferred
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not found:
        raise RunFailed("PostgreSQL server not found (install the postgresql-15 package: make demo does)")
    return found[-1].parent


def _conf_value(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _tablespace(placement_name: str) -> str:
    return f"ts_{placement_name}".lower().replace("-", "_")


class PostgresInstance:
    engine = "postgres"

    def __init__(self, spec: InstanceSpec, socket_dir: Path, version: str, wait_sampling: bool):
        self.spec = spec
        self.socket_dir = socket_dir
        self.version = version
        self.wait_sampling = wait_sampling

    def connect(self) -> psycopg.Connection:
        conn = psycopg.connect(host=str(self.socket_dir), port=PORT, user=SUPERUSER, dbname=DATABASE, autocommit=True)
        conn.prepare_threshold = 0  # prepare on first use, as pgbench -M prepared does
        return conn

    @property
    def dsn(self) -> str:
        return f"host={self.socket_dir} port={PORT} user={SUPERUSER} dbname={DATABASE}"

    def session_id(self, conn: psycopg.Connection) -> int:
        return conn.execute(BACKEND_PID).fetchone()[0]

    def session_os_pids(self, sessions: list[int]) -> list[int]:
        return list(sessions)  # a PostgreSQL session is one OS process

    def random_insert_setup(self) -> list[str]:
        files = self.spec.data_files
        if len(files) == 1:
            ts = _tablespace(files[0].name)
            return [SEEDS_TABLE.format(tail=f"TABLESPACE {ts}"), SEEDS_INDEX.format(table="lab_insert", tablespace=ts)]
        statements = [SEEDS_TABLE.format(tail="PARTITION BY HASH (c1)")]
        for i, placement in enumerate(files):
            ts = _tablespace(placement.name)
            statements.append(SEEDS_PARTITION.format(i=i, n=len(files), tablespace=ts))
            statements.append(SEEDS_INDEX.format(table=f"lab_insert_{i}", tablespace=ts))
        return statements

    def random_insert_statement(self, batch: int) -> tuple[str, tuple]:
        return RANDOM_INSERT, (batch,)

    def wait_probe(self):
        return WaitSamplingProbe(self) if self.wait_sampling else ActivityProbe(self)


class WaitSamplingProbe:
    """pg_wait_sampling's in-server profile (10 ms), restricted to the workload's sessions. Its
    collector records no on-CPU samples, so CPU comes from the sessions' /proc schedstat."""

    source = "pg_wait_sampling"

    def __init__(self, instance: PostgresInstance):
        self.instance = instance

    def _profile(self) -> dict[str, float]:
        with self.instance.connect() as conn:
            return {name: float(n) for name, n in conn.execute(WAIT_PROFILE, (self.sessions,)).fetchall()}

    def start(self, sessions: list[int]) -> None:
        self.sessions = sessions
        self.before = self._profile()
        self.sched_before = sched_time(sessions)

    def stop(self) -> WaitCapture:
        counts = delta(self.before, self._profile())
        sched = sched_delta(self.sched_before, sched_time(self.sessions))
        waits = [
            Wait(name, n * SAMPLING_PERIOD_MS / 1000)
            for name, n in counts.items()
            if not is_benign(name, BENIGN)
        ]
        extras = {}
        if sched is not None:
            waits.append(Wait("CPU", sched.cpu_s))
            extras = {"sessions_cpu_s": sched.cpu_s, "sessions_runqueue_s": sched.runqueue_s}
        return WaitCapture(self.source, waits, extras)


class ActivityProbe:
    """Sampling pg_stat_activity every 50 ms from a separate autocommit connection (its snapshot is
    frozen inside a transaction). Samples give time, not counts; CPU = active with no wait event."""

    source = "pg_stat_activity"

    def __init__(self, instance: PostgresInstance):
        self.instance = instance
        self.totals: dict[str, float] = {}
        self._lock = threading.Lock()

    def _record(self, weight_s: float) -> None:
        for (name,) in self.conn.execute(ACTIVITY_SAMPLE, (self.sessions,)).fetchall():
            with self._lock:
                self.totals[name] = self.totals.get(name, 0.0) + weight_s

    def start(self, sessions: list[int]) -> None:
        self.sessions = sessions
        self.conn = self.instance.connect()
        self.sched_before = sched_time(sessions)
        self.sampler = Sampler(ACTIVITY_PERIOD_S, self._record)
        self.sampler.start()

    def stop(self) -> WaitCapture:
        self.sampler.stop()
        self.conn.close()
        if self.sampler.error is not None:
            raise RunFailed(f"pg_stat_activity sampler failed: {self.sampler.error}")
        sched = sched_delta(self.sched_before, sched_time(self.sessions))
        extras = {} if sched is None else {"sessions_cpu_s": sched.cpu_s, "sessions_runqueue_s": sched.runqueue_s}
        waits = [Wait(name, s) for name, s in self.totals.items() if not is_benign(name, BENIGN)]
        return WaitCapture(self.source, waits, extras)


def _settings(spec: InstanceSpec, socket_dir: Path, preload_wait_sampling: bool, connections: int) -> dict:
    conf = {
        "port": PORT,
        "listen_addresses": "",
        "unix_socket_directories": str(socket_dir),
        "max_connections": max(100, connections + 10),
        "logging_collector": False,
    }
    if preload_wait_sampling:
        conf.update({
            "shared_preload_libraries": "pg_wait_sampling",
            "pg_wait_sampling.profile_period": SAMPLING_PERIOD_MS,
            "pg_wait_sampling.profile_pid": True,
            "pg_wait_sampling.profile_queries": False,
        })
    if spec.log_size_bytes:
        mb = max(spec.log_size_bytes // (1024 * 1024), 32)
        conf.update({"min_wal_size": f"{mb}MB", "max_wal_size": f"{max(2 * mb, 1024)}MB"})
    conf.update(spec.settings)
    return conf


def wait_sampling_installed(bins: Path) -> bool:
    libdir = bins.parent / "lib"
    return (libdir / "pg_wait_sampling.so").exists()


@contextmanager
def provision(spec: InstanceSpec, keep: bool, connections: int) -> Iterator[PostgresInstance]:
    """Create, start and yield an instance; stopped (and removed unless `keep`) on every way out."""
    bins = bin_dir()
    placements = {p.name: p.path for p in [*spec.data_placements, spec.log]}
    with instances.workspace("postgres", placements, keep, signal.SIGINT) as ws:  # SIGINT: fast shutdown
        home = ws.roots[spec.home.name]
        pgdata = home / "pgdata"
        instances.run_as(
            ws.user,
            [str(bins / "initdb"), "-D", str(pgdata), "--waldir", str(ws.roots[spec.log.name] / "wal"),
             "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
            "initdb", cwd=home,
        )
        preload = wait_sampling_installed(bins)
        with open(pgdata / "postgresql.auto.conf", "a") as conf:
            for key, value in _settings(spec, ws.socket_dir, preload, connections).items():
                conf.write(f"{key} = {_conf_value(value)}\n")
        server = ws.start([str(bins / "postgres"), "-D", str(pgdata)], home)
        instance = PostgresInstance(spec, ws.socket_dir, "", wait_sampling=False)

        def accepts() -> bool:
            try:
                instance.connect().close()
                return True
            except psycopg.OperationalError:
                return False

        server.wait_ready(accepts, "PostgreSQL")
        with instance.connect() as conn:
            instance.version = conn.execute(SERVER_VERSION).fetchone()[0]
            for placement in spec.data_placements:
                location = instances.make_server_dir(ws.roots[placement.name] / "tablespace", ws.user)
                conn.execute(CREATE_TABLESPACE.format(name=_tablespace(placement.name), path=location))
            # Only with the collector running: its reset and views have crashed backends without it.
            if preload and conn.execute(WAIT_COLLECTOR_RUNNING).fetchone()[0] > 0:
                conn.execute(CREATE_WAIT_SAMPLING)
                instance.wait_sampling = True
        yield instance
