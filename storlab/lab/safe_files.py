"""Files storlab (often root) opens in places another user can write: an instance's folders and its
server's log (the servers' OS user), a results folder someone else may share. A link planted there
must never lead root to a file of its own, so a path is walked one name at a time and a symbolic
link is followed only if root made it (a link cannot be changed, only replaced, and a replacement
belongs to whoever made it); the last name is never followed. Running as an ordinary user there is
no one to guard against: links are followed as usual, but the last name still is not."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from storlab.errors import RunFailed

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel: a longer chain is a loop


def _trusted(link_owner: int) -> bool:
    return os.getuid() != 0 or link_owner == 0


def _open_dir(path: Path) -> int:
    """A descriptor of the directory `path`, reached without following a link root did not make."""
    names = list(Path(os.path.abspath(path)).parts[1:])
    fd = os.open("/", _DIR)
    links = 0
    try:
        while names:
            name = names.pop(0)
            try:
                nxt = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.lstat(name, dir_fd=fd)
                if not stat.S_ISLNK(st.st_mode):
                    raise
                if not _trusted(st.st_uid):
                    raise OSError(errno.ELOOP, f"{name} is a link storlab did not make") from None
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many links") from None
                target = os.readlink(name, dir_fd=fd)
                names = list(Path(target).parts) + names
                if target.startswith("/"):
                    names.pop(0)
                    fd, passed = os.open("/", _DIR), fd  # in this order: an interrupt between the two must not close one twice
                    os.close(passed)
                continue
            fd, passed = nxt, fd
            os.close(passed)
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def _in_dir(path: Path) -> Iterator[int]:
    fd = _open_dir(path.parent)
    try:
        yield fd
    finally:
        os.close(fd)


def _refuse(path: Path, what: str) -> RunFailed:
    return RunFailed(f"{path}: {what}; storlab will not write through it (was it replaced by a link?)")


def own_folder(folder: Path, remedy: str, make: bool = True, shared: bool = False) -> None:
    """Make `folder` and the folders above it where missing, one name at a time and never through a
    link, and refuse it (RunFailed, ending with `remedy`) if anyone but root or storlab's own user
    could change what is in it: a link on the way, a folder another user owns, or one others may write
    to (above it, a sticky folder such as /var/tmp is fine: others may add names there, never rename or
    remove storlab's). `make` False: judge only the part that exists, make nothing (a check before
    anything starts; what is missing is judged again when it is made). `shared`: `folder` itself may
    be a sticky folder everyone writes in (/dev/shm), since storlab keeps nothing but a folder of its
    own there."""
    if ".." in Path(folder).parts:  # the kernel resolves it after a link, os.path.abspath before
        raise RunFailed(f"{folder}: a path with '..' in it: {remedy}")
    me = os.getuid()
    place = Path("/")
    fd = os.open("/", _DIR)
    try:
        names = Path(os.path.abspath(folder)).parts[1:]
        for i in range(len(names) + 1):
            st = os.fstat(fd)
            end = i == len(names)
            open_to_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if st.st_uid not in (0, me) or (open_to_others and ((end and not shared) or not st.st_mode & stat.S_ISVTX)):
                raise RunFailed(f"{place}: a folder another user could change (owner uid {st.st_uid}, mode "
                                f"{stat.S_IMODE(st.st_mode):04o}): {remedy}")
            if end:
                return
            place = place / names[i]
            try:
                if make:
                    try:
                        os.mkdir(names[i], 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                elif not _exists(names[i], fd):
                    return  # made afresh, and judged again, when it is made
                nxt = os.open(names[i], _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):  # the cause kept: a caller may say it its way
                    raise RunFailed(f"{place}: {exc.strerror}: {remedy}") from exc
                what = "a link" if stat.S_ISLNK(os.lstat(names[i], dir_fd=fd).st_mode) else "not a folder"
                raise RunFailed(f"{place}: {what}: {remedy}") from None
            fd, passed = nxt, fd  # as in _open_dir
            os.close(passed)
    finally:
        os.close(fd)


def changeable_by_others(folder: Path, remedy: str) -> str | None:
    """Why another user could rename or replace what root makes in `folder` (a link on the way, a
    folder above it that user owns or may write to), ending with `remedy`; None when only root can
    (or storlab runs as an ordinary user: then no one is above it to guard against)."""
    if os.getuid() != 0:
        return None
    try:
        own_folder(folder, remedy, make=False, shared=True)
    except RunFailed as refused:
        return str(refused)
    return None


def _exists(name: str, parent: int) -> bool:
    try:
        os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return False
    return True


def folder_problem(folder: Path) -> str | None:
    """Why storlab could not make a file in `folder` as write_new does (missing, or reached through a link
    another user made); None when it can."""
    try:
        os.close(_open_dir(folder))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_new(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Create `path` (it must not exist yet) and write `data` to it, with exactly `mode`."""
    body = data.encode() if isinstance(data, str) else data
    try:
        with _in_dir(path) as parent:
            fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=parent)
    except FileExistsError:
        raise _refuse(path, "already there") from None
    except OSError as exc:
        raise _refuse(path, exc.strerror or str(exc)) from None
    try:
        os.fchmod(fd, mode)  # whatever the umask
        _write_all(fd, body)
    finally:
        os.close(fd)


