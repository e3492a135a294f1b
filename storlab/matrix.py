"""Factors -> cells with stable ids, exclusions, and the order runs happen in."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from storlab.experiment import Experiment, short_name


@dataclass(frozen=True)
class Cell:
    """One configuration: the experiment's constants with one value of every factor."""

    id: str
    factors: dict[str, Any]  # dotted factor name -> value, in the experiment's factor order
    layout: dict[str, Any]
    workload: dict[str, Any]
    engine_settings: dict[str, Any]

    @property
    def label(self) -> str:
        return " ".join(f"{short_name(k)}={format_value(v)}" for k, v in self.factors.items()) or "(single cell)"


def format_value(value: Any) -> str:
    """A factor value as a user reads it: a ratio {disk=7, ram=1} as 'disk:7+ram:1'."""
    if isinstance(value, dict):
        return "+".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def cell_id(factors: dict[str, Any]) -> str:
    """Derived from factor values only, so a re-run or a resume finds the same cells."""
    canonical = json.dumps(factors, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def _excluded(factors: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    short = {short_name(k): v for k, v in factors.items()}
    return any(all(short.get(k) == v for k, v in rule.items()) for rule in rules)


def cells(experiment: Experiment) -> list[Cell]:
    """The product of all factors, in declaration order, less the excluded combinations."""
    model = experiment.model
    names = list(experiment.factors)
    result = []
    for combo in itertools.product(*experiment.factors.values()):
        factors = dict(zip(names, combo))
        if _excluded(factors, model.exclude):
            continue
        sections = {
            "layout": model.layout.model_dump(),
            "workload": model.workload.model_dump(),
            "engine_settings": dict(model.engine_settings),
        }
        for dotted, value in factors.items():
            section, key = dotted.split(".", 1)
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
