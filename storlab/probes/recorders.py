"""Recorders that run beside the workload (each on a storlab.sampler loop): the
sessions' CPU and run-queue time from /proc, and device IO per placement over time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from storlab import timeline
from storlab.errors import RunFailed
from storlab.sampler import Sampler

# The device sampler's period: short enough that a scan of under a second still has a point or two.
DEVICE_PERIOD_S = 0.5


@dataclass
class SchedTime:
    """Seconds on CPU and waiting in the run queue (the seeds' signal wait), from /proc/<pid>/schedstat."""

    cpu_s: float = 0.0
    runqueue_s: float = 0.0


def sched_time(pids: list[int], proc: Path = Path("/proc")) -> SchedTime | None:
    """Summed over the pids, or None when schedstat cannot be read (another host, no schedstats)."""
    total = SchedTime()
    for pid in pids:
        try:
            on_cpu, queued, _ = (proc / str(pid) / "schedstat").read_text().split()
        except (OSError, ValueError):
            return None
        total.cpu_s += int(on_cpu) / 1e9
        total.runqueue_s += int(queued) / 1e9
    return total


class SessionsSched:
    """The sessions' schedstat since the start, each session's last reading kept: a session that has
    ended (a load generator's, which disconnects before the probes stop) counts what it had at its last
    reading, taken at each waits-timeline interval (so at most that much short). A reading lower than
    the one before is another process that took the pid: the last one stands."""

    def __init__(self, pids: list[int], proc: Path = Path("/proc")):
        self.pids = list(pids)
        self.proc = proc
        self.last: dict[int, tuple[int, int]] = {}
        self.before = self._total()

    def _total(self) -> SchedTime | None:
        total = SchedTime()
        for pid in self.pids:
            try:
                on_cpu, queued, _ = (self.proc / str(pid) / "schedstat").read_text().split()
                if int(on_cpu) >= self.last.get(pid, (0, 0))[0]:
                    self.last[pid] = (int(on_cpu), int(queued))
            except (OSError, ValueError):
                if pid not in self.last:
                    return None
            total.cpu_s += self.last[pid][0] / 1e9
            total.runqueue_s += self.last[pid][1] / 1e9
        return total

    def since_start(self) -> SchedTime | None:
        return sched_delta(self.before, self._total())


def sched_delta(before: SchedTime | None, after: SchedTime | None) -> SchedTime | None:
    if before is None or after is None:
        return None
    return SchedTime(after.cpu_s - before.cpu_s, after.runqueue_s - before.runqueue_s)


@dataclass
class TimelinePoint:
    t_s: float
    metric: str
    value: float


@dataclass(frozen=True)
class DiskCounters:
    """One device's counters since boot, as /proc/diskstats keeps them (updated as each request completes)."""

    ios: int  # reads and writes completed
    bytes: int  # read and written


def disk_counters(devices: set[str]) -> dict[str, DiskCounters]:
    disks = psutil.disk_io_counters(perdisk=True) or {}
    return {dev: DiskCounters(c.read_count + c.write_count, c.read_bytes + c.write_bytes)
            for dev in devices if (c := disks.get(dev)) is not None}


@dataclass(frozen=True)
class DeviceReading:
    t: float  # the clock right after the counters were read
    counters: dict[str, DiskCounters]
    cpu_percent: float  # the machine's CPU since the reading before


class DeviceTimeline:
    """IOPS, MiB/s and average IO size for the devices behind the placements, and CPU %, every
    `period_s` on the run's time axis, each stamped at the end of the interval it covers.

    Each value is what the counters moved between two readings divided by the time between those
    same two readings: the clock is read right after the counters, not when the sampler wakes, so
    a reading delayed on a busy machine still counts for the time it really covers. The run's last
    partial interval is read at stop, folded into the one before when shorter than half a period
    (a rate over a sliver of a second is noise)."""

    def __init__(self, devices: dict[str, str], period_s: float = DEVICE_PERIOD_S,
                 read: Callable[[], dict[str, DiskCounters]] | None = None,
                 cpu: Callable[[], float] | None = None, clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        self.devices = devices  # placement name -> kernel device name
        self.period_s = period_s
        self.read = read or (lambda: disk_counters(set(devices.values())))
        self.cpu = cpu or (lambda: psutil.cpu_percent(interval=None))
        self.clock = clock
        self.sampler = Sampler(period_s, self._record, clock=clock, wait=wait)
        self.readings: list[DeviceReading] = []
        self._t0 = 0.0

    def _reading(self) -> DeviceReading:
        counters = self.read()
        return DeviceReading(self.clock(), counters, self.cpu())

    def _record(self, _weight_s: float) -> None:
        self.readings.append(self._reading())

    def start(self, t0: float) -> None:
        self._t0 = t0
        self.readings = [self._reading()]
        self.sampler.start()

    def stop(self) -> list[TimelinePoint]:
        self.sampler.stop()
        if self.sampler.error is not None:
            raise RunFailed(f"device timeline failed: {self.sampler.error}")
        self.readings.append(self._reading())
        return device_points(self.readings, self.devices, self._t0, self.period_s / 2)


def device_points(readings: list[DeviceReading], devices: dict[str, str], t0: float,
                  min_last_s: float) -> list[TimelinePoint]:
    """The timeline points of consecutive readings, on the axis that starts at `t0`."""
    pairs = [(a, b) for a, b in zip(readings, readings[1:]) if b.t > a.t]
    if len(pairs) > 1 and pairs[-1][1].t - pairs[-1][0].t < min_last_s:
        (a, b), (_, c) = pairs[-2], pairs[-1]
        cpu = (b.cpu_percent * (b.t - a.t) + c.cpu_percent * (c.t - b.t)) / (c.t - a.t)
        pairs = pairs[:-2] + [(a, DeviceReading(c.t, c.counters, cpu))]
    points = []
    for a, b in pairs:
        width, t = b.t - a.t, b.t - t0
        for placement, dev in devices.items():
            before, after = a.counters.get(dev), b.counters.get(dev)
            if before is None or after is None:
                continue
            ios, nbytes = after.ios - before.ios, after.bytes - before.bytes
            points.append(TimelinePoint(t, timeline.IOPS.of(placement), ios / width))
            points.append(TimelinePoint(t, timeline.MIB_S.of(placement), nbytes / width / 2**20))
            if ios:
                points.append(TimelinePoint(t, timeline.IO_KB.of(placement), nbytes / ios / 1024))
        points.append(TimelinePoint(t, timeline.CPU_PERCENT.name, b.cpu_percent))
    return points
