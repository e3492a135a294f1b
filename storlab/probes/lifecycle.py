"""The recorders around a measured run, with one lifecycle (as Rally's telemetry devices): each is
started with what the run is (its sessions, the start of its clock) and stopped with what it
recorded, which fills one part of the run's result. They start in order and stop in reverse, every
one on every way out:

- the engine's wait probe: the sessions' waits (the run's wait capture);
- the device timeline (recorders.py): IOPS, MiB/s and IO size per placement, and CPU %;
- the wait timeline: the waits per interval, read from the wait probe (so it starts after it);
- then every probe of the registry that has a recorder of its own (probes/registry.py): who waits on
  what, the IO sizes, the kernel's pressure, what the instance's IO caps and memory limit did, ...
  each keeping what it recorded under its name (and putting its points on the timeline, if it has).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from storlab import interrupts
from storlab.lab import mounts
from storlab.probes.bpftrace import Tracing
from storlab.probes.kept import RunScope
from storlab.probes.recorders import DeviceTimeline
from storlab.probes import registry
from storlab.probes.wait_timeline import WaitTimeline
from storlab.probes.target import Probed

CAPTURE, TIMELINE = "capture", "timeline"


@dataclass(frozen=True)
class RunStart:
    """What a recorder is told when the run starts."""

    sessions: list[int]  # the engine's ids of the load's sessions
    t0: float  # time.monotonic() at the run's start: the samplers' time axis


@dataclass
class Recorder:
    """One recorder's lifecycle: `records` names the part of the run's result its `stop()` fills
    (CAPTURE, TIMELINE, or a probe's name; timeline points from several are joined in the order
    they started)."""

    records: str
    start: Callable[[RunStart], None]
    stop: Callable[[], Any]
    points: Callable[[Any], list] | None = None  # a probe's points for the run's timeline, from what it recorded
    # What it recorded, completed once the load's sessions have exited: counters a session reports as it exits.
    ended: Callable[[Any], Any] | None = None


def around_run(instance: Probed, traced: bool, tracing: Tracing = Tracing.ON) -> list[Recorder]:
    """Every recorder of a run on `instance`, in the order they start. `traced`: every IO's size
    is traced (bpftrace), not only each interval's average; `tracing` what the engine's wait probe
    traces (OFF: no bpftrace at all, it keeps its sampled figures and says so)."""
    waits = instance.wait_probe(tracing)
    devices = DeviceTimeline(_devices(instance.spec.placements))
    waits_over_time = WaitTimeline(waits.so_far)
    recorders = [
        Recorder(CAPTURE, lambda run: waits.start(run.sessions), waits.stop, ended=waits.ended),
        Recorder(TIMELINE, lambda run: devices.start(run.t0), devices.stop),
        Recorder(TIMELINE, lambda run: waits_over_time.start(run.t0), waits_over_time.stop),
    ]
    scope = RunScope(instance, traced)
    for probe in registry.PROBES:
        recording = probe.recorder(scope) if probe.recorder is not None else None
        if recording is not None:
            recorders.append(Recorder(probe.name, lambda run, r=recording: r.start(run.sessions, run.t0), recording.stop,
                                      probe.timeline))
    return recorders


def kept(recorded: dict[str, Any]) -> dict[str, Any]:
    """What each probe of the registry keeps of the run: its recorder's result, or its part of the
    engine's wait capture."""
    found = {}
    for probe in registry.PROBES:
        if probe.name in recorded:
            found[probe.name] = recorded[probe.name]
        elif probe.from_capture is not None and CAPTURE in recorded:
            found[probe.name] = probe.from_capture(recorded[CAPTURE])
    return found


@interrupts.owning
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


def sessions_ended(recorders: list[Recorder], recorded: dict[str, Any]) -> None:
    """Complete what the recorders recorded, once the load's sessions have exited."""
    for recorder in recorders:
        if recorder.ended is not None and recorder.records in recorded:
            recorded[recorder.records] = recorder.ended(recorded[recorder.records])


def _stop(started: list[Recorder], into: dict[str, Any]) -> Exception | None:
    results: list[tuple[Recorder, Any]] = []
    error = None
    for recorder in reversed(started):
        try:
            results.append((recorder, recorder.stop()))
        except Exception as exc:  # the others still stop
            error = error or exc
    for recorder, result in reversed(results):  # in the order started
        if recorder.records == TIMELINE:
            into.setdefault(TIMELINE, []).extend(result)
        else:
            into[recorder.records] = result
            if recorder.points is not None:
                into.setdefault(TIMELINE, []).extend(recorder.points(result))
    return error


def _devices(paths: dict[str, Path]) -> dict[str, str]:
    found = {}
    for name, path in paths.items():
        device = mounts.block_device_of(path)
        if device:
            found[name] = device
    return found
