"""`[engine_settings]`: what storlab knows about each engine's settings.

Checked in two steps. When the experiment file loads (no engine needed): each name is a plain setting
name (so it cannot add a line to a configuration file), is not one storlab sets itself, and each value
is a string, number or boolean without control characters. Before `storlab run` (and `--dry-run`)
starts anything: each name is one the installed engine knows (its own list: `postgres
--describe-config`, `mariadbd --verbose --help`), and each value is one the engine accepts (PostgreSQL
reads a throwaway configuration file with `postgres -C`; mariadbd parses a throwaway option file with
`--help`), so a mistake costs one line instead of a failed run per cell.
"""

from __future__ import annotations

import difflib
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from storlab.errors import RunFailed, UserError

MAX_TEXT = 4096

_NAME = {
    # An extension's setting is prefix.name (pg_wait_sampling.profile_period).
    "postgres": re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?"),
    "mariadb": re.compile(r"[A-Za-z][A-Za-z0-9_-]*"),
}
_NAME_FORM = {
    "postgres": "letters, digits, '_' or '$', and one '.' for an extension's setting",
    "mariadb": "letters, digits, '_' or '-'",
}
MAX_NAME = 63

_SOCKET_ONLY = "storlab sets it: the instance listens on its own unix socket only, never on TCP"
_FILES = "storlab sets it: the instance's files live in the placements' directories"
_LOG = "storlab sets it: storlab reads the server's messages from its log"
_CONNECTIONS = "storlab sets it from the workload's connections"
_PROBE = "storlab sets it: the wait statistics depend on it"
_AUTH = "storlab sets it: the instance's authentication is storlab's"
_COLD = "storlab sets it: each cell starts with a cold buffer pool"
_USER = "storlab sets it: the servers run as the OS user storlab"

# Settings storlab owns: a user's value would open the instance to the network, move its files, hide
# its log or break the probes. Names in the engine's own spelling, lower case ('_' for MariaDB's '-').
OWNED = {
    "postgres": {
        "port": _SOCKET_ONLY,
        "listen_addresses": _SOCKET_ONLY,
        "unix_socket_directories": _SOCKET_ONLY,
        "unix_socket_group": _SOCKET_ONLY,
        "unix_socket_permissions": _SOCKET_ONLY,
        "data_directory": _FILES,
        "config_file": _FILES,
        "external_pid_file": _FILES,
        "hba_file": _AUTH,
        "ident_file": _AUTH,
        "logging_collector": _LOG,
        "log_destination": _LOG,
        "max_connections": _CONNECTIONS,
        "pg_wait_sampling.profile_period": _PROBE,
        "pg_wait_sampling.profile_pid": _PROBE,
        "pg_wait_sampling.profile_queries": _PROBE,
    },
    "mariadb": {
        "port": _SOCKET_ONLY,
        "extra_port": _SOCKET_ONLY,
        "bind_address": _SOCKET_ONLY,
        "skip_networking": _SOCKET_ONLY,
        "socket": _SOCKET_ONLY,
        "datadir": _FILES,
        "basedir": _FILES,
        "pid_file": _FILES,
        "innodb_log_group_home_dir": "layout.log_on sets it",
        "innodb_data_home_dir": "layout.data_on sets it",
        "innodb_data_file_path": "layout.data_files sets it",
        "innodb_file_per_table": "layout.file_kind sets it",
        "log_error": _LOG,
        "skip_grant_tables": _AUTH,
        "user": _USER,
        "max_connections": _CONNECTIONS,
        "innodb_buffer_pool_load_at_startup": _COLD,
        "innodb_buffer_pool_dump_at_shutdown": _COLD,
        "performance_schema": _PROBE,
        "performance_schema_instrument": _PROBE,
    },
}
OWNED_PREFIXES = {"postgres": (), "mariadb": (("performance_schema_consumer_", _PROBE),)}
# Settings a layout key sets when the experiment gives that key.
LAYOUT_OWNED = {
    "postgres": {"min_wal_size": "log_size"},
    "mariadb": {"innodb_log_file_size": "log_size", "innodb_page_size": "page_size"},
}
# MariaDB reads `loose-x`, `skip-x`, `enable-x`, `disable-x` and `maximum-x` as forms of x.
_MARIADB_PREFIXES = ("loose_", "skip_", "enable_", "disable_", "maximum_")

# Preload libraries storlab needs, joined with the user's instead of replaced by them.
STORLAB_PRELOAD = "pg_wait_sampling"


def canonical(engine: str, name: str) -> str:
    """The engine's own spelling of a name: PostgreSQL folds case, MariaDB also reads '-' as '_'."""
    name = name.lower()
    return name.replace("-", "_") if engine == "mariadb" else name


def _forms(engine: str, name: str) -> list[str]:
    """Every setting a name can reach (MariaDB's prefixes included)."""
    base = canonical(engine, name)
    forms = [base]
    if engine == "mariadb":
        for prefix in _MARIADB_PREFIXES:
            if base.startswith(prefix):
                forms.append(base[len(prefix):])
    return forms


