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

from storlab import engines
from storlab.answer import analysis, racing
from storlab.errors import RunFailed, UserError
from storlab.experiment import design, design_key, matrix, places, swept
from storlab.experiment.swept import short_name
from storlab.experiment.file import Experiment
from storlab.lab import devices, instances, os_users, placements, templates
from storlab.lab.placements import TMPFS
from storlab.machine import system
from storlab.probes import bpftrace
from storlab.probes.bpftrace import Tracing
from storlab.results.folder_store import exists
from storlab.results.runs import RunResult
from storlab.results.store import Store
from storlab.running import capacity, cell_runs, cleanup


@dataclass
class RunOutcome:
    folder: Path
    finished: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)


def default_folder(experiment: Experiment) -> Path:
    return Path("results") / experiment.name


def placement_paths(experiment: Experiment) -> dict[str, Path]:
    """The directory placements (a device placement's directory is its mount, made for each run)."""
    return {name: experiment.placement_path(name) for name in experiment.directories}


def prepare_placements(experiment: Experiment) -> dict[str, Path]:
    """Make the missing placement directories, after checking each again (the load checked them by
    looking only; the servers' OS user may have been made since)."""
    found = placement_paths(experiment)
    user = os_users.server_user()
    for name, path in found.items():
        problem = placements.path_problem(path, user)
        if problem:
            raise UserError(f"{experiment.where(('placements', name))}: placements.{name}: {problem}")
        if places.path_text(experiment.model.placements[name]) != TMPFS:
            try:
                placements.make(path)
            except OSError as exc:
                raise RunFailed(f"{experiment.path.name}: placements.{name}: cannot create {path}: {exc.strerror}") from None
    return found


def preflight(experiment: Experiment, cells: list[matrix.Cell]) -> list[str]:
    """What is checked before anything starts (and by --dry-run): the installed engine's verdict on the
    settings, and whether one run fits in each placement. Refusals raise UserError; returns warnings."""
    for version in experiment.model.versions():  # each engine_version's server is there (RunFailed says how to install it)
        engines.engine(experiment.engine).installed(version)
    problem = templates.folder_problem()
    if problem:
        raise UserError(f"the folder of templates: {problem}")
    warnings = engines.engine(experiment.engine).settings.verify(experiment)
    return warnings + capacity.check(experiment, cells, placement_paths(experiment))


def describe_plan(experiment: Experiment, folder: Path) -> list[str]:
    """The cells and the runs still to do, for --dry-run."""
    cells = matrix.cells(experiment)
    warnings = preflight(experiment, cells)
    done: set[tuple[str, int]] = set()
    seed = experiment.model.order_seed
    if exists(folder):
        with Store.open(folder, create=False) as store:
            done = store.done()
            held = store.experiment()
            if seed is None and held is not None:
                seed = held.order_seed
    todo = matrix.plan(cells, experiment.repetitions, done, seed)
    lines = [f"warning: {w}" for w in warnings]
    settings, settling = experiment.race(), experiment.settling()
    ordered = matrix.reference_first(experiment)
    lines += design.described(experiment.model.design, ordered, [{short_name(k): v for k, v in c.factors.items()} for c in cells],
                              swept.cell_count(experiment.factors))
    if settings is None:
        full = swept.cell_count(experiment.factors) * experiment.repetitions
        against = f" ({len(cells) * experiment.repetitions} runs; the full factorial's: {full})" \
            if experiment.model.design.kind != design_key.FULL else ""
        lines.append(f"{experiment.name}: {len(cells)} cells x {experiment.repetitions} repetitions on {experiment.engine}{against}")
    else:
        lines.append(f"{experiment.name}: a race of {len(cells)} cells on {experiment.engine}, {settings.min_rounds} to "
                     f"{settings.max_rounds} rounds: after each round from {settings.min_rounds}, cells clearly worse "
                     "than the best get no more runs; at most:")
    if settling is not None:
        budget = f", or once {settling.budget_s:g} s of wall time are spent" if settling.budget_s else ""
        lines.append(f"  until settled: after each round from {settling.min_rounds}, the factor effects are fitted "
                     f"again; the runs stop once every factor is different or equivalent{budget}; at most:")
    lines += [f"  cell {c.id}  {c.label}" for c in cells]
    order = "in this order" if seed is not None else \
        "listed in the matrix order (each round's order is drawn at the first run; order_seed fixes it)"
    lines.append(f"{len(todo)} runs to do ({len(done)} already in {folder}), {order}:")
    lines += [f"  {i:>4}. repetition {rep} of {c.id}  {c.label}" for i, (c, rep) in enumerate(todo, 1)]
    return lines


