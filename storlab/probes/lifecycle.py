"""The recorders around a measured run, with one lifecycle (as Rally's telemetry devices): each is
started with what the run is (its sessions, the start of its clock) and stopped with what it
recorded, which fills one part of the run's result. They start in order and stop in reverse, every
one on every way out:

- the engine's wait probe: the sessions' waits (the run's wait capture);
- the device timeline (probes.py): IOPS, MB/s and IO size per placement, and CPU %, every half second;
- the wait timeline: the waits per interval, read from the wait probe (so it starts after it);
- the waiting tasks: which waits, and on what, sampled;
- the IO-size tracer: the size of every IO, or each interval's average size.

A new recorder is one more entry in `around_run`."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from storlab.lab import mounts
from storlab.probes import iosizes
from storlab.probes.recorders import DeviceTimeline
from storlab.probes.wait_timeline import WaitTimeline
from storlab.probes.waiting_tasks import WaitingTasksSampler


@dataclass(frozen=True)
class RunStart:
    """What a recorder is told when the run starts."""

    sessions: list[int]  # the engine's ids of the load's sessions
    t0: float  # time.monotonic() at the run's start: the samplers' time axis


@dataclass
class Recorder:
    """One recorder's lifecycle: `records` names the part of the run's result its `stop()` fills
    ("capture", "timeline", "waiting_tasks" or "io_sizes"; timeline points from several are joined
    in the order they started)."""

    records: str
    start: Callable[[RunStart], None]
    stop: Callable[[], Any]


def around_run(instance: Any, traced: bool) -> list[Recorder]:
    """Every recorder of a run on `instance`, in the order they start. `traced`: every IO's size
    is traced (bpftrace), not only each interval's average."""
    where = instance.spec.placements
    waits = instance.wait_probe()
    devices = DeviceTimeline(_devices(where))
    waits_over_time = WaitTimeline(waits.so_far)
    tasks = WaitingTasksSampler(instance.waiting_tasks_probe())
    tracer = iosizes.IoSizeTracer(iosizes.device_numbers(where), "bpftrace" if traced else None)
    return [
        Recorder("capture", lambda run: waits.start(run.sessions), waits.stop),
        Recorder("timeline", lambda run: devices.start(run.t0), devices.stop),
        Recorder("timeline", lambda run: waits_over_time.start(run.t0), waits_over_time.stop),
        Recorder("waiting_tasks", lambda run: tasks.start(run.sessions), tasks.stop),
        Recorder("io_sizes", lambda run: tracer.start(), tracer.stop),
    ]


@contextmanager
def recording(recorders: list[Recorder], run: RunStart) -> Iterator[dict[str, Any]]:
    """Start each recorder in turn; on the way out stop those started, in reverse, and fill the
    dict yielded with what they recorded. A recorder that fails to stop fails the run (after the
    others are stopped), unless the run failed first."""
    started: list[Recorder] = []
    recorded: dict[str, Any] = {}
    try:
        for recorder in recorders:
            recorder.start(run)
            started.append(recorder)
        yield recorded
    except BaseException:
        _stop(started, {})
        raise
    error = _stop(started, recorded)
    if error is not None:
        raise error


def _stop(started: list[Recorder], into: dict[str, Any]) -> Exception | None:
    results: list[tuple[Recorder, Any]] = []
    error = None
    for recorder in reversed(started):
        try:
            results.append((recorder, recorder.stop()))
        except Exception as exc:  # the others still stop
            error = error or exc
    for recorder, result in reversed(results):  # in the order started
        if recorder.records == "timeline":
            into.setdefault("timeline", []).extend(result)
        else:
            into[recorder.records] = result
    return error


def _devices(paths: dict[str, Path]) -> dict[str, str]:
    found = {}
    for name, path in paths.items():
        device = mounts.block_device_of(path)
        if device:
            found[name] = device
    return found
