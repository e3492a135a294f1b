"""MariaDB's settings: their names (and the forms that reach one: loose-x, skip-x, ...), those storlab
sets itself, those that run a program or load a library, how my.cnf reads a value, and the installed
server's word on a user's settings (`mariadbd --verbose --help`, without and with a throwaway option
file; with one, as the servers' OS user: `--help` loads the plugins the file names).

An option file's `!include` and `!includedir` lines cannot be written: a name is letters, digits, `_`
and `-`, and a value stays on its line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from storlab import processes
from storlab.engines import settings as common
from storlab.engines.mariadb import log
from storlab.engines.mariadb.binaries import binaries
from storlab.errors import RunFailed
from storlab.lab import os_users, user_tools

CHECK_S = 60
# MariaDB reads a number with a suffix the same in every numeric setting; a bare number is itself.
SIZE = re.compile(r"([0-9]+)([KMGTPE]?)", re.ASCII | re.IGNORECASE)
SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}


def conf_value(value: Any) -> str:
    """A value as my.cnf reads it: quoted when it holds spaces, quotes, '#' or backslashes."""
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    text = str(value)
    if not text or any(c.isspace() for c in text) or any(c in text for c in "#'\"\\"):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class MariadbSettings(common.Settings):
    title = "MariaDB"
    name_pattern = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
    name_form = "letters, digits, '_' or '-'"
    owned = {
        "port": common.SOCKET_ONLY,
        "extra_port": common.SOCKET_ONLY,
        "bind_address": common.SOCKET_ONLY,
        "skip_networking": common.SOCKET_ONLY,
        "socket": common.SOCKET_ONLY,
        "datadir": common.FILES,
        "basedir": common.FILES,
        "pid_file": common.FILES,
        "innodb_log_group_home_dir": "layout.log_on sets it",
        "innodb_data_home_dir": "layout.data_on sets it",
        "innodb_data_file_path": "layout.data_files sets it",
        "innodb_file_per_table": "layout.file_kind sets it",
        "log_error": common.LOG,
        "skip_grant_tables": common.AUTH,
        "user": common.USER,
        "max_connections": common.CONNECTIONS,
        "innodb_buffer_pool_load_at_startup": common.COLD,
        "innodb_buffer_pool_dump_at_shutdown": common.COLD,
        "performance_schema": common.PROBE,
        "performance_schema_instrument": common.PROBE,
    }
    owned_prefixes = (("performance_schema_consumer_", common.PROBE),)
    server_programs = {
        "plugin_load": common.LIBRARY,
        "plugin_load_add": common.LIBRARY,
        "plugin_dir": f"{common.LIBRARY} from where it names",
    }
    # Galera's: its provider is a library, its state transfers and notifications run scripts.
    server_program_prefixes = (("wsrep_", f"{common.LIBRARY} and runs programs (Galera replication)"),)
    never = {"init_file": ("runs a file's SQL as the server's superuser when it starts, which could change the "
                           "settings storlab sets; put your SQL in a custom workload's setup file")}
    layout_owned = {"innodb_log_file_size": "log_size", "innodb_page_size": "page_size", "tmpdir": "temp_on",
                    "innodb_temp_data_file_path": "temp_on"}
    # MariaDB reads `loose-x`, `skip-x`, `enable-x`, `disable-x` and `maximum-x` as forms of x.
    prefixes = ("loose_", "skip_", "enable_", "disable_", "maximum_")

    def canonical(self, name: str) -> str:
        """MariaDB also reads '-' as '_'."""
        return name.lower().replace("-", "_")

    def spellings(self, form: str) -> set[str]:
        return {form, form.replace("_", "-")}

    def value(self, value: Any) -> str:
        return conf_value(value)

    def size_bytes(self, value: Any) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        match = SIZE.fullmatch(value) if isinstance(value, str) else None
        return int(match[1]) * SUFFIXES[match[2].upper()] if match else None

    def known_names(self) -> set[str]:
        """The variables' table, and the options listed before it that have no variable (plugin_load)."""
        out = common.output([str(binaries()[0]), "--no-defaults", "--verbose", "--help"])
        table = out.split("\n-------", 1)[-1].split("\n", 1)[-1].split("\n\n", 1)[0]  # to the blank line after it
        options = re.findall(r"^  --([A-Za-z0-9_-]+)", out, re.MULTILINE)
        return {self.canonical(line.split()[0]) for line in table.splitlines() if line.strip()} | \
            {self.canonical(name) for name in options}

    def verdict(self, settings: dict[str, Any], known: set[str], warnings: list[str]) -> tuple[str, str] | None:
        user = os_users.server_user()
        conf = "[mysqld]\n" + "".join(f"{k} = {conf_value(v)}\n" for k, v in settings.items())
        with common.throwaway_configuration(user, {"my.cnf": conf}) as folder:
            said = _messages(user, [str(binaries()[0]), f"--defaults-file={folder / 'my.cnf'}", "--verbose", "--help"],
                             folder)
        for line in map(log.message, said.splitlines()):
            name = self.blamed(line, settings)
            if name is None:
                continue
            if line.startswith("[ERROR]"):
                return name, f"MariaDB refuses {common.show(settings[name])}: {line.removeprefix('[ERROR]').strip()}"
            if line.startswith("[Warning]"):
                warnings.append(f"engine_settings.{name}: MariaDB: {line.removeprefix('[Warning]').strip()}")
        return None


def _messages(user: os_users.OsUser, argv: list[str], cwd: Path) -> str:
    """What mariadbd says on its standard error (its help, on standard output, is not wanted), run as
    the servers' OS user."""
    try:
        child = processes.start(argv, uid=user.uid, gid=user.gid, env=user_tools.server_env(user), cwd=cwd, text=True,
                                errors="replace", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        raise RunFailed(f"mariadbd: cannot check the engine settings: {exc}") from None
    try:
        return child.communicate(timeout=CHECK_S)[1]
    except subprocess.TimeoutExpired:
        raise RunFailed(f"mariadbd: checking the engine settings took more than {CHECK_S} s") from None
    finally:
        processes.stop(child)
