"""One way to run the runs of a cell, for `storlab run` (its runs come from the plan) and for a fleet
worker (its runs come from claims): a fresh instance with the cell's layout (its device placements
made by the device pool), the workload prepared, then each run settled, measured with the probes
around it and handed to its slot to be recorded. A kind whose repetitions share what it prepared
(a scan) gets all its slots on that one instance; any other kind one slot per instance. The run's
limit (`run_limit_s`) counts from the start of the instance's set-up, which has it as its deadline
(instances.deadlines); a watchdog then watches the instance from the workload's prepare to its last
run (stall.py): a server that stops answering, or a run past its wall-clock limit, has its instance
killed. The instance's server gets `stall_after_s` to stop at its end. The first failure ends the
cell's runs on that instance (its state is unknown) and is handed back to the caller, who records it
its own way."""

from __future__ import annotations

import time
from contextlib import closing, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

from storlab import engines, interrupts
from storlab.errors import RunFailed, UserError
from storlab.experiment import matrix
from storlab.experiment.file import Experiment
from storlab.lab import devices, instances, latency, quiesce, server_failures
from storlab.lab.layout import spec_for
from storlab.probes import lifecycle as run_probes
from storlab.probes.bpftrace import Tracing
from storlab.results.runs import RunResult
from storlab.running import stall
from storlab.running.queue import LeaseLost
from storlab.workloads.kind import TEMPORARY, Warmup
from storlab.engines.base import Instance


@dataclass
class Lab:
    """What every cell of one experiment runs with on this machine."""

    experiment: Experiment
    paths: dict[str, Path]  # the directory placements (a device placement's mount comes from the pool)
    keep: bool
    pool: devices.DevicePool | None = None
    tracing: Tracing = Tracing.ON  # what bpftrace traces (--no-trace, --trace-reads)


class Slot(Protocol):
    """One run to make: its repetition, and where its progress and its result go."""

    repetition: int

    def progress(self, done: int, total: int) -> None:
        """A progress reading came back (may raise to abandon the run: a fleet's lost lease)."""

    def record(self, result: RunResult) -> None: ...

    def abandoned(self) -> None:
        """The run is given up: its server stopped answering, or it passed its limit (called from the
        watchdog's thread, before it kills the instance)."""


@dataclass
class Failure:
    """The run that failed, in one line, and why."""

    slot: Slot
    message: str
    error: Exception

    @property
    def every_run_alike(self) -> bool:
        """A refused setting, a full placement or the user's own SQL: every later run would fail alike."""
        return isinstance(self.error, (UserError, server_failures.PlacementFull))


def failure_message(exc: Exception) -> str:
    """A failed run in one line: storlab's own words as they are, anything else named by its type."""
    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    return message if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {message}"


def shares_instance(experiment: Experiment) -> bool:
    """A cell's repetitions run on one instance, one after another (a scan's table is prepared once)."""
    return experiment.workload.prepared_once


def run_cell(lab: Lab, cell: matrix.Cell, slots: Iterator[Slot]) -> Failure | None:
    """Run what `slots` hands out on one fresh instance, until it stops handing out or a run fails;
    the failure is returned, not recorded. A lost lease (LeaseLost) and Ctrl-C pass through."""
    slot = next(slots, None)
    if slot is None:
        return None
    watch: stall.Watchdog | None = None
    try:
        paths = cell_paths(cell, lab.paths, lab.pool)  # the devices first: they are the lab's, not the run's
        started = time.monotonic()  # the first run's limit counts from its instance's set-up
        with cell_instance(lab, cell, paths, started) as instance, \
                stall.Watchdog(instance, stall.stall_after(cell.workload), lambda: slot and slot.abandoned(),
                               limit_s=cell.workload.run_limit, started=started) as watch:
            # Watched from here: the prepare may stall, or never end (the custom kind runs its transaction once).
            lab.experiment.workload.prepare(instance, cell.workload, lab.experiment.sql)
            while slot is not None:
                result = measure(lab.experiment, cell, instance, slot.progress, watch, lab.tracing)
                watch.run_ends()
                watch.check()
                slot.record(result)
                slot = next(slots, None)
                watch.run_starts()
    except LeaseLost:
        raise
    except Exception as exc:
        if watch is not None and watch.fired is not None:
            exc = watch.fired  # whatever the killed server's calls raised, the cause is the watchdog's
        if isinstance(exc, OSError):  # storlab's own call on a dead delay layer's mount (the next instance's folders)
            exc = server_failures.layer_ended(exc, _layered(lab, cell)) or exc
        return Failure(slot, failure_message(exc), exc)
    return None


def cell_paths(cell: matrix.Cell, paths: dict[str, Path], pool: devices.DevicePool | None) -> dict[str, Path]:
    """Where each placement is for this cell: the directories, and each device placement's mount
    (the pool makes the device, or reuses it when its format is the cell's)."""
    found = dict(paths)
    for name, spec in cell.devices.items():
        if pool is None:
            raise RunFailed(f"placements.{name}: a device placement needs a device pool")
        found[name] = pool.device(name, spec).path
    return found


def _layered(lab: Lab, cell: matrix.Cell) -> dict[str, Path]:
    """Where the cell's device placements are served (a delay layer's mount, for those with a latency)."""
    return {name: lab.pool.devices[name].path for name in cell.devices if lab.pool and name in lab.pool.devices}


