"""`storlab run`: every cell x repetition not yet in the store, each on a fresh instance, each
recorded in one transaction as soon as it finishes."""

from __future__ import annotations

import time
from contextlib import closing, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console
from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from storlab import (capacity, devices, engine_settings, engines, instances, iosizes, matrix, placements, racing, settle,
                     system)
from storlab.errors import RunFailed, UserError
from storlab.experiment import Experiment
from storlab.placements import TMPFS
from storlab.layout import spec_for
from storlab.probes import DeviceTimeline
from storlab.store import RunResult, Store, exists
from storlab.wait_timeline import WaitTimeline
from storlab.waiting_tasks import WaitingTasksSampler


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
    user = instances.server_user()
    for name, path in found.items():
        problem = placements.path_problem(path, user)
        if problem:
            raise UserError(f"{experiment.where(('placements', name))}: placements.{name}: {problem}")
        if experiment.model.placements[name] != TMPFS:
            try:
                placements.make(path)
            except OSError as exc:
                raise RunFailed(f"{experiment.path.name}: placements.{name}: cannot create {path}: {exc.strerror}") from None
    return found


def preflight(experiment: Experiment, cells: list[matrix.Cell]) -> list[str]:
    """What is checked before anything starts (and by --dry-run): the installed engine's verdict on the
    settings, and whether one run fits in each placement. Refusals raise UserError; returns warnings."""
    warnings = engine_settings.verify(experiment)
    return warnings + capacity.check(experiment, cells, placement_paths(experiment))


def describe_plan(experiment: Experiment, folder: Path) -> list[str]:
    """The cells and the runs still to do, for --dry-run."""
    cells = matrix.cells(experiment)
    warnings = preflight(experiment, cells)
    done: set[tuple[str, int]] = set()
    if exists(folder):
        with Store.open(folder, create=False) as store:
            done = store.done()
    todo = matrix.plan(cells, experiment.repetitions, done)
    lines = [f"warning: {w}" for w in warnings]
    settings = experiment.race()
    if settings is None:
        lines.append(f"{experiment.name}: {len(cells)} cells x {experiment.repetitions} repetitions on {experiment.engine}")
    else:
        lines.append(f"{experiment.name}: a race of {len(cells)} cells on {experiment.engine}, {settings.min_rounds} to "
                     f"{settings.max_rounds} rounds: after each round from {settings.min_rounds}, cells clearly worse "
                     "than the best get no more runs; at most:")
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


def cell_paths(cell: matrix.Cell, paths: dict[str, Path], pool: devices.DevicePool | None) -> dict[str, Path]:
    """Where each placement is for this cell: the directories, and each device placement's mount
    (the pool makes the device, or reuses it when its format is the cell's)."""
    found = dict(paths)
    for name, table in cell.devices.items():
        if pool is None:
            raise RunFailed(f"placements.{name}: a device placement needs a device pool")
        found[name] = pool.device(name, devices.device_spec(name, table)).mount_point
    return found


@contextmanager
def cell_instance(experiment: Experiment, cell: matrix.Cell, paths: dict[str, Path], keep: bool,
                  pool: devices.DevicePool | None = None) -> Iterator[Any]:
    """A fresh instance with the cell's layout and the workload's data prepared; stopped and removed
    on every way out."""
    spec = spec_for(cell.layout, cell.engine_settings, cell_paths(cell, paths, pool))
    kind, params = experiment.workload, cell.workload
    with engines.provision(experiment.engine, spec, keep, kind.sessions(params)) as instance:
        kind.prepare(instance, params, experiment.sql)
        yield instance


