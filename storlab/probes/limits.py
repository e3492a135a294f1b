"""What a run's IO caps and server memory limit did (storlab.lab.caps), read from the instance's
control group and the devices under its placements at the run's start, every half second, and at its
end:

- per device: the IO the device served against the IO the group was charged (a v1 cap holds back
  only what the servers submit, so writeback that went around it shows as the difference), the time
  the group's IO ran at its cap (an interval at AT_CAP of its tightest cap or more), and on the
  timeline each interval's IO as a share of that cap;
- the group's memory: its limit, how often it was reached (v1 memory.failcnt, v2 memory.events max),
  the kernel's OOM kills and its peak, on the timeline what it holds (what it held once the
  instance's files were evicted before the run is among the run's conditions: storlab.lab.quiesce);
- per credit bucket (storlab.lab.credits, held by this recorder over the run): when it ran dry, how
  long the baseline was in force, the credits spent and left, on the timeline the cap in force and
  the credits left.

Recorded only for an instance whose cell asks for a cap or a memory limit. Each limit at three
stages, named by the stage: Run* what one run did (RunDevice, RunMemory, storlab.lab.credits' RunBucket,
together RunLimits), Cell* a cell's runs summed up (CellCaps, CellMemory, CellBucket), and *Row the
answer's row of a cell (limits_part: CapRow, MemoryRow, BucketRow)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from storlab import timeline
from storlab.lab import caps, credits
from storlab.lab.cgroups import ControlGroup
from storlab.probes.kept import Db, KeptCell, Probe, RunScope
from storlab.probes.limits_part import BucketRow, CapInForce, CapRow, CapStep, DryRun, Limits, MemoryRow
from storlab.probes.recorders import DEVICE_PERIOD_S, TimelinePoint
from storlab.sampler import Sampler
from storlab.sizes import format_bytes


@dataclass
class RunDevice:
    """One device under the placements, over one run."""

    device: str
    placements: list[str]
    caps: caps.IoCaps  # empty: uncapped (a device recorded for its reads under a memory limit)
    cgroup_version: int
    max_sectors_kb: int | None  # the largest request it was issued (an IOPS cap counts each)
    served: caps.IoCount  # by the device, whoever asked
    charged: caps.IoCount | None  # to the group (None: uncapped, not counted)
    at_cap_s: float | None  # None: uncapped
    run_s: float
    io_pressure_s: float | None = None  # v2: some task of the group stalled on IO (the group's, not the device's)


@dataclass
class RunMemory:
    limit_bytes: int
    cgroup_version: int
    hits: int | None  # times the group reached its limit
    oom_kills: int | None
    peak_bytes: int | None


@dataclass
class RunLimits:
    devices: list[RunDevice] = field(default_factory=list)
    memory: RunMemory | None = None
    buckets: list[credits.RunBucket] = field(default_factory=list)
    points: list[TimelinePoint] = field(default_factory=list)  # for the run's timeline, not kept here


@dataclass
class _Watched:
    device: str
    dev: str
    placements: list[str]
    caps: caps.IoCaps


def cap_use(caps_: caps.IoCaps, moved: caps.IoCount, seconds: float) -> float | None:
    """The IO of `seconds` as a share of its tightest cap (1.0: at the cap); None when uncapped."""
    pairs = ((moved.read_ios, caps_.read_iops), (moved.write_ios, caps_.write_iops),
             (moved.read_bytes, caps_.read_bps), (moved.write_bytes, caps_.write_bps))
    shares = [amount / seconds / cap for amount, cap in pairs if cap]
    return max(shares) if shares and seconds > 0 else None


class LimitsRecorder:
    """Reads the group and the devices at the start, every `period_s`, and at the end."""

    def __init__(self, group: ControlGroup, watched: list[_Watched], period_s: float = DEVICE_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, devices: Callable[[str], caps.IoCount | None] = caps.device_counts):
        self.group = group
        self.watched = watched
        self.devices = devices
        self.clock = clock
        self.sampler = Sampler(period_s, self._sample, clock=clock)
        # The credit buckets are the lab's, not a measurement: held on their own, finer loop.
        self.keeper = credits.CreditKeeper(group, clock=clock)
        self.points: list[TimelinePoint] = []
        self.at_cap: dict[str, float] = {}
        self.peak = 0

    def _read(self, devices: bool = False) -> tuple[float, caps.Reading, dict[str, caps.IoCount | None]]:
        """The group's counters; the devices' too at the ends (what the device served against what the
        group was charged is a whole run's figure)."""
        reading = self.group.reading()
        served = {w.dev: self.devices(w.dev) for w in self.watched} if devices else {}
        return self.clock(), reading, served

    def start(self, sessions: list[int], t0: float) -> None:
        self.t0 = t0
        self.group.reset_peak()
        self.first = self.last = self._read(devices=True)
        if self.keeper:
            self.keeper.start(t0)
        self.sampler.start()

    def _sample(self, _weight_s: float) -> None:
        now = self._read()
        self._interval(self.last, now)
        self.last = now

    def _interval(self, before, after) -> None:
        (t_a, group_a, _), (t_b, group_b, _) = before, after
        width, t = t_b - t_a, t_b - self.t0
        if width <= 0:
            return
        for w in self.watched:
            if not w.caps:
                continue
            moved = group_b.io.get(w.dev, caps.IoCount()) - group_a.io.get(w.dev, caps.IoCount())
            share = cap_use(self.keeper.in_force(w.dev) or w.caps, moved, width)
            if share is None:
                continue
            if share >= caps.AT_CAP:
                self.at_cap[w.dev] = self.at_cap.get(w.dev, 0.0) + width
            self.points += [TimelinePoint(t, timeline.CAP_USE.of(p), 100 * share) for p in w.placements]
        if group_b.memory_bytes is not None:
            self.peak = max(self.peak, group_b.memory_bytes)
            self.points.append(TimelinePoint(t, timeline.SERVER_MEMORY.name, group_b.memory_bytes / caps.MIB))

    def stop(self) -> RunLimits:
        self.sampler.stop()
        bucket_uses = self.keeper.stop() if self.keeper else []  # the start's caps set back for the next run
        if self.sampler.error is not None:
            raise self.sampler.error
        end = self._read(devices=True)
        self._interval(self.last, end)
        (t_a, group_a, served_a), (t_b, group_b, served_b) = self.first, end
        found = RunLimits(points=self.points + [
            TimelinePoint(t, metric.of(p), value) for use in bucket_uses for p in use.placements
            for t, cap, left in use.points
            for metric, value in ((timeline.BUCKET_CAP[use.bucket.unit], cap), (timeline.CREDITS_LEFT[use.bucket.unit], left))],
            buckets=bucket_uses)
        pressure = None if group_a.io_pressure_us is None or group_b.io_pressure_us is None else \
            (group_b.io_pressure_us - group_a.io_pressure_us) / 1e6
        for w in self.watched:
            a, b = served_a.get(w.dev), served_b.get(w.dev)
            if a is None or b is None:
                continue
            charged = (group_b.io.get(w.dev, caps.IoCount()) - group_a.io.get(w.dev, caps.IoCount())) if w.caps else None
            found.devices.append(RunDevice(w.device, w.placements, w.caps, self.group.version,
                                           caps.queue_value(w.device, "max_sectors_kb"), b - a, charged,
                                           self.at_cap.get(w.dev, 0.0) if w.caps else None, t_b - t_a,
                                           pressure if w.caps else None))
        limit = self.group.limits.memory_bytes
        if limit is not None:
            def moved(x: int | None, y: int | None) -> int | None:
                return None if x is None or y is None else y - x

            peak = group_b.peak_bytes if self.group.version == 1 and group_b.peak_bytes is not None else \
                max(self.peak, group_b.memory_bytes or 0) or None
            found.memory = RunMemory(limit, self.group.version, moved(group_a.memory_hits, group_b.memory_hits),
                                     moved(group_a.oom_kills, group_b.oom_kills), peak)
        return found



def watched(group: ControlGroup, placements: dict[str, Path]) -> list[_Watched]:
    """Each device under the placements: the capped ones with their caps, the others for what they
    read (under a memory limit, the reads the cache could not hold)."""
    by_dev: dict[str, _Watched] = {cap.dev: _Watched(cap.device, cap.dev, list(cap.placements), cap.caps)
                                   for cap in group.limits.devices}
    for name, path in placements.items():
        found = caps.device_of(path)
        if found is None:
            continue
        entry = by_dev.setdefault(found[1], _Watched(found[0], found[1], [], caps.IoCaps()))
        if name not in entry.placements:
            entry.placements.append(name)
    return list(by_dev.values())


def _recording(run: RunScope) -> LimitsRecorder | None:
    group = getattr(run.instance, "group", None)
    if group is None or not group.limits:
        return None
    return LimitsRecorder(group, watched(group, run.instance.spec.placements))


def _points(found: RunLimits) -> list[TimelinePoint]:
    return found.points


_CAPS = ("read_iops", "write_iops", "read_mb_s", "write_mb_s")
_COUNTS = ("read_ios", "write_ios", "read_bytes", "write_bytes")


def _write(db: Db, run_id: int, found: RunLimits) -> None:
    db.executemany(
        f"INSERT INTO io_caps (run_id, device, placements, cgroup_version, max_sectors_kb, {', '.join(_CAPS)}, "
        f"{', '.join('served_' + c for c in _COUNTS)}, {', '.join('charged_' + c for c in _COUNTS)}, "
        "at_cap_s, run_s, io_pressure_s) VALUES (" + ", ".join("?" * 20) + ")",
        [(run_id, d.device, ",".join(d.placements), d.cgroup_version, d.max_sectors_kb,
          *(getattr(d.caps, c) for c in _CAPS), *(getattr(d.served, c) for c in _COUNTS),
          *((getattr(d.charged, c) for c in _COUNTS) if d.charged is not None else (None,) * 4),
          d.at_cap_s, d.run_s, d.io_pressure_s) for d in found.devices])
    db.executemany(
        "INSERT INTO io_buckets (run_id, device, placements, unit, baseline, burst, size, start, dry_at_s, dry_s, "
        "spent, left_end, run_s) VALUES (" + ", ".join("?" * 13) + ")",
        [(run_id, b.device, ",".join(b.placements), b.bucket.unit, b.bucket.baseline, b.bucket.burst, b.bucket.size,
          b.bucket.start, b.dry_at_s, b.dry_s, b.spent, b.left, b.run_s) for b in found.buckets])
    m = found.memory
    if m is not None:
        db.execute("INSERT INTO memory_limit (run_id, limit_bytes, cgroup_version, hits, oom_kills, peak_bytes) "
                   "VALUES (?, ?, ?, ?, ?, ?)", (run_id, m.limit_bytes, m.cgroup_version, m.hits, m.oom_kills, m.peak_bytes))


def _read(db: Db, run_id: int) -> RunLimits:
    found = RunLimits()
    rows = db.execute(
        f"SELECT device, placements, cgroup_version, max_sectors_kb, {', '.join(_CAPS)}, "
        f"{', '.join('served_' + c for c in _COUNTS)}, {', '.join('charged_' + c for c in _COUNTS)}, "
        "at_cap_s, run_s, io_pressure_s FROM io_caps WHERE run_id = ? ORDER BY device", (run_id,)).fetchall()
    for row in rows:
        device, placements, version, sectors, *rest = row
        cap, served, charged, (at_cap, run_s, pressure) = rest[:4], rest[4:8], rest[8:12], rest[12:]
        found.devices.append(RunDevice(device, placements.split(","), caps.IoCaps(*cap), version, sectors,
                                       caps.IoCount(*served), None if charged[0] is None else caps.IoCount(*charged),
                                       at_cap, run_s, pressure))
    row = db.execute("SELECT limit_bytes, cgroup_version, hits, oom_kills, peak_bytes FROM memory_limit WHERE run_id = ?",
                     (run_id,)).fetchone()
    if row is not None:
        found.memory = RunMemory(*row)
    for device, placements, unit, baseline, burst, size, start, *done in db.execute(
            "SELECT device, placements, unit, baseline, burst, size, start, dry_at_s, dry_s, spent, left_end, run_s "
            "FROM io_buckets WHERE run_id = ? ORDER BY device, unit", (run_id,)).fetchall():
        found.buckets.append(credits.RunBucket(device, placements.split(","),
                                               caps.Bucket(unit, baseline, burst, size, start), *done))
    for use in found.buckets:
        use.points = _bucket_points(db, run_id, use)
    # A device's caps as declared: its buckets with the caps they started each run with.
    found.devices = [replace(d, caps=replace(d.caps, buckets=tuple(b.bucket for b in found.buckets if b.device == d.device)))
                     for d in found.devices]
    return found


# -- what a cell's runs did, for the answer --------------------------------------------------------


@dataclass
class CellCaps:
    """One capped device over a cell's runs, each figure a mean per run."""

    device: str
    placements: list[str]
    caps: caps.IoCaps
    cgroup_version: int
    max_sectors_kb: int | None
    runs: int
    at_cap_share: float | None  # of the runs' time
    served: caps.IoCount
    charged: caps.IoCount
    io_pressure_s: float | None = None  # v2: some task of the group stalled on IO, a run


@dataclass
class CellMemory:
    limit_bytes: int
    cgroup_version: int
    runs: int
    runs_hit: int  # runs that reached the limit
    hits: float  # times a run
    oom_kills: int  # over every run
    peak_bytes: float | None
    read_bytes: float  # the placements' devices read, a run


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _mean_count(counts: list[caps.IoCount]) -> caps.IoCount:
    return caps.IoCount(*(round(_mean([getattr(c, f) for c in counts])) for f in _COUNTS))


def per_cell(runs: list[RunLimits]) -> tuple[list[CellCaps], CellMemory | None]:
    """A cell's runs (those that recorded their limits), each capped device and the memory summed up."""
    by_device: dict[str, list[RunDevice]] = {}
    for run in runs:
        for d in run.devices:
            if d.caps:
                by_device.setdefault(d.device, []).append(d)
    found = []
    for device, uses in by_device.items():
        last = uses[-1]
        time_s = sum(u.run_s for u in uses)
        pressures = [u.io_pressure_s for u in uses if u.io_pressure_s is not None]
        found.append(CellCaps(device, last.placements, last.caps, last.cgroup_version, last.max_sectors_kb, len(uses),
                              sum(u.at_cap_s or 0 for u in uses) / time_s if time_s > 0 else None,
                              _mean_count([u.served for u in uses]), _mean_count([u.charged for u in uses]),
                              _mean(pressures) if pressures else None))
    memory = [run for run in runs if run.memory is not None]
    if not memory:
        return found, None
    last = memory[-1].memory
    peaks = [r.memory.peak_bytes for r in memory if r.memory.peak_bytes is not None]
    return found, CellMemory(last.limit_bytes, last.cgroup_version, len(memory),
                             sum(1 for r in memory if r.memory.hits), _mean([r.memory.hits or 0 for r in memory]),
                             sum(r.memory.oom_kills or 0 for r in memory), max(peaks) if peaks else None,
                             _mean([sum(d.served.read_bytes for d in r.devices) for r in memory]))


@dataclass
class CellBucket:
    """One credit bucket over a cell's runs."""

    device: str
    placements: list[str]
    bucket: caps.Bucket
    runs: int
    dry_at_s: list[float | None]  # each run's: when it first ran dry (None: it never did)
    dry_share: float  # of the runs' time, the baseline in force
    spent: float  # credits a run


def buckets_per_cell(runs: list[RunLimits]) -> list[CellBucket]:
    """A cell's runs, each bucket summed up (`dry_at_s` in the runs' order)."""
    by_bucket: dict[tuple[str, str], list[credits.RunBucket]] = {}
    for run in runs:
        for b in run.buckets:
            by_bucket.setdefault((b.device, b.bucket.unit), []).append(b)
    found = []
    for uses in by_bucket.values():
        last = uses[-1]
        run_s = sum(u.run_s for u in uses)
        found.append(CellBucket(last.device, last.placements, last.bucket, len(uses), [u.dry_at_s for u in uses],
                                sum(u.dry_s for u in uses) / run_s if run_s else 0.0, _mean([u.spent for u in uses])))
    return found


def bucket_line(b: CellBucket, rounds: list[int] | None = None) -> str:
    """'disk on loop3 (20 IOPS, bursts to 200 from a bucket of 900 IO (full at the start)): ran dry in 3 of
    3 runs (round 1 at 5.1 s, …); the baseline in force 78 % of the time; 1,234 IO spent a run'."""
    dry = [(i, at) for i, at in enumerate(b.dry_at_s) if at is not None]
    line = f"{', '.join(b.placements)} on {b.device} ({b.bucket.text()}): "
    if not dry:
        line += f"never ran dry in {b.runs} run{'s' if b.runs > 1 else ''}"
    else:
        when = ", ".join(f"{'round ' + str(rounds[i]) if rounds else 'run ' + str(i + 1)} at {at:.1f} s" for i, at in dry)
        line += f"ran dry in {len(dry)} of {b.runs} run{'s' if b.runs > 1 else ''} ({when}); the baseline in force " \
                f"{100 * b.dry_share:.0f} % of the time"
    return line + f"; {b.spent:,.0f} {caps.CREDIT[b.bucket.unit]} spent a run"


def cap_line(c: CellCaps) -> str:
    """'wal on loop3 (write 300 IOPS): at its cap 82 % of the time; the device wrote 310 MiB a run, the
    group was charged 180 MiB (58 %)'."""
    line = f"{', '.join(c.placements)} on {c.device} ({c.caps.text()}"
    line += f", requests up to {c.max_sectors_kb} KiB)" if c.max_sectors_kb else ")"
    if c.at_cap_share is not None:
        line += f": at its cap {100 * c.at_cap_share:.0f} % of the time"
    for direction, served, charged in (("wrote", c.served.write_bytes, c.charged.write_bytes),
                                       ("read", c.served.read_bytes, c.charged.read_bytes)):
        if served or charged:
            share = f" ({100 * charged / served:.0f} %)" if served else ""
            line += f"; the device {direction} {format_bytes(served)} a run, the group was charged {format_bytes(charged)}{share}"
            if c.cgroup_version == 1 and direction == "wrote" and served and charged < 0.9 * served:
                line += ": the rest went around the cap (writeback the kernel started)"
    if c.io_pressure_s is not None:
        line += f"; some of its processes stalled on IO {c.io_pressure_s:,.1f} s a run (its io.pressure)"
    return line


def memory_line(m: CellMemory) -> str:
    line = f"{format_bytes(m.limit_bytes)} limit reached in {m.runs_hit} of {m.runs} run{'s' if m.runs > 1 else ''}"
    if m.runs_hit:
        counter = "memory.failcnt" if m.cgroup_version == 1 else "memory.events max"
        line += f" ({m.hits:,.0f} times a run, {counter})"
    if m.peak_bytes is not None:
        line += f"; peak {format_bytes(m.peak_bytes)}"
    line += f"; the placements' devices read {format_bytes(m.read_bytes)} a run"
    if m.oom_kills:
        line += f"; the kernel's OOM killer killed {m.oom_kills} of its processes"
    return line


def _cap_row(cell: KeptCell, d: CellCaps) -> CapRow:
    return CapRow(
        cell=cell.cell, label=cell.label, device=d.device, placements=d.placements, caps=d.caps.as_dict(),
        max_sectors_kb=d.max_sectors_kb, at_cap_share=d.at_cap_share,
        device_written_bytes=d.served.write_bytes, charged_written_bytes=d.charged.write_bytes,
        device_read_bytes=d.served.read_bytes, charged_read_bytes=d.charged.read_bytes, said=cap_line(d),
        io_pressure_s=d.io_pressure_s)


def _bucket_row(cell: KeptCell, b: CellBucket) -> BucketRow:
    return BucketRow(
        cell=cell.cell, label=cell.label, device=b.device, placements=b.placements, unit=b.bucket.unit,
        **b.bucket.as_dict(), runs=b.runs, dry_share=b.dry_share, spent_per_run=b.spent,
        dry=[DryRun(round=cell.rounds[i], at_s=at) for i, at in enumerate(b.dry_at_s) if at is not None],
        said=bucket_line(b, cell.rounds))


def _memory_row(cell: KeptCell, m: CellMemory) -> MemoryRow:
    return MemoryRow(
        cell=cell.cell, label=cell.label, limit_bytes=m.limit_bytes, runs=m.runs, runs_hit=m.runs_hit,
        hits_per_run=m.hits, oom_kills=m.oom_kills, peak_bytes=m.peak_bytes, device_read_bytes=m.read_bytes,
        said=memory_line(m))


def _bucket_points(db: Db, run_id: int, use: credits.RunBucket) -> list[tuple[float, float, float]]:
    """A bucket's (t, cap in force, % left) as the run put them on its timeline (every half second and at
    each change), read back from there: the run's own record of them."""
    cap_metric, left_metric = (metric[use.bucket.unit].of(use.placements[0])
                               for metric in (timeline.BUCKET_CAP, timeline.CREDITS_LEFT))
    found: dict[float, dict[str, float]] = {}
    for t, metric, value in db.execute("SELECT t_s, metric, value FROM timeline WHERE run_id = ? AND metric IN (?, ?)",
                                       (run_id, cap_metric, left_metric)).fetchall():
        found.setdefault(t, {})[metric] = value
    return [(t, pair[cap_metric], pair.get(left_metric, 0.0)) for t, pair in sorted(found.items()) if cap_metric in pair]


def in_force(cell: KeptCell) -> list[CapInForce]:
    """Each cap of each capped device over each of the cell's runs: a cap set once its level throughout; a
    bucket's caps (both directions of its unit) at the start and at each change the keeper recorded."""
    found = []
    for rnd, run in zip(cell.rounds, cell.runs):
        for d in run.devices:
            bucketed = {b.bucket.unit: b for b in run.buckets if b.device == d.device}
            keys = dict.fromkeys([*d.caps.as_dict(), *(f"{way}_{unit}" for unit in bucketed for way in ("read", "write"))])
            for key in keys:
                use = bucketed.get(key.split("_", 1)[1])
                if use is None:
                    steps = [(0.0, float(getattr(d.caps, key)))]
                elif use.points:
                    steps = [(t, cap) for i, (t, cap, _) in enumerate(use.points) if i == 0 or cap != use.points[i - 1][1]]
                else:  # no points recorded: the start's cap, and the baseline from when it first ran dry
                    steps = [(0.0, use.bucket.start_cap)] + ([(use.dry_at_s, use.bucket.baseline)] if use.dry_at_s else [])
                found.append(CapInForce(cell=cell.cell, round=rnd, device=d.device, placements=d.placements, key=key,
                                        steps=[CapStep(at_s=t, cap=cap) for t, cap in steps]))
    return found


def summary(cells: list[KeptCell]) -> Limits | None:
    """What each cell's IO caps, credit buckets and server memory limit did, and what a cap holds back on
    the hosts that ran them (cgroup v1: only what the servers submit)."""
    capped, buckets, memory, versions, caps_in_force = [], [], [], set(), []
    for cell in cells:
        devices, cell_memory = per_cell(cell.runs)
        capped += [_cap_row(cell, d) for d in devices]
        caps_in_force += in_force(cell)
        buckets += [_bucket_row(cell, b) for b in buckets_per_cell(cell.runs)]
        memory += [_memory_row(cell, cell_memory)] if cell_memory else []
        versions |= {d.cgroup_version for d in devices} | ({cell_memory.cgroup_version} if cell_memory else set())
    if not capped and not memory:
        return None
    covers = [caps.covers(v) for v in sorted(versions)]
    lines = []
    for title, rows in ((f"IO caps, per run ({'; '.join(covers)}):", capped),
                        ("credit buckets, per run (each run starts with its declared credits):", buckets),
                        ("server memory, per run (the control group's limit, the page cache included):", memory)):
        lines += [title] + [f"  {row.label} ({row.cell}): {row.said}" for row in rows] if rows else []
    return Limits(covers=covers, caps=capped, memory=memory, lines=lines, buckets=buckets, in_force=caps_in_force)


PROBE = Probe(
    "limits",
    # Per run, each device under the placements of a cell with IO caps or a memory limit: its caps, what
    # it served and what the instance's control group was charged; and the group's memory.
    ("""
    CREATE TABLE io_caps (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        device TEXT NOT NULL,
        placements TEXT NOT NULL,
        cgroup_version INTEGER NOT NULL,
        max_sectors_kb INTEGER,
        read_iops INTEGER,
        write_iops INTEGER,
        read_mb_s REAL,
        write_mb_s REAL,
        served_read_ios INTEGER NOT NULL,
        served_write_ios INTEGER NOT NULL,
        served_read_bytes INTEGER NOT NULL,
        served_write_bytes INTEGER NOT NULL,
        charged_read_ios INTEGER,
        charged_write_ios INTEGER,
        charged_read_bytes INTEGER,
        charged_write_bytes INTEGER,
        at_cap_s REAL,
        run_s REAL NOT NULL,
        io_pressure_s REAL,
        PRIMARY KEY (run_id, device)
    );
    CREATE TABLE memory_limit (
        run_id INTEGER NOT NULL PRIMARY KEY REFERENCES runs(id),
        limit_bytes INTEGER NOT NULL,
        cgroup_version INTEGER NOT NULL,
        hits INTEGER,
        oom_kills INTEGER,
        peak_bytes INTEGER
    );
    """,
     # 2: credit buckets, per run and device.
     """
    CREATE TABLE io_buckets (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        device TEXT NOT NULL,
        placements TEXT NOT NULL,
        unit TEXT NOT NULL,
        baseline REAL NOT NULL,
        burst REAL NOT NULL,
        size REAL NOT NULL,
        start REAL NOT NULL,
        dry_at_s REAL,
        dry_s REAL NOT NULL,
        spent REAL NOT NULL,
        left_end REAL NOT NULL,
        run_s REAL NOT NULL,
        PRIMARY KEY (run_id, device, unit)
    );
    """),
    _write, _read,
    recorder=_recording,
    summary=summary,
    timeline=_points,
)
