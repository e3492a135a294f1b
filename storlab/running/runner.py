"""`storlab run`: every cell x repetition not yet in the store, each on a fresh instance, each
recorded in one transaction as soon as it finishes."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from storlab import interrupts
from storlab.answer import noise_split
from storlab.errors import RunFailed, UserError
from storlab.experiment import matrix
from storlab.experiment.file import Experiment
from storlab.lab import devices, instances, server_failures
from storlab.machine import system
from storlab.probes import bpftrace
from storlab.probes.bpftrace import Tracing
from storlab.results.folder_store import exists
from storlab.results.runs import RunResult
from storlab.results.store import Store
from storlab.running import cell_runs, cleanup, plan


@dataclass
class RunOutcome:
    folder: Path
    finished: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)


def run(experiment: Experiment, folder: Path, keep: bool, console: Console, tracing: Tracing = Tracing.ON) -> RunOutcome:
    """Every run not yet in the store at `folder`; `tracing` what bpftrace traces around each run
    (OFF, --no-trace: the sampled figures only)."""
    cells = matrix.cells(experiment)
    if exists(folder):  # a damaged or foreign store is refused before anything starts
        with Store.open(folder, create=False):
            pass
    for warning in plan.preflight(experiment, cells):
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"))
    paths = plan.prepare_placements(experiment)
    for left in cleanup.clean(live=False, kept=False):
        console.print(f"cleaned up instance {left.instance_id} left by an earlier run"
                      + (f"; left {'; '.join(left.refused)}" if left.refused else ""), markup=False)
    outcome = RunOutcome(folder)
    settings, settling = plan.race_settings(experiment, cells), experiment.settling()
    with Store.open(folder) as store:
        store.bind_experiment(
            experiment.name, experiment.engine, experiment.source, experiment.identity(),
            experiment.repetitions, experiment.factors, [(c.id, c.label, c.factors) for c in cells],
            race=settings.model_dump() if settings else None, answer=experiment.answer_settings(),
        )
        store.order_seed(experiment.model.order_seed)
        store.record_stop(None)  # said again below once this invocation stops
        facts = system.collect_facts(sorted(set(paths.values())))
        comparable = system.comparable(facts)
        earlier = store.facts()
        facts_id = store.record_facts(facts, comparable)
        for fid, recorded in earlier.items():
            if fid != facts_id:
                for line in system.differences(recorded["comparable"], comparable):
                    console.print(Text.assemble(("warning:", "yellow"), f" this machine differs from earlier runs: {line}"))
        outcome.skipped = len(store.done())
        tried: set[tuple[str, int]] = set()
        started = time.monotonic()
        todo = plan.next_runs(experiment, cells, store, tried, started)
        if not todo:
            why = _with_lengths(plan.stop_reason(experiment, store) or plan.max_reason(experiment, store), experiment, store)
            store.record_stop(why)
            console.print(why or f"all {outcome.skipped} runs are already in {folder}", markup=False)
            return outcome
        has_devices = bool(experiment.device_sizes)
        with Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
        ) as progress, (devices.DevicePool() if has_devices else nullcontext()) as pool, bpftrace.attached_across_runs(), \
                instances.ending_in_background(lambda why: _warn(console, why)):
            bar = Bar(progress, progress.add_task("runs", total=plan.most_left(experiment, cells, store)),
                      progress.add_task("", total=1, visible=False))
            while todo:
                # Under a planned run length, each round's length is chosen before it starts, and said.
                todo, lengths = plan.with_lengths(experiment, store, todo, started)
                for rnd, (seconds, why) in lengths.items():
                    console.print(f"round {rnd}: runs of {seconds:g} s ({why})", markup=False)
                for cell, reps in _groups(experiment, todo):
                    _attempt(experiment, cell, reps, paths, keep, pool, store, facts_id, outcome, bar, tracing, lengths)
                    tried.update((cell.id, rep) for rep in reps)
                todo = plan.next_runs(experiment, cells, store, tried, started) if settings or settling else []
                # A race that dropped cells, or an answer that settled, has fewer runs left than the bar expected.
                left = plan.most_left(experiment, cells, store) if todo else 0
                progress.update(bar.overall, total=progress.tasks[bar.overall].completed + left)
            progress.update(bar.current, visible=False)
        why = _with_lengths(plan.stop_reason(experiment, store, started) or plan.max_reason(experiment, store),
                            experiment, store)
        store.record_stop(why)
        if why:
            console.print(why, markup=False)
    return outcome


def _with_lengths(why: str | None, experiment: Experiment, store: Store) -> str | None:
    """Why the runs stopped, and, under a planned run length, which rounds ran at which length."""
    lengths = plan.lengths_line(experiment, store)
    return f"{why}; {lengths}" if why and lengths else why


def _warn(console: Console, line: str) -> None:
    console.print(Text.assemble(("warning:", "yellow"), f" {line}"))


@dataclass
class Bar:
    """The progress bars: every run, and the transactions of the run under way."""

    progress: Progress
    overall: Any
    current: Any

    def start(self, cell: matrix.Cell, rep: int) -> None:
        interrupts.interruption_point()
        self.progress.update(self.current, description=f"  {cell.label} #{rep}", completed=0, total=1, visible=True)

    def transactions(self, done: int, total: int) -> None:
        interrupts.interruption_point()
        self.progress.update(self.current, completed=done, total=total)

    def done(self) -> None:
        self.progress.advance(self.overall)


def _groups(experiment: Experiment, todo: list[tuple[matrix.Cell, int]]) -> list[tuple[matrix.Cell, list[int]]]:
    """The runs in the order given, one instance each; for a kind whose repetitions share the data it
    prepares (a scan's table), every repetition of a cell on one instance, one cell after another."""
    if not cell_runs.shares_instance(experiment):
        return [(cell, [rep]) for cell, rep in todo]
    grouped: dict[str, tuple[matrix.Cell, list[int]]] = {}
    for cell, rep in todo:
        grouped.setdefault(cell.id, (cell, []))[1].append(rep)
    return list(grouped.values())


@dataclass
class _PlannedRun:
    """A run of the plan: its progress on the bar, its result recorded in the results folder."""

    cell: matrix.Cell
    repetition: int
    store: Store
    facts_id: int
    outcome: RunOutcome
    bar: Bar
    length: tuple[float, str] | None = None  # under a planned run length: its seconds and why

    def progress(self, done: int, total: int) -> None:
        self.bar.transactions(done, total)

    def record(self, result: RunResult) -> None:
        if self.length is not None:  # kept with the run: a resume keeps its round's length, the answer says it
            result.conditions[noise_split.RUN_LENGTH] = {"s": self.length[0], "why": self.length[1]}
        self.store.record_run(self.cell.id, self.repetition, result, self.facts_id)
        self.outcome.finished += 1
        self.bar.done()

    def abandoned(self) -> None:
        pass  # the run fails once its instance is stopped; said then


def _attempt(experiment: Experiment, cell: matrix.Cell, reps: list[int], paths: dict[str, Path], keep: bool,
             pool: devices.DevicePool | None, store: Store, facts_id: int, outcome: RunOutcome, bar: Bar,
             tracing: Tracing, lengths: dict[int, tuple[float, str]]) -> None:
    """The runs of one instance, each recorded whole as soon as it ends, or its failure recorded: a
    failure the next runs would repeat stops the experiment; any other fails this run (and the
    instance's runs not made yet, which the next `storlab run` retries)."""
    def planned():
        for rep in reps:
            bar.start(cell, rep)
            yield _PlannedRun(cell, rep, store, facts_id, outcome, bar, lengths.get(rep))

    failure = cell_runs.run_cell(cell_runs.Lab(experiment, paths, keep, pool, tracing), cell, planned())
    if failure is None:
        return
    exc, rep = failure.error, failure.slot.repetition
    if isinstance(exc, UserError) and not isinstance(exc, server_failures.SettingRejected):
        raise exc  # the user's own mistake (their SQL): every run would fail alike
    store.record_failure(cell.id, rep, failure.message)
    if isinstance(exc, server_failures.SettingRejected):  # every run with this setting would fail alike
        raise UserError(
            f"{experiment.where(('engine_settings', exc.setting))}: engine_settings.{exc.setting}: "
            f"the server refuses it (cell {cell.label}): {exc}; stopped before the other runs"
        ) from None
    if isinstance(exc, server_failures.PlacementFull):  # so would every later run
        raise RunFailed(f"{exc}; stopped: free space there or shrink the workload, then run the "
                        "same command to resume") from None
    outcome.failed.append(f"{cell.label} #{rep}: {failure.message}")
    bar.progress.console.print(Text.assemble(("failed:", "red"), f" {cell.label} #{rep}: {failure.message}"))
    bar.done()
