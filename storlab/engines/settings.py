"""`[engine_settings]`: the check of a user's settings, shared by the engines; each engine's package
gives its grammar (settings.py there: names, the settings storlab owns, how a value is written, how
the installed server is asked).

Checked in two steps. When the experiment file loads (no engine needed): each name is a plain setting
name (so it cannot add a line to a configuration file), is not one storlab sets itself, does not bring
in another file's settings (an include: refused always), does not run a program or load a library on
the server unless the experiment is run here with `storlab run --allow-server-programs` (a fleet worker
never takes one), and each value is a string, number or boolean without control characters. Before
`storlab run` (and `--dry-run`) starts anything: each name is one the installed engine knows (its own
list), and each value is one the engine accepts (the engine, as the servers' OS user, reads a
throwaway configuration file; what it says about any other file is never repeated), so a mistake
costs one line instead of a failed run per cell.
"""

from __future__ import annotations

import difflib
import math
import re
import shutil
import subprocess
import tempfile
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from storlab.errors import RunFailed, UserError
from storlab.lab import os_users, user_tools
from storlab.sizes import parse_size

MAX_TEXT = 4096
MAX_NAME = 63

SOCKET_ONLY = "storlab sets it: the instance listens on its own unix socket only, never on TCP"
FILES = "storlab sets it: the instance's files live in the placements' directories"
LOG = "storlab sets it: storlab reads the server's messages from its log"
CONNECTIONS = "storlab sets it from the workload's connections"
PROBE = "storlab sets it: the wait statistics depend on it"
AUTH = "storlab sets it: the instance's authentication is storlab's"
COLD = "storlab sets it: each cell starts with a cold buffer pool"
USER = "storlab sets it: the servers run as the OS user storlab"

PROGRAM = "runs a program on the server"
LIBRARY = "loads a library into the server"
ALLOWED_WITH = "storlab run --allow-server-programs"
INCLUDE = ("brings in another file's settings, which would go around every check here (and the settings storlab "
           "sets); write them in [engine_settings]")


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


