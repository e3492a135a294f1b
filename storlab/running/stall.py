"""A run's deadline. A server that stops answering (its processes stopped, a hung device) must fail
its run, not hang it: every call storlab makes to the server (the sessions' load, the progress
readings, the probes' queries) blocks as long as the server does. So while an instance is in use a
watchdog asks it a one-row query every second over a connection of its own, and when no answer has
come for `stall_after_s` (a `[workload]` key; 60 s by default, far beyond the answer of a live server
however loaded, since the query touches no table) it kills the instance's processes with SIGKILL,
which even a stopped process obeys. Every blocked call then returns with an error, the instance is
torn down as after any failure, and the run fails with "the server stopped answering for N s". A run
during which the watchdog fired is never recorded."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from storlab import processes
from storlab.errors import RunFailed
from storlab.lab import cgroups, instances
from storlab.workloads.kind import WorkloadParams
from storlab.engines.base import Instance

DEFAULT_STALL_S = 60.0
PING_PERIOD_S = 1.0
PING = "SELECT 1"


class Stalled(RunFailed):
    """The server stopped answering; its instance was killed."""


def stall_after(workload: WorkloadParams) -> float:
    """The cell's declared deadline, or the default."""
    return workload.stall_after_s or DEFAULT_STALL_S


def kill_instance(roots: dict[str, Any]) -> None:
    """SIGKILL every process of the instance whose directories are `roots`: its server, found through
    its manifest, the server's children (a PostgreSQL backend leads a session of its own) and whatever
    else is in its control group. A stopped process dies of SIGKILL without being continued."""
    dirs = {str(path) for path in roots.values()}
    for manifest in instances.Manifest.all():
        if not dirs & set(manifest.dirs):
            continue
        pid = manifest.server_pid
        if pid and instances.running(pid, manifest.server_start):
            processes.kill_tree(pid)
        group = cgroups.recorded(manifest.cgroup) if manifest.cgroup else None
        if group is not None:
            group.kill()


class Watchdog:
    """Pings `instance` while the `with` block runs; after `after_s` without an answer it calls
    `on_stall` (a fleet worker stops renewing its lease) and kills the instance."""

    def __init__(self, instance: Instance, after_s: float, on_stall: Callable[[], None] | None = None,
                 kill: Callable[[], None] | None = None):
        self.instance = instance
        self.after_s = after_s
        self.on_stall = on_stall
        self.kill = kill or (lambda: kill_instance(instance.roots))
        self.stalled = threading.Event()
        self._done = threading.Event()
        self._answered = time.monotonic()
        self._paused = False
        self._conn: Any = None
        self._pinger = threading.Thread(target=self._ping, name="storlab-ping", daemon=True)
        self._judge = threading.Thread(target=self._watch, name="storlab-watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        self._answered = time.monotonic()
        self._pinger.start()
        self._judge.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._judge.join()
        # A ping blocked on a stopped server returns once the server is killed or torn down; its
        # thread is a daemon and never waited for here.
        self._pinger.join(PING_PERIOD_S)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No deadline while the server restarts (a cold run): its shutdown writes every dirty page,
        which may take longer than a stall's deadline, and the engine's own start and stop waits are
        bounded."""
        self._paused = True
        try:
            yield
        finally:
            self._answered = time.monotonic()
            self._paused = False

    def check(self) -> None:
        """Raise Stalled when the watchdog fired (a result that came back meanwhile is not kept)."""
        if self.stalled.is_set():
            raise self.failure()

    def failure(self) -> Stalled:
        return Stalled(f"the server stopped answering for {self.after_s:g} s; its instance was stopped")

    def _ping(self) -> None:
        while not self._done.is_set():
            try:
                if self._conn is None:
                    # storlab's own session, which the wait probes leave out.
                    self._conn = self.instance.admin()
                self._conn.execute(PING).fetchone()
                self._answered = time.monotonic()
            except Exception:  # refused or cut off: no answer; a restart of the server is brief
                self._close()
            self._done.wait(PING_PERIOD_S)
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # the server is gone: nothing to close politely
                pass

    def _watch(self) -> None:
        while not self._done.wait(0.2):
            if not self._paused and time.monotonic() - self._answered > self.after_s:
                self.stalled.set()
                if self.on_stall is not None:
                    self.on_stall()
                self.kill()
                return
