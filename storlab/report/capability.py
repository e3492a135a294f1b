"""The device's capability (`storlab io`) beside what the database drove on it: the fio jobs measured on
a placement's device, and the IOPS and MiB/s the busiest cell reached there (mean and peak over its
runs' device timelines). The io results come from the results folder itself, from folders given with
`storlab report --io`, and from the folders `storlab io` writes by default beside it
(results/io-<path>) for the experiment's placements."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from storlab import timeline
from storlab.answer.analysis import Results
from storlab.errors import UserError
from storlab.lab.placements import TMPFS, TMPFS_ROOT
from storlab.machine import iobench
from storlab.probes.recorders import DEVICE_PERIOD_S
from storlab.report.charts import plt, svg
from storlab.results.folder_store import exists
from storlab.results.store import Store


@dataclass
class DatabaseIo:
    cell_label: str
    iops_mean: float
    iops_peak: float
    mb_s_mean: float
    mb_s_peak: float


@dataclass
class Capability:
    target: str  # the path fio measured
    device: str | None
    placement: str | None  # the experiment's placement on that device; None: not one of them
    jobs: list[dict] = field(default_factory=list)  # io_jobs rows, as Store.io_jobs returns them
    database: DatabaseIo | None = None


def placement_paths(results: Results) -> dict[str, str]:
    """Each placement's path as the runs recorded it (the facts' paths), from the names in the file."""
    declared = results.experiment.placements if results.experiment is not None else {}
    recorded = list((results.facts or {}).get("paths", {}))
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


def _io_folders(store: Store, results: Results, given: list[Path]) -> list[Path]:
    # The results folder itself holds `storlab io` jobs recorded into it; a shared store's report
    # goes to a folder that holds no store.
    folders = [store.folder] if exists(store.folder) else []
    for path in given:
        if not exists(path):
            raise UserError(f"--io {path}: no storlab io results here (expected {path}/storlab.sqlite)")
        folders.append(path)
    for path in placement_paths(results).values():
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
    for held in facts.values():
        for path, d in ((held.get("body") or {}).get("paths") or {}).items():
            found.setdefault(path, d.get("device"))
    return found


def _database(store: Store, results: Results, placement: str) -> DatabaseIo | None:
    """The busiest cell on this placement: the highest mean MiB/s over its runs' device timelines."""
    best = None
    for c in results.measured:
        iops, mb_s = [], []
        for run in c.runs:
            for _, metric, value in store.timeline(run.id):
                if metric == timeline.IOPS.of(placement):
                    iops.append(value)
                elif metric == timeline.MIB_S.of(placement):
                    mb_s.append(value)
        if not mb_s:
            continue
        found = DatabaseIo(c.cell.label, sum(iops) / len(iops), max(iops), sum(mb_s) / len(mb_s), max(mb_s))
        if best is None or found.mb_s_mean > best.mb_s_mean:
            best = found
    return best


def gather(store: Store, results: Results, given: list[Path]) -> list[Capability]:
    paths = placement_paths(results)
    ours = {path: name for name, path in paths.items()}
    recorded = (results.facts or {}).get("paths", {})
    by_device = {d.get("device"): ours[p] for p, d in recorded.items() if p in ours and d.get("device")}
    found: dict[str, Capability] = {}
    for folder in _io_folders(store, results, given):
        with Store.open(folder, create=False) as io_store:
            jobs, devices = io_store.io_jobs(), _devices(io_store.facts())
        for job in jobs:
            target = job["target"]
            if target not in found:
                device = devices.get(target)
                placement = ours.get(os.path.realpath(target)) or by_device.get(device)
                found[target] = Capability(target, device, placement)
            found[target].jobs.append(job)
    for capability in found.values():
        if capability.placement:
            capability.database = _database(store, results, capability.placement)
    # The placements first, in the file's order; devices of no placement after them.
    order = list(paths)
    return sorted(found.values(), key=lambda c: (order.index(c.placement) if c.placement in order else len(order), c.target))


def latest_jobs(jobs: list[dict]) -> list[dict]:
    """Each job's latest measurement (a device measured twice keeps the newer numbers)."""
    latest: dict[str, dict] = {}
    for job in sorted(jobs, key=lambda j: j["run_at"]):
        latest[job["job"]] = job
    return list(latest.values())


def _name(c: Capability) -> str:
    return f"{c.placement} ({c.target})" if c.placement else f"{c.target} (not a placement of this experiment)"


def chart(capabilities: list[Capability], png: Path) -> str:
    """Per device, IOPS and MiB/s of each fio job, and beside them what the busiest cell drove there."""
    rows = [(c, latest_jobs(c.jobs)) for c in capabilities]
    heights = [0.8 + 0.28 * (len(jobs) + (2 if c.database else 0)) for c, jobs in rows]
    fig, axes = plt.subplots(len(rows), 2, figsize=(9, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for (c, jobs), (left, right) in zip(rows, axes):
        names = [j["job"] for j in jobs]
        iops = [j["iops"] for j in jobs]
        mb_s = [j["mb_s"] for j in jobs]
        colour = ["#4e79a7"] * len(jobs)
        if c.database:
            names += [f"database mean ({c.database.cell_label})", f"database peak ({c.database.cell_label})"]
            iops += [c.database.iops_mean, c.database.iops_peak]
            mb_s += [c.database.mb_s_mean, c.database.mb_s_peak]
            colour += ["#f28e2b", "#e15759"]
        y = range(len(names))
        left.barh(y, iops, color=colour)
        left.set_yticks(y, names, fontsize=7)
        left.invert_yaxis()
        left.set_xlabel("IOPS", fontsize=8)
        left.set_title(_name(c), fontsize=9, loc="left")
        right.barh(y, mb_s, color=colour)
        right.set_yticks(y, [])
        right.invert_yaxis()
        right.set_xlabel("MiB/s", fontsize=8)
        for ax in (left, right):
            ax.grid(axis="x", alpha=0.3)
            ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("device capability (storlab io, fio) beside what the database drove", fontsize=10)
    fig.tight_layout()
    return svg(fig, png)


def table_rows(capabilities: list[Capability]) -> list[list[str]]:
    out = []
    for c in capabilities:
        for j in latest_jobs(c.jobs):
            out.append([_name(c), c.device or "?", j["job"], f"{j['iops']:,.0f}", f"{j['mb_s']:,.1f}",
                        _ms(j["lat_p99_ms"]), "; ".join(j["flags"])])
        if c.database:
            d = c.database
            out.append([_name(c), c.device or "?", f"database, busiest cell ({d.cell_label})",
                        f"{d.iops_mean:,.0f} mean, {d.iops_peak:,.0f} peak",
                        f"{d.mb_s_mean:,.1f} mean, {d.mb_s_peak:,.1f} peak", "", f"whole device, every {DEVICE_PERIOD_S:g} s"])
    return out


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