@interrupts.owning
def cell_instance(lab: Lab, cell: matrix.Cell, paths: dict[str, Path], started: float) -> Iterator[Instance]:
    """A fresh instance with the cell's layout at `paths` (cell_paths), set up within the run's limit
    from `started`, its server given the stall deadline to stop at its end; stopped and removed on
    every way out."""
    experiment = lab.experiment
    kind, params = experiment.workload, cell.workload
    spec = spec_for(cell.layout, cell.engine_settings, paths, cell.engine_version, cell.caps)
    limit = instances.Deadline(params.run_limit, "workload.run_limit_s")
    stop = instances.Deadline(stall.stall_after(params), "workload.stall_after_s")
    with instances.deadlines(limit, stop, started) as set_up, \
            engines.provision(experiment.engine, spec, lab.keep, kind.sessions(params, experiment.sql)) as instance:
        set_up.done()
        yield instance


def measure(experiment: Experiment, cell: matrix.Cell, instance: Instance, on_progress=None,
            watch: stall.Watchdog | None = None, tracing: Tracing = Tracing.ON) -> RunResult:
    """One measured run on a prepared instance: settled first (restarted too, for a kind that reads
    cold, the watchdog paused meanwhile), with the recorders around the load (run_probes)."""
    kind, params = experiment.workload, cell.workload
    if kind.cold:
        with watch.paused() if watch is not None else nullcontext():
            instance.restart()
    conditions = quiesce.quiesce(instance.checkpoint, instance.roots.values(), instance.group)
    conditions.update(_device_conditions(cell, instance), tracing=tracing.value)
    if isinstance(params, Warmup) and params.declared_warmup:
        conditions["warmup_s"] = params.declared_warmup
    # Only a kind that shows the temporary files' counters asks for them: each asking is two sessions,
    # and after the load a wait for the sessions to report them.
    counts_temporary = any(f in kind.figures for f in TEMPORARY)
    spilled = instance.temporary_files() if counts_temporary else {}
    # The delay layers' CPU over the load: the lab's, counted apart from the servers' and shown.
    layers = {name: layer for name in cell.devices if name in instance.roots
              and (layer := latency.serving(instance.roots[name])) is not None}
    layer_cpu = {name: layer.cpu_s() for name, layer in layers.items()}
    with closing(kind.load(instance, params, experiment.sql)) as load:
        sessions = load.open()
        recorders = run_probes.around_run(instance, tracing is not Tracing.OFF and traces_io(experiment), tracing)
        started_at, t0 = time.time(), time.monotonic()
        with run_probes.recording(recorders, run_probes.RunStart(sessions, t0)) as recorded:
            measured = load.run(on_progress)
    run_probes.sessions_ended(recorders, recorded)  # once the load's sessions are closed
    if layers:  # the load's length beside them: the layer's share of a core (storlab.volume.added_latency)
        load_s = time.monotonic() - t0
        conditions["delay_layer_cpu_s"] = {name: layer.cpu_s() - layer_cpu[name] for name, layer in layers.items()}
        conditions["delay_layer_load_s"] = {name: load_s for name in layers}
        conditions["delay_layer_mode"] = {name: "passthrough" if layer.passthrough else "cached"
                                          for name, layer in layers.items()}
    # What the load cut and why it ended, where they were decided in the run: the answer reads the
    # measured part from them as from a declared warm-up.
    if measured.warmup_cut_s is not None:
        conditions.update(warmup_s=measured.warmup_cut_s, warmup_found=True)
    if measured.stopped is not None:
        conditions["stopped"] = measured.stopped
    if measured.kept is not None:
        conditions["workload"] = measured.kept
    if counts_temporary:  # once the load's sessions are closed: they report their temporary files as they end
        measured.figures.update({name: count - spilled.get(name, 0.0)
                                 for name, count in instance.temporary_files().items()})
    # The samplers count from t0; the run's axis from the load's first start (by the server's clock).
    offset = started_at - measured.start_epoch
    capture = recorded[run_probes.CAPTURE]
    timeline = [(p.t_s + offset, p.metric, p.value) for p in recorded.get(run_probes.TIMELINE, [])] + measured.timeline \
        + [(at - t0 + offset, metric, value) for at, metric, value in capture.events]
    figures = [(f.name, measured.figures[f.name], f.unit) for f in kind.figures if f.name in measured.figures]
    return RunResult(started_at, figures, capture, instance.version, timeline, conditions,
                     run_probes.kept(recorded))


def traces_io(experiment: Experiment) -> bool:
    """The size of every IO is traced (bpftrace: it takes about half a second to attach) where it is
    the question: devices storlab makes, and loads that read. Elsewhere each run keeps the
    per-interval average size from /proc/diskstats on its timeline."""
    return bool(experiment.device_sizes) or experiment.workload.cold


def _device_conditions(cell: matrix.Cell, instance: Instance) -> dict[str, Any]:
    """What each device placement really was for this run, read back from sysfs and the mount table."""
    if not cell.devices:
        return {}
    seen = {name: devices.format_of(instance.roots[name]) for name in cell.devices if name in instance.roots}
    return {"devices": {name: asdict(found) for name, found in seen.items()}}
