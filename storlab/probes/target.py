"""What a probe asks of the running instance it records (engines.base.Instance is this and what the
workloads ask): probes sit below the engines, so they name the instance by this protocol alone."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from storlab.lab.cgroups import ControlGroup
from storlab.lab.layout import InstanceSpec
from storlab.probes.bpftrace import Tracing
from storlab.probes.waits import RunWaitProbe
from storlab.session import Session


class WaitingSessions(Protocol):
    """An engine's reader of its waiting sessions (`instance.waiting_tasks_probe()`)."""

    def open(self, sessions: list[int]) -> None: ...

    def read(self) -> list[tuple[str, str]]:
        """(wait, what it waits on) for each session waiting now; "" where the engine names nothing."""

    def close(self) -> None: ...


class Probed(Protocol):
    """A running throwaway server with one cell's layout, as its probes see it."""

    engine: str
    version: str
    spec: InstanceSpec  # the cell's layout: its placements, data files, log, settings
    roots: dict[str, Path]  # placement name -> the instance's own directory on it
    group: ControlGroup | None  # the control group its processes run in, with its IO caps and memory limit

    def connect(self) -> Session:
        """A workload session in autocommit (the workload's unprivileged role)."""

    def admin(self) -> Session:
        """storlab's own session (the superuser): its probes, checkpoints and cancels, never counted as the workload's."""

    def session_os_pids(self, sessions: list[int]) -> list[int]:
        """The OS process or thread serving each session (for /proc schedstat)."""

    def cpu_s(self) -> float:
        """The server's CPU seconds so far, its finished worker processes included (to be differenced)."""

    def wait_probe(self, tracing: Tracing = Tracing.ON) -> RunWaitProbe:
        """The workload's waits, with what `tracing` asks bpftrace to trace (Tracing.OFF: storlab run --no-trace)."""

    def checkpoint_reading(self, conn: Session) -> tuple[float, bool]:
        """The engine's cumulative checkpoint counter on storlab's session `conn`, and whether a
        checkpoint is being written now (PostgreSQL: the checkpoints done, and its checkpointer out of its
        idle wait; MariaDB: InnoDB's last checkpoint LSN, which moves when one is made, and False)."""

    def checkpoint_cycle(self, conn: Session) -> tuple[str, str, float | None, float | None]:
        """What paces its checkpoints: the setting, its value as the server shows it, the cycle in
        seconds where the setting is a time (PostgreSQL's checkpoint_timeout), in bytes of log where it
        is a size (InnoDB's redo log, innodb_log_file_size)."""

    def log_written(self, conn: Session) -> float:
        """Bytes of WAL or redo the server has written so far (its current LSN), to be differenced."""

    def waiting_tasks_probe(self) -> WaitingSessions:
        """A reader of the workload's waiting sessions and what each waits on."""
