"""What every engine's throwaway instance shares: the directories storlab owns, the manifest that
lets `storlab clean` finish the job after a crash, the unprivileged OS user, and the server process.

Every directory storlab creates carries a marker naming the instance; storlab removes or reuses a
directory only when the marker is there and names the same instance.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import stat
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol

from storlab import processes
from storlab.errors import RunFailed, UserError
from storlab.lab import caps, cgroups, diagnosis, safe_files, setting_failures

MARKER = ".storlab-owned"
SERVER_USER = "storlab"
# A fresh server answers within seconds of its start, however loaded the machine; one that has not by
# then (stopped, or stuck on a hung device) never will.
START_S = 120
# Every connection to an instance: a live server accepts a session within milliseconds.
CONNECT_TIMEOUT_S = 10


def state_dir() -> Path:
    """Where manifests of live instances are kept, so a later `storlab clean` finds them."""
    base = os.environ.get("STORLAB_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "storlab"
    )
    path = Path(base) / "instances"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class ServerUser:
    name: str
    uid: int
    gid: int

    @property
    def is_self(self) -> bool:
        return self.uid == os.getuid()


def current_user() -> ServerUser:
    me = pwd.getpwuid(os.getuid())
    return ServerUser(me.pw_name, me.pw_uid, me.pw_gid)


def server_user(create: bool = True) -> ServerUser:
    """Servers refuse to run as root: as root, run them as the `storlab` system user (made if missing).
    Without `create`, a user not made yet is described as it will be: in no group, no uid of its own
    (so only the "other" permission bits let it through a directory)."""
    if os.getuid() != 0:
        return current_user()
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        if not create:
            return ServerUser(SERVER_USER, -1, -1)
        run_as(current_user(), ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                                "/nonexistent", "--shell", "/usr/sbin/nologin", SERVER_USER], "useradd", timeout=60)
        entry = pwd.getpwnam(SERVER_USER)
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def unreachable_ancestor(path: Path, user: ServerUser) -> Path | None:
    """The first existing ancestor of `path` the user cannot traverse (a server there cannot start)."""
    if user.uid == 0:
        return None
    for ancestor in reversed([path, *path.parents]):
        if not ancestor.exists():
            break
        st = ancestor.stat()
        if st.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif user.gid >= 0 and (st.st_gid == user.gid or st.st_gid in os.getgrouplist(user.name, user.gid)):
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return ancestor
    return None


def check_reachable(label: str, path: Path, user: ServerUser) -> None:
    blocked = unreachable_ancestor(path, user)
    if blocked is not None:
        raise UserError(
            f"{label}: {path} is not reachable by the servers' OS user {user.name} "
            f"({blocked} is mode {stat.S_IMODE(blocked.stat().st_mode):04o}); choose a directory outside it"
        )


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


def new_instance_id(engine: str) -> str:
    return f"{engine[:2]}{secrets.token_hex(4)}"


def pid_start(pid: int) -> int | None:
    """When a process started (clock ticks since boot). A pid is reused, a pid with its start time is
    not: together they name one process for good."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    # A zombie has ended; only its parent has not collected it yet.
    return None if fields[0] in ("Z", "X") else int(fields[19])


def running(pid: int | None, started: int | None) -> bool:
    """Whether the process recorded as (pid, start time) still runs; without a recorded start time
    (a manifest from an older storlab) any process with that pid counts, to be safe."""
    if not pid:
        return False
    now = pid_start(pid)
    return now is not None and (started is None or now == started)


