"""Initialized instances kept as templates, so a run copies one (tens of milliseconds) instead of
running initdb or mariadb-install-db (half a second to seconds) for every repetition.

A template is keyed by everything that is fixed when an instance is installed: the engine's binary
and version, and install-time options (PostgreSQL's WAL segment size, InnoDB's page and redo log
size). It is built once into a private directory and renamed into place, so two storlab runs never
see a half-built template, and it is never changed afterwards. Templates live under
/var/tmp/storlab/templates (STORLAB_TEMPLATE_DIR elsewhere), where the servers' OS user can read
them; deleting that folder only costs the next run the time to build them again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

from storlab import instances, processes
from storlab.errors import RunFailed

# Part of every key: a change in how templates are built makes the old ones unused.
FORMAT = 1
MARKER = instances.MARKER


def root() -> Path:
    return Path(os.environ.get("STORLAB_TEMPLATE_DIR") or "/var/tmp/storlab/templates")


def key(engine: str, options: dict) -> str:
    body = json.dumps({"format": FORMAT, "engine": engine, **options}, sort_keys=True)
    return f"{engine}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def template(engine: str, options: dict, build: Callable[[Path], None]) -> Path:
    """The template for these options, built by `build(into)` the first time it is asked for.
    `build` fills an empty directory that the servers' OS user owns."""
    final = root() / key(engine, options)
    if (final / MARKER).exists():
        return final
    user = instances.server_user()
    root().mkdir(parents=True, exist_ok=True)
    os.chmod(root(), 0o755)
    building = root() / f".build-{final.name}-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(mode=0o755)
    try:
        if not user.is_self:
            os.chown(building, user.uid, user.gid)
        build(building)
        (building / "options.json").write_text(json.dumps({"engine": engine, **options}, indent=1) + "\n")
        (building / MARKER).write_text(f"template {final.name}\n")
        try:
            os.rename(building, final)
        except OSError:
            if not (final / MARKER).exists():  # not another run's finished template: a real failure
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return final


def copy(source: Path, target: Path, preallocated: bool = False) -> None:
    """Copy one directory of a template (never its top, which holds the template's marker) to a
    new directory `target` in an instance's owned directory, keeping owners and modes.

    `preallocated`: the engine made its files with fallocate (InnoDB's redo log and tablespaces:
    space reserved, nothing written), so the copy is made the same way, zeros as holes, then every
    file allocated whole, instead of writing 100 MB of zeros a fresh install never wrote."""
    sparse = "--sparse=always" if preallocated else "--sparse=auto"
    code, out = processes.run(["cp", "-a", "--reflink=auto", sparse, str(source), str(target)], timeout=600)
    if code != 0:
        raise RunFailed(f"copying the template {source} to {target} failed: {out.strip()}")
    if preallocated:
        for file in (f for f in target.rglob("*") if f.is_file() and not f.is_symlink()):
            size = file.stat().st_size
            if size == 0:
                continue
            fd = os.open(file, os.O_WRONLY)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
