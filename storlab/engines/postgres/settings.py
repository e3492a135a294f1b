"""PostgreSQL's settings: their names, those storlab sets itself, how postgresql.conf reads a value
(a time as the server reads it), and the installed server's word on a user's settings
(`postgres --describe-config`, and `postgres -C` reading a throwaway configuration file)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from storlab.engines import settings as common
from storlab.engines.postgres import log
from storlab.engines.postgres.binaries import DEFAULT_VERSION, bin_dir, lib_dir
from storlab.lab import os_users, user_tools

# Preload libraries storlab needs, joined with the user's instead of replaced by them.
STORLAB_PRELOAD = "pg_wait_sampling"
# A file a message names: PostgreSQL quotes the token it could not read, so a message about any file
# but the throwaway one could repeat what that file holds.
FILE_NAMED = re.compile(r'\bfile "([^"]*)"')
# A number with one of PostgreSQL's memory units (case matters, as the server reads them).
SIZE = re.compile(r"\s*([0-9]+)\s*(B|kB|MB|GB|TB)\s*", re.ASCII)
MEMORY_UNITS = {"B": 1, "kB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
# How the server reads an integer setting's value (guc.c's parse_int): a number as C's strtol reads it
# in base 0 (0x: hex, a leading 0: octal), read again by strtod where that stops at '.', 'e' or 'E'
# (decimals, exponents, hex fractions); then, spaces around it, a unit of at most 3 characters.
C_INTEGER = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", re.ASCII)
C_FLOAT = re.compile(r"\s*[+-]?(0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?[0-9]+)?"
                     r"|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)", re.ASCII)
UNIT = re.compile(r"\s*(?:(\S{1,3})\s*)?", re.ASCII)
# A time setting counted in seconds: its units, longest first, each as seconds (guc.c's table).
TIME_UNITS = {"d": 86400.0, "h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1.0 / 1000, "us": 1.0 / (1000 * 1000)}
CHECKPOINT_TIMEOUT_S = 300.0  # the server's default


def seconds(text: str) -> float | None:
    """A time setting counted in seconds, as the server reads `text`: a fraction with a unit is rounded
    to the next smaller unit, then to whole seconds, half to even ("0.5min" is 30, "30.5" is 30); None
    where it reads no such time (its range aside: the server says that in its own words)."""
    whole = C_INTEGER.match(text)
    end = whole.end() if whole else 0
    if text[end:end + 1] in (".", "e", "E"):
        found = C_FLOAT.match(text)
        if found is None:
            return None
        number, end = (float.fromhex if found[2] else float)(found[0].strip()), found.end()
    elif whole:
        digits = whole[2].lower()
        number = int(whole[1] + digits, 16 if digits.startswith("0x") else 8 if digits.startswith("0") else 10)
    else:
        return None
    unit = UNIT.fullmatch(text, end)
    if unit is None or unit[1] not in (None, *TIME_UNITS):
        return None
    if unit[1] is not None:
        names = list(TIME_UNITS)
        number *= TIME_UNITS[unit[1]]
        smaller = names.index(unit[1]) + 1
        if smaller < len(names):
            number = round(number / TIME_UNITS[names[smaller]]) * TIME_UNITS[names[smaller]]
    if not math.isfinite(number) or not -2**31 <= round(number) < 2**31:  # an int, in C
        return None
    return float(round(number))


def checkpoint_timeout_s(settings: dict[str, Any]) -> float | None:
    """The cell's checkpoint_timeout in seconds (its unit: seconds), the server's default when it sets
    none; None when it is not a time the server reads (the server then refuses it, in its own words)."""
    value = next((v for k, v in settings.items() if k.lower() == "checkpoint_timeout"), CHECKPOINT_TIMEOUT_S)
    return seconds(value if isinstance(value, str) else conf_value(value))


def preload_libraries(user_value: Any) -> str:
    """storlab's preload library first, then the user's (each once)."""
    names = [STORLAB_PRELOAD]
    for item in str(user_value).split(","):
        item = item.strip().strip('"').strip()
        if item and item not in names:
            names.append(item)
    return ",".join(names)


def conf_value(value: Any) -> str:
    """A value as postgresql.conf reads it: a quoted string with quotes doubled and backslashes escaped
    (the file's strings read backslash escapes)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


class PostgresSettings(common.Settings):
    title = "PostgreSQL"
    # An extension's setting is prefix.name (pg_wait_sampling.profile_period).
    name_pattern = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?")
    name_form = "letters, digits, '_' or '$', and one '.' for an extension's setting"
    # A user's value would open the instance to the network, move its files, hide its log or break the probes.
    owned = {
        "port": common.SOCKET_ONLY,
        "listen_addresses": common.SOCKET_ONLY,
        "unix_socket_directories": common.SOCKET_ONLY,
        "unix_socket_group": common.SOCKET_ONLY,
        "unix_socket_permissions": common.SOCKET_ONLY,
        "data_directory": common.FILES,
        "config_file": common.FILES,
        "external_pid_file": common.FILES,
        "hba_file": common.AUTH,
        "ident_file": common.AUTH,
        "logging_collector": common.LOG,
        "log_destination": common.LOG,
        "max_connections": common.CONNECTIONS,
        "pg_wait_sampling.profile_period": common.PROBE,
        "pg_wait_sampling.profile_pid": common.PROBE,
        "pg_wait_sampling.profile_queries": common.PROBE,
    }
    layout_owned = {"min_wal_size": "log_size", "temp_tablespaces": "temp_on"}
    server_programs = {
        "archive_command": common.PROGRAM,
        "restore_command": common.PROGRAM,
        "archive_cleanup_command": common.PROGRAM,
        "recovery_end_command": common.PROGRAM,
        "ssl_passphrase_command": common.PROGRAM,
        "archive_library": common.LIBRARY,
        "shared_preload_libraries": common.LIBRARY,
        "session_preload_libraries": common.LIBRARY,
        "local_preload_libraries": common.LIBRARY,
        "jit_provider": common.LIBRARY,
        "oauth_validator_libraries": common.LIBRARY,  # 18
        "output_plugin_libraries": common.LIBRARY,
        "dynamic_library_path": f"{common.LIBRARY} from where it names",
        "extension_destdir": f"{common.LIBRARY} from where it names (Debian's setting)",
        "extension_control_path": f"{common.LIBRARY} and runs the extension scripts found where it names",  # 18
    }
    never = {"include": common.INCLUDE, "include_dir": common.INCLUDE, "include_if_exists": common.INCLUDE}

    def __init__(self, version: str = DEFAULT_VERSION):
        self.version = version  # whose server has the last word: a setting one version lacks is refused for it

    def for_version(self, version: str | None) -> "PostgresSettings":
        settings = PostgresSettings(version or DEFAULT_VERSION)
        settings.title = f"PostgreSQL {settings.version}"  # "PostgreSQL 15 has no io_method"
        return settings

    def value(self, value: Any) -> str:
        return conf_value(value)

    def load_problem(self, settings: dict[str, Any], layout_keys: set[str],
                     allow_server_programs: bool = False) -> tuple[str, str] | None:
        """As every engine's, and each checkpoint_timeout a time the server reads: a run of
        checkpoint_cycles is sized by it when the cells are made, before the server is asked."""
        found = super().load_problem(settings, layout_keys, allow_server_programs)
        if found:
            return found
        for name, given in settings.items():
            if self.canonical(name) != "checkpoint_timeout":
                continue
            for value in given if isinstance(given, list) else [given]:
                if checkpoint_timeout_s({name: value}) is None:
                    return name, (f"{common.show(value)} is not a time PostgreSQL reads (a number and a unit: us, "
                                  'ms, s, min, h or d, such as "30s" or "0.5min"; a bare number counts seconds)')
        return None

    def size_bytes(self, value: Any) -> int | None:
        """A memory unit makes a value a size; a bare number counts in its setting's own unit, which
        the file does not say."""
        match = SIZE.fullmatch(value) if isinstance(value, str) else None
        return int(match[1]) * MEMORY_UNITS[match[2]] if match else None

    def known_names(self) -> set[str]:
        out = common.output([str(bin_dir(self.version) / "postgres"), "--describe-config"])
        return {line.split("\t", 1)[0].lower() for line in out.splitlines() if line.strip()}

    def name_problem(self, name: str, known: set[str], settings: dict[str, Any]) -> str | None:
        """The list leaves out settings not in the sample file (such as application_name): postgres -C
        then has the last word on a plain name; an extension's setting (prefix.name) is known only with
        the extension preloaded."""
        if any(form in known for form in self.forms(name)) or "." not in name:
            return None
        preload = self._preload(settings)
        if name.split(".", 1)[0].lower() in preload:
            return None  # an extension's setting: its library checks it when the server starts
        return (f"unknown setting: PostgreSQL knows an extension's settings only with the extension "
                f"in shared_preload_libraries (now: {', '.join(preload)})")

    @staticmethod
    def _preload(settings: dict[str, Any]) -> list[str]:
        wanted = settings.get("shared_preload_libraries", "")
        return preload_libraries(",".join(map(str, wanted)) if isinstance(wanted, list) else wanted).split(",")

    def value_problems(self, settings: dict[str, Any]) -> tuple[str, str] | None:
        """A preload library that is not installed."""
        libdir = lib_dir(bin_dir(self.version))
        for name, given in settings.items():
            if self.canonical(name) != "shared_preload_libraries":
                continue
            for one in (given if isinstance(given, list) else [given]):
                for library in preload_libraries(one).split(",")[1:]:
                    if not (Path(library).is_absolute() or (libdir / f"{library}.so").exists()):
                        return name, f"no library {library} in {libdir}"
        return None

    def verdict(self, settings: dict[str, Any], known: set[str], warnings: list[str]) -> tuple[str, str] | None:
        user = os_users.server_user()
        files = {"postgresql.conf": "".join(f"{k} = {conf_value(v)}\n" for k, v in settings.items()),
                 "postgresql.auto.conf": ""}
        with common.throwaway_configuration(user, files) as folder:
            conf = folder / "postgresql.conf"
            code, out = user_tools.run_tool(user, [str(bin_dir(self.version) / "postgres"), "-D", str(folder), "-C", "port"])
        if code == 0:
            return None
        lines = [log.message(line) for line in out.splitlines()
                 if all(named == str(conf) for named in FILE_NAMED.findall(line))]
        for i, line in enumerate(lines):
            name = self.blamed(line, settings) if line.startswith(("LOG:", "FATAL:", "ERROR:")) else None
            if name and "unrecognized configuration parameter" in line:
                return name, self.unknown(name, known)
            if name and "skipping missing" not in line:
                hint = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("HINT:") else ""
                message = line.split(":", 1)[1].strip() + (f" ({hint})" if hint else "")
                return name, f"PostgreSQL refuses {common.show(settings[name])}: {message}"
        return next(iter(settings)), f"PostgreSQL refuses these settings: {' | '.join(lines[-2:]) or 'it does not say why'}"