@dataclass
class Manifest:
    """A live instance written down before anything is created, rewritten as it grows."""

    instance_id: str
    engine: str
    owner_pid: int
    owner_start: int | None = None
    dirs: list[str] = field(default_factory=list)
    server_pid: int | None = None
    server_start: int | None = None
    kept: bool = False
    # Devices storlab made (storlab.devices): one entry per device, written before it is made.
    devices: list[dict] = field(default_factory=list)
    # The control group the server runs in (storlab.cgroups), written before it is made; on cgroup v1,
    # the same group in the hierarchies its IO caps and memory limit need.
    cgroup: str | None = None
    cgroup_more: list[str] = field(default_factory=list)

    @property
    def owner_running(self) -> bool:
        return running(self.owner_pid, self.owner_start)

    @property
    def path(self) -> Path:
        return state_dir() / f"{self.instance_id}.json"

    def save(self) -> None:
        # A temporary file of this writer's own: `storlab clean --all` saves an instance's manifest while
        # the run that owns it may be saving it too, and a shared name was moved away under the other.
        tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, self.path)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    @classmethod
    def all(cls) -> list["Manifest"]:
        return cls.read()[0]

    @classmethod
    def read(cls) -> tuple[list["Manifest"], dict[Path, str]]:
        """Every manifest, and the files that cannot be read as one (file -> why): `storlab clean`
        names those, since it cannot tell what they would have it clean."""
        found, unreadable = [], {}
        for file in sorted(state_dir().glob("*.json")):
            try:
                manifest = cls(**json.loads(file.read_text()))
                if not (isinstance(manifest.instance_id, str) and isinstance(manifest.dirs, list)
                        and all(isinstance(d, str) for d in manifest.dirs)
                        and isinstance(manifest.devices, list) and all(isinstance(d, dict) for d in manifest.devices)
                        and (manifest.cgroup is None or isinstance(manifest.cgroup, str))
                        and isinstance(manifest.cgroup_more, list)
                        and all(isinstance(g, str) for g in manifest.cgroup_more)):
                    raise ValueError("its fields are not a manifest's")
                found.append(manifest)
            except (OSError, ValueError, TypeError) as exc:
                unreadable[file] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return found, unreadable


def make_owned_dir(path: Path, manifest: Manifest, user: ServerUser, server_writes: bool = True) -> Path:
    """Create a fresh directory for the instance, marked as storlab's. `server_writes`: owned by the
    server user (a socket directory); otherwise it stays storlab's (mode 0711), and only the
    directories made in it are the server's, so no name in it can be swapped for a link."""
    if path.exists():
        raise RunFailed(f"{path} already exists; storlab will not reuse a directory it did not make for this instance")
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest.dirs.append(str(path))
    manifest.save()
    path.mkdir(mode=0o700)
    # Through a descriptor: the placement's folder may be writable by others, who could swap the new
    # name for a link before storlab marks it and hands it over.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        mark(path, manifest.instance_id, dir_fd=fd)
        if not server_writes:
            os.fchmod(fd, 0o711)
        elif not user.is_self:
            os.fchown(fd, user.uid, user.gid)
    finally:
        os.close(fd)
    return path


def mark(directory: Path, owner: str, dir_fd: int | None = None) -> None:
    """Write storlab's marker into a directory it has just made: one line naming its owner (an instance's
    id, or a template's name), in a new file, never through a link (`dir_fd`: the directory, opened)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(MARKER, flags, 0o644, dir_fd=dir_fd) if dir_fd is not None else os.open(directory / MARKER, flags, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(owner + "\n")


def marked_by(directory: Path) -> str | None:
    """Who storlab's marker in `directory` names; None without a marker (or with a link in its place)."""
    try:
        fd = os.open(directory / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        return f.read(4096).strip()


def make_server_dir(path: Path, user: ServerUser) -> Path:
    """An empty subdirectory of an owned directory (initdb and tablespaces insist on empty ones)."""
    path.mkdir(mode=0o700)
    if not user.is_self:
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
    return path


def remove_owned_dir(path: Path, instance_id: str) -> bool:
    """Remove a directory only if storlab's marker in it names this instance. The marker goes last:
    if anything else cannot be removed (a process still writing there), the directory stays marked,
    so a later `storlab clean` may finish the job. Nothing in it is followed if it is a link."""
    return safe_files.remove_marked(path, MARKER, instance_id)


def server_env(user: ServerUser) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "MYSQL", "MARIADB"))}
    if not user.is_self:
        env.update(HOME="/tmp", USER=user.name, LOGNAME=user.name)
    return env


