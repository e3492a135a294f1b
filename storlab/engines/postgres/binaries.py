"""Where the installed PostgreSQL server is, and which it is."""

from __future__ import annotations

import functools
from pathlib import Path

from storlab import processes
from storlab.errors import RunFailed


def bin_dir() -> Path:
    """The newest installed server, preferring 15 (the version storlab's SQL is written for)."""
    preferred = Path("/usr/lib/postgresql/15/bin")
    if (preferred / "postgres").exists():
        return preferred
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not found:
        raise RunFailed("PostgreSQL server not found (install the postgresql-15 package: make demo does)")
    return found[-1].parent


def lib_dir(bins: Path) -> Path:
    return bins.parent / "lib"


def wait_sampling_installed(bins: Path) -> bool:
    return (lib_dir(bins) / "pg_wait_sampling.so").exists()


@functools.cache
def server_version(bins: Path) -> str:
    code, out = processes.run([str(bins / "postgres"), "--version"], timeout=30)
    if code != 0:
        raise RunFailed(f"{bins / 'postgres'} --version failed: {out.strip()}")
    return out.strip()
