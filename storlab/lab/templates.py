"""Initialized instances kept as templates, so a run copies one (tens of milliseconds) instead of
running initdb or mariadb-install-db (half a second to seconds) for every repetition.

A template is keyed by everything that is fixed when an instance is installed: the engine's binary
and version, and install-time options (PostgreSQL's WAL segment size, InnoDB's page and redo log
size). It is built once into a private directory and renamed into place, so two storlab runs never
see a half-built template, and it is never changed afterwards. Templates live under
/var/tmp/storlab/templates (STORLAB_TEMPLATE_DIR elsewhere); deleting that folder only costs the
next run the time to build them again.

The servers' OS user builds a template (initdb runs as that user), but a finished one is storlab's
own (root's), as is the folder holding it: that user can reach root's files through a link only if
it can plant one where root copies and writes. A template that is not wholly storlab's (one from an
older storlab, or changed since) is built again; a folder of templates someone else could change is
refused. A copy is storlab's until it is complete, then handed to the servers' user, deepest names
first."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Callable

from storlab import processes
from storlab.errors import RunFailed
from storlab.lab import os_users, owned, safe_files, user_tools

# Part of every key: a change in how templates are built makes the old ones unused.
FORMAT = 1
MARKER = owned.MARKER
COPY_S = 600  # a template's copy takes seconds; one that takes this long is stuck on its device


def root() -> Path:
    return Path(os.environ.get("STORLAB_TEMPLATE_DIR") or "/var/tmp/storlab/templates")


def key(engine: str, options: dict) -> str:
    body = json.dumps({"format": FORMAT, "engine": engine, **options}, sort_keys=True)
    return f"{engine}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def template(engine: str, options: dict, build: Callable[[Path], None]) -> Path:
    """The template for these options, built by `build(into)` the first time it is asked for.
    `build` fills an empty directory that the servers' OS user owns."""
    final = root() / key(engine, options)
    _check_folder(root())
    if (final / MARKER).exists():
        if _storlabs(final):
            return final
        _discard(final)
    user = os_users.server_user()
    building = root() / f".build-{final.name}-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(mode=0o755)
    try:
        if not user.is_self:
            os.chown(building, user.uid, user.gid)
        build(building)
        _seal(building)
        (building / "options.json").write_text(json.dumps({"engine": engine, **options}, indent=1) + "\n")
        owned.mark(building, f"template {final.name}")
        try:
            os.rename(building, final)
        except OSError:
            if not (final / MARKER).exists():  # not another run's finished template: a real failure
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return final


_REMEDY = "storlab keeps no templates under it; remove it, or set STORLAB_TEMPLATE_DIR to a folder of its own"


def folder_problem() -> str | None:
    """Why the folder of templates cannot be storlab's (someone else could change it), judged without
    making anything: a check before anything starts."""
    try:
        safe_files.own_folder(root(), _REMEDY, make=False)
    except RunFailed as refused:
        return str(refused)
    return None


def _check_folder(folder: Path) -> None:
    """Make the folder of templates if missing, refused if someone other than storlab could change
    what is in it; the servers' user reads the templates in it."""
    safe_files.own_folder(folder, _REMEDY)
    if stat.S_IMODE(os.stat(folder).st_mode) != 0o755:
        os.chmod(folder, 0o755)


def _storlabs(folder: Path) -> bool:
    """Whether every name in `folder` is storlab's (so no one else has changed, or can change, it)."""
    me = os.getuid()
    if os.lstat(folder).st_uid != me or folder.is_symlink():
        return False
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            if os.lstat(os.path.join(top, name)).st_uid != me:
                return False
    return True


def _discard(folder: Path) -> None:
    """Move a template storlab no longer trusts out of the way (another run may be copying it), then remove it."""
    aside = folder.with_name(f".untrusted-{folder.name}-{os.getpid()}")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # another run discarded it first
        return
    shutil.rmtree(aside, ignore_errors=True)


def _seal(building: Path) -> None:
    """Make a built template storlab's, closed first so the servers' user cannot reach in meanwhile; a
    link in it must point inside it (PostgreSQL's pg_wal), or the servers' user planted it."""
    if os.getuid() == 0:
        os.chown(building, 0, 0, follow_symlinks=False)
        os.chmod(building, 0o700)
        safe_files.give_to(building, 0, 0)
    for top, dirs, files in os.walk(building):
        for name in dirs + files:
            path = os.path.join(top, name)
            if os.path.islink(path):
                target = os.path.normpath(os.path.join(top, os.readlink(path)))
                if not target.startswith(str(building) + "/"):
                    raise RunFailed(f"building a template: {path} is a link to {target}, which the engine's "
                                    "installer does not make; storlab will not keep it")
    os.chmod(building, 0o755)


def copy(source: Path, target: Path, preallocated: bool = False) -> None:
    """Copy one directory of a template (never its top, which holds the template's marker) to a
    new directory `target` in a directory of storlab's, keeping modes, then hand it to the servers'
    OS user.

    `preallocated`: the engine made its files with fallocate (InnoDB's redo log and tablespaces:
    space reserved, nothing written), so the copy is made the same way, zeros as holes, then every
    file allocated whole, instead of writing 100 MB of zeros a fresh install never wrote."""
    sparse = "--sparse=always" if preallocated else "--sparse=auto"
    try:
        code, out = processes.run(["cp", "-a", "--reflink=auto", sparse, str(source), str(target)], timeout=COPY_S)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"copying the template {source} to {target} did not finish within {COPY_S} s "
                        "and was stopped") from None
    if code != 0:
        raise RunFailed(f"copying the template {source} to {target} failed: {out.strip()}")
    if preallocated:
        for file in (f for f in target.rglob("*") if f.is_file() and not f.is_symlink()):
            size = file.stat().st_size
            if size == 0:
                continue
            fd = os.open(file, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
    user_tools.give_to(target, os_users.server_user())
