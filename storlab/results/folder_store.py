"""A results folder's store: one SQLite file, storlab.sqlite, recognised by what is inside (storlab's
application id in its header), opened read-only for the commands that read and for writing (made when
missing) for those that run, brought up to date step by step (storlab.results.versions), and
checked whole before it is read (storlab.results.damage)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Protocol, TypeVar
from urllib.parse import quote

from storlab.errors import UserError
from storlab.results import damage, versions
from storlab.results.dialects import SQLITE, Connection
from storlab.results.schema import MIGRATIONS


FILENAME = "storlab.sqlite"
# A store is recognised by what is inside, not by its file name: storlab's application id in the
# SQLite header (stores from before it was set: a schema version and these tables).
APPLICATION_ID = 0x53544C42  # "STLB"
SIGNATURE = {"experiment", "cells", "failures", "facts"}
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
NAME_MAX = 255
PATH_MAX = 4096


def check_folder(folder: Path) -> None:
    """A results folder that can exist: no over-long names, nothing in the way that is not a folder."""
    text = os.fsencode(str(folder))
    if not text:
        raise UserError("the results folder is an empty name; give a folder, or leave --out out")
    if len(text) >= PATH_MAX or any(len(os.fsencode(part)) > NAME_MAX for part in folder.parts):
        raise UserError(f"{str(folder)[:60]}…: the folder name is too long (at most {NAME_MAX} bytes a name, {PATH_MAX - 1} in all)")
    probe = folder
    while not (probe.exists() or probe.is_symlink()):
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{folder}: cannot be a results folder: {probe} is not a folder" if probe != folder
                        else f"{folder}: is not a folder")
    store = folder / FILENAME
    if store.exists() and not store.is_file():
        raise UserError(f"{store}: is not a file (a folder or device is in the way of storlab's results store)")


def exists(folder: Path) -> bool:
    """Whether a folder holds a non-empty storlab.sqlite (what it holds is checked when opened)."""
    check_folder(folder)
    path = folder / FILENAME
    return path.is_file() and path.stat().st_size > 0


def identity(path: Path) -> tuple[Path, int, int] | None:
    """The store file as it is now (path, device, inode); None when it is gone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return path, st.st_dev, st.st_ino


def unwritable(folder: Path, exc: sqlite3.Error) -> str | None:
    """Why a store cannot be written, when the cause is the place and not the file: a read-only
    folder is not a damaged store."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or not os.access(folder, os.W_OK)
    except OSError:
        read_only = False
    if read_only or name.startswith("SQLITE_READONLY"):
        return f"the results folder {folder} is read-only"
    if name == "SQLITE_FULL":
        return f"the disk holding {folder} is full"
    return None


_FS_IOC_GETFLAGS = 0x80086601  # the kernel's inode flags (lsattr): 'i' immutable, 'a' append-only
_FLAGS = ((0x10, "immutable", "i"), (0x20, "append-only", "a"))


def _descriptor(path: Path) -> int | None:
    """A read-only descriptor of the store file, None when it is missing (or a link: what opens it
    next says so)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None


def locked(fd: int) -> str | None:
    """What keeps even root from writing the store file `fd` in place, though it opens: an immutable
    or append-only attribute. SQLite then opens the file read-only without a word, and the store's
    writes fail, or land only in its write-ahead log, which can never be written back. None if nothing."""
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)
    except OSError:  # a file system without these attributes
        return None
    found = [(what, letter) for flag, what, letter in _FLAGS if flags & flag]
    if not found:
        return None
    letters = "".join(letter for _, letter in found)
    return (f"the file is {' and '.join(what for what, _ in found)} (chattr +{letters}): nothing can write it "
            f"until chattr -{letters} clears that")


def _header(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(_SQLITE_MAGIC))


class Opened(versions.Migrating, Protocol):
    """What opening a folder's store reads and sets of it (storlab.results.store.Store)."""

    folder: Path
    descriptor: int | None  # a descriptor of the store's file while a writer has it open
    file: tuple[Path, int, int] | None  # (path, device, inode)


S = TypeVar("S", bound=Opened)


