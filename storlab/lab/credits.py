"""A placement's credit bucket: a volume that earns credits at its baseline rate and may spend them up
to its burst rate (EBS gp2 on IOPS, st1/sc1 on throughput, Azure's P1-P20 disks), held by changing its
device's cap in the instance's control group during each run from the IO the group was charged.

Every `PERIOD_S` the keeper reads what the group did on the device and settles the bucket: it earns
`baseline` a second and pays for each IO (an IOPS bucket) or MiB (a MiB/s bucket), up to `size`. The
cap in force is `burst` while the bucket holds credits and `baseline` once it is empty; it bursts
again once the bucket holds a second of bursting (or is full, if smaller), so an empty bucket does
not flap between the two every period. A period's IO can overdraw the bucket by a period's worth: the
debt is paid before it bursts again, so the run's IO stays within what the bucket allows.

Each run starts from the declared `start` (runs are repetitions: each begins where the file says),
and between runs the group holds the start's cap."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from storlab.lab import caps
from storlab.lab.caps import Bucket
from storlab.lab.cgroups import ControlGroup
from storlab.sampler import Sampler

PERIOD_S = 0.1


def at_rate(base: caps.IoCaps, bucket: Bucket, rate: float) -> caps.IoCaps:
    """`base` with the bucket's directions capped at `rate` (a bucket holds reads and writes alike)."""
    if bucket.unit == "iops":
        return replace(base, read_iops=round(rate), write_iops=round(rate))
    return replace(base, read_mb_s=rate, write_mb_s=rate)


def spent(bucket: Bucket, moved: caps.IoCount) -> float:
    """What `moved` costs the bucket: its IOs, or its MiB."""
    if bucket.unit == "iops":
        return moved.read_ios + moved.write_ios
    return (moved.read_bytes + moved.write_bytes) / caps.MIB


@dataclass
class Credits:
    """A bucket over one run: the credits left and whether it bursts."""

    bucket: Bucket
    left: float = field(init=False)
    bursting: bool = field(init=False)

    def __post_init__(self) -> None:
        self.left = self.bucket.start
        self.bursting = self.bucket.start > 0

    @property
    def cap(self) -> float:
        return self.bucket.burst if self.bursting else self.bucket.baseline

    def settle(self, used: float, seconds: float) -> bool:
        """Earn `seconds` at the baseline and pay `used`; whether the cap in force changed."""
        self.left = min(self.bucket.size, self.left + self.bucket.baseline * seconds - used)
        if self.bursting and self.left <= 0:
            self.bursting = False
            return True
        if not self.bursting and self.left >= self.bucket.refill:
            self.bursting = True
            return True
        return False


@dataclass
class RunBucket:
    """What one bucket did over one run."""

    device: str
    placements: list[str]
    bucket: Bucket
    dry_at_s: float | None  # when it first ran dry, from the run's start; None: it never did
    dry_s: float  # how long the baseline was in force
    spent: float  # credits paid over the run (IOs or MiB)
    left: float  # credits at the end
    run_s: float = 0.0  # the time it was settled over
    points: list[tuple[float, float, float]] = field(default_factory=list)  # (t, cap in force, % of the bucket left)


@dataclass
class _Device:
    cap: caps.DeviceCap
    credits: list[Credits]
    use: list[RunBucket]
    in_force: caps.IoCaps | None = None  # now


class CreditKeeper:
    """Settles each bucket of a group's capped devices every PERIOD_S between `start` and `stop`, on a
    thread of its own, changing the device's cap when a bucket runs dry or bursts again; `stop` sets
    the start's caps back for the next run. (`wait`: the sampler's, for a test that settles by hand.)"""

    def __init__(self, group: ControlGroup, record_every_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        self.group = group
        self.clock = clock
        self.record_every_s = record_every_s
        self.devices = [_Device(cap, [], []) for cap in group.limits.devices if cap.caps.buckets]
        self.wait = wait
        self.sampler: Sampler | None = None

    def __bool__(self) -> bool:
        return bool(self.devices)

    def start(self, t0: float) -> None:
        self.t0 = t0
        for d in self.devices:
            d.credits = [Credits(b) for b in d.cap.caps.buckets]
            d.use = [RunBucket(d.cap.device, list(d.cap.placements), b, None, 0.0, 0.0, b.start) for b in d.cap.caps.buckets]
            self._hold(d)
        self.t, self.io = self.clock(), self.group.charged_io()
        self.last_point = self.t
        self._record(self.t, force=True)
        self.sampler = Sampler(PERIOD_S, lambda _weight_s: self.settle(), clock=self.clock, wait=self.wait)
        self.sampler.start()

    def settle(self) -> None:
        """Pay for the IO since the last settling, earn its time, and hold the cap each bucket allows."""
        now, io = self.clock(), self.group.charged_io()
        seconds, changed = now - self.t, False
        if seconds <= 0:
            return
        for d in self.devices:
            moved = io.get(d.cap.dev, caps.IoCount()) - self.io.get(d.cap.dev, caps.IoCount())
            for credits, use in zip(d.credits, d.use):
                if not credits.bursting:
                    use.dry_s += seconds
                paid = spent(credits.bucket, moved)
                use.spent += paid
                if credits.settle(paid, seconds):
                    changed = True
                    if not credits.bursting and use.dry_at_s is None:
                        use.dry_at_s = now - self.t0
                    self._hold(d)
                use.left = credits.left
        self.t, self.io = now, io
        self._record(now, force=changed)

    def in_force(self, dev: str) -> caps.IoCaps | None:
        """The caps in force on a device ("major:minor") now; None for a device without a bucket."""
        return next((d.in_force for d in self.devices if d.cap.dev == dev), None)

    def _hold(self, d: _Device) -> None:
        in_force = d.cap.caps
        for credits in d.credits:
            in_force = at_rate(in_force, credits.bucket, credits.cap)
        self.group.hold(replace(d.cap, caps=in_force))
        d.in_force = in_force

    def _record(self, now: float, force: bool) -> None:
        if not force and now - self.last_point < self.record_every_s:
            return
        self.last_point = now
        for d in self.devices:
            for credits, use in zip(d.credits, d.use):
                use.points.append((now - self.t0, credits.cap, 100 * max(credits.left, 0.0) / credits.bucket.size))

    def stop(self) -> list[RunBucket]:
        """The run's last stretch settled, what each bucket did; the start's caps set back whatever
        happens."""
        if self.sampler is not None:
            self.sampler.stop()
        try:
            if self.sampler is None:
                return []  # never started
            if self.sampler.error is not None:
                raise self.sampler.error
            self.settle()
            self._record(self.t, force=True)
            for d in self.devices:
                for use in d.use:
                    use.run_s = self.t - self.t0
        finally:
            for d in self.devices:
                d.credits = [Credits(b) for b in d.cap.caps.buckets]
                self._hold(d)
        return [use for d in self.devices for use in d.use]
