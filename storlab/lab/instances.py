"""What every engine's throwaway instance shares: its workspace (a directory of storlab's own on each
placement, written down in its manifest: storlab.lab.owned), its control group, the tools run as the
servers' OS user, and the server process, stopped and removed on every way out."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

from storlab import interrupts, processes
from storlab.errors import RunFailed, UserError
from storlab.sizes import format_size
from storlab.lab import caps, cgroups, diagnosis, safe_files, setting_failures
from storlab.lab.clients import Clients
from storlab.lab.os_users import OsUser, check_reachable, client_user, server_user
from storlab.lab.owned import (Manifest, make_owned_dir, new_instance_id, pid_start, remove_owned_dir)

KILLED_CHILD = re.compile(r"(\w[\w ]* \(PID \d+\)) was terminated by signal 9")
NAMED_WITHIN_S = 2.0  # a postmaster logs a lost child within milliseconds of its death
# A fresh server answers within seconds of its start, however loaded the machine; one that has not by
# then (stopped, or stuck on a hung device) never will.
START_S = 120
# Every connection to an instance: a live server accepts a session within milliseconds.
CONNECT_TIMEOUT_S = 10


# Why a placement must be a folder only root can change: storlab, as root, makes its instance's folder
# there and works in it by name (copies, hands files to the servers' user); whoever can rename that
# folder and put a link in its place would have root hand them whatever the link names.
GUARDED = ("root would work in it by names that user can swap for links; use a folder only root can change "
           "(sudo mkdir), or run storlab as that user")


def check_guarded(label: str, path: Path) -> None:
    """Refuse (UserError) a placement another user could change, as root; again when each instance
    starts, since a folder can change hands between the checks before the runs and a run."""
    problem = safe_files.changeable_by_others(path, GUARDED)
    if problem is not None:
        raise UserError(f"{label}: {problem}")


def server_env(user: OsUser) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "MYSQL", "MARIADB"))}
    if not user.is_self:
        env.update(HOME="/tmp", USER=user.name, LOGNAME=user.name)
    return env


def run_tool(user: OsUser, argv: list[str], what: str | None = None, cwd: Path | None = None,
             timeout: float = 300, input: str | None = None) -> tuple[int, str]:
    """Run a tool as the server user (`input` on its standard input): its exit code and its output
    (stdout and stderr together). One that has not finished after `timeout` is killed, and what it
    said until then goes with the failure."""
    what = what or Path(argv[0]).name
    try:
        return processes.run(argv, timeout, input, cwd=cwd, env=server_env(user), uid=user.uid, gid=user.gid,
                             errors="replace")
    except FileNotFoundError:
        raise RunFailed(f"{what}: {argv[0]} not found") from None
    except subprocess.TimeoutExpired as exc:
        out = (exc.output or b"").decode(errors="replace")
        raise ToolFailed(f"{what}: {argv[0]} did not finish within {timeout:g} s and was stopped; its output: "
                         f"{_said(out) or 'none'}", out) from None


def _said(out: str) -> str:
    """A tool's output in one line: its first error, else its last lines."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower() or "fatal" in line.lower()), None)
    return said or " | ".join(lines[-3:])


class ToolFailed(RunFailed):
    """A set-up tool failed; its whole output goes with it, for the diagnosis."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


class SettingRejected(UserError):
    """The server refused one of the user's engine_settings: every run with it would fail alike."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


class PlacementFull(RunFailed):
    """A placement ran out of space: every later run would too."""

    def __init__(self, message: str, placement: str):
        super().__init__(message)
        self.placement = placement


def run_as(user: OsUser, argv: list[str], what: str, cwd: Path | None = None, timeout: float = 300,
           input: str | None = None) -> str:
    """Run a set-up tool as `user` (initdb, mariadb-install-db: the server user); its output on failure."""
    code, out = run_tool(user, argv, what, cwd, timeout, input)
    if code != 0:
        raise ToolFailed(f"{what} failed (exit {code}): {_said(out)}", out)
    return out


def give_to(folder: Path, user: OsUser) -> None:
    """Hand a throwaway folder storlab made (and everything in it) to the server user."""
    if not user.is_self:
        safe_files.give_to(folder, user.uid, user.gid)