def race_state(experiment: Experiment, cells: list[matrix.Cell], store: Store) -> racing.RaceState:
    values = racing.rounds_from([c.id for c in cells], store.runs(), store.failures(), experiment.figures[0].name)
    return racing.race(values, experiment.race())


def stop_reason(experiment: Experiment, store: Store, started: float | None = None) -> str | None:
    """Why an experiment run until settled takes no more runs: its answer settled (after its `min`
    rounds), or the budget of wall time of this invocation (since `started`, monotonic) is spent.
    None while it goes on (or without until settled; `max` is where its plan ends)."""
    settling = experiment.settling()
    if settling is None:
        return None
    results = analysis.load(store)
    if results.settled:
        return f"settled after {results.rounds} rounds: {analysis.verdicts_line(results)}"
    if settling.budget_s is not None and started is not None and time.monotonic() - started >= settling.budget_s:
        return f"budget spent: {settling.budget_s:g} s after {results.rounds} rounds, not settled: " \
            + analysis.verdicts_line(results)
    return None


def max_reason(experiment: Experiment, store: Store) -> str | None:
    """Why runs stopped where the plan ended: max reached (or the race over) before the answer settled."""
    if experiment.settling() is None:
        return None
    results = analysis.load(store)
    if results.rounds >= experiment.repetitions:
        why = f"max reached: {results.rounds} rounds"
    elif results.race is not None and results.race.finished:
        why = f"race over after {results.rounds} rounds ({results.race.finished})"
    else:  # the runs this invocation could not make failed; the next `storlab run` tries them again
        why = f"stopped after {results.rounds} rounds, runs failed"
    return f"{why}, not settled: {analysis.verdicts_line(results)}"


def next_runs(experiment: Experiment, cells: list[matrix.Cell], store: Store, tried: set,
              started: float | None = None) -> list[tuple[matrix.Cell, int]]:
    """The runs to do next, each round in the order drawn from the experiment's seed. The whole
    matrix at once, interleaved; until settled, the next round (every round up to `min` at once; none
    once the answer is settled or the budget spent); in a race, the next round of the cells still
    racing (none when the race is over). `tried`: runs already attempted in this invocation, never
    repeated in it (a failed run is retried by running the command again)."""
    settings, settling = experiment.race(), experiment.settling()
    done = store.done() | tried
    held = store.experiment()
    seed = None if held is None else held.order_seed
    if settling is not None and stop_reason(experiment, store, started) is not None:
        return []
    if settings is None:
        todo = matrix.plan(cells, experiment.repetitions, done, seed)
        if settling is None or not todo:
            return todo
        upto = max(todo[0][1], settling.min_rounds)
        return [(c, rep) for c, rep in todo if rep <= upto]
    state = race_state(experiment, cells, store)
    if state.finished:
        return []
    alive = set(state.alive)
    return [(c, state.next_round) for c in matrix.round_order(cells, seed, state.next_round)
            if c.id in alive and (c.id, state.next_round) not in done]


def _most_left(experiment: Experiment, cells: list[matrix.Cell], store: Store) -> int:
    """The runs still possible (a race may drop cells and stop sooner; until settled, the answer may
    settle sooner): the progress bar's total."""
    done = store.done()
    settings = experiment.race()
    if settings is None:
        return len(matrix.plan(cells, experiment.repetitions, done))
    state = race_state(experiment, cells, store)
    if state.finished:
        return 0
    return sum(1 for c in cells if c.id in set(state.alive)
               for rep in range(state.rounds + 1, settings.max_rounds + 1) if (c.id, rep) not in done)


