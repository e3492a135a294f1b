"""The experiment's factors: every key given a list, named by its dotted key (`layout.data_files`),
the host and the engine's version among them, and the checks on them all (no value twice, a matrix
small enough to plan, references and exclusions that name real factors and values)."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from storlab import engines, factors
from storlab.experiment import places
from storlab.experiment.model import ExperimentModel, is_version
from storlab.factors import show
from storlab.labels import short_name
from storlab.sizes import format_size, parse_size
from storlab.workloads import KINDS

MAX_CELLS = 1000  # cell ids are 8 hex digits: this keeps a clash of two ids below 1 in 10,000


MAX_RUNS = 10_000


MAX_EXCLUDE_RULES = 1000


# `hosts`: each host runs the whole matrix, so the host is a factor (short name "host"), listed first.
HOST_FACTOR = "fleet.host"


# `engine_version`: the engine's version is a factor like any other (short name "engine_version"),
# listed after the host; a setting of one version's table ([engine_settings.18]) is nested in it.
VERSION_FACTOR = "engine.engine_version"


def nested_in(dotted: str) -> str | None:
    """The version a factor is nested in: a setting of [engine_settings.V] exists in V's cells alone."""
    parts = dotted.split(".", 2)
    return parts[1] if len(parts) == 3 and parts[0] == "engine_settings" and is_version(parts[1]) else None


def swept(model: ExperimentModel) -> dict[str, list[Any]]:
    """Every key whose value is a list, under its dotted name, in file order; the host first, then a
    device's, so the cells of one device format run one after another (a new format means a new device)."""
    found: dict[str, list[Any]] = {HOST_FACTOR: list(model.hosts)} if model.hosts else {}
    if isinstance(model.engine_version, list):
        found[VERSION_FACTOR] = list(model.engine_version)
    for name, raw in model.placements.items():
        if isinstance(raw, places.VolumeKeys):
            found.update({f"placements.{name}.{key}": values for key, values in raw.factors().items()})
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


def cell_count(declared: dict[str, list[Any]]) -> int:
    """How many cells the factors make: a factor nested in a version multiplies that version's cells only."""
    crossed = math.prod(len(v) for d, v in declared.items() if nested_in(d) is None and d != VERSION_FACTOR)
    versions = declared.get(VERSION_FACTOR) or sorted({nested_in(d) for d in declared if nested_in(d)}) or [None]
    return sum(crossed * math.prod(len(v) for d, v in declared.items() if nested_in(d) is not None and nested_in(d) == version)
               for version in versions)


def factor_loc(dotted: str) -> tuple[str, ...]:
    """The keys of the file a factor comes from."""
    if dotted == VERSION_FACTOR:
        return ("engine_version",)
    return tuple(dotted.split(".", 2)) if nested_in(dotted) else tuple(dotted.split(".", 1))


