"""A run's deadlines. A server that stops answering (its processes stopped, a hung device) must fail
its run, not hang it: every call storlab makes to the server (the sessions' load, the progress
readings, the probes' queries) blocks as long as the server does. So while an instance is in use a
watchdog asks it a one-row query every second over a connection of its own, and when no answer has
come for `stall_after_s` (a `[workload]` key; 60 s by default, far beyond the answer of a live server
however loaded, since the query touches no table) it kills the instance's processes with SIGKILL,
which even a stopped process obeys. Every blocked call then returns with an error, the instance is
torn down as after any failure, and the run fails with "the server stopped answering for N s".

A server that answers may still never finish: a statement that sleeps (`SELECT pg_sleep(3600)` in a
custom workload) holds its run, and a fleet worker, for ever while `SELECT 1` still answers. So each
run also has a wall-clock limit, `run_limit_s` (a `[workload]` key), from the start of its instance's
set-up (or, on an instance a kind keeps for its next repetition, from the run's start) to the end of
its load. The set-up before the workload's prepare has it as its deadline (instances.SetUp, which
names the step that waited); from the prepare on, past it the same watchdog kills the instance the
same way, and the run fails with "the run passed its limit of N s". A run during which the watchdog
fired is never recorded."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from storlab import processes
from storlab.errors import RunFailed
from storlab.lab import cgroups, owned
from storlab.workloads.kind import WorkloadParams
from storlab.engines.base import Instance
from storlab.session import Session

DEFAULT_STALL_S = 60.0
PING_PERIOD_S = 1.0
PING = "SELECT 1"


class Stalled(RunFailed):
    """The server stopped answering; its instance was killed."""


class OverLimit(RunFailed):
    """The run went on past its wall-clock limit; its instance was killed."""


def stall_after(workload: WorkloadParams) -> float:
    """The cell's declared deadline, or the default."""
    return workload.stall_after_s or DEFAULT_STALL_S


def kill_instance(roots: dict[str, Any]) -> None:
    """SIGKILL every process of the instance whose directories are `roots`: its server, found through
    its manifest, the server's children (a PostgreSQL backend leads a session of its own) and whatever
    else is in its control group. A stopped process dies of SIGKILL without being continued."""
    dirs = {str(path) for path in roots.values()}
    for manifest in owned.Manifest.all():
        if not dirs & set(manifest.dirs):
            continue
        pid = manifest.server_pid
        if pid and owned.running(pid, manifest.server_start):
            processes.kill_tree(pid)
        group = cgroups.recorded(manifest.cgroup) if manifest.cgroup else None
        if group is not None:
            group.kill()


class Watchdog:
    """Pings `instance` while the `with` block runs; after `after_s` without an answer, or once the run
    under way has lasted `limit_s` (timed from `started`, by default the block's start, then from each
    `run_starts` to its `run_ends`), it calls `on_stop` (a fleet worker stops renewing its lease), then
    kills the instance. `fired` is then the run's failure."""

    def __init__(self, instance: Instance, after_s: float, on_stop: Callable[[], None] | None = None,
                 kill: Callable[[], None] | None = None, limit_s: float | None = None,
                 started: float | None = None):
        self.instance = instance
        self.after_s = after_s
        self.limit_s = limit_s
        self.started = started
        self.on_stop = on_stop
        self.kill = kill or (lambda: kill_instance(instance.roots))
        self.fired: RunFailed | None = None
        self._done = threading.Event()
        self._answered = time.monotonic()
        self._run_started: float | None = None
        self._paused = False
        self._conn: Session | None = None
        self._pinger = threading.Thread(target=self._ping, name="storlab-ping", daemon=True)
        self._judge = threading.Thread(target=self._watch, name="storlab-watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        self._answered = time.monotonic()
        self._run_started = self._answered if self.started is None else self.started
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

    def run_starts(self) -> None:
        """The next run on this instance starts: its own limit from now."""
        self._run_started = time.monotonic()

    def run_ends(self) -> None:
        """The run's load is over: no limit while it is recorded and the next one is found."""
        self._run_started = None

    def check(self) -> None:
        """Raise the run's failure when the watchdog fired (a result that came back meanwhile is not kept)."""
        if self.fired is not None:
            raise self.fired

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
            now, started = time.monotonic(), self._run_started
            if not self._paused and now - self._answered > self.after_s:
                self._fire(Stalled(f"the server stopped answering for {self.after_s:g} s; its instance was stopped"))
                return
            if self.limit_s is not None and started is not None and now - started > self.limit_s:
                self._fire(OverLimit(f"the run passed its limit of {self.limit_s:g} s (workload.run_limit_s); "
                                     "its instance was stopped"))
                return

    def _fire(self, failure: RunFailed) -> None:
        self.fired = failure  # before the kill: the calls it makes fail are read as this failure
        if self.on_stop is not None:
            self.on_stop()
        self.kill()