def run(experiment: Experiment, folder: Path, keep: bool, console: Console, tracing: Tracing = Tracing.ON) -> RunOutcome:
    """Every run not yet in the store at `folder`; `tracing` what bpftrace traces around each run
    (OFF, --no-trace: the sampled figures only)."""
    cells = matrix.cells(experiment)
    if exists(folder):  # a damaged or foreign store is refused before anything starts
        with Store.open(folder, create=False):
            pass
    for warning in preflight(experiment, cells):
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"))
    paths = prepare_placements(experiment)
    for left in cleanup.clean(live=False, kept=False):
        console.print(f"cleaned up instance {left.instance_id} left by an earlier run"
                      + (f"; left {'; '.join(left.refused)}" if left.refused else ""), markup=False)
    outcome = RunOutcome(folder)
    settings, settling = experiment.race(), experiment.settling()
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
        for fid, held in earlier.items():
            if fid != facts_id:
                for line in system.differences(held["comparable"], comparable):
                    console.print(Text.assemble(("warning:", "yellow"), f" this machine differs from earlier runs: {line}"))
        outcome.skipped = len(store.done())
        tried: set[tuple[str, int]] = set()
        started = time.monotonic()
        todo = next_runs(experiment, cells, store, tried, started)
        if not todo:
            why = stop_reason(experiment, store) or max_reason(experiment, store)
            store.record_stop(why)
            console.print(why or f"all {outcome.skipped} runs are already in {folder}", markup=False)
            return outcome
        has_devices = bool(experiment.device_sizes)
        with Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
        ) as progress, (devices.DevicePool() if has_devices else nullcontext()) as pool, bpftrace.kept_across_runs(), \
                instances.ending_in_background():
            bar = Bar(progress, progress.add_task("runs", total=_most_left(experiment, cells, store)),
                      progress.add_task("", total=1, visible=False))
            while todo:
                for cell, reps in _groups(experiment, todo):
                    _attempt(experiment, cell, reps, paths, keep, pool, store, facts_id, outcome, bar, tracing)
                    tried.update((cell.id, rep) for rep in reps)
                todo = next_runs(experiment, cells, store, tried, started) if settings or settling else []
                # A race that dropped cells, or an answer that settled, has fewer runs left than the bar expected.
                left = _most_left(experiment, cells, store) if todo else 0
                progress.update(bar.overall, total=progress.tasks[bar.overall].completed + left)
            progress.update(bar.current, visible=False)
        why = stop_reason(experiment, store, started) or max_reason(experiment, store)
        store.record_stop(why)
        if why:
            console.print(why, markup=False)
    return outcome


@dataclass
class Bar:
    """The progress bars: every run, and the transactions of the run under way."""

    progress: Progress
    overall: Any
    current: Any

    def start(self, cell: matrix.Cell, rep: int) -> None:
        self.progress.update(self.current, description=f"  {cell.label} #{rep}", completed=0, total=1, visible=True)

    def transactions(self, done: int, total: int) -> None:
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

    def progress(self, done: int, total: int) -> None:
        self.bar.transactions(done, total)

    def record(self, result: RunResult) -> None:
        self.store.record_run(self.cell.id, self.repetition, result, self.facts_id)
        self.outcome.finished += 1
        self.bar.done()

    def abandoned(self) -> None:
        pass  # the run fails once its instance is stopped; said then


def _attempt(experiment: Experiment, cell: matrix.Cell, reps: list[int], paths: dict[str, Path], keep: bool,
             pool: devices.DevicePool | None, store: Store, facts_id: int, outcome: RunOutcome, bar: Bar,
             tracing: Tracing) -> None:
    """The runs of one instance, each recorded whole as soon as it ends, or its failure recorded: a
    failure the next runs would repeat stops the experiment; any other fails this run (and the
    instance's runs not made yet, which the next `storlab run` retries)."""
    def planned():
        for rep in reps:
            bar.start(cell, rep)
            yield _PlannedRun(cell, rep, store, facts_id, outcome, bar)

    failure = cell_runs.run_cell(cell_runs.Lab(experiment, paths, keep, pool, tracing), cell, planned())
    if failure is None:
        return
    exc, rep = failure.error, failure.slot.repetition
    if isinstance(exc, UserError) and not isinstance(exc, instances.SettingRejected):
        raise exc  # the user's own mistake (their SQL): every run would fail alike
    store.record_failure(cell.id, rep, failure.message)
    if isinstance(exc, instances.SettingRejected):  # every run with this setting would fail alike
        raise UserError(
            f"{experiment.where(('engine_settings', exc.setting))}: engine_settings.{exc.setting}: "
            f"the server refuses it (cell {cell.label}): {exc}; stopped before the other runs"
        ) from None
    if isinstance(exc, instances.PlacementFull):  # so would every later run
        raise RunFailed(f"{exc}; stopped: free space there or shrink the workload, then run the "
                        "same command to resume") from None
    outcome.failed.append(f"{cell.label} #{rep}: {failure.message}")
    bar.progress.console.print(Text.assemble(("failed:", "red"), f" {cell.label} #{rep}: {failure.message}"))
    bar.done()