class ServerProcess:
    """A database server started by storlab: its own session (so a terminal's Ctrl-C reaches storlab,
    which then stops it in order), killed by the kernel if storlab itself dies."""

    def __init__(self, argv: list[str], user: OsUser, log_path: Path, manifest: Manifest,
                 group: cgroups.ControlGroup | None = None):
        self.argv = argv
        self.log_path = log_path
        self.manifest = manifest
        self.cwd: Path | None = None  # the server's own working directory: its log's relative paths
        log = safe_files.open_log(log_path, user.uid, user.gid)
        try:
            self.proc = processes.start(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=server_env(user), uid=user.uid, gid=user.gid,
                                        cgroups=cgroups.joining(group))
        finally:
            os.close(log)
        manifest.server_pid = self.proc.pid
        manifest.server_start = pid_start(self.proc.pid)
        manifest.save()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    @contextmanager
    def starting(self, accepts: Callable[[], bool], what: str) -> Iterator[None]:
        """Poll `accepts()` (a connection, given CONNECT_TIMEOUT_S) until the server accepts one, then
        run the block: storlab's first statements to it. Both get START_S from now: a server that has
        not answered by then is killed, so whatever waits on it returns, and the start fails in one
        line naming the server and its log. A server that exits meanwhile fails it at once."""
        expired = threading.Event()

        def give_up() -> None:
            expired.set()
            processes.kill_tree(self.pid)

        timer = threading.Timer(START_S, give_up)
        timer.daemon = True
        timer.start()
        unanswered = (f"{what} did not answer within {START_S:g} s of its start; its instance was stopped "
                      f"(its log: {self.log_path}, kept with --keep)")
        try:
            while not accepts():
                if not self.alive():
                    raise RunFailed(f"{what} exited during start-up (exit {self.proc.returncode})")
                time.sleep(0.01)  # a refused connection costs microseconds; a server starts in a tenth of a second
            try:
                self.cwd = Path(os.readlink(f"/proc/{self.pid}/cwd"))
            except OSError:
                pass
            yield
        except Exception as exc:
            if expired.is_set():
                raise RunFailed(unanswered) from exc
            raise
        finally:
            timer.cancel()
            timer.join()
        if expired.is_set():  # the last statement's answer came as the deadline passed: the server is gone
            raise RunFailed(unanswered)

    def stop(self, polite: signal.Signals, timeout: float = 60) -> None:
        """The engine's shutdown signal, then SIGKILL to the whole process group."""
        processes.stop(self.proc, polite, timeout)
        self.manifest.server_pid = None
        self.manifest.save()


