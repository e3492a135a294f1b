"""The device's capability (`storlab io`) beside what the database drove on it: the fio jobs measured
on a placement's device, and the IOPS and MiB/s the busiest cell reached there (mean and peak over its
runs' device timelines). The io results come from the results folder itself, from folders given with
`storlab report --io`, and from the folders `storlab io` writes by default beside it (results/io-<path>)
for the experiment's placements. `read` gathers them when the store is loaded (storlab.answer.analysis);
`answer` matches them to the placements for the answer (storlab.answer.compose)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storlab import timeline
from storlab.answer import model
from storlab.errors import UserError
from storlab.lab.placements import TMPFS, TMPFS_ROOT
from storlab.machine import iobench
from storlab.probes.recorders import DEVICE_PERIOD_S
from storlab.results.folder_store import exists
from storlab.results.experiment_record import StoredExperiment
from storlab.results.store import Store


@dataclass
class Measured:
    """What the io folders held and what the database's runs drove on the devices fio measured."""

    jobs: list[dict[str, Any]] = field(default_factory=list)  # io_jobs rows, each with its "device" (None: unknown)
    # placement -> cell id -> (its runs' IOPS readings, their MiB/s readings) on that placement's device
    drove: dict[str, dict[str, tuple[list[float], list[float]]]] = field(default_factory=dict)


def placement_paths(experiment: StoredExperiment | None, facts: dict | None) -> dict[str, str]:
    """Each placement's path as the runs recorded it (the facts' paths), from the names in the file."""
    declared = experiment.placements if experiment is not None else {}
    recorded = list((facts or {}).get("paths", {}))
    found = {}
    for name, raw in declared.items():
        if isinstance(raw, dict) and "loop" not in raw:  # a directory's table, with IO caps on its device
            raw = raw.get("path")
        if not isinstance(raw, str):
            continue
        if raw == TMPFS:
            found[name] = str(TMPFS_ROOT)
        elif os.path.isabs(raw):
            found[name] = os.path.realpath(raw)
        else:  # relative to the experiment file, which the store does not name: the recorded path ending so
            tail = os.path.normpath(raw)
            match = [p for p in recorded if p.endswith(os.sep + tail)]
            if len(match) == 1:
                found[name] = match[0]
    return found


def _io_folders(store: Store, paths: dict[str, str], given: list[Path]) -> list[Path]:
    # The results folder itself holds `storlab io` jobs recorded into it; a shared store has no folder
    # until a report or an export names one, and its own folder then holds no store.
    folders = [store.folder] if store.folder is not None and exists(store.folder) else []
    for path in given:
        if not exists(path):
            raise UserError(f"--io {path}: no storlab io results here (expected {path}/storlab.sqlite)")
        folders.append(path)
    for path in paths.values() if store.folder is not None else []:
        beside = store.folder.parent / iobench.default_folder(Path(path)).name
        if exists(beside):
            folders.append(beside)
    unique: dict[Path, Path] = {}
    for folder in folders:
        unique.setdefault(folder.resolve(), folder)
    return list(unique.values())


def _devices(facts: dict[int, dict]) -> dict[str, str | None]:
    """target path -> its device, from the facts `storlab io` recorded with its jobs."""
    found: dict[str, str | None] = {}
    for record in facts.values():
        for path, d in ((record.get("body") or {}).get("paths") or {}).items():
            found.setdefault(path, d.get("device"))
    return found


def _placement(job: dict[str, Any], paths: dict[str, str], facts: dict | None) -> str | None:
    """The experiment's placement fio measured: its path, or the device the runs recorded it on."""
    ours = {path: name for name, path in paths.items()}
    recorded = (facts or {}).get("paths", {})
    by_device = {d.get("device"): ours[p] for p, d in recorded.items() if p in ours and d.get("device")}
    return ours.get(os.path.realpath(job["target"])) or by_device.get(job["device"])


def read(store: Store, experiment: StoredExperiment | None, facts: dict | None, runs: dict[str, list[int]],
         given: list[Path]) -> Measured:
    """The io folders' jobs, and each measured cell's device readings (`runs`: its runs' ids by the
    cell's) on the placements they measured."""
    paths = placement_paths(experiment, facts)
    measured = Measured()
    for folder in _io_folders(store, paths, given):
        with Store.open(folder, create=False) as io_store:
            jobs, devices = io_store.io_jobs(), _devices(io_store.facts())
        measured.jobs += [{**job, "device": devices.get(job["target"])} for job in jobs]
    placements = {p for job in measured.jobs if (p := _placement(job, paths, facts))}
    for cell, ids in runs.items() if placements else []:
        for run_id in ids:
            for _, metric, value in store.timeline(run_id):
                for placement in placements:
                    if metric in (timeline.IOPS.of(placement), timeline.MIB_S.of(placement)):
                        iops, mb_s = measured.drove.setdefault(placement, {}).setdefault(cell, ([], []))
                        (iops if metric == timeline.IOPS.of(placement) else mb_s).append(value)
    return measured


def _database(drove: dict[str, tuple[list[float], list[float]]], labels: dict[str, str]) -> model.DatabaseIo | None:
    """The busiest cell on a placement: the highest mean MiB/s over its runs' device timelines."""
    best = None
    for cell, (iops, mb_s) in drove.items():
        if not mb_s:
            continue
        found = model.DatabaseIo(cell=cell, label=labels[cell], iops_mean=sum(iops) / len(iops) if iops else 0.0,
                                 iops_peak=max(iops, default=0.0), mb_s_mean=sum(mb_s) / len(mb_s), mb_s_peak=max(mb_s),
                                 period_s=DEVICE_PERIOD_S)
        if best is None or found.mb_s_mean > best.mb_s_mean:
            best = found
    return best


def answer(measured: Measured, experiment: StoredExperiment | None, facts: dict | None,
           labels: dict[str, str]) -> list[model.Capability]:
    """Each device fio measured: each job's latest measurement (a device measured twice keeps the newer
    numbers), and what the busiest cell drove there when it is one of the experiment's placements. The
    placements first, in the file's order; devices of no placement after them."""
    paths = placement_paths(experiment, facts)
    targets: dict[str, list[dict[str, Any]]] = {}
    for job in measured.jobs:
        targets.setdefault(job["target"], []).append(job)
    found = []
    for target, jobs in targets.items():
        latest: dict[str, dict[str, Any]] = {}
        for job in sorted(jobs, key=lambda j: j["run_at"]):
            latest[job["job"]] = job
        placement = _placement(jobs[0], paths, facts)
        found.append(model.Capability(
            target=target, device=jobs[0]["device"], placement=placement,
            jobs=[model.FioJob(job=j["job"], rw=j["rw"], block_size=j["block_size"], iodepth=j["iodepth"], iops=j["iops"],
                               mb_s=j["mb_s"], lat_p50_ms=j["lat_p50_ms"], lat_p99_ms=j["lat_p99_ms"],
                               lat_p999_ms=j["lat_p999_ms"], flags=list(j["flags"]), run_at=j["run_at"])
                  for j in latest.values()],
            database=_database(measured.drove.get(placement, {}), labels) if placement else None))
    order = list(paths)
    return sorted(found, key=lambda c: (order.index(c.placement) if c.placement in order else len(order), c.target))
