"""One writer per results folder: `storlab run` holds an exclusive lock on a file inside the folder
while it runs, so a second run into the same folder is refused in one line naming the first, instead
of both doing every run side by side and each distorting the other's figures. The lock is the
kernel's (flock): it goes with the process however that ends, so a crashed run never leaves a lock
to clear by hand. The file also says who holds it (pid, start time, command), for the refusal's
message only. Readers (show, report, export) never take it; a fleet runs in parallel through its
shared store instead."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Iterator

from storlab import interrupts
from storlab.errors import RunFailed, UserError
from storlab.lab import owned, safe_files

FILENAME = ".storlab-lock"
MAX_HOLDER_BYTES = 4096


def _made(folder: Path) -> list[Path]:
    """Make the folder; the folders made, deepest first (so only those are removed again). As root,
    one name at a time and never through a link, each judged as it is made: another user must not
    slip a folder of theirs in between the checks before anything starts and now."""
    missing = []
    probe = folder
    while not (probe.exists() or probe.is_symlink()):
        missing.append(probe)
        probe = probe.parent
    try:
        if os.getuid() == 0:
            safe_files.own_folder(folder, "storlab runs as root and writes its results there; choose a folder "
                                  "only root can change")
        else:
            folder.mkdir(parents=True, exist_ok=True)
    except RunFailed as exc:
        if isinstance(exc.__cause__, OSError):  # the place, not its owner: read-only, full, ...
            raise UserError(f"{folder}: cannot make the results folder: {_reason(exc.__cause__)}") from None
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{folder}: cannot make the results folder: {_reason(exc)}") from None
    return missing


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return "the folder is read-only"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "the folder is read-only for this user (permission denied)"
    return exc.strerror or str(exc)


def _holder(fd: int) -> str:
    """Who holds the lock, in words, from what it wrote into the file."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        said = json.loads(os.read(fd, MAX_HOLDER_BYTES) or b"{}")
        pid, start = int(said["pid"]), said.get("start")
    except (OSError, ValueError, KeyError, TypeError):
        return "another storlab process"  # it is still writing who it is
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(said.get("started_at", 0))))
    command = str(said.get("command", ""))[:200]
    alive = "" if owned.running(pid, start) else ", no longer running"
    return f"pid {pid} ({command or 'storlab'}, started {when}{alive})"


def _open(path: Path) -> int:
    """The lock file, never through a link: a link planted there would lead the lock's writes elsewhere."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{path}: is a symbolic link; storlab's lock file must be a plain file") from None
        if exc.errno == errno.EISDIR:
            raise UserError(f"{path}: is a folder; storlab's lock file must be a plain file") from None
        raise UserError(f"{path.parent}: cannot write the results folder: {_reason(exc)}") from None


@interrupts.owning
def writing(folder: Path) -> Iterator[None]:
    """Hold the results folder for one writer, for the block's length; refused (UserError, naming the
    holder) while another process holds it. A folder made here and left empty is removed again."""
    made = _made(folder)
    path = folder / FILENAME
    try:
        fd = _locked(folder, path)
    except BaseException:
        _remove_empty(made)
        raise
    try:
        me = os.getpid()
        with suppress(OSError):  # who holds it is for a refusal's message only (a full disk)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": me, "start": owned.pid_start(me), "started_at": time.time(),
                                      "command": " ".join(["storlab", *sys.argv[1:]])}).encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)  # under the lock, so nobody else's file goes
        except OSError:
            pass
        os.close(fd)
        _remove_empty(made)


def _locked(folder: Path, path: Path) -> int:
    """The lock file, opened and locked; refused while another process holds it."""
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(f"{folder}: in use by another storlab run, {holder}; wait for it to end, or give "
                            "another --out folder (storlab worker runs an experiment in parallel)") from None
        # The holder before us may have removed the file between our open and our lock: the lock
        # must be on the file the name leads to now.
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _remove_empty(made: list[Path]) -> None:
    """Remove folders this process made, once empty (a run refused before it wrote anything)."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return
