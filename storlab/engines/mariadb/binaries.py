"""Where the installed MariaDB server and its installer are, and which server it is."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from storlab import processes
from storlab.errors import RunFailed


def binaries() -> tuple[Path, Path]:
    """The server and its installer, from the distribution's mariadb-server package."""
    server = Path("/usr/sbin/mariadbd")
    if not server.exists():
        found = shutil.which("mariadbd")
        if not found:
            raise RunFailed("MariaDB server not found (install the mariadb-server package)")
        server = Path(found)
    installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if not installer:
        raise RunFailed("mariadb-install-db not found (install the mariadb-server package)")
    return server, Path(installer)


@functools.cache
def server_version(server_bin: Path) -> str:
    code, out = processes.run([str(server_bin), "--version"], timeout=30)
    if code != 0:
        raise RunFailed(f"{server_bin} --version failed: {out.strip()}")
    return out.strip()