def measure(experiment: Experiment, cell: matrix.Cell, instance: Any, on_progress=None) -> RunResult:
    """One measured run on a prepared instance: settled first (restarted too, for a kind that reads
    cold), with the probes and the IO-size tracer around the load."""
    kind, params = experiment.workload, cell.workload
    if kind.cold:
        instance.restart()
    conditions = settle.settle(instance, instance.roots.values())
    conditions.update(_device_conditions(cell, instance))
    if params.get("warmup_s"):
        conditions["warmup_s"] = params["warmup_s"]
    where = instance.spec.placements
    probe = instance.wait_probe()
    timeline_probe = DeviceTimeline(_devices(where))
    tracer = iosizes.IoSizeTracer(iosizes.device_numbers(where), "bpftrace" if traces_io(experiment) else None)
    with closing(kind.load(instance, params, experiment.sql)) as load:
        sessions = load.open()
        probe.start(sessions)
        waits_over_time = WaitTimeline(probe.so_far)
        tasks = WaitingTasksSampler(instance.waiting_tasks_probe())
        started_at, t0 = time.time(), time.monotonic()
        timeline_probe.start(t0)
        waits_over_time.start(t0)
        tasks.start(sessions)
        tracer.start()
        try:
            measured = load.run(on_progress)
        finally:
            sizes = tracer.stop()
            points = timeline_probe.stop()
            waiting = tasks.stop()
            points += waits_over_time.stop()
            capture = probe.stop()
    # The samplers count from t0; the run's axis from the load's first start (by the server's clock).
    offset = started_at - measured.start_epoch
    timeline = [(p.t_s + offset, p.metric, p.value) for p in points] + measured.timeline
    figures = [(f.name, measured.figures[f.name], f.unit) for f in kind.figures if f.name in measured.figures]
    return RunResult(started_at, figures, capture, instance.version, timeline, waiting, conditions, sizes)


def traces_io(experiment: Experiment) -> bool:
    """The size of every IO is traced (bpftrace: it takes about half a second to attach) where it is
    the question: devices storlab makes, and loads that read. Elsewhere each run keeps the
    per-interval average size from /proc/diskstats on its timeline."""
    return bool(experiment.device_sizes) or experiment.workload.cold


def _device_conditions(cell: matrix.Cell, instance: Any) -> dict[str, Any]:
    """What each device placement really was for this run, read back from sysfs and the mount table."""
    if not cell.devices:
        return {}
    seen = {name: devices.format_of(instance.roots[name]) for name in cell.devices if name in instance.roots}
    return {"devices": {name: asdict(found) for name, found in seen.items()}}


def run_once(experiment: Experiment, cell: matrix.Cell, paths: dict[str, Path], keep: bool,
             on_progress=None, pool: devices.DevicePool | None = None) -> RunResult:
    """One repetition of one cell on a fresh instance."""
    with cell_instance(experiment, cell, paths, keep, pool) as instance:
        return measure(experiment, cell, instance, on_progress)


def race_state(experiment: Experiment, cells: list[matrix.Cell], store: Store) -> racing.RaceState:
    values = racing.rounds_from([c.id for c in cells], store.runs(), store.failures(), experiment.workload.figures[0].name)
    return racing.race(values, experiment.race())


def next_runs(experiment: Experiment, cells: list[matrix.Cell], store: Store, tried: set) -> list[tuple[matrix.Cell, int]]:
    """The runs to do next. The whole matrix at once, interleaved; or, in a race, the next round of
    the cells still racing (none when the race is over). `tried`: runs already attempted in this
    invocation, never repeated in it (a failed run is retried by running the command again)."""
    settings = experiment.race()
    done = store.done() | tried
    if settings is None:
        return matrix.plan(cells, experiment.repetitions, done)
    state = race_state(experiment, cells, store)
    if state.finished:
        return []
    alive = set(state.alive)
    return [(c, state.next_round) for c in cells if c.id in alive and (c.id, state.next_round) not in done]


def _most_left(experiment: Experiment, cells: list[matrix.Cell], store: Store) -> int:
    """The runs still possible (a race may drop cells and stop sooner): the progress bar's total."""
    done = store.done()
    settings = experiment.race()
    if settings is None:
        return len(matrix.plan(cells, experiment.repetitions, done))
    state = race_state(experiment, cells, store)
    if state.finished:
        return 0
    return sum(1 for c in cells if c.id in set(state.alive)
               for rep in range(state.rounds + 1, settings.max_rounds + 1) if (c.id, rep) not in done)