def run_tool(user: ServerUser, argv: list[str], what: str | None = None, cwd: Path | None = None,
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


def run_as(user: ServerUser, argv: list[str], what: str, cwd: Path | None = None, timeout: float = 300,
           input: str | None = None) -> str:
    """Run a set-up tool as `user` (initdb, mariadb-install-db: the server user); its output on failure."""
    code, out = run_tool(user, argv, what, cwd, timeout, input)
    if code != 0:
        raise ToolFailed(f"{what} failed (exit {code}): {_said(out)}", out)
    return out


def give_to(folder: Path, user: ServerUser) -> None:
    """Hand a throwaway folder storlab made (and everything in it) to the server user."""
    if not user.is_self:
        safe_files.give_to(folder, user.uid, user.gid)


class ServerProcess:
    """A database server started by storlab: its own session (so a terminal's Ctrl-C reaches storlab,
    which then stops it in order), killed by the kernel if storlab itself dies."""

    def __init__(self, argv: list[str], user: ServerUser, log_path: Path, manifest: Manifest,
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
    user: ServerUser
    roots: dict[str, Path]  # placement name -> the instance's own directory on it
    socket_dir: Path
    group: cgroups.ControlGroup | None = None  # every process the server starts, whatever it does
    server: ServerProcess | None = None

    def start(self, argv: list[str]) -> ServerProcess:
        # The log lives beside the socket, off the placements: a full placement cannot swallow the
        # server's last words, and the log's writes are not counted as the placement's IO.
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
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return RunFailed(f"{first}; the server's log says: {said}")
        return None


@contextmanager
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
    manifest.save()
    ws = group = None
    ended_well = False
    try:
        roots = {name: make_owned_dir(path / f"storlab-{iid}", manifest, user, server_writes=False)
                 for name, path in placements.items()}
        limits = caps.resolve(placements, io_caps or {}, memory_bytes)
        place = cgroups.place(iid, limits)
        if place is not None:
            manifest.cgroup = str(place.path)
            manifest.cgroup_more = [str(p) for p in place.more.values()]
            manifest.save()
            group = cgroups.ControlGroup.make(place, limits)
        ws = Workspace(manifest, user, roots, make_owned_dir(Path("/tmp") / f"storlab-{iid}", manifest, user), group)
        try:
            yield ws
        except Exception as exc:
            told = ws.failure(exc, engine, settings or {})
            if told is None:
                raise
            raise told from exc
        ended_well = True
    finally:
        def tear_down() -> None:
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
                refused = [d for d in manifest.dirs if not remove_owned_dir(Path(d), iid)]
                if not refused and not group_left:
                    manifest.forget()
                else:
                    manifest.save()

        if _ending is not None and ended_well and not keep:
            thread = threading.Thread(target=tear_down, name=f"storlab ending {iid}")  # not a daemon: exit waits
            with processes.interrupts_held():  # a Ctrl-C between the two would leave a thread no one joins, or one never started
                thread.start()
                _ending.append(thread)
        else:
            with processes.interrupts_held():  # a second signal (or SIGHUP after Ctrl-C) must not cut this short
                tear_down()


# While ending_in_background() is open: the instances ending now, stopped and removed by threads of their own.
_ending: list[threading.Thread] | None = None


@contextmanager
def ending_in_background() -> Iterator[None]:
    """A run's instances, once their run is recorded, are stopped and removed while the next run sets
    up, not before it: about a tenth of a second a run, where loads take seconds. wait_ended() (called
    by settle before any measured run, and before a device is remade) makes sure nothing of them runs,
    writes or unlinks a file during a measured load; the block's end waits for them all, on every path."""
    global _ending
    if _ending is not None:  # inside one already: that one ends them
        yield
        return
    _ending = []
    try:
        yield
    finally:
        with processes.interrupts_held():
            wait_ended()
        _ending = None


def wait_ended() -> None:
    """Every instance ended in the background so far is stopped and removed."""
    while _ending:
        _ending.pop(0).join()
