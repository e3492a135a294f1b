"""Will the experiment fit? Before the first run, each placement's free space against an estimate of
what one run writes there (each run's instance is removed before the next, so the largest cell counts).

The estimates are measured, not worst cases (4 connections x 20,000 and x 100,000 rows, `du` of the
placements before and after; docs/experiment-file.md, "Checked before anything starts"): a refusal then
means the experiment really cannot fit.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from storlab import engines
from storlab.errors import UserError
from storlab.experiment.file import Experiment
from storlab.lab.layout import CellLayout, spec_for
from storlab.sizes import format_bytes
from storlab.workloads import KINDS
from storlab.workloads.kind import Footprint, WorkloadParams

WARN_SHARE = 0.5  # warn when one run needs more than half of what is free


def run_footprint(engine: str, layout: CellLayout, workload: WorkloadParams, settings: dict[str, Any]) -> Footprint:
    """One run of one cell: the workload's writes (as its kind estimates them; nothing for a kind that
    cannot tell) plus the instance's own floor (its catalog; its log as the engine keeps it)."""
    work = KINDS[workload.kind].footprint(engine, workload) or Footprint()
    rules = engines.engine(engine)
    return Footprint(data=rules.catalog_bytes + work.data, log=rules.log_bytes(layout.log_size_bytes, work.log, settings))


def needs(experiment: Experiment, cells: list, paths: dict[str, Path]) -> dict[str, tuple[int, str]]:
    """placement -> (bytes the largest cell writes there in one run, that cell's label)."""
    largest: dict[str, tuple[int, str]] = {}
    for cell in cells:
        spec = spec_for(cell.layout, cell.engine_settings, paths, cell.engine_version)
        need = run_footprint(experiment.engine, cell.layout, cell.workload, cell.engine_settings)
        share: dict[str, int] = defaultdict(int)
        for placement in spec.data_files:
            share[placement.name] += math.ceil(need.data / len(spec.data_files))
        share[spec.log.name] += need.log
        for name, size in share.items():
            if size > largest.get(name, (0, ""))[0]:
                largest[name] = (size, cell.label)
    return largest


def _existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


# A filesystem keeps some of its device for itself (ext4's journal and inode tables, xfs's log).
DEVICE_USABLE = 0.9


def check(experiment: Experiment, cells: list, paths: dict[str, Path]) -> list[str]:
    """Refuse (UserError) when a run cannot fit in a file system's free space, or in a device
    placement's size; warnings when it takes more than half. Placements on one file system add up."""
    sizes = experiment.device_sizes
    by_device: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    warnings = []
    for name, (size, label) in needs(experiment, cells, {**paths, **{n: Path("/") for n in sizes}}).items():
        if name in sizes:
            _device_check(experiment, name, size, label, sizes[name])
            continue
        by_device[os.stat(_existing(paths[name])).st_dev].append((name, size, label))
    for device, parts in by_device.items():
        name = parts[0][0]
        usage = os.statvfs(_existing(paths[name]))
        free = usage.f_bavail * usage.f_frsize
        total = sum(size for _, size, _ in parts)
        what = " + ".join(f"placements.{n} {format_bytes(s)}" for n, s, _ in parts)
        cells_named = "; ".join(dict.fromkeys(f"cell {label}" for _, _, label in parts))
        figures = (f"one run writes about {format_bytes(total)} ({what}; {cells_named}) and {format_bytes(free)} is free "
                   f"on {_existing(paths[name])}")
        if total > free:
            raise UserError(f"{experiment.where(('placements', name))}: placements.{name}: too small: {figures}; "
                            "free space, choose another placement or shrink the workload")
        if total > WARN_SHARE * free:
            warnings.append(f"placements.{name}: {figures}")
    return warnings


def _device_check(experiment: Experiment, name: str, size: int, label: str, device: int) -> None:
    usable = int(device * DEVICE_USABLE)
    if size > usable:
        raise UserError(f"{experiment.where(('placements', name))}: placements.{name}: too small: one run writes about "
                        f"{format_bytes(size)} there (cell {label}) and the device holds about {format_bytes(usable)}; make its loop larger")