def run(experiment: Experiment, folder: Path, keep: bool, console: Console) -> RunOutcome:
    cells = matrix.cells(experiment)
    if exists(folder):  # a damaged or foreign store is refused before anything starts
        with Store.open(folder, create=False):
            pass
    for warning in preflight(experiment, cells):
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"))
    paths = prepare_placements(experiment)
    for left in instances.clean(live=False, kept=False):
        console.print(f"cleaned up instance {left.instance_id} left by an earlier run")
    outcome = RunOutcome(folder)
    settings = experiment.race()
    with Store.open(folder) as store:
        store.bind_experiment(
            experiment.name, experiment.engine, experiment.source, experiment.identity(),
            experiment.repetitions, experiment.factors, [(c.id, c.label, c.factors) for c in cells],
            race=settings.model_dump() if settings else None,
        )
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
        todo = next_runs(experiment, cells, store, tried)
        if not todo:
            console.print(f"all {outcome.skipped} runs are already in {folder}", markup=False)
            return outcome
        has_devices = bool(experiment.device_sizes)
        with Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
        ) as progress, (devices.DevicePool() if has_devices else nullcontext()) as pool:
            bar = Bar(progress, progress.add_task("runs", total=_most_left(experiment, cells, store)),
                      progress.add_task("", total=1, visible=False))
            while todo:
                for cell, reps in _groups(experiment, todo):
                    _attempt(experiment, cell, reps, paths, keep, pool, store, facts_id, outcome, bar)
                    tried.update((cell.id, rep) for rep in reps)
                todo = next_runs(experiment, cells, store, tried) if settings else []
                # A race that dropped cells has fewer runs left than the bar expected.
                progress.update(bar.overall, total=progress.tasks[bar.overall].completed + _most_left(experiment, cells, store))
            progress.update(bar.current, visible=False)
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
    if not experiment.workload.prepared_once:
        return [(cell, [rep]) for cell, rep in todo]
    grouped: dict[str, tuple[matrix.Cell, list[int]]] = {}
    for cell, rep in todo:
        grouped.setdefault(cell.id, (cell, []))[1].append(rep)
    return list(grouped.values())


def _attempt(experiment: Experiment, cell: matrix.Cell, reps: list[int], paths: dict[str, Path], keep: bool,
             pool: devices.DevicePool | None, store: Store, facts_id: int, outcome: RunOutcome, bar: Bar) -> None:
    """The runs of one instance, each recorded whole as soon as it ends, or its failure recorded: a
    failure the next runs would repeat stops the experiment; any other fails this run (and the
    instance's runs not made yet, which the next `storlab run` retries)."""
    rep = reps[0]
    try:
        with cell_instance(experiment, cell, paths, keep, pool) as instance:
            for rep in reps:
                bar.start(cell, rep)
                result = measure(experiment, cell, instance, bar.transactions)
                store.record_run(cell.id, rep, result, facts_id)
                outcome.finished += 1
                bar.done()
    except instances.SettingRejected as exc:  # every run with this setting would fail alike
        store.record_failure(cell.id, rep, str(exc))
        raise UserError(
            f"{experiment.where(('engine_settings', exc.setting))}: engine_settings.{exc.setting}: "
            f"the server refuses it (cell {cell.label}): {exc}; stopped before the other runs"
        ) from None
    except instances.PlacementFull as exc:  # so would every later run
        store.record_failure(cell.id, rep, str(exc))
        raise RunFailed(f"{exc}; stopped: free space there or shrink the workload, then run the "
                        "same command to resume") from None
    except UserError:
        raise  # the user's own mistake (their SQL): every run would fail alike
    except Exception as exc:  # a server or driver error fails this run, not the matrix
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not isinstance(exc, RunFailed):
            message = f"{type(exc).__name__}: {message}"
        store.record_failure(cell.id, rep, message)
        outcome.failed.append(f"{cell.label} #{rep}: {message}")
        bar.progress.console.print(Text.assemble(("failed:", "red"), f" {cell.label} #{rep}: {message}"))
        bar.done()
