"""storlab capture: one cell of an experiment, its workload run once on a fresh instance with its
statements logged, written out as the statement log the replay kind reads: on PostgreSQL a stderr log
(log_line_prefix = '%m|%u|%d|%c|'), on MariaDB the general log written as a table, dumped as
`mariadb --batch` dumps it (workloads/mariadb_log.py), its stamps in microseconds. The workload's prepare (a custom kind's setup, pgbench -i ...) runs
before the log starts: the log holds the load alone, and the replay's setup must build what the
prepare built (for a custom workload, its setup file)."""

from __future__ import annotations

import os
import time
from contextlib import closing, nullcontext
from dataclasses import dataclass
from pathlib import Path

from storlab.errors import RunFailed, UserError
from storlab.experiment import matrix
from storlab.experiment.file import Experiment
from storlab.lab import devices, safe_files
from storlab.running import cell_runs, plan, stall
from storlab.workloads import captured_log, mariadb_log, replay


@dataclass(frozen=True)
class Captured:
    """What a log holds, as the replay kind reads it."""

    path: Path
    cell: str  # its cell's label, "" for an experiment of one cell
    log: captured_log.CapturedLog | mariadb_log.MariadbLog


def pick(experiment: Experiment, cell_id: str | None) -> matrix.Cell:
    """The cell whose load is captured: the one named (an id or a unique prefix), or the first."""
    cells = matrix.cells(experiment)
    if cell_id is None:
        return cells[0]
    found = [c for c in cells if c.id.startswith(cell_id)]
    if len(found) != 1:
        raise UserError(f"--cell {cell_id}: {'no cell' if not found else 'several cells'} of {experiment.name} "
                        f"{'has' if not found else 'have'} that id (its cells: "
                        f"{', '.join(f'{c.id} {c.label}' for c in cells)})")
    return found[0]


def check(experiment: Experiment, out: Path) -> None:
    """Refused before anything starts: an engine without a replayer, a file already there, a folder
    it cannot be written to."""
    if experiment.engine not in replay.ENGINES:
        raise UserError(f"{experiment.path.name}: capture writes a statement log for the replay kind; "
                        f"{experiment.engine} has no replayer that keeps its timing (docs/experiment-file.md, replay)")
    if out.exists() or out.is_symlink():
        raise UserError(f"{out}: already there; capture writes a new file (remove it, or name another with --out)")
    if not out.parent.is_dir():
        raise UserError(f"{out.parent}: no such folder for the log")
    problem = safe_files.folder_problem(out.parent)
    if problem is not None:
        raise UserError(f"{out.parent}: {problem}; capture writes the log through no link another user made")
    if not os.access(out.parent, os.W_OK | os.X_OK):  # known now, not after the load has run
        raise UserError(f"{out.parent}: cannot write the log there (not writable: permissions, or a read-only "
                        "filesystem)")


def capture(experiment: Experiment, out: Path, cell_id: str | None = None, keep: bool = False) -> Captured:
    """Run one cell's load once with its statements logged, and write the log to `out` (a new file)."""
    check(experiment, out)
    cell = pick(experiment, cell_id)
    paths = plan.prepare_placements(experiment)
    kind, params = experiment.workload, cell.workload
    with (devices.DevicePool() if experiment.device_sizes else nullcontext()) as pool:
        lab = cell_runs.Lab(experiment, paths, keep, pool)
        placed = cell_runs.cell_paths(cell, paths, pool)
        started = time.monotonic()  # the run's limit counts from its instance's set-up
        with cell_runs.cell_instance(lab, cell, placed, started) as instance, \
                stall.Watchdog(instance, stall.stall_after(params), limit_s=params.run_limit, started=started) as watch:
            kind.prepare(instance, params, experiment.sql)
            instance.checkpoint()
            position = instance.log_statements()
            with closing(kind.load(instance, params, experiment.sql)) as load:
                load.open()
                load.run()
            watch.check()
            text = instance.statements_logged_since(position)
    if len(text.encode()) > replay.MAX_FILE_BYTES:
        raise RunFailed(f"the captured log is {len(text.encode()) / 2**20:.0f} MB, more than the "
                        f"{replay.MAX_FILE_BYTES // 2**20} MB the replay kind reads: capture a shorter load "
                        "(fewer transactions, a shorter duration)")
    try:
        log = mariadb_log.read(text) if mariadb_log.is_mariadb(text) else captured_log.read(text, False)
    except captured_log.LogProblem as exc:
        raise UserError(f"the captured log cannot be replayed: {exc}") from None
    safe_files.write_new(out, text)
    return Captured(out, cell.label if cell.factors else "", log)
