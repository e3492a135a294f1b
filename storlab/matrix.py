"""Factors -> cells with stable ids, exclusions, and the order runs happen in."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from storlab.experiment import HOST_FACTOR, Experiment, excluded, short_name


@dataclass(frozen=True)
class Cell:
    """One configuration: the experiment's constants with one value of every factor."""

    id: str
    factors: dict[str, Any]  # dotted factor name -> value, in the experiment's factor order
    layout: dict[str, Any]
    workload: dict[str, Any]
    engine_settings: dict[str, Any]
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # device placement -> its table, one value each

    @property
    def host(self) -> str | None:
        """The host that must run it (the experiment's `hosts`), None when any host may."""
        return self.factors.get(HOST_FACTOR)

    @property
    def label(self) -> str:
        return " ".join(f"{short_name(k)}={format_value(v)}" for k, v in self.factors.items()) or "(single cell)"


_PLAIN = re.compile(r"[A-Za-z0-9_./-]+")


def format_value(value: Any) -> str:
    """A factor value as a user reads it: a ratio {disk=7, ram=1} as 'disk:7+ram:1'. A string that could
    be read as another value (a number, True, a ratio, text with spaces or '=') is quoted, so two
    different values never print alike, and neither do two cells' labels."""
    if isinstance(value, dict):
        return "+".join(f"{k}:{format_value(v)}" for k, v in value.items())
    if isinstance(value, str) and (not _PLAIN.fullmatch(value) or value in ("True", "False") or _number(value)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cell_id(factors: dict[str, Any]) -> str:
    """Derived from factor values only, so a re-run or a resume finds the same cells."""
    canonical = json.dumps(factors, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def cells(experiment: Experiment) -> list[Cell]:
    """The product of all factors, in declaration order, less the excluded combinations."""
    model = experiment.model
    names = list(experiment.factors)
    result = []
    for combo in itertools.product(*experiment.factors.values()):
        factors = dict(zip(names, combo))
        if excluded({short_name(k): v for k, v in factors.items()}, model.exclude):
            continue
        sections = {
            "layout": model.layout.model_dump(),
            "workload": model.workload.model_dump(),
            "engine_settings": dict(model.engine_settings),
            "devices": {name: dict(raw) for name, raw in model.placements.items() if isinstance(raw, dict)},
        }
        for dotted, value in factors.items():
            section, key = dotted.split(".", 1)
            if section == "placements":
                name, key = key.split(".", 1)
                sections["devices"][name][key] = value
            elif section in sections:  # the host is where a cell runs, not part of its configuration
                sections[section][key] = value
        result.append(Cell(id=cell_id(factors), factors=factors, **sections))
    return result


def plan(all_cells: list[Cell], repetitions: int, done: set[tuple[str, int]]) -> list[tuple[Cell, int]]:
    """Repetition 1 of every cell, then repetition 2, ...: slow drift of the machine then touches
    every cell alike instead of favouring the cells that ran first."""
    return [
        (cell, rep)
        for rep in range(1, repetitions + 1)
        for cell in all_cells
        if (cell.id, rep) not in done
    ]