def append(path: Path, text: str) -> None:
    """Add `text` to the end of the regular file `path` (a link there is refused, not followed)."""
    try:
        with _in_dir(path) as parent:
            fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=parent)
    except OSError as exc:
        raise _refuse(path, exc.strerror or str(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(path, "not a regular file")
        _write_all(fd, text.encode())
    finally:
        os.close(fd)


def _write_all(fd: int, body: bytes) -> None:
    view = memoryview(body)
    while view:
        view = view[os.write(fd, view):]


def open_log(path: Path, uid: int, gid: int) -> int:
    """A server's log, opened for appending (made if missing) and owned by the server's user, who
    writes it; a descriptor to pass to the server. Anything but a regular file there is refused."""
    try:
        with _in_dir(path) as parent:
            fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o600, dir_fd=parent)
    except OSError as exc:
        raise _refuse(path, exc.strerror or str(exc)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (uid, os.getuid()):
        os.close(fd)
        raise _refuse(path, "not a regular file of the server's user")
    if st.st_uid != uid:
        os.fchown(fd, uid, gid)
    return fd


def read_tail(path: Path, uid: int, max_bytes: int) -> str:
    """At most the last `max_bytes` of a file the user `uid` owns (so nothing that user could not read
    anyway); "" for anything else there: a link, a FIFO, another user's file, nothing."""
    return _read_owned(path, uid, lambda size: max(0, size - max_bytes), max_bytes)[0]


def read_from(path: Path, uid: int, offset: int, max_bytes: int) -> str:
    """At most `max_bytes` of a file the user `uid` owns, from byte `offset` on; "" as read_tail says."""
    return _read_owned(path, uid, lambda size: offset, max_bytes)[0]


def size_of(path: Path, uid: int) -> int:
    """How long a file the user `uid` owns is now (0 for anything else there, as read_tail says)."""
    return _read_owned(path, uid, lambda size: size, 0)[1]


def _read_owned(path: Path, uid: int, start_at, max_bytes: int) -> tuple[str, int]:
    """(text read from start_at(its size), at most max_bytes; its size), of a regular file `uid` owns."""
    try:
        with _in_dir(path) as parent:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                         dir_fd=parent)
    except OSError:
        return "", 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return "", 0
        start = start_at(st.st_size)
        chunks, left = [], max_bytes
        while left > 0:
            chunk = os.pread(fd, left, start + max_bytes - left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode(errors="replace"), st.st_size
    except OSError:
        return "", 0
    finally:
        os.close(fd)


def _read_small(name: str, parent: int, max_bytes: int = 4096) -> str | None:
    """A short regular file's text (a marker), None if it is missing or anything else: a link is not
    followed, a FIFO does not block."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, max_bytes).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def remove_marked(path: Path, marker: str, owner: str) -> bool:
    """Remove the directory `path` if its file `marker` says `owner`; whether it is gone. Everything is
    reached through descriptors, so a link swapped in for the directory or anything in it is removed
    itself, never followed. The marker goes last: if anything else cannot be removed (a process still
    writing there), the directory stays marked, so a later try may finish the job."""
    try:
        parent = _open_dir(path.parent)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        try:
            fd = os.open(path.name, _DIR | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            return True
        except OSError:  # a link, or not a directory: not the one storlab made
            return False
        try:
            said = _read_small(marker, fd)
            if said is None or said.strip() != owner:
                return False
            for name in os.listdir(fd):
                if name == marker:
                    continue
                if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
                else:
                    os.unlink(name, dir_fd=fd)
            if os.listdir(fd) != [marker]:
                return False
            os.unlink(marker, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(path.name, dir_fd=parent)
        return True
    except FileNotFoundError:  # removed meanwhile by another storlab (clean --all and the run itself)
        return not os.path.lexists(path)
    except OSError:
        return False
    finally:
        os.close(parent)


def regular_files(folder: Path) -> Iterator[int]:
    """A read-only descriptor of each regular file under `folder`, open until the next is asked for.
    The walk goes one folder at a time, each opened through its parent's descriptor without following
    a link: a folder or a file swapped for a link after it was listed is passed over, never followed."""
    try:
        fd = _open_dir(folder)
    except OSError:
        return
    yield from _regular_files(fd)


def _regular_files(fd: int) -> Iterator[int]:
    """regular_files of the folder open as `fd`, which it closes."""
    try:
        with os.scandir(fd) as entries:
            listed = list(entries)
            files = [entry.name for entry in listed if entry.is_file(follow_symlinks=False)]
            folders = [entry.name for entry in listed if entry.is_dir(follow_symlinks=False)]
        for name in files:
            try:
                file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                               dir_fd=fd)
            except OSError:
                continue  # a link now, or removed
            try:
                if stat.S_ISREG(os.fstat(file).st_mode):
                    yield file
            finally:
                os.close(file)
        for name in folders:
            try:
                folder = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # a link now, or removed
            yield from _regular_files(folder)
    finally:
        os.close(fd)


def give_to(folder: Path, uid: int, gid: int) -> None:
    """Hand `folder` and everything in it to another user, deepest first: each name is changed while
    the directory holding it is still root's, so nothing in it can be swapped for a link meanwhile,
    and a link is changed itself, never what it points to."""
    for top, dirs, files in os.walk(folder, topdown=False):
        for name in files + dirs:
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)
    os.chown(folder, uid, gid, follow_symlinks=False)
