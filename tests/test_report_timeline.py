"""The run's timeline from its sources to the report: the metrics declared once (storlab.timeline) under
the names every store already holds, the driver's latency percentiles per bucket, and the device
sampler's arithmetic on a fake clock and fake counters."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from storlab import timeline
from storlab.probes.recorders import DeviceTimeline, DiskCounters
from storlab.results.store import Store
from storlab.workloads.driver import Transactions
from storlab.workloads.driver import timeline as driver_timeline

RECORDED = Path(__file__).parent / "data" / "explain" / "quickstart"


def test_every_metric_of_a_recorded_store_is_declared_under_its_stored_name(tmp_path):
    shutil.copytree(RECORDED, tmp_path / "q")
    with Store.open(tmp_path / "q", create=False) as store:
        stored = {name for run in store.runs() for _, name, _ in store.timeline(run.id)}
    assert {"rows_per_s", "latency_p99_ms", "iops:disk", "mb_s:disk", "cpu_percent", "wait:LWLock:WALWrite"} <= stored
    assert {name for name in stored if timeline.find(name) is None} == set()
    assert timeline.find("mb_s:disk") is timeline.MIB_S and timeline.MIB_S.member_of("mb_s:disk") == "disk"
    assert timeline.find("wait:Lock:extend") is timeline.WAIT and timeline.WAIT.member_of("wait:Lock:extend") == "Lock:extend"
    assert timeline.find("event:checkpoint") is timeline.CHECKPOINT and timeline.find("event:other") is None
    assert [m.of("disk") for m in (timeline.IOPS, timeline.MIB_S, timeline.IO_KB)] == ["iops:disk", "mb_s:disk", "io_kb:disk"]
    assert not timeline.CPU_PERCENT.holds("cpu_percent:x") and not timeline.MIB_S.holds("mb_s")
    assert len({m.name for m in timeline.METRICS}) == len(timeline.METRICS)


def test_each_bucket_has_the_latency_percentiles_of_its_transactions():
    # Second 0: latencies 1..100 ms; second 1: 100 transactions of 5 ms.
    starts = np.concatenate([np.linspace(0.0, 0.5, 100), np.linspace(1.0, 1.8, 100)])
    latency_s = np.concatenate([np.arange(1, 101) / 1000, np.full(100, 0.005)])
    ends = starts + latency_s
    points = {(t, name): v for t, name, v in driver_timeline(Transactions(starts + 50, ends + 50, np.ones(200), []))}
    assert points[(0.0, "latency_p50_ms")] == pytest.approx(50.5)
    assert points[(0.0, "latency_p95_ms")] == pytest.approx(95.05)
    assert points[(0.0, "latency_p99_ms")] == pytest.approx(99.01)
    assert [points[(1.0, m.name)] for m in timeline.LATENCY.values()] == pytest.approx([5.0, 5.0, 5.0])


class SteadyDevice:
    """A device doing 10 MiB/s in 64 KiB requests, on a fake clock; the sampler wakes every period, and
    on some wake-ups the thread is not scheduled for a while before it reads the counters."""

    def __init__(self, delays: list[float], period_s: float = 0.5):
        self.t = 100.0
        self.period_s = period_s
        self.delays = list(delays)  # before each reading after the first
        self.wakes = len(delays) - 1  # the last delay is stop's reading

    def clock(self) -> float:
        return self.t

    def wait(self, period_s: float) -> bool:
        if self.wakes == 0:
            return True
        self.wakes -= 1
        self.t += period_s
        return False

    def read(self) -> dict[str, DiskCounters]:
        if self.delays and self.t > 100.0:
            self.t += self.delays.pop(0)
        moved = (self.t - 100.0) * 10 * 2**20
        return {"loop7": DiskCounters(round(moved / 65536), round(moved))}


def test_a_steady_device_reads_steady_however_late_each_reading_comes():
    """Each rate is what moved between two readings over the time between those two readings: a
    reading that comes 0.2 s after its wake-up (a busy machine) covers 0.7 s. Divided by the time
    between the wake-ups instead (0.5 s, then 0.7 s), the same steady device read 14 and 7 MiB/s by
    turns: the zig-zag of a sampler out of step with its own readings."""
    device = SteadyDevice([0.0, 0.2, 0.0, 0.2, 0.0, 0.2, 0.0])
    cpu = iter([0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0])
    sampler = DeviceTimeline({"flash": "loop7"}, 0.5, read=device.read, cpu=lambda: next(cpu), clock=device.clock,
                             wait=device.wait)
    sampler.start(100.0)
    points = sampler.stop()
    mib_s = [(p.t_s, p.value) for p in points if p.metric == "mb_s:flash"]
    assert [v for _, v in mib_s] == pytest.approx([10.0] * len(mib_s))
    assert [p.value for p in points if p.metric == "iops:flash"] == pytest.approx([160.0] * len(mib_s))
    assert [p.value for p in points if p.metric == "io_kb:flash"] == pytest.approx([64.0] * len(mib_s))
    # Stamped at the end of each interval, on the run's axis: the readings' own times.
    assert [t for t, _ in mib_s] == pytest.approx([0.5, 1.2, 1.7, 2.4, 2.9, 3.6])


def test_the_last_partial_interval_is_read_at_stop_and_a_sliver_is_folded_into_the_one_before():
    device = SteadyDevice([0.0, 0.0, 0.1])  # two wake-ups, then stop 0.1 s after the second
    cpu = iter([0.0, 40.0, 40.0, 100.0])
    sampler = DeviceTimeline({"flash": "loop7"}, 0.5, read=device.read, cpu=lambda: next(cpu), clock=device.clock,
                             wait=device.wait)
    sampler.start(100.0)
    points = sampler.stop()
    mib_s = [p for p in points if p.metric == "mb_s:flash"]
    assert [p.t_s for p in mib_s] == pytest.approx([0.5, 1.1]) and [p.value for p in mib_s] == pytest.approx([10.0, 10.0])
    # CPU over the folded interval: 0.5 s at 40 % and 0.1 s at 100 %.
    assert [p.value for p in points if p.metric == "cpu_percent"] == pytest.approx([40.0, (0.5 * 40 + 0.1 * 100) / 0.6])
