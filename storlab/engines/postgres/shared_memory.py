"""Shared memory a PostgreSQL leaves behind when it dies without shutting down (storlab killed by
SIGKILL, a set-up tool's server interrupted).

PostgreSQL keeps a small System V segment (its header) and, with dynamic_shared_memory_type = posix,
files /dev/shm/PostgreSQL.<handle>. Their names are random, so they are found the way PostgreSQL finds
its own after a crash: the header records the device and inode of its data directory, and the handle
of its control segment, which lists every other segment. A segment is removed only when its header
names a data directory of the instance being cleaned (while that directory still exists), nobody is
attached to it, and it belongs to the servers' OS user; each file only when the control segment lists
it and it belongs to that user. Other servers' segments are never touched.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

SYSV_TABLE = Path("/proc/sysvipc/shm")
SHM_DIR = Path("/dev/shm")
_PG_SHMEM_MAGIC = 679834894
_PG_DSM_CONTROL_MAGIC = 0x9A503D32
# PGShmemHeader on 64-bit Linux: int32 magic, pid_t creatorPID, Size totalsize, Size freeoffset,
# dsm_handle dsm_control (4 bytes of padding), void *index, dev_t device, ino_t inode.
_HEADER = struct.Struct("=iiQQI4xQQQ")
# dsm_control_header: uint32 magic, nitems, maxitems; then items of {uint32 handle, uint32 refcnt, ...},
# 40 bytes each on 64-bit Linux, from offset 16.
_CONTROL_HEAD = struct.Struct("=III")
_ITEMS_AT = 16
_ITEM_SIZE = 40
# The largest control segment: 64 slots and 5 per backend, at most 2^18 - 1 backends.
_CONTROL_MAX_BYTES = _ITEMS_AT + _ITEM_SIZE * (64 + 5 * (2**18 - 1))
_IPC_RMID = 0
_SHM_RDONLY = 0o10000


@dataclass(frozen=True)
class Segment:
    """One System V segment as /proc/sysvipc/shm lists it."""

    key: int
    shmid: int
    creator_pid: int
    attached: int
    uid: int


def segments() -> list[Segment]:
    try:
        lines = SYSV_TABLE.read_text().splitlines()[1:]
    except OSError:
        return []
    found = []
    for line in lines:
        f = line.split()
        # key shmid perms size cpid lpid nattch uid ...
        found.append(Segment(int(f[0]), int(f[1]), int(f[4]), int(f[6]), int(f[7])))
    return found


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return libc


def _header(libc, shmid: int) -> tuple[int, int, int] | None:
    """(control segment handle, device, inode of the data directory) of a PostgreSQL header segment."""
    address = libc.shmat(shmid, None, _SHM_RDONLY)
    if address in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        magic, _pid, _total, _free, handle, _index, device, inode = _HEADER.unpack(ctypes.string_at(address, _HEADER.size))
    finally:
        libc.shmdt(address)
    return (handle, device, inode) if magic == _PG_SHMEM_MAGIC else None


def _read_control(control: Path, uid: int) -> bytes:
    """The control segment's bytes if it is a regular file of the server's OS user, else nothing.
    Opened once, without following a link, and what was opened is checked: /dev/shm is everyone's, and
    that user could swap the name for a link or a FIFO (whose read would never end) after a check."""
    try:
        fd = os.open(control, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return b""
        return os.pread(fd, min(st.st_size, _CONTROL_MAX_BYTES), 0)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _segment_files(control: Path, uid: int) -> list[Path]:
    """The control segment and every live segment it lists, as files of the server's OS user."""
    data = _read_control(control, uid)
    if len(data) < _ITEMS_AT:
        return []
    magic, nitems, _maxitems = _CONTROL_HEAD.unpack_from(data)
    if magic != _PG_DSM_CONTROL_MAGIC:
        return []
    files = [control]
    for i in range(min(nitems, (len(data) - _ITEMS_AT) // _ITEM_SIZE)):
        handle, refcnt = struct.unpack_from("=II", data, _ITEMS_AT + i * _ITEM_SIZE)
        path = SHM_DIR / f"PostgreSQL.{handle}"
        try:
            st = os.lstat(path)  # a link there is no segment of the server's: never followed
        except OSError:
            continue
        if refcnt > 0 and stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            files.append(path)
    return files


def _directories(roots: list[Path]) -> dict[tuple[int, int], int]:
    """(device, inode) -> owner of each instance directory and of the directories right inside it
    (a data directory is one of those). Each is read through its folder's descriptor, never through a
    link: the socket folder is the server's OS user's, who could swap a name in it (or the folder
    itself) for a link to another server's data directory."""
    found = {}
    for root in roots:
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            seen = [os.fstat(fd)]
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        seen.append(entry.stat(follow_symlinks=False))
                    except OSError:
                        continue  # removed since it was listed
        finally:
            os.close(fd)
        for st in seen:
            if stat.S_ISDIR(st.st_mode):
                found[(st.st_dev, st.st_ino)] = st.st_uid
    return found


def _ours(libc, directories: dict[tuple[int, int], int]) -> list[tuple[Segment, int]]:
    """The System V segments whose header names one of `directories` (device, inode -> its owner's
    uid) and belong to that user, each with the handle of its control segment."""
    ours = []
    for segment in segments():
        if segment.uid not in directories.values():
            continue
        header = _header(libc, segment.shmid)
        if header is not None and directories.get(header[1:]) == segment.uid:
            ours.append((segment, header[0]))
    return ours


def in_use(roots: list[Path]) -> tuple[list[Segment], list[Path]]:
    """The System V segments and /dev/shm files PostgreSQL holds now for a data directory under `roots`."""
    directories = _directories(roots)
    if not directories:
        return [], []
    ours = _ours(_libc(), directories)
    files = [path for segment, handle in ours if handle
             for path in _segment_files(SHM_DIR / f"PostgreSQL.{handle}", segment.uid)]
    return [segment for segment, _ in ours], files


def release(roots: list[Path], recorded: dict[tuple[int, int], int] | None = None, wait_s: float = 5.0) -> list[str]:
    """Remove the shared memory PostgreSQL left for a data directory under `roots` (an instance's own
    directories, before they are removed), or one of `recorded` ((device, inode) -> owner: those its
    manifest names, for folders that can no longer be read, behind a dead delay layer's mount). Waits up
    to `wait_s` for the dead server's last processes to let go; a segment still in use after that is left
    alone. Returns what was removed."""
    directories = _directories(roots) | (recorded or {})
    if not directories:
        return []
    libc = _libc()
    deadline = time.monotonic() + wait_s
    while True:
        ours = _ours(libc, directories)
        if not any(segment.attached for segment, _ in ours) or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    removed: list[str] = []
    for segment, handle in ours:
        if segment.attached:
            continue
        if handle:
            for path in _segment_files(SHM_DIR / f"PostgreSQL.{handle}", segment.uid):
                try:
                    path.unlink()
                    removed.append(str(path))
                except FileNotFoundError:
                    pass
        if libc.shmctl(segment.shmid, _IPC_RMID, None) == 0:
            removed.append(f"shared memory segment {segment.shmid}")
    return removed
