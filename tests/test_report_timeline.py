"""The run's timeline from its sources to the report: the metrics declared once (storlab.timeline) under
the names every store already holds, the driver's latency percentiles per bucket, the device
sampler's arithmetic on a fake clock and fake counters, and on a real capped device the cap in force
drawn on the device's timelines at the level the answer holds."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from storlab import timeline
from storlab.lab import cgroups
from storlab.probes.recorders import DeviceTimeline, DiskCounters
from storlab.results.store import Store
from storlab.workloads.driver import Transactions
from storlab.workloads.driver import timeline as driver_timeline
from tests.commands import storlab
from tests.experiments import write_capped

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


SVG = "{http://www.w3.org/2000/svg}"


def cap_levels(page: str, gid: str) -> list[float]:
    """The levels of the step line whose SVG group is `gid`, in the data's units: its path's y positions
    read through the y ticks of the axes it is drawn in (each tick's position, and its label, which
    matplotlib writes beside the glyphs as a comment)."""
    for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        if f'id="{gid}"' not in svg:
            continue
        root = ET.fromstring(svg, parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))
        axes = next(a for a in root.iter(f"{SVG}g") if a.get("id", "").startswith("axes_")
                    and any(g.get("id") == gid for g in a.iter(f"{SVG}g")))
        ticks = []
        for tick in (g for g in axes.iter(f"{SVG}g") if g.get("id", "").startswith("ytick_")):
            (mark,) = {float(u.get("y")) for u in tick.iter(f"{SVG}use") if u.get("y") is not None}
            (label,) = [c.text for c in tick.iter(ET.Comment)]
            ticks.append((mark, float(label.strip().replace("\u2212", "-").replace(",", ""))))
        slope, offset = np.polyfit([y for y, _ in ticks], [v for _, v in ticks], 1)
        (line,) = [g for g in axes.iter(f"{SVG}g") if g.get("id") == gid]
        (path,) = line.iter(f"{SVG}path")
        ys = [float(y) for y in re.findall(r"[ML] [-\d.]+ ([-\d.]+)", path.get("d"))]
        return [slope * y + offset for i, y in enumerate(ys) if i == 0 or y != ys[i - 1]]
    raise AssertionError(f"no line {gid} on the page")


@pytest.mark.engine
@pytest.mark.skipif(cgroups.limits_unavailable(True, False) is not None, reason="IO caps cannot be set here")
def test_the_cap_in_force_is_drawn_on_the_device_s_timelines_at_the_level_the_answer_holds(lab_root, images, tmp_path):
    """A write MiB/s cap set once, and an IOPS bucket that runs dry: pgbench's commits at 300 IOPS spend 270
    credits a second more than it earns, so 600 last about 2 s, then 30 IOPS hold to the end. The answer holds
    each cap's steps; the device's MiB/s carries a line at 20, its IOPS one from 300 down to 30 where the
    bucket ran dry."""
    path = write_capped(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", write_mb_s = 20, '
                                  'iops_bucket = { baseline = 30, burst = 300, size = 600 } }',
                        workload="scale = 1\nclients = 4\nduration_s = 8", repetitions=1)
    done = storlab("run", path, "--out", tmp_path / "r", "--no-trace")
    assert done.returncode == 0, done.stderr
    answer = json.loads(storlab("show", tmp_path / "r", "--json").stdout)
    held = {c["key"]: c for c in answer["limits"]["in_force"]}
    assert set(held) == {"write_mb_s", "read_iops", "write_iops"}
    assert [s["cap"] for s in held["write_mb_s"]["steps"]] == [20]
    (dry,) = answer["limits"]["buckets"][0]["dry"]
    for key in ("read_iops", "write_iops"):
        steps = held[key]["steps"]
        assert [s["cap"] for s in steps] == [300, 30]
        # On the timeline's axis (from the load's first start), the bucket's own from the keeper's start.
        assert steps[1]["at_s"] == pytest.approx(dry["at_s"], abs=0.5)
    assert storlab("report", tmp_path / "r").returncode == 0
    page = (tmp_path / "r" / "report.html").read_text()
    (run,) = answer["first_runs"]
    # One line for a bucket's read and write caps (the same steps), drawn at the answer's levels, within
    # the drawing's rounding.
    assert cap_levels(page, f"cap-in-force-mb_s-run{run['run']}-1") == pytest.approx([20], rel=0.01)
    assert cap_levels(page, f"cap-in-force-iops-run{run['run']}-1") == pytest.approx([300, 30], rel=0.01)
    assert f'id="cap-in-force-iops-run{run["run"]}-2"' not in page
    assert "Device IOPS over time against the IOPS caps" in page and "cap in force (vol on " in page