@contextmanager
def opened(kind: Callable[[Connection, Path], S], folder: Path, create: bool) -> Iterator[S]:
    """`create`: the store `storlab run` and `storlab io` write (made when missing). Otherwise the
    store is opened read-only and must be a storlab store: read commands never write, and an empty
    or foreign storlab.sqlite is "no storlab results here". A damaged store is one clear line."""
    path = folder / FILENAME
    if create:
        check_folder(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{folder}: cannot make the results folder: {exc.strerror}") from None
    elif not exists(folder):
        raise UserError(f"{folder}: no storlab results here (expected {FILENAME})")
    fresh = not path.exists() or path.stat().st_size == 0
    if not fresh and _header(path) != _SQLITE_MAGIC:
        raise UserError(f"{path}: not a storlab results store (not an SQLite file)")
    # Open from before SQLite opens the file to after it closes it: closing any descriptor of a file
    # drops every lock the process holds on it (POSIX), SQLite's too, so the file is never opened and
    # closed by its name meanwhile (another process would then think itself the store's last user, and
    # move the write-ahead log away under this one).
    descriptor = _descriptor(path) if create else None
    try:
        cause = locked(descriptor) if descriptor is not None else None
        if cause:
            raise UserError(f"{path}: cannot write the results store: {cause}")
        try:
            db = sqlite3.connect(path, isolation_level=None, timeout=30) if create else \
                sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, isolation_level=None, timeout=30)
        except sqlite3.Error as exc:
            raise UserError(f"{path}: cannot open the results store: {unwritable(folder, exc) or exc}") from None
        if create and descriptor is None:
            descriptor = _descriptor(path)  # made just now, by SQLite
        store = None
        try:
            try:
                store = kind(Connection(db, SQLITE), folder)
                store.descriptor = descriptor
                _recognise(kind, store, path, create)
                if create:
                    db.execute("PRAGMA journal_mode=WAL")  # readers while a run writes
                db.execute("PRAGMA foreign_keys=ON")
                if create:
                    versions.migrate(store)
                damage.check(store.db, store.where)
                store.file = identity(path)
            except sqlite3.DatabaseError as exc:
                cause = unwritable(folder, exc)
                raise UserError(f"{path}: cannot write the results store: {cause}" if cause
                                else f"{path}: the results store is damaged: {exc}") from None
            try:
                yield store
            except sqlite3.DatabaseError as exc:
                if getattr(exc, "sqlite_errorname", None) in _DAMAGED:
                    raise UserError(f"{path}: the results store is damaged: {exc}") from None
                cause = unwritable(folder, exc)
                if cause:
                    raise UserError(f"{path}: cannot write the results store: {cause}") from None
                raise
            if create:
                try:  # at rest a store is one file, which read-only readers then leave alone
                    db.execute("PRAGMA journal_mode=DELETE")
                except sqlite3.OperationalError:
                    pass  # a reader is on it: it stays in WAL mode until the next close
        finally:
            db.close()
            if store is not None and store.db.raw is not db:  # an older store read in memory
                store.db.close()
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _recognise(kind: Callable[[Connection, Path], S], store: S, path: Path, create: bool) -> None:
    """A storlab store, or (for `create`) an empty database to make one in; anything else is refused."""
    db = store.db
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    ours = db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    if not tables and not ours:
        if not create:
            raise UserError(f"{store.folder}: no storlab results here ({FILENAME} holds no storlab store)")
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        return
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if not ours and not (version >= 1 and SIGNATURE <= tables):
        raise UserError(f"{path}: not a storlab results store (an SQLite database with other tables)")
    check = db.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise UserError(f"{path}: the results store is damaged: {check}")
    if version > len(MIGRATIONS):
        raise UserError(f"{store.folder}: written by a newer storlab (schema {version}); upgrade storlab to read it")
    if create and not ours:
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # a store from before the id
    if version == len(MIGRATIONS):
        versions.check_probes(store)
    if not create and versions.behind(store):
        # An older store is brought up to date once, the one write a read command makes; where
        # storlab cannot write (a read-only folder), a copy in memory is, and the folder is left alone.
        try:
            with closing(sqlite3.connect(path, isolation_level=None, timeout=30)) as upgrade:
                versions.migrate(kind(Connection(upgrade, SQLITE), store.folder))
        except sqlite3.OperationalError as exc:
            if unwritable(store.folder, exc) is None:
                raise
            copy = sqlite3.connect(":memory:", isolation_level=None)
            db.raw.backup(copy)
            store.db = Connection(copy, SQLITE)
            versions.migrate(store)