def canonical(value: Any) -> str:
    """One text per distinct value: 1, 1.0, true and "1" all differ; {a=1, b=2} is {b=2, a=1}."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=lambda v: f"{type(v).__name__}:{v}")


# Layout keys that are sizes: two spellings of one size are one value.
LAYOUT_SIZES = {("layout", "log_size"), ("layout", "log_growth"), ("layout", "server_memory")}


def check_factors(model: ExperimentModel, declared: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """No value twice in a factor (two cells of one value; a setting's size in two spellings is one
    value, as the engine's grammar reads it), no two factors sharing a short name (exclude rules and
    labels use it), and a matrix small enough to plan."""
    grammar = engines.engine(model.engine).settings
    by_short: dict[str, str] = {}
    for dotted, values in declared.items():
        loc = factor_loc(dotted)
        seen: dict[Any, Any] = {}  # what tells values apart -> the first value so told
        for value in values:
            size = (grammar.size_bytes(value) if loc[0] == "engine_settings"
                    else parse_size(value) if loc in LAYOUT_SIZES and isinstance(value, str) and value != places.UNCAPPED
                    else None)
            key = canonical(value) if size is None else ("bytes", size)
            if key in seen and canonical(seen[key]) == canonical(value):
                return loc, f"{show(value)} is listed twice; each value of a factor makes one cell"
            if key in seen:
                amount = format_size(size) if size and size % 1024 == 0 else f"{size:,}"
                reader = grammar.title if loc[0] == "engine_settings" else "storlab"
                return loc, (f"{show(value)} and {show(seen[key])} are one value to {reader} ({amount}); "
                             "each value of a factor makes one cell")
            seen[key] = value
        short = short_name(dotted)
        if short in by_short:
            return loc, f"a factor named {short} already comes from {by_short[short]}; rename one"
        by_short[short] = dotted
    if model.design.kind != "full":  # its cells are the design's (storlab.experiment.design.check_design)
        return None
    cells = cell_count(declared)
    if cells > MAX_CELLS:
        return factor_loc(next(iter(declared)))[:1], f"{cells:,} cells; the limit is {MAX_CELLS:,}"
    if cells * model.most_repetitions > MAX_RUNS:
        return ("repetitions",), f"{cells:,} cells x {model.most_repetitions} repetitions; the limit is {MAX_RUNS:,} runs"
    return None


def check_reference(model: ExperimentModel, declared: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """Each reference level names a factor (by its short name) and one of its values; until settled
    needs a factor to settle."""
    by_short = {short_name(d): values for d, values in declared.items()}
    if model.settling() is not None and not any(len(values) > 1 for values in declared.values()):
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


def check_excludes(model: ExperimentModel, declared: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """Every rule names factors and values that exist, and some cell is left to run."""
    if len(model.exclude) > MAX_EXCLUDE_RULES:
        return ("exclude",), f"{len(model.exclude):,} rules; the limit is {MAX_EXCLUDE_RULES:,}"
    values = {short_name(k): {canonical(v) for v in vs} for k, vs in declared.items()}
    for rule in model.exclude:
        if not rule:
            return ("exclude",), "an empty rule excludes every cell"
        for key, value in rule.items():
            if key not in values:
                return ("exclude",), f"{show(key)} is not a factor (factors: {', '.join(sorted(values)) or 'none'})"
            if canonical(value) not in values[key]:
                return ("exclude",), f"{key} = {show(value)} matches no cell ({key} is never {show(value)})"
    if model.exclude:
        names = [short_name(k) for k in declared]
        left = sum(1 for combo in itertools.product(*declared.values())
                   if not excluded(dict(zip(names, combo)), model.exclude))
        if left == 0:
            return ("exclude",), "every cell is excluded; nothing would run"
    return None


def excluded(short_factors: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    """Whether a cell (factors by short name) matches a rule: every key of the rule, same value."""
    return any(all(k in short_factors and canonical(short_factors[k]) == canonical(v) for k, v in rule.items())
               for rule in rules)


# What a server needs beside the memory its settings size (its processes, the catalog's caches), for a
# memory limit to be one it can run in: below that the kernel would kill its processes.
MEMORY_MARGIN = 48 * 2**20


def check_memory(model: ExperimentModel, declared: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """Each server_memory holds what the engine's settings give its own memory (PostgreSQL's
    shared_buffers and maintenance_work_mem, MariaDB's buffer pool and log buffer, set or by default)
    and MEMORY_MARGIN for its processes; values that an exclude rule names together run in no cell."""
    memories = [m for m in factors.values(model.layout.server_memory) if m not in (None, places.UNCAPPED)]
    engine = engines.engine(model.engine)
    if not memories or not engine.memory_settings:
        return None
    short = {short_name(d) for d in declared}
    for version in model.versions() or [None]:
        settings = model.settings_for(version)
        keys = {name: next((k for k in settings if engine.settings.canonical(k) == name), None)
                for name in engine.memory_settings}
        choices = [[(name, key, v) for v in (factors.values(settings[key]) if key else [None])] for name, key in keys.items()]
        for combination in itertools.product(*choices):
            need = sum(engine.memory_bytes(name, value) for name, _, value in combination) + MEMORY_MARGIN
            for memory in memories:
                if parse_size(memory) >= need:
                    continue
                cell = {"server_memory": memory, "engine_version": version,
                        **{key: value for _, key, value in combination if key},
                        **{f"{version}.{key}": value for _, key, value in combination if key}}
                if excluded({k: v for k, v in cell.items() if k in short}, model.exclude):
                    continue
                given = ", ".join(f"{key} = {show(value)}" if key else f"{name} {format_size(engine.memory_bytes(name, None))} "
                                  "(its default)" for name, key, value in combination)
                return ("layout", "server_memory"), (
                    f"{show(memory)} cannot hold {given} and {format_size(MEMORY_MARGIN)} for the server's processes: "
                    f"give the server at least {format_size(need)}, or less to those settings")
    return None
