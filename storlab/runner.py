"""`storlab run`: every cell x repetition not yet in the store, each on a fresh instance, each
recorded in one transaction as soon as it finishes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from storlab import engines, instances, matrix, system
from storlab.engines.base import spec_for
from storlab.errors import RunFailed
from storlab.experiment import TMPFS, Experiment
from storlab.probes import DeviceTimeline
from storlab.store import Store
from storlab.workloads import Driver, prepare


@dataclass
class RunOutcome:
    folder: Path
    finished: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)


def default_folder(experiment: Experiment) -> Path:
    return Path("results") / experiment.name


def placements(experiment: Experiment) -> dict[str, Path]:
    return {name: experiment.placement_path(name) for name in experiment.model.placements}


def prepare_placements(experiment: Experiment) -> dict[str, Path]:
    """Make the placement directories and check the servers' OS user can reach them, before any run."""
    found = placements(experiment)
    user = instances.server_user()
    for name, path in found.items():
        label = f"{experiment.path.name}: placements.{name}"
        if experiment.model.placements[name] != TMPFS:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunFailed(f"{label}: cannot create {path}: {exc.strerror}") from None
        instances.check_reachable(label, path, user)
    return found


def describe_plan(experiment: Experiment, folder: Path) -> list[str]:
    """The cells and the runs still to do, for --dry-run."""
    cells = matrix.cells(experiment)
    done: set[tuple[str, int]] = set()
    if (folder / "storlab.sqlite").exists():
        with Store.open(folder, create=False) as store:
            done = store.done()
    todo = matrix.plan(cells, experiment.repetitions, done)
    lines = [f"{experiment.name}: {len(cells)} cells x {experiment.repetitions} repetitions on {experiment.engine}"]
    lines += [f"  cell {c.id}  {c.label}" for c in cells]
    lines.append(f"{len(todo)} runs to do ({len(done)} already in {folder}), in this order:")
    lines += [f"  {i:>4}. repetition {rep} of {c.id}  {c.label}" for i, (c, rep) in enumerate(todo, 1)]
    return lines


def _devices(paths: dict[str, Path]) -> dict[str, str]:
    found = {}
    for name, path in paths.items():
        device = system.block_device_of(path)
        if device:
            found[name] = device
    return found


def run_cell(experiment: Experiment, cell: matrix.Cell, paths: dict[str, Path], keep: bool,
             on_progress=None):
    """One repetition of one cell on a fresh instance; returns what the store records."""
    spec = spec_for(cell.layout, cell.engine_settings, paths)
    work = cell.workload
    used = {p.name: p.path for p in [*spec.data_placements, spec.log]}
    with engines.provision(experiment.engine, spec, keep, work["connections"]) as instance:
        prepare(instance, work["kind"])
        probe = instance.wait_probe()
        devices = DeviceTimeline(_devices(used))
        with Driver(instance, work["connections"], work["rows_per_connection"], work["batch"]) as driver:
            sessions = driver.open()
            probe.start(sessions)
            started_at = time.time()
            t0 = time.monotonic()
            devices.start(t0)
            try:
                drive = driver.run(on_progress)
            finally:
                points = devices.stop()
                capture = probe.stop()
        offset = t0 - drive.start
        timeline = [(p.t_s + offset, p.metric, p.value) for p in points]
        timeline += [(t, "rows_per_s", v) for t, v in drive.rows_per_second_timeline(drive.rows / max(drive.transactions, 1))]
        return started_at, drive, capture, instance.version, timeline


def run(experiment: Experiment, folder: Path, keep: bool, console: Console) -> RunOutcome:
    paths = prepare_placements(experiment)
    for left in instances.clean(only_orphans=True):
        console.print(f"cleaned up instance {left.instance_id} left by an earlier run")
    cells = matrix.cells(experiment)
    outcome = RunOutcome(folder)
    with Store.open(folder) as store:
        store.bind_experiment(
            experiment.name, experiment.engine, experiment.source, experiment.identity(),
            experiment.repetitions, experiment.factors, [(c.id, c.label, c.factors) for c in cells],
        )
        facts = system.collect_facts(sorted(set(paths.values())))
        comparable = system.comparable(facts)
        earlier = store.facts()
        facts_id = store.record_facts(facts, comparable)
        for fid, held in earlier.items():
            if fid != facts_id:
                for line in system.differences(held["comparable"], comparable):
                    console.print(f"[yellow]warning:[/] this machine differs from earlier runs: {line}")
        done = store.done()
        todo = matrix.plan(cells, experiment.repetitions, done)
        outcome.skipped = len(done)
        if not todo:
            console.print(f"all {len(done)} runs are already in {folder}")
            return outcome
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
        ) as progress:
            overall = progress.add_task("runs", total=len(todo))
            current = progress.add_task("", total=1, visible=False)
            for cell, rep in todo:
                progress.update(current, description=f"  {cell.label} #{rep}", completed=0, total=1, visible=True)

                def on_progress(done_tx: int, total_tx: int) -> None:
                    progress.update(current, completed=done_tx, total=total_tx)

                try:
                    started_at, drive, capture, version, timeline = run_cell(experiment, cell, paths, keep, on_progress)
                except Exception as exc:  # a server or driver error fails this run, not the matrix
                    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    if not isinstance(exc, RunFailed):
                        message = f"{type(exc).__name__}: {message}"
                    store.record_failure(cell.id, rep, message)
                    outcome.failed.append(f"{cell.label} #{rep}: {message}")
                    progress.console.print(f"[red]failed:[/] {cell.label} #{rep}: {message}")
                else:
                    store.record_run(cell.id, rep, started_at, drive, capture, version, facts_id, timeline)
                    outcome.finished += 1
                progress.advance(overall)
            progress.update(current, visible=False)
    return outcome
