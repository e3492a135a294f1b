"""The experiment file: load a TOML file, validate it, and say what is wrong in one line.

A list value is a factor (one cell per value); a scalar is a constant of every cell.
Errors read `FILE:LINE: KEY: what is wrong`, so a user finds the mistake without reading a traceback.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from storlab.errors import UserError

TMPFS = "tmpfs"
# A RAM disk placement lives under the tmpfs every Linux mounts; storlab needs no mount of its own.
TMPFS_ROOT = Path("/dev/shm")

ENGINES = ("postgres", "mariadb")
WORKLOAD_KINDS = ("random-insert",)

# What each engine can honour; a key outside its set is an error, never silently ignored.
LAYOUT_KEYS_BY_ENGINE = {
    "postgres": {"data_files", "data_on", "log_on", "log_size", "striping"},
    "mariadb": {"data_files", "data_on", "log_on", "log_size", "page_size", "file_kind", "striping"},
}
PAGE_SIZES = ("4k", "8k", "16k", "32k", "64k")
FILE_KINDS = ("partitions", "system-tablespace")
STRIPINGS = ("round-robin", "contiguous")

_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[bB]?\s*$")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """'256MB' -> bytes; raises ValueError with the accepted forms."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f'expected a size like "256MB" or "1GB", got {json.dumps(text)}')
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_factor(value: Any, check, what: str) -> Any:
    """Validate a scalar or a non-empty list of scalars with `check`, naming `what` in the error."""
    if isinstance(value, list):
        if not value:
            raise ValueError(f"expected {what} or a list of them, got an empty list")
        return [check(v, what, True) for v in value]
    return check(value, what, False)


def _positive_int(v: Any, what: str, in_list: bool) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"expected {what} or a list of them, got {json.dumps(v)}")
    return v


def _choice(choices):
    def check(v: Any, what: str, in_list: bool) -> str:
        if v not in choices:
            raise ValueError(f"expected {what} or a list of them, got {json.dumps(v)}")
        return v

    return check


def _size_text(v: Any, what: str, in_list: bool) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected {what} or a list of them, got {json.dumps(v)}")
    try:
        parse_size(v)
    except ValueError:
        raise ValueError(f"expected {what} or a list of them, got {json.dumps(v)}") from None
    return v


def _placement_ref(v: Any, what: str, in_list: bool) -> str | dict[str, int]:
    """A placement name, or a ratio across placements such as {disk = 7, ram = 1}."""
    if isinstance(v, str) and v:
        return v
    if isinstance(v, dict) and v and all(isinstance(k, str) for k in v):
        for name, weight in v.items():
            if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
                raise ValueError(f"ratio weight for {json.dumps(name)} must be a positive integer, got {json.dumps(weight)}")
        return dict(v)
    raise ValueError(f"expected {what} or a list of them, got {json.dumps(v)}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Layout(_Strict):
    data_files: int | list[int] = 1
    data_on: Any = None
    log_on: Any = None
    log_size: str | list[str] | None = None
    page_size: str | list[str] | None = None
    file_kind: str | list[str] | None = None
    striping: str | list[str] | None = None

    @field_validator("data_files", mode="before")
    @classmethod
    def _data_files(cls, v):
        return _check_factor(v, _positive_int, "a positive integer")

    @field_validator("data_on", "log_on", mode="before")
    @classmethod
    def _placements(cls, v):
        if v is None:
            return v
        return _check_factor(v, _placement_ref, "a placement name (or a ratio table for data_on)")

    @field_validator("log_size", mode="before")
    @classmethod
    def _log_size(cls, v):
        return None if v is None else _check_factor(v, _size_text, 'a size such as "1GB"')

    @field_validator("page_size", mode="before")
    @classmethod
    def _page_size(cls, v):
        return None if v is None else _check_factor(v, _choice(PAGE_SIZES), "one of " + ", ".join(PAGE_SIZES))

    @field_validator("file_kind", mode="before")
    @classmethod
    def _file_kind(cls, v):
        return None if v is None else _check_factor(v, _choice(FILE_KINDS), "one of " + ", ".join(FILE_KINDS))

    @field_validator("striping", mode="before")
    @classmethod
    def _striping(cls, v):
        return None if v is None else _check_factor(v, _choice(STRIPINGS), "one of " + ", ".join(STRIPINGS))


class Workload(_Strict):
    kind: str
    connections: int | list[int] = 16
    rows_per_connection: int | list[int] = 100_000
    batch: int | list[int] = 1000

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, v):
        return _choice(WORKLOAD_KINDS)(v, "one of " + ", ".join(WORKLOAD_KINDS), False)

    @field_validator("connections", "rows_per_connection", "batch", mode="before")
    @classmethod
    def _counts(cls, v):
        return _check_factor(v, _positive_int, "a positive integer")


def _setting_value(v: Any, what: str, in_list: bool) -> str | int | float | bool:
    if isinstance(v, (str, int, float, bool)):
        return v
    raise ValueError(f"expected {what} or a list of them, got {json.dumps(v, default=str)}")


class Exclude(BaseModel):
    model_config = ConfigDict(extra="allow")


