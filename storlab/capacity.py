"""Will the experiment fit? Before the first run, each placement's free space against an estimate of
what one run writes there (each run's instance is removed before the next, so the largest cell counts).

The estimates are measured, not worst cases (4 connections x 20,000 and x 100,000 rows, `du` of the
placements before and after; README "Capacity"): a refusal then means the experiment really cannot fit.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from storlab.errors import UserError
from storlab.experiment import Experiment
from storlab.layout import spec_for
from storlab.sizes import parse_size
from storlab.workloads import KINDS
from storlab.workloads.kind import Footprint

MB = 1024**2
# What an empty instance holds before the workload: PostgreSQL's catalog (16 MB: its template has no
# template0 database) and one WAL segment;
# MariaDB's datadir (ibdata1, system tables: 30 MB). The log's own floor comes from the settings.
CATALOG_BYTES = {"postgres": 16 * MB, "mariadb": 30 * MB}
PG_WAL_SEGMENT = 16 * MB
PG_MIN_WAL = 80 * MB  # PostgreSQL's default min_wal_size: recycled segments it keeps
PG_MAX_WAL = 1024 * MB  # its default max_wal_size: a checkpoint then lets WAL be recycled
INNODB_REDO = 96 * MB  # MariaDB's default innodb_log_file_size, allocated whole at install
WARN_SHARE = 0.5  # warn when one run needs more than half of what is free


def _setting_bytes(settings: dict[str, Any], name: str, default: int, unit: int) -> int:
    """A size setting as the engine reads it: a bare number counts in `unit` (PostgreSQL's WAL sizes
    in MB, MariaDB's in bytes)."""
    value = next((v for k, v in settings.items() if k.lower() == name), None)
    if value is None or isinstance(value, bool):
        return default
    try:
        return value * unit if isinstance(value, int) else parse_size(str(value))
    except ValueError:
        return default  # the engine check names a value it cannot read


def run_footprint(engine: str, layout: dict[str, Any], workload: dict[str, Any], settings: dict[str, Any]) -> Footprint:
    """One run of one cell: the workload's writes (as its kind estimates them; nothing for a kind that
    cannot tell) plus the instance's own floor."""
    work = KINDS[workload["kind"]].footprint(engine, workload) or Footprint()
    log_size = parse_size(layout["log_size"]) if layout.get("log_size") else None
    if engine == "postgres":
        floor = max(log_size or 0, _setting_bytes(settings, "min_wal_size", PG_MIN_WAL, MB))
        ceiling = _setting_bytes(settings, "max_wal_size", max(2 * (log_size or 0), PG_MAX_WAL), MB)
        log = max(floor, min(work.log, ceiling)) + PG_WAL_SEGMENT
    else:
        log = log_size or _setting_bytes(settings, "innodb_log_file_size", INNODB_REDO, 1)
    return Footprint(data=CATALOG_BYTES[engine] + work.data, log=log)


def needs(experiment: Experiment, cells: list, paths: dict[str, Path]) -> dict[str, tuple[int, str]]:
    """placement -> (bytes the largest cell writes there in one run, that cell's label)."""
    largest: dict[str, tuple[int, str]] = {}
    for cell in cells:
        spec = spec_for(cell.layout, cell.engine_settings, paths)
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
        what = " + ".join(f"placements.{n} {_mb(s)}" for n, s, _ in parts)
        cells_named = "; ".join(dict.fromkeys(f"cell {label}" for _, _, label in parts))
        figures = (f"one run writes about {_mb(total)} ({what}; {cells_named}) and {_mb(free)} is free "
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
                        f"{_mb(size)} there (cell {label}) and the device holds about {_mb(usable)}; make its loop larger")


def _mb(size: int) -> str:
    return f"{size / MB:,.0f} MB"
