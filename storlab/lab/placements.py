"""Placements: the named places where an experiment's files may live.

A placement's name goes into SQL (tablespace names) and directory names, and its path must be a
directory the servers' OS user can reach. Both are checked by looking only: nothing is created until
every placement has passed (storlab run makes the missing directories afterwards). What the
experiment file may say of a placement (a directory, tmpfs, a table of a volume's keys) is
storlab.experiment.places'; this module knows only names and paths on this machine.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from storlab.errors import RunFailed, UserError
from storlab.lab import safe_files
from storlab.lab.os_users import OsUser, unreachable_ancestor

TMPFS = "tmpfs"
# A RAM disk placement lives under the tmpfs every Linux mounts; storlab needs no mount of its own.
TMPFS_ROOT = Path("/dev/shm")

MAX_PLACEMENTS = 32
# Letters, digits and '_' only: the name becomes part of an unquoted SQL identifier (ts_<name>, at most
# 63 bytes in PostgreSQL) and of file names.
NAME = re.compile(r"[A-Za-z0-9_]{1,32}")
# Kernel and device file systems, the operating system's own trees, and root's home (closed to the
# servers' OS user): never a place for storlab's files, at any depth.
FORBIDDEN = tuple(Path(p) for p in (
    "/proc", "/sys", "/root", "/etc", "/usr", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/run", "/var/lib", "/var/log", "/var/cache", "/var/spool", "/var/mail", "/var/run", "/var/lock", "/snap",
))
DEVICES = Path("/dev")
# Folders other people's folders hang from: storlab's may go below one, never straight in it.
SYSTEM_TOPS = tuple(Path(p) for p in ("/", "/var", "/home", "/mnt", "/media", "/srv", "/opt"))
# Shared scratch folders (anyone may add names there): an instance's folder may go in one, a results
# folder must not be one.
SHARED_SCRATCH = tuple(Path(p) for p in ("/tmp", "/var/tmp", "/dev/shm"))
NAME_MAX = 255
PATH_MAX = 4096


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


def name_problem(name: str) -> str | None:
    if not NAME.fullmatch(name):
        return "not a placement name: use 1 to 32 letters, digits or '_'"
    return None


def resolve(raw: str, base: Path) -> Path:
    """The path a placement names: "tmpfs" is the RAM disk; relative paths are relative to `base`."""
    if raw == TMPFS:
        return TMPFS_ROOT
    path = Path(raw).expanduser()
    return path if path.is_absolute() else base / path


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def path_problem(path: Path, user: OsUser) -> str | None:
    """What stops `path` from holding a server's files, found without creating anything; None if fine."""
    encoded = os.fsencode(str(path))
    if len(encoded) >= PATH_MAX:
        return f"the path is {len(encoded)} bytes long; the limit is {PATH_MAX - 1}"
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            return f"{part[:40]}…: a name in the path is longer than {NAME_MAX} bytes"
    real = Path(os.path.realpath(path))
    problem = not_a_place(real)
    if problem:
        return problem
    existing = real
    while not os.path.lexists(existing):
        existing = existing.parent
    try:
        st = os.stat(existing)
    except OSError as exc:
        return f"cannot look at {existing}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        if existing == real:
            return f"{real} is not a directory"
        return f"{real} cannot be made: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == real else f" ({real} cannot be made)"
        return f"{existing} is not writable{made}"
    blocked = unreachable_ancestor(real, user)
    if blocked is not None:
        return (
            f"{real} is not reachable by the servers' OS user {user.name} "
            f"({blocked} is mode {stat.S_IMODE(blocked.stat().st_mode):04o}); choose a directory outside it"
        )
    return safe_files.changeable_by_others(real, GUARDED)


def not_a_place(real: Path) -> str | None:
    """Why storlab never puts files of its own in the (resolved) folder `real`: a system folder, or a
    device's (the RAM disk aside); None if it may."""
    problem = system_folder(real)
    if problem:
        return problem
    if _inside(real, DEVICES) and not _inside(real, TMPFS_ROOT):
        return f"{real} is inside {DEVICES}: choose a directory on a real file system (or \"tmpfs\")"
    return None


def system_folder(real: Path) -> str | None:
    """Why the (resolved) folder `real` is the system's, not a place for storlab's files; None if not."""
    for root in FORBIDDEN:
        if _inside(real, root):
            where = "is a system folder" if real == root else f"is inside {root}, a system folder"
            return f"{real} {where}: choose a directory of your own, outside {root}"
    if real in SYSTEM_TOPS:
        return f"{real} is a system folder: choose a directory of your own below it"
    return None


def results_folder_problem(folder: Path) -> str | None:
    """Why `folder` cannot hold results (a store, a report): a system folder, a device, or a shared
    scratch folder itself (where anyone may plant names); None if fine."""
    real = Path(os.path.realpath(folder))
    if real in SHARED_SCRATCH:
        return f"{real} is shared by every user: choose a folder of your own (below it is fine)"
    if _inside(real, DEVICES) and not _inside(real, TMPFS_ROOT):
        return f"{real} is inside {DEVICES}: choose a folder on a real file system"
    return system_folder(real)


def foreign_results_folder(folder: Path) -> str | None:
    """As root, why another user could change the results folder `folder` or a folder above it (their
    own folder, or one open to them; above it, a sticky one such as /var/tmp is fine): root's store
    and files would be written through names they could swap for links. None if only root can, or
    storlab does not run as root (it then writes only where its own user may)."""
    if os.getuid() != 0:
        return None
    try:
        safe_files.own_folder(folder, "storlab runs as root and writes its results there; choose a folder "
                              "only root can change", make=False)
    except RunFailed as exc:
        return str(exc)
    return None


def make(path: Path) -> None:
    """Make a checked placement's missing directories, each one open to the servers' OS user (0755
    whatever the umask, which could otherwise close a new parent to it)."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o755)
        # Through a descriptor: if the name was swapped for a link meanwhile, it is not followed.
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)
