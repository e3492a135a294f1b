"""The waits on the run's time axis: the wait probe read once a second while the load runs, each
interval's difference stored as the timeline's family `wait:<WaitType>` (timeline.WAIT), in seconds
waited per second of the interval (the average number of sessions in that wait), so intervals of any
width stack and compare honestly beside throughput, latency, device IO and CPU."""

from __future__ import annotations

import time
from typing import Callable

from storlab import timeline
from storlab.errors import RunFailed
from storlab.probes.recorders import TimelinePoint
from storlab.sampler import Sampler

PERIOD_S = 1.0
# A last interval shorter than this is folded into the one before (as the throughput buckets are):
# a rate over a sliver of a second is noise.
MIN_LAST_INTERVAL_S = 0.5


class WaitTimeline:
    """`so_far()` returns the seconds in each wait since the probe started; each interval is stamped
    at its start on the sampler's clock (the runner moves it onto the run's axis)."""

    def __init__(self, so_far: Callable[[], dict[str, float]], period_s: float = PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None):
        self.so_far = so_far
        self.clock = clock
        self.sampler = Sampler(period_s, self.record, clock=clock, wait=wait)
        self.intervals: list[tuple[float, float, dict[str, float]]] = []  # start, width, seconds moved
        self._t0 = 0.0
        self._at = 0.0
        self._last: dict[str, float] = {}

    def record(self, weight_s: float) -> None:
        reading = self.so_far()
        moved = {name: value - self._last.get(name, 0.0) for name, value in reading.items()}
        self.intervals.append((self._at - self._t0, weight_s, moved))
        self._at, self._last = self._at + weight_s, reading

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._at = self.clock()
        self._last = self.so_far()
        self.sampler.start()

    def stop(self) -> list[TimelinePoint]:
        """Stops the sampler, reads the last partial interval, and returns the points."""
        self.sampler.stop()
        if self.sampler.error is not None:
            raise RunFailed(f"wait timeline failed: {self.sampler.error}")
        self.record(self.clock() - self._at)
        return points(self.intervals)


def points(intervals: list[tuple[float, float, dict[str, float]]]) -> list[TimelinePoint]:
    intervals = [i for i in intervals if i[1] > 0]
    if len(intervals) > 1 and intervals[-1][1] < MIN_LAST_INTERVAL_S:
        (start, width, moved), (_, tail, more) = intervals[-2], intervals[-1]
        merged = {k: moved.get(k, 0.0) + more.get(k, 0.0) for k in set(moved) | set(more)}
        intervals = intervals[:-2] + [(start, width + tail, merged)]
    out = []
    for start, width, moved in intervals:
        for name in sorted(moved):
            if moved[name] > 0:
                out.append(TimelinePoint(start, timeline.WAIT.of(name), moved[name] / width))
    return out
