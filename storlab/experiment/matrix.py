"""Factors -> cells with stable ids, exclusions, and the order runs happen in."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import weakref
from dataclasses import dataclass, field
from typing import Any

from storlab import engines
from storlab.errors import UserError
from storlab.experiment import design, design_key
from storlab.experiment.file import Experiment
from storlab.experiment.places import CAP_KEYS, UNCAPPED, VolumeKeys
from storlab.experiment.swept import HOST_FACTOR, VERSION_FACTOR, canonical, excluded, nested_in
from storlab.lab.caps import IoCaps
from storlab.lab.devices import DeviceSpec
from storlab.lab.layout import CellLayout
from storlab.labels import format_value, short_name
from storlab.sizes import parse_size
from storlab.workloads.kind import WorkloadParams
from storlab.workloads.rates import MAX_DURATION_S


@dataclass(frozen=True)
class Cell:
    """One configuration: the experiment's constants with one value of every factor, validated and
    typed (sizes in bytes, the workload kind's own parameters, each device's spec)."""

    id: str
    factors: dict[str, Any]  # dotted factor name -> value, in the experiment's factor order
    layout: CellLayout
    workload: WorkloadParams  # the kind's Params, one value of each key
    engine_settings: dict[str, Any]
    devices: dict[str, DeviceSpec] = field(default_factory=dict)  # device placement -> its device
    engine_version: str | None = None  # None: an engine storlab runs one version of
    caps: dict[str, IoCaps] = field(default_factory=dict)  # capped placement -> the caps on its device

    @property
    def host(self) -> str | None:
        """The host that must run it (the experiment's `hosts`), None when any host may."""
        return self.factors.get(HOST_FACTOR)

    @property
    def label(self) -> str:
        return " ".join(f"{short_name(k)}={format_value(v)}" for k, v in self.factors.items()) or "(single cell)"


def cell_id(factors: dict[str, Any]) -> str:
    """Derived from factor values only, so a re-run or a resume finds the same cells."""
    canonical = json.dumps(factors, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def _combinations(experiment: Experiment) -> list[dict[str, Any]]:
    """The product of the crossed factors, in declaration order; within each, the product of the
    factors nested in its engine version (a setting of [engine_settings.V]: V's cells alone have it).
    A screening or a follow-up: the cells its design names (storlab.experiment.design)."""
    if experiment.model.design.kind != design_key.FULL:
        return _designed(experiment)
    crossed = {name: values for name, values in experiment.factors.items() if nested_in(name) is None}
    versions = experiment.model.versions()
    result = []
    for combo in itertools.product(*crossed.values()):
        factors = dict(zip(crossed, combo))
        version = factors.get(VERSION_FACTOR, versions[0] if versions else None)
        nested = {name: values for name, values in experiment.factors.items()
                  if nested_in(name) is not None and nested_in(name) == version}
        result += [{**factors, **dict(zip(nested, inner))} for inner in itertools.product(*nested.values())]
    return result


def reference_first(experiment: Experiment) -> dict[str, list[Any]]:
    """Each factor's values by its short name, its reference level first (the file's `reference`, else
    its first value): a design codes the reference -1."""
    reference = experiment.answer_settings()["reference"]
    return {short_name(d): [reference[short_name(d)]] + [v for v in values if canonical(v) != canonical(reference[short_name(d)])]
            for d, values in experiment.factors.items()}


def _designed(experiment: Experiment) -> list[dict[str, Any]]:
    key = experiment.model.design
    ordered = reference_first(experiment)
    dotted = {short_name(d): d for d in experiment.factors}
    fraction = design.fraction_of(key, ordered)
    levels = design.levels_of(fraction, ordered) if fraction is not None else design.follow_up(ordered, key.factors or [])
    return [{dotted[name]: value for name, value in cell.items()} for cell in levels]


_CELLS: "weakref.WeakKeyDictionary[Experiment, list[Cell]]" = weakref.WeakKeyDictionary()


def cells(experiment: Experiment) -> list[Cell]:
    """Every combination of the factors (_combinations), less the excluded ones; computed once for an
    experiment (a run, a submit and a worker each ask for them)."""
    if experiment not in _CELLS:
        _CELLS[experiment] = _cells(experiment)
    return list(_CELLS[experiment])


def _cells(experiment: Experiment) -> list[Cell]:
    model = experiment.model
    versions = model.versions()
    result = []
    for factors in _combinations(experiment):
        if excluded({short_name(k): v for k, v in factors.items()}, model.exclude):
            continue
        version = factors.get(VERSION_FACTOR, versions[0] if versions else None)
        sections: dict[str, dict[str, Any]] = {
            "layout": model.layout.model_dump(),
            "workload": {},
            "engine_settings": model.settings_for(version),
            "placements": {name: {} for name, raw in model.placements.items() if isinstance(raw, VolumeKeys)},
        }
        for dotted, value in factors.items():
            section, key = dotted.split(".", 1)
            if section == "placements":
                name, key = key.split(".", 1)
                sections["placements"][name][key] = value
            elif nested_in(dotted):
                sections["engine_settings"][key.split(".", 1)[1]] = value
            elif section in sections:  # the host is where a cell runs, not part of its configuration
                sections[section][key] = value
        workload = model.workload.model_copy(update=sections["workload"])
        if workload.cycles_per_run() is not None:
            workload = _whole_cycles(engines.engine(experiment.engine), workload, sections["engine_settings"])
        result.append(Cell(
            id=cell_id(factors), factors=factors, engine_version=version, layout=_layout(sections["layout"]),
            # Each value was validated as one of its factor's, and the whole as the file was.
            workload=workload,
            engine_settings=sections["engine_settings"],
            # The file checked every combination of a device's factors (places.DevicePlacement).
            devices={name: table.spec(sections["placements"][name]) for name, table in experiment.devices.items()},
            caps={name: table.caps(sections["placements"][name]) for name, table in experiment.capped.items()}))
    return result


def _whole_cycles(engine: engines.Engine, workload: Any, settings: dict[str, Any]) -> Any:
    """A run of the kind's whole cycles of the cell's checkpoint_timeout (WorkloadParams.cycles_per_run):
    its duration_s."""
    cycles = workload.cycles_per_run()
    try:
        cycle = engine.checkpoint_cycle_s(settings)
    except ValueError as exc:
        raise UserError(f"engine_settings.{exc}; checkpoint_cycles needs it") from None
    seconds = math.ceil(cycles * cycle)
    if seconds > MAX_DURATION_S:
        raise UserError(f"workload.checkpoint_cycles: {cycles} cycles of checkpoint_timeout "
                        f"{settings.get('checkpoint_timeout', '5min')} last {seconds} s, more than a run's "
                        f"{MAX_DURATION_S} s")
    return workload.model_copy(update={"duration_s": seconds})


def _layout(declared: dict[str, Any]) -> CellLayout:
    """The layout's keys, one value each, its sizes parsed once from the validated text; a key left
    unset takes CellLayout's default."""
    given = {key: value for key, value in declared.items() if value is not None}
    if given.get("server_memory") == UNCAPPED:
        given.pop("server_memory")
    for key in ("log_size", "log_growth", "server_memory"):
        if key in given:
            given[f"{key}_bytes"] = parse_size(given.pop(key))
    return CellLayout(**given)


def round_order(all_cells: list[Cell], seed: int | None, rnd: int) -> list[Cell]:
    """The order of one round's cells, drawn from the experiment's seed and the round's number, so
    whatever a run leaves behind (the page cache, the disk's write-back, a checkpoint) lands on
    different cells in each round (randomised multiple interleaved trials, Abedi and Brecht, ICPE 2017),
    and a resume draws the same order again. The cells of one device format stay together (a new
    format is a new device), their groups in a drawn order too. No seed: the matrix order (runs
    recorded before storlab kept one)."""
    if seed is None:
        return list(all_cells)
    draw = random.Random(f"{seed}:{rnd}")
    groups: dict[tuple, list[Cell]] = {}
    for cell in all_cells:
        groups.setdefault(_device_format(cell), []).append(cell)
    ordered = list(groups.values())
    draw.shuffle(ordered)
    for group in ordered:
        draw.shuffle(group)
    return [cell for group in ordered for cell in group]


def _device_format(cell: Cell) -> tuple:
    """A cell's device factors' values (its caps are set on the instance's group, not the device)."""
    return tuple(json.dumps(v, sort_keys=True) for k, v in cell.factors.items()
                 if k.startswith("placements.") and k.rsplit(".", 1)[1] not in CAP_KEYS)


def plan(all_cells: list[Cell], repetitions: int, done: set[tuple[str, int]],
         seed: int | None = None) -> list[tuple[Cell, int]]:
    """Repetition 1 of every cell, then repetition 2, ...: slow drift of the machine then touches
    every cell alike instead of favouring the cells that ran first. Within each round, the order
    drawn from `seed` (round_order)."""
    return [
        (cell, rep)
        for rep in range(1, repetitions + 1)
        for cell in round_order(all_cells, seed, rep)
        if (cell.id, rep) not in done
    ]
