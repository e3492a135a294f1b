"""Recorders that run beside the workload: a sampler loop (testable with a fake clock), the
sessions' CPU and run-queue time from /proc, and device IO per placement over time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil


class Sampler:
    """Calls `record(weight_s)` every `period_s` on its own thread. The weight is the time since the
    previous sample, so a late sample (a busy machine) counts for the time it really covers."""

    def __init__(self, period_s: float, record: Callable[[float], None],
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        self.period_s = period_s
        self.record = record
        self.clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def loop(self) -> None:
        last = self.clock()
        while not self._wait(self.period_s):
            now = self.clock()
            self.record(now - last)
            last = now

    def _guarded(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # a probe failing must not kill the run silently
            self.error = exc

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name="storlab-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


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


def sched_delta(before: SchedTime | None, after: SchedTime | None) -> SchedTime | None:
    if before is None or after is None:
        return None
    return SchedTime(after.cpu_s - before.cpu_s, after.runqueue_s - before.runqueue_s)


@dataclass
class TimelinePoint:
    t_s: float
    metric: str
    value: float


@dataclass
class DeviceTimeline:
    """IOPS, MiB/s and CPU % every half second for the devices behind the placements, on the run's time axis."""

    devices: dict[str, str]  # placement name -> kernel device name
    period_s: float = 0.5
    points: list[TimelinePoint] = field(default_factory=list)
    _sampler: Sampler | None = None
    _t0: float = 0.0
    _last: dict = field(default_factory=dict)

    def _read(self) -> dict:
        disks = psutil.disk_io_counters(perdisk=True) or {}
        return {dev: disks.get(dev) for dev in set(self.devices.values())}

    def _record(self, weight_s: float) -> None:
        now = self._read()
        t = time.monotonic() - self._t0
        for placement, dev in self.devices.items():
            a, b = self._last.get(dev), now.get(dev)
            if a is None or b is None or weight_s <= 0:
                continue
            ios = (b.read_count - a.read_count) + (b.write_count - a.write_count)
            nbytes = (b.read_bytes - a.read_bytes) + (b.write_bytes - a.write_bytes)
            self.points.append(TimelinePoint(t, f"iops:{placement}", ios / weight_s))
            self.points.append(TimelinePoint(t, f"mb_s:{placement}", nbytes / weight_s / 2**20))
            if ios:
                self.points.append(TimelinePoint(t, f"io_kb:{placement}", nbytes / ios / 1024))
        self.points.append(TimelinePoint(t, "cpu_percent", psutil.cpu_percent(interval=None)))
        self._last = now

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._last = self._read()
        psutil.cpu_percent(interval=None)
        self._sampler = Sampler(self.period_s, self._record)
        self._sampler.start()

    def stop(self) -> list[TimelinePoint]:
        if self._sampler is not None:
            self._sampler.stop()
        return self.points