def combinations(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Enough settings files that every value of every setting is in one of them."""
    lists = {k: (v if isinstance(v, list) else [v]) for k, v in settings.items()}
    width = max((len(v) for v in lists.values()), default=0)
    return [{k: values[i % len(values)] for k, values in lists.items()} for i in range(width)]


def output(argv: list[str]) -> str:
    """What a server prints about its settings (about 0.05 s for either engine: not worth a cache)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunFailed(f"{argv[0]}: cannot list the engine's settings: {exc}") from None
    return done.stdout


@contextmanager
def throwaway_configuration(user: os_users.OsUser, files: dict[str, str]) -> Iterator[Path]:
    """A folder holding `files` (name: text) for the installed engine to read a user's settings from,
    as the servers' OS user `user`; removed on every path."""
    folder = Path(tempfile.mkdtemp(prefix="storlab-settings-"))
    try:
        for name, text in files.items():
            (folder / name).write_text(text)
            (folder / name).chmod(0o644)  # mariadbd ignores a world-writable option file
        user_tools.give_to(folder, user)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def setting_bytes(settings: dict[str, Any], name: str, default: int, unit: int) -> int:
    """A size setting as the engine reads it: a bare number counts in `unit` (PostgreSQL's WAL sizes
    in MB, MariaDB's in bytes)."""
    value = next((v for k, v in settings.items() if k.lower() == name), None)
    if value is None or isinstance(value, bool):
        return default
    try:
        return value * unit if isinstance(value, int) else parse_size(str(value))
    except ValueError:
        return default  # the engine check names a value it cannot read


def show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


class Settings(ABC):
    """One engine's settings grammar. Names in `owned` and `layout_owned` are in the engine's own
    spelling, lower case (see `canonical`)."""

    title: str  # the engine as its messages name it
    name_pattern: re.Pattern
    name_form: str  # what name_pattern allows, in words
    owned: dict[str, str]  # settings storlab sets -> why a user's value is refused
    owned_prefixes: tuple[tuple[str, str], ...] = ()
    layout_owned: dict[str, str] = {}  # settings a layout key sets when the experiment gives that key
    # Settings that run a program or load a library on the server -> what they do: taken only from an
    # experiment run here by whoever runs it (storlab run --allow-server-programs), never from a fleet's store.
    server_programs: dict[str, str] = {}
    server_program_prefixes: tuple[tuple[str, str], ...] = ()
    # Settings refused always, the switch or not -> why: an included file could set anything.
    never: dict[str, str] = {}
    prefixes: tuple[str, ...] = ()  # forms of a name that reach the same setting (MariaDB's loose-x)

    def canonical(self, name: str) -> str:
        """The engine's own spelling of a name."""
        return name.lower()

    def size_bytes(self, value: Any) -> int | None:
        """The bytes a value names when the engine reads it as a size whatever the setting ("4MB" and
        "4096kB" are one value); None for any other value."""
        return None

    def spellings(self, form: str) -> set[str]:
        """How a server message may spell a setting."""
        return {form}

    @abstractmethod
    def value(self, value: Any) -> str:
        """A value as the engine's configuration file reads it, quoted so that it stays on its line."""

    @abstractmethod
    def known_names(self) -> set[str]:
        """The installed engine's own list of settings."""

    @abstractmethod
    def verdict(self, settings: dict[str, Any], known: set[str], warnings: list[str]) -> tuple[str, str] | None:
        """The installed engine's word on one combination of values: (name, what is wrong), or None
        (adding the values it adjusts to `warnings`)."""

    def forms(self, name: str) -> list[str]:
        """Every setting a name can reach."""
        base = self.canonical(name)
        return [base] + [base[len(p):] for p in self.prefixes if base.startswith(p)]

    def owned_reason(self, name: str, layout_keys: set[str]) -> str | None:
        for form in self.forms(name):
            if form in self.owned:
                return self.owned[form]
            for prefix, reason in self.owned_prefixes:
                if form.startswith(prefix):
                    return reason
            key = self.layout_owned.get(form)
            if key in layout_keys:
                return f"layout.{key} sets it in this experiment"
        return None

    def server_program(self, name: str) -> str | None:
        """What a setting runs or loads on the server, if it does."""
        for form in self.forms(name):
            if form in self.server_programs:
                return self.server_programs[form]
            for prefix, what in self.server_program_prefixes:
                if form.startswith(prefix):
                    return what
        return None

    def load_problem(self, settings: dict[str, Any], layout_keys: set[str],
                     allow_server_programs: bool = False) -> tuple[str, str] | None:
        """The first (name, what is wrong) a file alone shows: name syntax, duplicates, owned settings,
        includes, and settings that run programs or load libraries unless `allow_server_programs`."""
        seen: dict[str, str] = {}
        for name in settings:
            if len(name) > MAX_NAME or not self.name_pattern.fullmatch(name):
                return name, f"not a setting name: use at most {MAX_NAME} {self.name_form}"
            key = self.canonical(name)
            if key in seen:
                return name, f"the same setting as {seen[key]}"
            seen[key] = name
            reason = self.owned_reason(name, layout_keys) or next(
                (self.never[form] for form in self.forms(name) if form in self.never), None)
            if reason:
                return name, reason
            what = self.server_program(name)
            if what and not allow_server_programs:
                return name, f"{what}; taken only with {ALLOWED_WITH} (a fleet worker never takes it)"
        return None

    def name_problem(self, name: str, known: set[str], settings: dict[str, Any]) -> str | None:
        return None if any(form in known for form in self.forms(name)) else self.unknown(name, known)

    def value_problems(self, settings: dict[str, Any]) -> tuple[str, str] | None:
        """What the engine can tell of a value without reading it as a setting (a library it lacks)."""
        return None

    def unknown(self, name: str, known: set[str]) -> str:
        close = difflib.get_close_matches(self.forms(name)[0], known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown setting: {self.title} has no {name}{hint}"

    def blamed(self, line: str, settings: dict[str, Any]) -> str | None:
        """The user's setting a server message names, in any of the engine's spellings."""
        lowered = line.lower()
        for name in settings:
            for form in self.forms(name):
                # MariaDB names a size's ceiling after it (innodb_buffer_pool_size_max).
                if any(re.search(r"(?<![\w.-])" + re.escape(s) + r"(?:[_-]max)?(?![\w.-])", lowered)
                       for s in self.spellings(form)):
                    return name
        return None

    def first_problem(self, settings: dict[str, Any]) -> tuple[str, str] | list[str]:
        known = self.known_names()
        for name in settings:
            problem = self.name_problem(name, known, settings)
            if problem:
                return name, problem
        found = self.value_problems(settings)
        if found:
            return found
        warnings: list[str] = []
        for combination in combinations(settings):
            found = self.verdict(combination, known, warnings)
            if found:
                return found
        return list(dict.fromkeys(warnings))

    def for_version(self, version: str | None) -> "Settings":
        """The grammar checked against `version`'s server (an engine of one version: itself)."""
        return self

    def verify(self, experiment) -> list[str]:
        """Ask the installed engine, each version the experiment runs, about every setting its cells
        get; the first it refuses is the user's error (FILE:LINE: engine_settings[.VERSION].NAME: ...),
        a setting a version does not know among them. Returns the engine's warnings (a value it adjusts)."""
        model = experiment.model
        warnings: list[str] = []
        for version in model.versions() or [None]:
            settings = model.settings_for(version)
            if not settings:
                continue
            # A file that names versions hears which one refused; one that names none, as before versions.
            checker = self.for_version(version) if model.engine_version is not None else self
            found = checker.first_problem(settings)
            if isinstance(found, tuple):
                name, problem = found
                loc = ("engine_settings", version, name) if name in model.version_tables().get(version, {}) \
                    else ("engine_settings", name)
                raise UserError(f"{experiment.where(loc)}: {'.'.join(loc)}: {problem}")
            warnings += [w for w in found if w not in warnings]
        return warnings
