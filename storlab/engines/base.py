"""What the rest of storlab may ask of an engine (`Engine`: its rules, its settings, its log, how an
instance is provisioned) and of its running instance (`Instance`). Engine things only: connect,
identify sessions, spread a table over the cell's data files, hand back what a load procedure
recorded, cancel sessions, capture waits. Workloads bring their own SQL; engines never import them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from storlab.engines.settings import Settings
from storlab.errors import RunFailed
from storlab.lab.clients import Clients
from storlab.lab.diagnosis import ServerLog
from storlab.lab.layout import InstanceSpec
from storlab.probes.costs import Cost
from storlab.probes.target import Probed
from storlab.session import Session


@dataclass(frozen=True)
class ClientAddress:
    """Where a load generator of the field (pgbench, sysbench) connects to an instance: its unix socket
    (PostgreSQL: the socket's directory, `port` naming the socket file in it; MariaDB: the socket file,
    `port` None), as the role the workload's sessions use, in the workload's database."""

    socket: Path
    port: int | None
    user: str
    database: str


@dataclass(frozen=True)
class Table:
    """A workload's table, described so that each engine can spread it over the data files its way
    (PostgreSQL: hash partitions over tablespaces; MariaDB: partitions with DATA DIRECTORY)."""

    name: str
    columns: str  # the column definitions in the engine's own DDL, from the workload
    key: str  # the column whose values spread rows over the data files
    key_kind: str  # "uuid": random 128-bit values; "serial": an ever-increasing integer
    index_key: bool = True  # PostgreSQL: a btree on the key (InnoDB clusters on the key by itself)


class Instance(Probed, Protocol):
    """A running throwaway server with one cell's layout: what its probes ask (probes.target.Probed:
    its sessions, the superuser's, its waits, its placements) and what the workloads ask."""

    clients: Clients  # where a load generator of the field runs against it (storlab.lab.clients)

    def session_id(self, conn: Session) -> int: ...

    def client_address(self) -> ClientAddress:
        """Where a load generator of the field connects, as the workload's sessions do (connect())."""

    def client_sessions(self, tag: str) -> list[int]:
        """The sessions a load generator has opened so far (their ids, as session_id gives them): on
        PostgreSQL those whose application_name is `tag` (the client is started with PGAPPNAME set to
        it), on MariaDB every session of the workload's user (none of storlab's own sessions uses it
        while such a client runs)."""

    def create_table(self, conn: Session, table: Table) -> None:
        """Create `table` spread over the cell's data files."""

    def call_load(self, conn: Session, call: str, params: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Run a load procedure and return what it recorded: each transaction's start and commit
        time, epoch seconds by the server's clock."""

    def table_bytes(self, conn: Session, name: str) -> int:
        """What a table holds on disk, its indexes and partitions included."""

    def log_position(self) -> int:
        """Where the server's log ends now (bytes): what it logs later is read with logged_since."""

    def logged_since(self, position: int, max_bytes: int) -> str:
        """At most `max_bytes` of what the server logged after `position`, as it wrote it."""

    def log_statements(self) -> int:
        """From now on the server logs every statement of the workload's sessions, as the replay kind
        reads a captured log (PostgreSQL's stderr log, MariaDB's general log as a table); where its log is now."""

    def statements_logged_since(self, position: int) -> str:
        """The statement log of the workload's sessions written after `position` (log_statements)."""

    def temporary_files(self) -> dict[str, float]:
        """What the server has sent to temporary files so far, counters named as kind.TEMPORARY names
        them (a run's figures are their difference): PostgreSQL's temp_mb and temp_files of the workload's
        database, read once the workload's sessions have ended (a session reports its files as it ends);
        MariaDB's disk temporary tables, temporary files and sort merge passes."""

    def restart(self) -> None:
        """Stop the server cleanly and start it again: its buffers empty, its files as they were."""

    def checkpoint(self) -> None:
        """Write every dirty page of the instance to its files (before a measured run)."""

    def committed(self, conn: Session) -> int:
        """A server-wide counter that moves by one for each committed write transaction (progress)."""

    def cancel(self, sessions: list[int]) -> None:
        """Stop whatever the sessions are running (a failed or interrupted load)."""

    def parallel_workers(self, conn: Session, workers: int) -> None:
        """Let the session's queries use up to `workers` parallel workers (an engine that runs a query
        on one thread ignores it: see Engine.parallel_query)."""

    def planned_workers(self, conn: Session, query: str) -> int:
        """How many parallel workers the engine plans for `query`."""


class Engine(ABC):
    """One database engine, as the experiment file names it (`name`); its package registers it in
    storlab.engines."""

    name: str
    title: str  # as its users write it: PostgreSQL
    settings: Settings  # its settings grammar and the check of a user's settings
    log: ServerLog  # its server log's grammar, for failed runs
    symptoms: tuple[tuple[str, str], ...]  # (setting, pattern): a setting that started yet fails every run
    # Layout keys it honours; a key outside them is an error with the engine's reason, never ignored.
    layout_keys: frozenset[str]
    unhonoured: dict[str, str]  # layout key -> why this engine cannot honour it
    min_log_bytes = 0  # the smallest log it can be given
    parallel_query: bool  # one query can use parallel workers (a scan's dop)
    catalog_bytes: int  # what an empty instance holds before the workload (capacity's floor)
    # The settings that size memory of the server's own (lower case), which a server memory limit must
    # hold beside its processes (memory_bytes reads a value; None: unset, the engine's default).
    memory_settings: tuple[str, ...] = ()
    # The versions storlab runs (engine_version: a factor like any other) and the one a file that names
    # none runs; none: the installed server, whichever it is.
    versions: tuple[str, ...] = ()
    default_version: str | None = None

    @abstractmethod
    def installed(self, version: str | None = None) -> None:
        """Nothing when the server (of `version`, or the default one) is installed; RunFailed naming
        what to install otherwise."""

    def installations(self) -> list[tuple[str, str | None, str]]:
        """For `storlab check`: each server storlab runs, as (name, what is installed or None, how
        to install it)."""
        found = []
        for version in self.versions or (None,):
            name = f"{self.title} {version}" if version else self.title
            try:
                self.installed(version)
            except RunFailed as exc:
                found.append((name, None, str(exc)))
            else:
                found.append((name, "installed", ""))
        return found

    def checkpoint_cycle_s(self, settings: dict[str, Any]) -> float | None:
        """The time between the checkpoints of a cell with these settings, where the engine checkpoints
        on a clock; None where it does not (InnoDB checkpoints as its redo log fills). ValueError
        when the settings name a time the server would not read."""
        return None

    def client_program(self, name: str, server_version: str) -> Path:
        """The client program `name` shipped with the server of `server_version` (as SHOW server_version
        says it), for a load generator that must match its server (pgbench); RunFailed where there is none."""
        raise RunFailed(f"{self.title} ships no {name}")

    @abstractmethod
    def provision(self, spec: InstanceSpec, keep: bool, connections: int) -> AbstractContextManager[Instance]:
        """Create and start an instance with the cell's layout; stopped (and removed unless `keep`) on
        every way out."""

    def memory_bytes(self, name: str, value: Any) -> int:
        """The bytes the memory setting `name` (one of memory_settings) set to `value` takes (None: its default)."""
        return 0

    def check_layout(self, layout: Any) -> None:
        """Refuse (factors.KeyProblem) what the experiment's layout asks and this engine's own rules
        forbid, beyond the keys it honours."""

    def data_folder_problem(self, folder: Path) -> str | None:
        """Why this engine cannot keep a table's data files under `folder` (a placement's directory, as
        its instances will name it), checked when the experiment loads; None when it can."""
        return None

    def temp_folder_problem(self, folder: Path) -> str | None:
        """Why this engine cannot keep its temporary files under `folder` (temp_on's placement, as its
        instances will name it), checked when the experiment loads; None when it can."""
        return self.data_folder_problem(folder)

    @abstractmethod
    def log_bytes(self, log_size: int | None, written: int, settings: dict[str, Any]) -> int:
        """What its log holds on disk after a run that writes `written` bytes of log (capacity)."""

    def probe_costs(self, source: str, tracing: str | None) -> tuple[Cost, ...]:
        """What the probes of a run whose waits came from `source` and whose traces were `tracing`
        (storlab.probes.bpftrace.Tracing's value; None: not recorded) cost its load, as measured."""
        return ()

    def trace_groups(self) -> list[tuple[str, str | None]]:
        """For `storlab check`: each group of what a run traces in this engine's servers (by version),
        named, with why it cannot run here (None when it can)."""
        return []

    def release_shared_memory(self, dirs: list[Path], data_dirs: list[list[int]]) -> list[str]:
        """Shared memory a killed server of this engine left for an instance in `dirs` (before they are
        removed), or for the data directories `data_dirs` ([device, inode, owner]) its manifest names;
        what was removed."""
        return []

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
