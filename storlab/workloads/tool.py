"""The load of a load generator of the field (pgbench, sysbench, pgreplay): a C client storlab starts on
the machine it tests, connected to the instance's socket as the workload's sessions are.

Such a client connects its sessions and starts its load at once, with no pause between the two: storlab
finds the sessions it opened in the server (Instance.client_sessions) and hands them to the probes, so
the waits are counted from then, a fraction of a second after the client's first transaction; the
figures are the client's own and leave out `warmup_s` from its start. Its output is read line by line
as it comes, each line with the time it arrived. Its CPU time comes back with its exit status (wait4),
to stand beside the server's. It runs where the instance's clients run (storlab.lab.clients: as the
OS user storlab-client, never root, in the clients' control group, in a private folder), through
storlab.processes (its own process group, killed with storlab), and is stopped, with whatever it
started, and its folder removed on every way out: a failed run, Ctrl-C, a stalled server. A run until
steady (SteadyWatch) reads the client's per-second throughput from its output while it runs, and ends
it once steady: by cancelling its sessions' statements (pgbench), or as the kind says (sysbench's
threads end at their next transaction once storlab writes a file in the client's folder)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import numpy as np

from storlab import processes
from storlab import steady_state
from storlab.engines.base import Instance
from storlab.errors import RunFailed
from storlab.lab.clients import ClientFolder, Clients
from storlab.workloads.kind import Measurement, Progress
from storlab.workloads.rates import RateParams, Until

POLL_S = 0.02  # while its sessions connect: a client connects a session in milliseconds
# A client may open a session of its own before its load's (pgbench: the server's version and its
# tables, under the same application name) and close it as its load's open: sessions found are looked
# at again this much later, and those gone by then were not the load's.
WAIT_S = 0.2  # while it runs
CONNECT_TIMEOUT_S = 60.0
# Past its declared run time (connections made, the last transactions finished, the report written):
# a client that has not ended by then is stuck, and is stopped.
GRACE_S = 120.0
LET_GO_S = 5.0
# A client stopped once steady has its sessions' statements cancelled until it ends: a cancel between
# two statements misses, and under a slow rate a session may wait seconds for its next transaction.
STOP_S = 30.0


@dataclass
class SteadyWatch:
    """`until = "steady"` (rates.Until) for a client that prints its throughput each second: `per_second`
    reads one of its lines (seconds into its run at the second's end, transactions that second; None for
    any other line). Its measured part starts after the declared warm-up, or, when `finds` (`warmup_s =
    "found"`), after the warm-up MSER-5 finds in what it has printed so far (as the figures will cut it
    once it ends). From `least` measured seconds on (and one more, which the answer leaves out as the
    run's last), each new second the measured part is held to steady_state.snia_holds: the rule the answer
    judges the run by afterwards, before its change test. `stopped` then says why the load ended, for
    the run's conditions, and `stopped_at` when (epoch s): the figures keep what ended before it."""

    until: Until
    warmup_s: float
    per_second: Callable[[str], tuple[float, float] | None]
    finds: bool = False
    points: list[tuple[float, float]] = field(default_factory=list)  # (second's start, throughput), in order
    read: int = 0  # the client's lines read so far
    stopped: dict | None = None
    stopped_at: float | None = None

    def measured_throughput(self) -> np.ndarray:
        """The throughput of the seconds its figures would keep if it ended now."""
        t, x = np.array([p[0] for p in self.points]), np.array([p[1] for p in self.points])
        begins = steady_state.warmup_to_cut(t, x) if self.finds else self.warmup_s
        return x[t >= begins]

    def steady(self, lines: list[tuple[float, str]]) -> bool:
        """The rule holds at the latest second the client has printed (read from `lines`, all it printed)."""
        fresh, self.read = lines[self.read:], len(lines)
        at = None
        for _, line in fresh:
            found = self.per_second(line)
            if found is not None:
                at = found[0]
                self.points.append((found[0] - 1, found[1]))
        if at is None:
            return False
        measured = self.measured_throughput()
        # One second more than least: the answer leaves out a run's last second, cut short where it ended.
        if len(measured) <= self.until.least or not steady_state.snia_holds(measured):
            return False
        self.stopped_at = time.time()
        self.stopped = {**self._said, "by": "steady", "at_s": at}
        return True

    def reached_max(self) -> None:
        if self.stopped is None:
            self.stopped = {**self._said, "by": "max", "at_s": self.warmup_s + self.until.max}

    @property
    def _said(self) -> dict:
        return {"least_s": self.until.least, "max_s": self.until.max}


def watch_of(params: RateParams, per_second: Callable[[str], tuple[float, float] | None]) -> SteadyWatch | None:
    """The watch of a run until steady, reading the client's lines with `per_second`; None for a run by duration."""
    return None if params.until is None else SteadyWatch(params.until, params.declared_warmup, per_second,
                                                         params.finds_warmup)


@dataclass
class Ended:
    """What a client left: its exit code, every line it printed with the time it arrived (epoch s),
    its CPU seconds (user and system, every thread), and its wall time from start to exit."""

    code: int
    lines: list[tuple[float, str]]
    cpu_s: float
    wall_s: float
    errors: re.Pattern | None = None  # the lines that say what went wrong, in the client's own words
    stopped_at: float | None = None  # when storlab stopped it once steady (epoch s); None: it ended by itself
    stopped: dict | None = None  # under until steady, why its load ended (SteadyWatch.stopped)

    @property
    def text(self) -> list[str]:
        return [line for _, line in self.lines]

    def last_words(self, count: int = 3) -> str:
        """What it said went wrong (its first error lines), else its last lines: a failed run's one line."""
        said = [line.strip() for line in self.text if line.strip()]
        wrong = [line for line in said if self.errors is not None and self.errors.search(line)]
        return " / ".join(wrong[:count] or said[-count:]) or f"exit code {self.code}, no output"


@dataclass
class Client:
    """One run of a client: `argv` started by `clients` in `folder` with `env`."""

    argv: list[str]
    env: dict[str, str]
    clients: Clients
    folder: ClientFolder
    errors: re.Pattern | None = None
    open_files: int | None = None  # the most descriptors it may open (None: storlab's own limit)
    popen: dict = field(default_factory=dict)  # more of subprocess.Popen's arguments (executable, pass_fds)
    lines: list[tuple[float, str]] = field(default_factory=list)
    child: subprocess.Popen | None = None
    started: float = 0.0
    ended: Ended | None = None
    _reader: threading.Thread | None = None

    def start(self) -> None:
        self.started = time.time()
        self.child = self.clients.start(self.argv, self.env, self.folder, self.open_files, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", **self.popen)
        self._reader = threading.Thread(target=self._read, name="storlab-client-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.child.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def _reap(self) -> Ended | None:
        """Its end, once it has exited: wait4 gives its CPU time with its status."""
        if self.ended is None:
            pid, status, usage = os.wait4(self.child.pid, os.WNOHANG)
            if pid == 0:
                return None
            self.child.returncode = os.waitstatus_to_exitcode(status)
            self._reader.join(10)
            self.ended = Ended(self.child.returncode, list(self.lines), usage.ru_utime + usage.ru_stime,
                               time.time() - self.started, self.errors)
        return self.ended

    def sessions(self, instance: Instance, tag: str, expected: int,
                 failure: Callable[[str], Exception] = RunFailed, settle_s: float = 0.0) -> list[int]:
        """Its `expected` sessions, once it has opened them all; if it ends first, those still open
        when it ended well (a short run is done before its sessions are seen: it is measured all the
        same), else `failure` of what it said went wrong (RunFailed if it takes too long). `settle_s`:
        for a client that opens a session of its own before its load's, under the same name, the
        sessions found are looked at again that much later, and those gone by then were not the load's."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            found = instance.client_sessions(tag)
            if len(found) >= expected and settle_s:
                time.sleep(settle_s)
                still = set(instance.client_sessions(tag))
                found = [pid for pid in found if pid in still]
            if len(found) >= expected:
                return found
            ended = self._reap()
            if ended is not None and ended.code == 0:
                return found
            if ended is not None:
                raise failure(ended.last_words())
            if time.monotonic() > deadline:
                raise RunFailed(f"{Path(self.argv[0]).name} opened {len(found)} of its {expected} sessions in "
                                f"{CONNECT_TIMEOUT_S:g} s")
            time.sleep(POLL_S)

    def wait(self, run_s: float | None, on_progress: Progress | None = None, grace_s: float | None = GRACE_S,
             watch: SteadyWatch | None = None, stop: Callable[[], None] | None = None) -> Ended:
        """Its end; `run_s`: how long it was told to run (None: until its transactions are done), past
        which (and `grace_s`; None: never) it is stopped and the run fails. With `watch`, once steady
        `stop` is called until it ends (STOP_S at most, then the run fails)."""
        total = max(1, round(run_s)) if run_s else 1
        while True:
            ended = self._reap()
            if ended is not None:
                if watch is not None:
                    watch.reached_max()
                    ended.stopped_at, ended.stopped = watch.stopped_at, watch.stopped
                return ended
            if watch is not None and (watch.stopped_at is not None or watch.steady(self.lines)):
                if time.time() - watch.stopped_at > STOP_S:
                    self.stop()
                    raise RunFailed(f"{Path(self.argv[0]).name} did not end within {STOP_S:g} s of being stopped "
                                    "once steady (its sessions' statements cancelled)")
                stop()
                time.sleep(POLL_S)
                continue
            elapsed = time.time() - self.started
            if run_s is not None and grace_s is not None and elapsed > run_s + grace_s:
                self.stop()
                raise RunFailed(f"{Path(self.argv[0]).name} was still running {elapsed:.0f} s after it started, "
                                f"told to run {run_s:g} s; stopped")
            if on_progress:
                on_progress(min(int(elapsed), total) if run_s else 0, total)
            time.sleep(WAIT_S)

    def stop(self) -> None:
        """Stopped if it still runs (its process group, as every child of storlab's), and whatever it
        started in the clients' group with it."""
        if self.child is not None and self.ended is None and self.child.returncode is None:
            processes.stop(self.child)
        self.clients.end()
        if self._reader is not None:
            self._reader.join(10)


class ToolLoad:
    """A Load (kind.Load) run by a client: `open` starts it in a private folder and returns its
    sessions; `run` waits for its end and hands its output to `measure`; `close` stops it and removes
    the folder. `prepare_folder` writes what the client reads (scripts) into the folder first;
    `failure` makes the exception of what a client that ended early said (its words, the folder's
    path taken out: RunFailed, or UserError for a mistake in the user's script); `errors` finds the
    lines of its output that say what went wrong; `grace_s`: how long past `run_s` it may run before
    it is taken for stuck (None: as long as it takes); `open_files`: the most descriptors it may open;
    `settle_s`: how long a session of the client's own, opened before its load's, may stay (Client.sessions);
    `watch`: a run until steady, ended once steady by `stop_by` (what makes the client end, written in its
    folder), else by cancelling its sessions' statements."""

    def __init__(self, instance: Instance, argv: Callable[[ClientFolder], list[str]], env: dict[str, str], tag: str,
                 sessions: int, run_s: float | None, measure: Callable[[Ended, ClientFolder, float], Measurement],
                 prepare_folder: Callable[[ClientFolder], None] | None = None,
                 failure: Callable[[str], Exception] = RunFailed, errors: re.Pattern | None = None,
                 grace_s: float | None = GRACE_S, open_files: int | None = None, settle_s: float = 0.0,
                 watch: SteadyWatch | None = None, stop_by: Callable[[ClientFolder], None] | None = None):
        self.instance = instance
        self.watch = watch
        self.stop_by = stop_by
        self.settle_s = settle_s
        self.open_files = open_files
        self.argv = argv
        self.env = env
        self.tag = tag
        self.expected = sessions
        self.run_s = run_s
        self.measure = measure
        self.prepare_folder = prepare_folder
        self.failure = failure
        self.errors = errors
        self.grace_s = grace_s
        self.folder: ClientFolder | None = None
        self.client: Client | None = None
        self.popen: dict = {}  # more of subprocess.Popen's arguments for the client (Client.popen)
        self.server_cpu_before = 0.0
        self._resources = ExitStack()

    def open(self) -> list[int]:
        self.start()
        folder = self.folder.path
        return self.client.sessions(self.instance, self.tag, self.expected,
                                    lambda said: self.failure(said.replace(f"{folder}/", "")), self.settle_s)

    def opened_within(self, window_s: float, program: str) -> list[int]:
        """The load's sessions once all it expects are open, its client has ended, or `window_s` is over
        (a replay's opening: a session in it may end before it is seen); its client failing raises."""
        deadline = time.monotonic() + window_s
        while True:
            found = self.instance.client_sessions(self.tag)
            ended = self.client._reap()
            if ended is not None and ended.code != 0:
                raise RunFailed(f"{program} failed: {ended.last_words()}")
            if len(found) >= self.expected or ended is not None or time.monotonic() > deadline:
                return found
            time.sleep(POLL_S)

    def start(self) -> None:
        """The client started in its private folder (what it reads written there first)."""
        self.folder = self._resources.enter_context(self.instance.clients.folder())
        if self.prepare_folder is not None:
            self.prepare_folder(self.folder)
        self.client = Client(self.argv(self.folder), self.env, self.instance.clients, self.folder, self.errors,
                             self.open_files, self.popen)
        self.server_cpu_before = self.instance.cpu_s()
        self.client.start()

    def run(self, on_progress: Progress | None = None) -> Measurement:
        stop = self._stop_sessions if self.stop_by is None else lambda: self.stop_by(self.folder)
        ended = self.client.wait(self.run_s, on_progress, self.grace_s, self.watch, stop)
        self._let_go()
        server_cpu_s = self.instance.cpu_s() - self.server_cpu_before
        return self.measure(ended, self.folder, server_cpu_s)

    def _stop_sessions(self) -> None:
        """The client's sessions' statements cancelled: a client whose sessions fail ends (pgbench
        aborts them, writes its logs whole and prints its report)."""
        sessions = self.instance.client_sessions(self.tag)
        if sessions:
            self.instance.cancel(sessions)

    def _let_go(self) -> None:
        """Until the server has ended the client's sessions (a PostgreSQL backend's CPU counts in its
        server's once it has exited), at most LET_GO_S."""
        deadline = time.monotonic() + LET_GO_S
        while self.instance.client_sessions(self.tag) and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def close(self) -> None:
        try:
            if self.client is not None:
                self.client.stop()
        finally:
            self.folder = None
            self._resources.close()


def run_to_end(instance: Instance, argv: Callable[[ClientFolder], list[str]], env: dict[str, str], timeout_s: float,
               errors: re.Pattern | None = None, prepare_folder: Callable[[ClientFolder], None] | None = None) -> Ended:
    """A client's command that ends by itself (building a data set), to its end, in a folder of its
    own; stopped on every way out, RunFailed if it takes longer than `timeout_s`."""
    with instance.clients.folder() as folder:
        if prepare_folder is not None:
            prepare_folder(folder)
        command = argv(folder)
        client = Client(command, env, instance.clients, folder, errors)
        client.start()
        try:
            deadline = time.monotonic() + timeout_s
            while (ended := client._reap()) is None:
                if time.monotonic() > deadline:
                    raise RunFailed(f"{Path(command[0]).name} {' '.join(command[1:3])} did not end within "
                                    f"{timeout_s:g} s; stopped")
                time.sleep(WAIT_S)
            return ended
        finally:
            client.stop()
