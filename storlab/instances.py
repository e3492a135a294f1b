"""What every engine's throwaway instance shares: the directories storlab owns, the manifest that
lets `storlab clean` finish the job after a crash, the unprivileged OS user, and the server process.

Every directory storlab creates carries a marker naming the instance; storlab removes or reuses a
directory only when the marker is there and names the same instance.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from storlab.errors import RunFailed, UserError

MARKER = ".storlab-owned"
SERVER_USER = "storlab"
_PR_SET_PDEATHSIG = 1


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


def server_user() -> ServerUser:
    """Servers refuse to run as root: as root, run them as the `storlab` system user (made if missing)."""
    if os.getuid() != 0:
        me = pwd.getpwuid(os.getuid())
        return ServerUser(me.pw_name, me.pw_uid, me.pw_gid)
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True, capture_output=True,
        )
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
        elif st.st_gid == user.gid or user.gid in os.getgrouplist(user.name, user.gid):
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


def new_instance_id(engine: str) -> str:
    return f"{engine[:2]}{secrets.token_hex(4)}"


@dataclass
class Manifest:
    """A live instance written down before anything is created, rewritten as it grows."""

    instance_id: str
    engine: str
    owner_pid: int
    dirs: list[str] = field(default_factory=list)
    server_pid: int | None = None
    kept: bool = False

    @property
    def path(self) -> Path:
        return state_dir() / f"{self.instance_id}.json"

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, self.path)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    @classmethod
    def all(cls) -> list["Manifest"]:
        found = []
        for file in sorted(state_dir().glob("*.json")):
            try:
                found.append(cls(**json.loads(file.read_text())))
            except (ValueError, TypeError):
                continue
        return found


def make_owned_dir(path: Path, manifest: Manifest, user: ServerUser) -> Path:
    """Create a fresh directory for the instance, marked as storlab's and owned by the server user."""
    if path.exists():
        raise RunFailed(f"{path} already exists; storlab will not reuse a directory it did not make for this instance")
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest.dirs.append(str(path))
    manifest.save()
    path.mkdir(mode=0o700)
    (path / MARKER).write_text(manifest.instance_id + "\n")
    if not user.is_self:
        os.chown(path, user.uid, user.gid)
    return path


def make_server_dir(path: Path, user: ServerUser) -> Path:
    """An empty subdirectory of an owned directory (initdb and tablespaces insist on empty ones)."""
    path.mkdir(mode=0o700)
    if not user.is_self:
        os.chown(path, user.uid, user.gid)
    return path


def remove_owned_dir(path: Path, instance_id: str) -> bool:
    """Remove a directory only if storlab's marker in it names this instance."""
    marker = path / MARKER
    try:
        owner = marker.read_text().strip()
    except FileNotFoundError:
        return not path.exists()
    if owner != instance_id:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def _die_with_parent(user: ServerUser):
    """In the child, before exec: drop to the server user, then ask the kernel to end the server if
    storlab dies, even by SIGKILL (set after setuid, which clears it)."""

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def prepare() -> None:
        if not user.is_self:
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return prepare


def server_env(user: ServerUser) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "MYSQL", "MARIADB"))}
    if not user.is_self:
        env.update(HOME="/tmp", USER=user.name, LOGNAME=user.name)
    return env