class ExperimentModel(_Strict):
    name: str
    engine: Literal["postgres", "mariadb"]
    repetitions: int = 3
    placements: dict[str, str]
    layout: Layout = Layout()
    workload: Workload
    engine_settings: dict[str, Any] = {}
    exclude: list[dict[str, Any]] = []

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"expected letters, digits, '-', '_' or '.', got {json.dumps(v)}")
        return v

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, v):
        return _choice(ENGINES)(v, "one of " + ", ".join(ENGINES), False)

    @field_validator("repetitions", mode="before")
    @classmethod
    def _repetitions(cls, v):
        return _positive_int(v, "a positive integer", False)

    @field_validator("placements", mode="before")
    @classmethod
    def _placement_paths(cls, v):
        if not isinstance(v, dict) or not v:
            raise ValueError('expected a table of named places, such as disk = "./lab/disk"')
        for name, path in v.items():
            if not isinstance(path, str) or not path:
                raise ValueError(f"{name}: expected a directory path or \"tmpfs\", got {json.dumps(path)}")
        return v

    @field_validator("engine_settings", mode="before")
    @classmethod
    def _settings(cls, v):
        return {k: _check_factor(val, _setting_value, "a string, number or boolean") for k, val in v.items()}

    @model_validator(mode="after")
    def _cross_checks(self):
        declared = set(self.placements)
        for key in ("data_on", "log_on"):
            for ref in _values(getattr(self.layout, key)):
                names = [] if ref is None else ([ref] if isinstance(ref, str) else list(ref))
                for name in names:
                    if name not in declared:
                        raise _KeyError(("layout", key), f"unknown placement {json.dumps(name)} (declared: {', '.join(sorted(declared))})")
            if key == "log_on" and any(isinstance(r, dict) for r in _values(self.layout.log_on)):
                raise _KeyError(("layout", "log_on"), "the log lives on one placement; a ratio is only for data_on")
        honoured = LAYOUT_KEYS_BY_ENGINE[self.engine]
        for key in self.layout.model_fields_set:
            if key not in honoured and getattr(self.layout, key) is not None:
                raise _KeyError(("layout", key), f"not supported by engine {self.engine}")
        return self


class _KeyError(ValueError):
    """A cross-field error that knows which key it belongs to."""

    def __init__(self, loc: tuple[str, ...], message: str):
        super().__init__(message)
        self.loc = loc


@dataclass(frozen=True)
class Experiment:
    """A validated experiment, with the file it came from (for relative placements and errors)."""

    model: ExperimentModel
    path: Path
    source: str
    factors: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def engine(self) -> str:
        return self.model.engine

    @property
    def repetitions(self) -> int:
        return self.model.repetitions

    def placement_path(self, name: str) -> Path:
        """Where a placement lives: relative paths are relative to the experiment file."""
        raw = self.model.placements[name]
        if raw == TMPFS:
            return TMPFS_ROOT
        path = Path(raw).expanduser()
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    def identity(self) -> dict[str, Any]:
        """What must not change between two runs into the same results folder (repetitions may)."""
        body = self.model.model_dump(mode="json")
        body.pop("repetitions")
        return body

    def identity_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()


def _factors(model: ExperimentModel) -> dict[str, list[Any]]:
    """Every key whose value is a list, under its dotted name, in file order."""
    found: dict[str, list[Any]] = {}
    for section in ("layout", "workload"):
        for key, value in getattr(model, section).model_dump().items():
            if isinstance(value, list):
                found[f"{section}.{key}"] = value
    for key, value in model.engine_settings.items():
        if isinstance(value, list):
            found[f"engine_settings.{key}"] = value
    return found


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
    key_line = re.compile(r"^\s*" + re.escape(leaf) + r"\s*=")
    dotted = re.compile(r"^\s*" + r"\s*\.\s*".join(map(re.escape, keys[: (table or 0) + 1])) + r"\s*=")
    for i in range(start, len(lines)):
        if table and i > start and lines[i].lstrip().startswith("[") and not lines[i].lstrip().startswith("[["):
            break
        if key_line.match(lines[i]) or dotted.match(lines[i]):
            return i + 1
    return start or None


def _where(path: Path, text: str, loc: tuple) -> str:
    line = locate(text, loc)
    return f"{path.name}:{line}" if line else path.name


def _first_error(exc: ValidationError) -> tuple[tuple, str]:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, _KeyError):
        return cause.loc, str(cause)
    if err["type"] == "missing":
        return loc, "missing"
    if err["type"] == "extra_forbidden":
        return loc, "unknown key"
    message = str(cause) if cause is not None else err["msg"]
    # pydantic's union errors name each branch; the user wants the value that was wrong.
    if "Input should be" in message and "input" in err:
        message = f"{message.split(',')[0].replace('Input should be', 'expected')}, got {json.dumps(err['input'], default=str)}"
    return loc, message


def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file; any mistake raises UserError naming file, line and key."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such experiment file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path.name}: not valid TOML: {exc}") from None
    try:
        model = ExperimentModel.model_validate(raw)
    except ValidationError as exc:
        loc, message = _first_error(exc)
        dotted = ".".join(str(k) for k in loc if not isinstance(k, int)) or "(top level)"
        raise UserError(f"{_where(path, text, loc)}: {dotted}: {message}") from None
    if model.layout.data_on is None:
        raise UserError(f"{_where(path, text, ('layout',))}: layout.data_on: missing (name the placement that holds the data)")
    factors = _factors(model)
    _check_excludes(path, text, model, factors)
    return Experiment(model=model, path=path.resolve(), source=text, factors=factors)


def short_name(dotted: str) -> str:
    return dotted.split(".", 1)[1]


def _check_excludes(path: Path, text: str, model: ExperimentModel, factors: dict[str, list[Any]]) -> None:
    known = {short_name(k) for k in factors}
    for rule in model.exclude:
        for key in rule:
            if key not in known:
                raise UserError(
                    f"{_where(path, text, ('exclude',))}: exclude: {json.dumps(key)} is not a factor "
                    f"(factors: {', '.join(sorted(known)) or 'none'})"
                )
