"""What storlab makes for an instance, written down: the manifest of each live instance (saved before
anything it names is made, so a later `storlab clean` can finish the job after a crash), and the
directories storlab makes, each marked with the instance's id. storlab removes or reuses a directory
only when the marker is there and names the same instance."""

from __future__ import annotations

import json
import os
import secrets
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from storlab import interrupts
from storlab.errors import RunFailed
from storlab.lab import safe_files
from storlab.lab.os_users import OsUser

MARKER = ".storlab-owned"
def state_dir() -> Path:
    """Where manifests of live instances are kept, so a later `storlab clean` finds them."""
    base = os.environ.get("STORLAB_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "storlab"
    )
    path = Path(base) / "instances"
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    # Devices storlab made (storlab.lab.devices): one entry per device, written before it is made.
    devices: list[dict] = field(default_factory=list)
    # The control group the server runs in (storlab.lab.cgroups), written before it is made; on cgroup v1,
    # the same group in the hierarchies its IO caps and memory limit need.
    cgroup: str | None = None
    cgroup_more: list[str] = field(default_factory=list)
    # The control group its load generators run in (storlab.lab.clients), written before it is made.
    client_cgroup: str | None = None
    # Delay layers in front of its directories (storlab.lab.latency): {"point", "pid", "start"}, the
    # mount point written before the layer starts.
    layers: list[dict] = field(default_factory=list)
    # [device, inode, owner] of its data directories as its server sees them: a killed server's shared
    # memory names them, and a dead delay layer's mount no longer shows them (storlab.engines release_shared_memory).
    data_dirs: list[list[int]] = field(default_factory=list)

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
                        and (manifest.client_cgroup is None or isinstance(manifest.client_cgroup, str))
                        and isinstance(manifest.cgroup_more, list)
                        and isinstance(manifest.layers, list) and all(isinstance(x, dict) for x in manifest.layers)
                        and isinstance(manifest.data_dirs, list)
                        and all(isinstance(x, list) and len(x) == 3 and all(isinstance(n, int) for n in x)
                                for x in manifest.data_dirs)
                        and all(isinstance(g, str) for g in manifest.cgroup_more)):
                    raise ValueError("its fields are not a manifest's")
                found.append(manifest)
            except (OSError, ValueError, TypeError) as exc:
                unreadable[file] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return found, unreadable


def make_owned_dir(path: Path, manifest: Manifest, user: OsUser, server_writes: bool = True,
                   reached_by: OsUser | None = None) -> Path:
    """Create a fresh directory for the instance, marked as storlab's. `server_writes`: owned by the
    server user (a socket directory; `reached_by`: that user's group may pass through it to the
    sockets, and no one else); otherwise it stays storlab's (mode 0711), and only the directories made
    in it are the server's, so no name in it can be swapped for a link."""
    if path.exists():
        raise RunFailed(f"{path} already exists; storlab will not reuse a directory it did not make for this instance")
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest.dirs.append(str(path))
    manifest.save()
    with interrupts.uninterrupted:  # a directory without its marker could never be removed
        path.mkdir(mode=0o700)
        # Through a descriptor: the placement's folder may be writable by others, who could swap the new
        # name for a link before storlab marks it and hands it over.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            mark(path, manifest.instance_id, dir_fd=fd)
            if not server_writes:
                os.fchmod(fd, 0o711)
            elif not user.is_self:
                os.fchown(fd, user.uid, user.gid if reached_by is None else reached_by.gid)
                if reached_by is not None:
                    os.fchmod(fd, 0o710)
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


def make_server_dir(path: Path, user: OsUser) -> Path:
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