class Server(Protocol):
    """What a workspace asks of its engine (storlab.engines.base.Engine): its name for the manifest,
    its log's grammar and its symptoms to tell a failure, and the clean-up of its shared memory."""

    name: str
    log: diagnosis.ServerLog
    symptoms: tuple[tuple[str, str], ...]

    def release_shared_memory(self, dirs: list[Path]) -> list[str]: ...


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
        with self.start(argv).starting(accepts, what):
            pass  # its instance is set up already

    def log_position(self) -> int:
        """Where the server's log ends now: what it writes later is read from here (logged_since)."""
        return safe_files.size_of(self.server.log_path, self.user.uid) if self.server is not None else 0

    def logged_since(self, position: int, max_bytes: int) -> str:
        """At most `max_bytes` of what the server logged after `position`."""
        return safe_files.read_from(self.server.log_path, self.user.uid, position, max_bytes) if self.server else ""

    def failure(self, exc: Exception, engine: Server, settings: dict) -> Exception | None:
        """The failure in the server's own words, read while its log still exists; None to keep `exc`."""
        text = getattr(exc, "output", "")
        if self.server is not None:
            text += "\n" + safe_files.read_tail(self.server.log_path, self.user.uid, diagnosis.LOG_TAIL_BYTES)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        killed = self.out_of_memory(engine, text)
        if killed is not None:
            return RunFailed(f"{first}; {killed}")
        cause = diagnosis.explain(engine.log, text, self.server.cwd if self.server else None, self.roots, settings)
        if cause is not None and cause.placement:
            return PlacementFull(cause.message, cause.placement)
        if cause is not None and cause.setting:
            return SettingRejected(cause.message, cause.setting)
        said = "\n".join(diagnosis.messages(engine.log, f"{exc}\n{text}"))
        blamed = setting_failures.caused_by(engine.symptoms, said, settings)  # started, yet fails every run
        if blamed is not None:
            return SettingRejected(blamed[1], blamed[0])
        if self.server is not None and not self.server.alive():
            lines = diagnosis.messages(engine.log, text)
            said = diagnosis.first_stop(engine.log, lines) or " | ".join(lines[-3:]) or "nothing in its log"
            return RunFailed(f"{first}; the server's log says: {said}")
        return None

    def out_of_memory(self, engine: Server, logged: str) -> str | None:
        """What the kernel's OOM killer did in the instance's group at its memory limit, in words (which
        process, the limit, the peak); None when it killed nothing."""
        if self.group is None or self.group.limits.memory_bytes is None:
            return None
        try:
            reading = self.group.reading()
        except RunFailed:
            return None
        if not reading.oom_kills:
            return None
        if self.server is not None and not self.server.alive():
            which = f"the server itself ({Path(self.server.argv[0]).name}, pid {self.server.pid})"
        else:  # PostgreSQL's postmaster names the child it lost: "server process (PID 123) was terminated by signal 9"
            named = KILLED_CHILD.search(logged)
            deadline = time.monotonic() + NAMED_WITHIN_S
            while named is None and self.server is not None and time.monotonic() < deadline:
                time.sleep(0.05)  # the client saw its session end a moment before the postmaster logged why
                named = KILLED_CHILD.search(safe_files.read_tail(self.server.log_path, self.user.uid,
                                                                 diagnosis.LOG_TAIL_BYTES))
            which = named.group(1) if named else "one of the server's processes"
        peak = f", peak {format_size(reading.peak_bytes)}" if reading.peak_bytes else ""
        return (f"the kernel's OOM killer ended {which}: the server's memory limit of "
                f"{format_size(self.group.limits.memory_bytes)} (layout.server_memory) was reached "
                f"({reading.oom_kills} killed{peak})")


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
            group = cgroups.ControlGroup.make(place, limits)
        clients = Clients(manifest, client_user())
        sockets = make_owned_dir(Path("/tmp") / f"storlab-{iid}", manifest, user, reached_by=clients.user)
        ws = Workspace(manifest, user, roots, sockets, clients, group)
        try:
            yield ws
        except Exception as exc:
            told = ws.failure(exc, engine, settings or {})
            if told is None:
                raise
            raise told from exc
        ended_well = True
    finally:
        with interrupts.uninterrupted:  # a second signal (or SIGHUP after Ctrl-C) must not cut the end short
            end = functools.partial(_end, manifest, engine, ws, group, stop_signal, keep)
            if _ending is not None and ended_well and not keep:
                thread = threading.Thread(target=end, name=f"storlab ending {iid}")  # not a daemon: exit waits
                thread.start()
                _ending.append(thread)
            else:
                end()


def _end(manifest: Manifest, engine: Server, ws: Workspace | None, group: cgroups.ControlGroup | None,
         stop_signal: signal.Signals, keep: bool) -> None:
    """An instance's end: its clients and server stopped, its group and shared memory gone, its
    directories removed (unless kept), and its manifest forgotten once nothing of it is left."""
    clients_left = ws is not None and not ws.clients.remove()
    if ws is not None and ws.server is not None:
        ws.server.stop(stop_signal)
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
    engine.release_shared_memory([Path(d) for d in manifest.dirs])
    if keep:
        manifest.kept = True
        manifest.save()
    else:
        refused = [d for d in manifest.dirs if not remove_owned_dir(Path(d), manifest.instance_id)]
        if not refused and not group_left and not clients_left:
            manifest.forget()
        else:
            manifest.save()


# While ending_in_background() is open: the instances ending now, stopped and removed by threads of their own.
_ending: list[threading.Thread] | None = None


@interrupts.owning
def ending_in_background() -> Iterator[None]:
    """A run's instances, once their run is recorded, are stopped and removed while the next run sets
    up, not before it: about a tenth of a second a run, where loads take seconds. wait_ended() (called
    by quiesce before any measured run, and before a device is remade) makes sure nothing of them runs,
    writes or unlinks a file during a measured load; the block's end waits for them all, on every path."""
    global _ending
    if _ending is not None:  # inside one already: that one ends them
        yield
        return
    _ending = []
    try:
        yield
    finally:
        with interrupts.uninterrupted:
            wait_ended()
        _ending = None


def wait_ended() -> None:
    """Every instance ended in the background so far is stopped and removed."""
    while _ending:
        _ending.pop(0).join()
