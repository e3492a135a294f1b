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
started, and its folder removed on every way out: a failed run, Ctrl-C, a stalled server."""

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

from storlab import processes
from storlab.engines.base import Instance
from storlab.errors import RunFailed
from storlab.lab.clients import ClientFolder, Clients
from storlab.workloads.kind import Measurement, Progress

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


@dataclass
class Ended:
    """What a client left: its exit code, every line it printed with the time it arrived (epoch s),
    its CPU seconds (user and system, every thread), and its wall time from start to exit."""

    code: int
    lines: list[tuple[float, str]]
    cpu_s: float
    wall_s: float
    errors: re.Pattern | None = None  # the lines that say what went wrong, in the client's own words

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
    lines: list[tuple[float, str]] = field(default_factory=list)
    child: subprocess.Popen | None = None
    started: float = 0.0
    ended: Ended | None = None
    _reader: threading.Thread | None = None

    def start(self) -> None:
        self.started = time.time()
        self.child = self.clients.start(self.argv, self.env, self.folder, self.open_files, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
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

    def wait(self, run_s: float | None, on_progress: Progress | None = None, grace_s: float | None = GRACE_S) -> Ended:
        """Its end; `run_s`: how long it was told to run (None: until its transactions are done), past
        which (and `grace_s`; None: never) it is stopped and the run fails."""
        total = max(1, round(run_s)) if run_s else 1
        while True:
            ended = self._reap()
            if ended is not None:
                return ended
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
    `settle_s`: how long a session of the client's own, opened before its load's, may stay (Client.sessions)."""

    def __init__(self, instance: Instance, argv: Callable[[ClientFolder], list[str]], env: dict[str, str], tag: str,
                 sessions: int, run_s: float | None, measure: Callable[[Ended, ClientFolder, float], Measurement],
                 prepare_folder: Callable[[ClientFolder], None] | None = None,
                 failure: Callable[[str], Exception] = RunFailed, errors: re.Pattern | None = None,
                 grace_s: float | None = GRACE_S, open_files: int | None = None, settle_s: float = 0.0):
        self.instance = instance
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
        self.server_cpu_before = 0.0
        self._kept = ExitStack()

    def open(self) -> list[int]:
        self.start()
        folder = self.folder.path
        return self.client.sessions(self.instance, self.tag, self.expected,
                                    lambda said: self.failure(said.replace(f"{folder}/", "")), self.settle_s)

    def start(self) -> None:
        """The client started in its private folder (what it reads written there first)."""
        self.folder = self._kept.enter_context(self.instance.clients.folder())
        if self.prepare_folder is not None:
            self.prepare_folder(self.folder)
        self.client = Client(self.argv(self.folder), self.env, self.instance.clients, self.folder, self.errors,
                             self.open_files)
        self.server_cpu_before = self.instance.cpu_s()
        self.client.start()

    def run(self, on_progress: Progress | None = None) -> Measurement:
        ended = self.client.wait(self.run_s, on_progress, self.grace_s)
        self._let_go()
        server_cpu_s = self.instance.cpu_s() - self.server_cpu_before
        return self.measure(ended, self.folder, server_cpu_s)

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
            self._kept.close()


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
