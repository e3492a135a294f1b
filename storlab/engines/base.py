"""What the rest of storlab may ask of an engine's running instance. Engine things only: connect,
identify sessions, spread a table over the cell's data files, hand back what a load procedure
recorded, cancel sessions, capture waits. Workloads bring their own SQL; engines never import them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from storlab.waits import WaitProbe


@dataclass(frozen=True)
class Table:
    """A workload's table, described so that each engine can spread it over the data files its way
    (PostgreSQL: hash partitions over tablespaces; MariaDB: partitions with DATA DIRECTORY)."""

    name: str
    columns: str  # the column definitions in the engine's own DDL, from the workload
    key: str  # the column whose values spread rows over the data files
    key_kind: str  # "uuid": random 128-bit values; "serial": an ever-increasing integer
    index_key: bool = True  # PostgreSQL: a btree on the key (InnoDB clusters on the key by itself)


class Instance(Protocol):
    """A running throwaway server with one cell's layout."""

    engine: str
    version: str
    roots: dict[str, Path]  # placement name -> the instance's own directory on it

    def connect(self) -> Any:
        """A workload session in autocommit."""

    def session_id(self, conn: Any) -> int: ...

    def session_os_pids(self, sessions: list[int]) -> list[int]:
        """The OS process or thread serving each session (for /proc schedstat)."""

    def create_table(self, conn: Any, table: Table) -> None:
        """Create `table` spread over the cell's data files."""

    def call_load(self, conn: Any, call: str, params: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Run a load procedure and return what it recorded: each transaction's start and commit
        time, epoch seconds by the server's clock."""

    def table_bytes(self, conn: Any, name: str) -> int:
        """What a table holds on disk, its indexes and partitions included."""

    def restart(self) -> None:
        """Stop the server cleanly and start it again: its buffers empty, its files as they were."""

    def cpu_s(self) -> float:
        """The server's CPU seconds so far, its finished worker processes included (to be differenced)."""

    def checkpoint(self) -> None:
        """Write every dirty page of the instance to its files (before a measured run)."""

    def committed(self, conn: Any) -> int:
        """A server-wide counter that moves by one for each committed write transaction (progress)."""

    def cancel(self, sessions: list[int]) -> None:
        """Stop whatever the sessions are running (a failed or interrupted load)."""

    def wait_probe(self) -> WaitProbe: ...

    def waiting_tasks_probe(self) -> Any:
        """A reader of the workload's waiting sessions and what each waits on (waiting_tasks.WaitingSessions)."""