def owned_reason(engine: str, name: str, layout_keys: set[str]) -> str | None:
    for form in _forms(engine, name):
        if form in OWNED[engine]:
            return OWNED[engine][form]
        for prefix, reason in OWNED_PREFIXES[engine]:
            if form.startswith(prefix):
                return reason
        key = LAYOUT_OWNED[engine].get(form)
        if key in layout_keys:
            return f"layout.{key} sets it in this experiment"
    return None


def value_problem(value: Any) -> str | None:
    """A value a configuration line can hold: written quoted, it can never start another line."""
    if isinstance(value, bool) or isinstance(value, int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "expected a finite number"
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            return f"the value is {len(value)} characters long; the limit is {MAX_TEXT}"
        return None
    return "expected a string, number or boolean"


def load_problem(engine: str, settings: dict[str, Any], layout_keys: set[str]) -> tuple[str, str] | None:
    """The first (name, what is wrong) a file alone shows: name syntax, duplicates, owned settings."""
    seen: dict[str, str] = {}
    for name in settings:
        if len(name) > MAX_NAME or not _NAME[engine].fullmatch(name):
            return name, f"not a setting name: use at most {MAX_NAME} {_NAME_FORM[engine]}"
        key = canonical(engine, name)
        if key in seen:
            return name, f"the same setting as {seen[key]}"
        seen[key] = name
        reason = owned_reason(engine, name, layout_keys)
        if reason:
            return name, reason
    return None


def preload_libraries(user_value: Any) -> str:
    """storlab's preload library first, then the user's (each once)."""
    names = [STORLAB_PRELOAD]
    for item in str(user_value).split(","):
        item = item.strip().strip('"').strip()
        if item and item not in names:
            names.append(item)
    return ",".join(names)


def postgres_value(value: Any) -> str:
    """A value as postgresql.conf reads it: a quoted string with quotes doubled and backslashes escaped
    (the file's strings read backslash escapes)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


def mariadb_value(value: Any) -> str:
    """A value as my.cnf reads it: quoted when it holds spaces, quotes, '#' or backslashes."""
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    text = str(value)
    if not text or any(c.isspace() for c in text) or any(c in text for c in "#'\"\\"):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


# -- what the installed engine says --------------------------------------------------------------


def known_names(engine: str) -> set[str]:
    """The engine's own list of settings (about 0.05 s for either engine: not worth a cache)."""
    if engine == "postgres":
        from storlab.engines.postgres import bin_dir

        out = _output([str(bin_dir() / "postgres"), "--describe-config"])
        return {line.split("\t", 1)[0].lower() for line in out.splitlines() if line.strip()}
    from storlab.engines.mariadb import binaries

    out = _output([str(binaries()[0]), "--no-defaults", "--verbose", "--help"])
    table = out.split("\n-------", 1)[-1].split("\n", 1)[-1].split("\n\n", 1)[0]  # to the blank line after it
    return {canonical(engine, line.split()[0]) for line in table.splitlines() if line.strip()}


def _output(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunFailed(f"{argv[0]}: cannot list the engine's settings: {exc}") from None
    return done.stdout


def _name_problem(engine: str, name: str, known: set[str], preload: list[str]) -> str | None:
    """MariaDB's list is complete. PostgreSQL's leaves out settings not in its sample file (such as
    application_name): postgres -C then has the last word on a plain name; an extension's setting
    (prefix.name) is known only with the extension preloaded."""
    forms = _forms(engine, name)
    if any(form in known for form in forms):
        return None
    if engine == "postgres" and "." in name:
        prefix = name.split(".", 1)[0].lower()
        if prefix in preload:
            return None  # an extension's setting: its library checks it when the server starts
        return (f"unknown setting: PostgreSQL knows an extension's settings only with the extension "
                f"in shared_preload_libraries (now: {', '.join(preload)})")
    return None if engine == "postgres" else unknown(engine, name, known)


def unknown(engine: str, name: str, known: set[str]) -> str:
    close = difflib.get_close_matches(_forms(engine, name)[0], known, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown setting: {'PostgreSQL' if engine == 'postgres' else 'MariaDB'} has no {name}{hint}"


def _library_problem(value: Any) -> str | None:
    from storlab.engines.postgres import bin_dir

    libdir = bin_dir().parent / "lib"
    for name in preload_libraries(value).split(",")[1:]:
        if not (Path(name).is_absolute() or (libdir / f"{name}.so").exists()):
            return f"no library {name} in {libdir}"
    return None


def _combinations(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Enough settings files that every value of every setting is in one of them."""
    lists = {k: (v if isinstance(v, list) else [v]) for k, v in settings.items()}
    width = max((len(v) for v in lists.values()), default=0)
    return [{k: values[i % len(values)] for k, values in lists.items()} for i in range(width)]


def verify(experiment) -> list[str]:
    """Ask the installed engine about every setting of the experiment; the first it refuses is the
    user's error (FILE:LINE: engine_settings.NAME: ...). Returns the engine's warnings (a value it adjusts)."""
    settings = experiment.model.engine_settings
    if not settings:
        return []
    engine = experiment.engine
    found = _first_problem(engine, settings)
    if isinstance(found, tuple):
        name, problem = found
        raise UserError(f"{experiment.where(('engine_settings', name))}: engine_settings.{name}: {problem}")
    return found


def _first_problem(engine: str, settings: dict[str, Any]) -> tuple[str, str] | list[str]:
    known = known_names(engine)
    wanted = settings.get("shared_preload_libraries", "")
    preload = preload_libraries(",".join(map(str, wanted)) if isinstance(wanted, list) else wanted).split(",")
    for name in settings:
        problem = _name_problem(engine, name, known, preload)
        if problem:
            return name, problem
    if engine == "postgres":
        for name, value in settings.items():
            if canonical(engine, name) == "shared_preload_libraries":
                for one in (value if isinstance(value, list) else [value]):
                    problem = _library_problem(one)
                    if problem:
                        return name, problem
    warnings: list[str] = []
    for combination in _combinations(settings):
        found = _postgres_verdict(combination, known) if engine == "postgres" else _mariadb_verdict(combination, warnings)
        if found:
            return found
    return list(dict.fromkeys(warnings))


def blamed(engine: str, line: str, settings: dict[str, Any]) -> str | None:
    """The user's setting a server message names, in any of the engine's spellings."""
    lowered = line.lower()
    for name in settings:
        for form in _forms(engine, name):
            spellings = {form, form.replace("_", "-")} if engine == "mariadb" else {form}
            # MariaDB names a size's ceiling after it (innodb_buffer_pool_size_max).
            if any(re.search(r"(?<![\w.-])" + re.escape(s) + r"(?:[_-]max)?(?![\w.-])", lowered) for s in spellings):
                return name
    return None


_PG_PREFIX = re.compile(r"^.*?\[\d+\]\s+")


def postgres_message(line: str) -> str:
    """A PostgreSQL log line without its timestamp and pid ("FATAL:  x" as "FATAL: x")."""
    return re.sub(r"^([A-Z]+):\s+", r"\1: ", _PG_PREFIX.sub("", line).strip())


def _postgres_verdict(settings: dict[str, Any], known: set[str]) -> tuple[str, str] | None:
    from storlab import instances  # instances reads server logs with this module's help
    from storlab.engines.postgres import bin_dir

    user = instances.server_user()
    folder = Path(tempfile.mkdtemp(prefix="storlab-settings-"))
    try:
        conf = folder / "postgresql.conf"
        conf.write_text("".join(f"{k} = {postgres_value(v)}\n" for k, v in settings.items()))
        (folder / "postgresql.auto.conf").write_text("")
        instances.give_to(folder, user)
        code, out = instances.run_tool(user, [str(bin_dir() / "postgres"), "-D", str(folder), "-C", "port"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if code == 0:
        return None
    lines = [postgres_message(line) for line in out.splitlines()]
    for i, line in enumerate(lines):
        name = blamed("postgres", line, settings) if line.startswith(("LOG:", "FATAL:", "ERROR:")) else None
        if name and "unrecognized configuration parameter" in line:
            return name, unknown("postgres", name, known)
        if name and "skipping missing" not in line:
            hint = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("HINT:") else ""
            message = line.split(":", 1)[1].strip() + (f" ({hint})" if hint else "")
            return name, f"PostgreSQL refuses {_show(settings[name])}: {message}"
    return next(iter(settings)), f"PostgreSQL refuses these settings: {' | '.join(lines[-2:])}"


_MARIADB_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d\s+[\d:]+\s+\d+\s+")


def mariadb_message(line: str) -> str:
    """A MariaDB log line without its timestamp and thread id."""
    return _MARIADB_PREFIX.sub("", line).strip()


def _mariadb_verdict(settings: dict[str, Any], warnings: list[str]) -> tuple[str, str] | None:
    from storlab.engines.mariadb import binaries

    folder = Path(tempfile.mkdtemp(prefix="storlab-settings-"))
    try:
        conf = folder / "my.cnf"
        conf.write_text("[mysqld]\n" + "".join(f"{k} = {mariadb_value(v)}\n" for k, v in settings.items()))
        conf.chmod(0o644)  # mariadbd ignores a world-writable option file
        done = subprocess.run([str(binaries()[0]), f"--defaults-file={conf}", "--verbose", "--help"],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunFailed(f"mariadbd: cannot check the engine settings: {exc}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for line in map(mariadb_message, done.stderr.splitlines()):
        name = blamed("mariadb", line, settings)
        if name is None:
            continue
        if line.startswith("[ERROR]"):
            return name, f"MariaDB refuses {_show(settings[name])}: {line.removeprefix('[ERROR]').strip()}"
        if line.startswith("[Warning]"):
            warnings.append(f"engine_settings.{name}: MariaDB: {line.removeprefix('[Warning]').strip()}")
    return None


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
