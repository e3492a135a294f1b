"""One throwaway instance's life: its workspace (a directory of storlab's own on each placement, written
down in its manifest: storlab.lab.owned), its control group, its clients' folders and its server,
stopped and removed on every way out, at once or while the next run sets up. Its set-up and its end
each have a deadline (`deadlines`: the run's, storlab.running.cell_runs): past the set-up's,
everything of the instance is killed and the set-up fails naming the step that waited; past the
end's, its server is killed with everything in its control group, and what held the end is said."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol

from storlab import interrupts, processes
from storlab.errors import RunFailed
from storlab.lab import caps, cgroups, latency, safe_files, server_failures
from storlab.lab.clients import Clients
from storlab.lab.os_users import OsUser, check_reachable, client_user, server_user
from storlab.lab.owned import (Manifest, make_owned_dir, new_instance_id, pid_start, remove_owned_dir)
from storlab.lab.placements import check_guarded
from storlab.lab.server_process import STOP_S, ServerProcess


class Server(server_failures.Diagnosed, Protocol):
    """What a workspace asks of its engine (storlab.engines.base.Engine): its name for the manifest
    and its title for the user, its log's grammar and its symptoms to tell a failure, and the clean-up
    of its shared memory."""

    name: str
    title: str

    def release_shared_memory(self, dirs: list[Path], data_dirs: list[list[int]]) -> list[str]: ...


@dataclass(frozen=True)
class Deadline:
    """Seconds, and the experiment's key that declares them (None: storlab's own)."""

    seconds: float
    key: str | None = None

    def __str__(self) -> str:
        return f"{self.seconds:g} s" + (f" ({self.key})" if self.key else "")


class SetUp:
    """An instance's set-up (its folders, its server's start, storlab's first statements to it): the
    step it is at (`doing`) and, given the run's limit as its deadline (counted from `started`, a
    time.monotonic()), a timer that kills everything of the instance once the deadline passes, so
    whatever waits on it returns; the set-up then fails naming the step that was waiting (`failure`).
    Ends with `done`, once the instance is set up."""

    def __init__(self, deadline: Deadline | None = None, started: float = 0.0):
        self.deadline = deadline
        self.step = "work on its folders"  # between named steps too: the files it writes, the folders it makes
        self.waited: str | None = None  # the step under way when the deadline passed
        self._workspace: Workspace | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        if deadline is not None:
            self._timer = threading.Timer(max(started + deadline.seconds - time.monotonic(), 0.0), self._expire)
            self._timer.daemon = True
            self._timer.start()

    def watch(self, ws: Workspace) -> None:
        """`ws` is the instance being set up: what the deadline kills."""
        with self._lock:
            self._workspace = ws

    def _expire(self) -> None:
        with self._lock:
            self.waited = self.step
            if self._workspace is not None:
                self._workspace.kill()

    @contextmanager
    def doing(self, step: str) -> Iterator[None]:
        """The set-up is at `step` until the block ends (a step not begun once the deadline passed fails)."""
        self.check()
        before, self.step = self.step, step
        try:
            yield
        finally:
            self.step = before

    def check(self) -> None:
        if self.waited is not None:
            raise self.failure()

    def failure(self) -> RunFailed:
        return RunFailed(f"set-up: {self.waited} waited past the run's limit of {self.deadline}; its instance "
                         "was stopped")

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()

    def done(self) -> None:
        """The instance is set up: no deadline from now on (RunFailed if it passed meanwhile)."""
        self.cancel()
        self.check()


# The deadlines of the next instance made in this thread (`deadlines`): its SetUp and its end's.
_next = threading.local()


@contextmanager
def deadlines(set_up: Deadline, end: Deadline, started: float) -> Iterator[SetUp]:
    """The next instance made in this thread inside the block: set up within `set_up` from `started`
    (SetUp.done() once it is), and at its end, its server stopped within `end`."""
    setting_up = SetUp(set_up, started)
    _next.deadlines = (setting_up, end)
    try:
        yield setting_up
    finally:
        _next.deadlines = None
        setting_up.cancel()


@dataclass
class Workspace:
    """The directories and bookkeeping of one instance being provisioned."""

    manifest: Manifest
    user: OsUser
    roots: dict[str, Path]  # placement name -> the instance's own directory on it
    socket_dir: Path
    clients: Clients  # its load generators: their OS user, control group and folders
    group: cgroups.ControlGroup | None = None  # every process the server starts, whatever it does
    server: ServerProcess | None = None
    set_up: SetUp = field(default_factory=SetUp)

    def doing(self, step: str) -> contextlib.AbstractContextManager[None]:
        """The set-up is at `step` (a statement, the server's start) until the block ends: what its
        deadline names if it passes meanwhile."""
        return self.set_up.doing(step)

    def kill(self) -> None:
        """SIGKILL everything of the instance (its server's processes, its group's, its clients'), so
        whatever waits on it returns; a stopped process dies of SIGKILL without being continued."""
        if self.server is not None:
            processes.kill_tree(self.server.pid)
        if self.group is not None:
            self.group.kill()
        self.clients.end()

    def start(self, argv: list[str]) -> ServerProcess:
        # The log lives beside the socket, off the placements: a full placement cannot swallow the
        # server's last words, and the log's writes are not counted as the placement's IO.
        with interrupts.uninterrupted:  # a server started and not yet named here would outlive the instance's end
            self.server = ServerProcess(argv, self.user, self.socket_dir / "server.log", self.manifest, self.group)
        return self.server

    def restart(self, polite: signal.Signals, accepts, what: str) -> None:
        """Stop the server cleanly (its files consistent, its memory freed) and start it again."""
        argv = self.server.argv
        self.server.stop(polite)
        self.start(argv).wait_answer(accepts, what)  # its instance is set up already

    def log_position(self) -> int:
        """Where the server's log ends now: what it writes later is read from here (logged_since)."""
        return safe_files.size_of(self.server.log_path, self.user.uid) if self.server is not None else 0

    def logged_since(self, position: int, max_bytes: int) -> str:
        """At most `max_bytes` of what the server logged after `position`."""
        return safe_files.read_from(self.server.log_path, self.user.uid, position, max_bytes) if self.server else ""


@interrupts.owning
def workspace(engine: Server, placements: dict[str, Path], keep: bool, stop_signal: signal.Signals,
              settings: dict | None = None, io_caps: dict[str, caps.IoCaps] | None = None,
              memory_bytes: int | None = None) -> Iterator[Workspace]:
    """One owned directory on each placement plus a short socket directory (socket paths are limited
    to 107 bytes); on every way out the server is stopped and, unless `keep`, everything removed.
    A failure is told in the server's own words (`settings`: the user's, to name one it refuses).
    The instance's control group holds the IO caps asked for each placement (`io_caps`, by name, on
    the device under it) and the server's memory (`memory_bytes`), set before the server starts."""
    user = server_user()
    for name, path in placements.items():
        check_reachable(f"placement {name}", path, user)
        check_guarded(f"placement {name}", path)
    iid = new_instance_id(engine.name)
    manifest = Manifest(iid, engine.name, owner_pid=os.getpid(), owner_start=pid_start(os.getpid()))
    set_up, end_within = getattr(_next, "deadlines", None) or (SetUp(), Deadline(STOP_S))
    _next.deadlines = None  # this instance's alone
    ws = group = None
    ended_well = False
    try:
        manifest.save()
        roots = {name: make_owned_dir(path / f"storlab-{iid}", manifest, user, server_writes=False)
                 for name, path in placements.items()}
        limits = caps.resolve(placements, io_caps or {}, memory_bytes)
        place = cgroups.place(iid, limits)
        if place is not None:
            manifest.cgroup = str(place.path)
            manifest.cgroup_more = [str(p) for p in place.more.values()]
            manifest.save()
            group = cgroups.ControlGroup.make(place, limits, latency.guests(placements.values()))
        clients = Clients(manifest, client_user())
        sockets = make_owned_dir(Path("/tmp") / f"storlab-{iid}", manifest, user, reached_by=clients.user)
        ws = Workspace(manifest, user, roots, sockets, clients, group, set_up=set_up)
        set_up.watch(ws)
        try:
            yield ws
        except Exception as exc:
            if set_up.waited is not None:  # its deadline killed it: whatever failed then, that is why
                raise set_up.failure() from exc
            told = server_failures.told(exc, engine, settings or {}, ws.server, ws.user.uid, ws.group, ws.roots)
            if told is None:
                raise
            raise told from exc
        ended_well = True
    finally:
        with interrupts.uninterrupted:  # a second signal (or SIGHUP after Ctrl-C) must not cut the end short
            end = functools.partial(_end, manifest, engine, ws, group, stop_signal, keep, end_within)
            if _ending is not None and ended_well and not keep:
                thread = threading.Thread(target=_end_told, args=(end, iid, _tell), name=f"storlab ending {iid}")
                thread.start()  # not a daemon: exit waits
                _ending.append(thread)
            else:
                delayed = _end_told(end, iid, _tell)
                if delayed is not None and ended_well:  # after a failure, that failure is the run's
                    raise RunFailed(f"the instance's end: {delayed}")


def _end(manifest: Manifest, engine: Server, ws: Workspace | None, group: cgroups.ControlGroup | None,
         stop_signal: signal.Signals, keep: bool, within: Deadline) -> str | None:
    """An instance's end: its clients killed and its server stopped, its group and shared memory gone,
    its directories removed (unless kept), and its manifest forgotten once nothing of it is left. A
    server not stopped `within` its deadline is killed with everything in its group: what delayed the
    end, in words; None when nothing did."""
    delayed = None
    clients_left = ws is not None and not ws.clients.remove()
    if ws is not None and ws.server is not None and not ws.server.stop(stop_signal, within.seconds):
        delayed = (f"{engine.title} (pid {ws.server.pid}) did not stop within {within} of {stop_signal.name}; "
                "everything of the instance was killed")
    # What the server started and left (a program an experiment's SQL ran in a session of its
    # own) ends with the instance; the group goes only once it is empty.
    if group is None and manifest.cgroup:  # its making was cut short: what it made is in the manifest
        made = cgroups.recorded_with(manifest.cgroup, manifest.cgroup_more)
        group_left = made is not None and not made.remove()
    else:
        group_left = group is not None and not group.remove()
    if not group_left:
        manifest.cgroup, manifest.cgroup_more = None, []
    # A clean shutdown removes the server's shared memory itself; after SIGKILL, or a set-up
    # tool's server interrupted, it is storlab's job.
    engine.release_shared_memory([Path(d) for d in manifest.dirs], manifest.data_dirs)
    if keep:
        manifest.kept = True
        manifest.save()
    else:
        # Only what is left: a later `storlab clean` says what it removes, never what is gone already.
        manifest.dirs = [d for d in manifest.dirs if not remove_owned_dir(Path(d), manifest.instance_id)]
        if not manifest.dirs and not group_left and not clients_left:
            manifest.forget()
        else:
            manifest.save()
    return delayed


def _end_told(end: Callable[[], str | None], iid: str, tell: Callable[[str], None] | None) -> str | None:
    """`end()`, what delayed it told to `tell` where someone listens (the run it ended keeps its result, or
    its own failure), else returned."""
    delayed = end()
    if delayed is not None and tell is not None:
        tell(f"the end of instance {iid}: {delayed}")
        return None
    return delayed


# While ending_in_background() is open: the instances ending now, stopped and removed by threads of
# their own, and where an end held past its deadline is told.
_ending: list[threading.Thread] | None = None
_tell: Callable[[str], None] | None = None


@interrupts.owning
def ending_in_background(tell: Callable[[str], None] | None = None) -> Iterator[None]:
    """A run's instances, once their run is recorded, are stopped and removed while the next run sets
    up, not before it: about a tenth of a second a run, where loads take seconds. wait_ended() (called
    by quiesce before any measured run, and before a device is remade) makes sure nothing of them runs,
    writes or unlinks a file during a measured load; the block's end waits for them all, on every path.
    `tell` gets, in one line, each instance's end (here, or in the foreground after a failed run or with
    --keep) that its server held past its deadline; from the ending thread."""
    global _ending, _tell
    if _ending is not None:  # inside one already: that one ends them
        yield
        return
    _ending, _tell = [], tell
    try:
        yield
    finally:
        with interrupts.uninterrupted:
            wait_ended()
        _ending = _tell = None


def wait_ended() -> None:
    """Every instance ended in the background so far is stopped and removed. Uninterrupted: Python 3.11
    takes a thread whose join a Ctrl-C cut short for ended (Thread._wait_for_tstate_lock lets go of the
    lock the thread still holds, bpo-45274), so neither a later wait nor the interpreter's exit would wait
    for it, and storlab exited with that instance's end half done: its folders left."""
    with interrupts.uninterrupted:
        while _ending:
            _ending.pop(0).join()