def run_as(user: ServerUser, argv: list[str], what: str, cwd: Path | None = None, timeout: float = 300) -> str:
    """Run a set-up tool (initdb, mariadb-install-db) as the server user; its output on failure."""
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=server_env(user), preexec_fn=_die_with_parent(user),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        )
    except FileNotFoundError:
        raise RunFailed(f"{what}: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{what}: {argv[0]} took longer than {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise RunFailed(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout


class ServerProcess:
    """A database server started by storlab: its own session (so a terminal's Ctrl-C reaches storlab,
    which then stops it in order), killed by the kernel if storlab itself dies."""

    def __init__(self, argv: list[str], user: ServerUser, log_path: Path, manifest: Manifest):
        self.argv = argv
        self.log_path = log_path
        self.manifest = manifest
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=server_env(user), preexec_fn=_die_with_parent(user), start_new_session=True,
            )
        manifest.server_pid = self.proc.pid
        manifest.save()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def wait_ready(self, probe, what: str, timeout: float = 120) -> None:
        """Poll `probe()` until it returns True; fail early with the log when the server exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RunFailed(f"{what} exited during start-up (exit {self.proc.returncode}): {self.log_tail()}")
            if probe():
                return
            time.sleep(0.1)
        raise RunFailed(f"{what} did not accept connections within {timeout:.0f} s: {self.log_tail()}")

    def stop(self, polite: signal.Signals, timeout: float = 60) -> None:
        """The engine's clean-shutdown signal, then SIGKILL to the whole process group."""
        if self.alive():
            try:
                self.proc.send_signal(polite)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.manifest.server_pid = None
        self.manifest.save()


def _still_ours(pid: int, dirs: list[str]) -> bool:
    """A pid from a manifest may have been reused: it is ours only if its command line names our dirs."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(d in cmdline for d in dirs)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Cleaned:
    instance_id: str
    stopped: bool
    removed: list[str]
    refused: list[str]


def clean(only_orphans: bool) -> list[Cleaned]:
    """Stop and remove what crashed runs left behind. With only_orphans, leave instances whose storlab
    process is still running (another `storlab run` in progress) and instances kept on purpose."""
    report = []
    for manifest in Manifest.all():
        if only_orphans and (manifest.kept or (manifest.owner_pid != os.getpid() and _alive(manifest.owner_pid))):
            continue
        stopped = False
        pid = manifest.server_pid
        if pid and _alive(pid) and _still_ours(pid, manifest.dirs):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:
                os.kill(pid, signal.SIGKILL)
            for _ in range(100):
                if not _alive(pid):
                    break
                time.sleep(0.05)
            stopped = True
        removed, refused = [], []
        for d in manifest.dirs:
            if remove_owned_dir(Path(d), manifest.instance_id):
                removed.append(d)
            else:
                refused.append(d)
        if not refused:
            manifest.forget()
        report.append(Cleaned(manifest.instance_id, stopped, removed, refused))
    return report


@dataclass
class Workspace:
    """The directories and bookkeeping of one instance being provisioned."""

    manifest: Manifest
    user: ServerUser
    roots: dict[str, Path]  # placement name -> the instance's own directory on it
    socket_dir: Path
    server: ServerProcess | None = None

    def start(self, argv: list[str], home: Path) -> ServerProcess:
        self.server = ServerProcess(argv, self.user, home / "server.log", self.manifest)
        return self.server


@contextmanager
def workspace(engine: str, placements: dict[str, Path], keep: bool, stop_signal: signal.Signals) -> Iterator[Workspace]:
    """One owned directory on each placement plus a short socket directory (socket paths are limited
    to 107 bytes); on every way out the server is stopped and, unless `keep`, everything removed."""
    user = server_user()
    for name, path in placements.items():
        check_reachable(f"placement {name}", path, user)
    iid = new_instance_id(engine)
    manifest = Manifest(iid, engine, owner_pid=os.getpid())
    manifest.save()
    ws = None
    try:
        roots = {name: make_owned_dir(path / f"storlab-{iid}", manifest, user) for name, path in placements.items()}
        ws = Workspace(manifest, user, roots, make_owned_dir(Path("/tmp") / f"storlab-{iid}", manifest, user))
        yield ws
    finally:
        if ws is not None and ws.server is not None:
            ws.server.stop(stop_signal)
        if keep:
            manifest.kept = True
            manifest.save()
        else:
            refused = [d for d in manifest.dirs if not remove_owned_dir(Path(d), iid)]
            if not refused:
                manifest.forget()
