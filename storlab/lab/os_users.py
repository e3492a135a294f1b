"""The OS users what an experiment brings runs as, never root: the servers' (`storlab`), and the load
generators' (`storlab-client`: pgbench, sysbench, pgreplay). Two users, so a client cannot touch the
servers' files, and a server cannot touch a client's. storlab run as an ordinary user runs both as
itself: there is no one above it to keep out."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from storlab import processes
from storlab.errors import RunFailed, UserError

SERVER_USER = "storlab"
CLIENT_USER = "storlab-client"
USERADD_S = 60


@dataclass(frozen=True)
class OsUser:
    name: str
    uid: int
    gid: int

    @property
    def is_self(self) -> bool:
        return self.uid == os.getuid()


def current_user() -> OsUser:
    me = pwd.getpwuid(os.getuid())
    return OsUser(me.pw_name, me.pw_uid, me.pw_gid)


def _system_user(name: str, create: bool) -> OsUser:
    """As root, the system user `name` (made if missing: no home, no shell, a group of its own); as
    anyone else, that one. Without `create`, a user not made yet is described as it will be: in no
    group, no uid of its own (so only the "other" permission bits let it through a directory)."""
    if os.getuid() != 0:
        return current_user()
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if not create:
            return OsUser(name, -1, -1)
        try:
            code, said = processes.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                                        "/nonexistent", "--shell", "/usr/sbin/nologin", name], USERADD_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RunFailed(f"useradd {name}: {exc}") from None
        try:  # another storlab may have made it meanwhile: then useradd said it exists
            entry = pwd.getpwnam(name)
        except KeyError:
            raise RunFailed(f"useradd {name} failed (exit {code}): {said.strip()}") from None
    return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def server_user(create: bool = True) -> OsUser:
    """Servers refuse to run as root: as root, they run as the `storlab` system user."""
    return _system_user(SERVER_USER, create)


def client_user(create: bool = True) -> OsUser:
    """The load generators' user: as root, the `storlab-client` system user."""
    return _system_user(CLIENT_USER, create)


def unreachable_ancestor(path: Path, user: OsUser) -> Path | None:
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


def check_reachable(label: str, path: Path, user: OsUser) -> None:
    blocked = unreachable_ancestor(path, user)
    if blocked is not None:
        raise UserError(
            f"{label}: {path} is not reachable by the servers' OS user {user.name} "
            f"({blocked} is mode {stat.S_IMODE(blocked.stat().st_mode):04o}); choose a directory outside it"
        )
