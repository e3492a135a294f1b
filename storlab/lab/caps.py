"""What a cell asks of its instance's control group beyond keeping its processes: IO caps on the
devices under its placements (the kernel's block IO throttling: cgroup v2 `io.max`, v1
`blkio.throttle.*_device`) and a memory limit that charges the page cache (v2 `memory.max`, v1
`memory.limit_in_bytes`); the lines that set them, and the counters that say what they did, in the
kernel's own formats.

A cap holds a whole device: a directory placement's cap holds the disk under it (partitions are
throttled as their disk), and an IOPS cap counts requests as the block layer issues them, after it
splits large ones at the device's `max_sectors_kb`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from storlab.errors import RunFailed
from storlab.lab import mounts

MIB = 2**20
# An interval the group's IO ran at this share of its tightest cap or above counts as time at the cap:
# the throttle lets IO through in slices, so a held-back group measures a little under its cap.
AT_CAP = 0.9
# The file's keys, each direction's and the shorthands for both.
KEYS = ("read_iops", "write_iops", "read_mb_s", "write_mb_s")
SHORTHANDS = {"iops": ("read_iops", "write_iops"), "mb_s": ("read_mb_s", "write_mb_s")}
# What each cgroup version's cap holds back (DOMAIN.md: v1 throttles only what the group submits).
COVERS = {
    1: ("IO the servers submit themselves (direct IO, reads, writes at fsync); writeback the kernel starts "
        "on its own escapes the cap"),
    2: "IO the servers submit and the writeback of their buffered writes (ext4, xfs: the memory controller is on)",
}


def covers(version: int) -> str:
    """What a cap holds back with this cgroup version, in words."""
    return f"cgroup v{version}: a cap holds {COVERS[version]}"


# A cap's units (a credit bucket's too: what it earns and pays, and its credit; storlab.lab.credits
# holds a bucket).
UNITS = {"iops": "IOPS", "mb_s": "MiB/s"}
CREDIT = {"iops": "IO", "mb_s": "MiB"}


@dataclass(frozen=True)
class Bucket:
    """One bucket as declared: rates a second (IOs, or MiB for a MiB/s bucket), credits in the same
    unit (IOs, MiB); `start` the credits a run begins with."""

    unit: str  # "iops" or "mb_s": what it earns and pays
    baseline: float
    burst: float
    size: float
    start: float

    @property
    def start_cap(self) -> float:
        return self.burst if self.start > 0 else self.baseline

    @property
    def refill(self) -> float:
        """The credits it must hold before it bursts again, once empty."""
        return min(self.size, self.burst - self.baseline)

    @property
    def burst_s(self) -> float:
        """How long a full bucket lasts at the burst rate."""
        return self.size / (self.burst - self.baseline)

    def text(self) -> str:
        """'100 IOPS, bursts to 1,000 from a bucket of 4,500 IO (full at the start)'."""
        unit, credit = UNITS[self.unit], CREDIT[self.unit]
        start = "full" if self.start == self.size else "empty" if self.start == 0 else f"{self.start:,g} {credit}"
        return (f"{self.baseline:,g} {unit}, bursts to {self.burst:,g} from a bucket of {self.size:,g} {credit} "
                f"({start} at the start)")

    def as_dict(self) -> dict[str, float]:
        return {"baseline": self.baseline, "burst": self.burst, "size": self.size, "start": self.start}


@dataclass(frozen=True)
class IoCaps:
    """One placement's caps, None where uncapped: IOs a second, MiB (2^20 bytes) a second."""

    read_iops: int | None = None
    write_iops: int | None = None
    read_mb_s: float | None = None
    write_mb_s: float | None = None
    # Credit buckets: each holds its unit's caps of both directions (at its burst or its baseline
    # rate), the caps above being those in force at a run's start.
    buckets: tuple[Bucket, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, key) is not None for key in KEYS)

    @property
    def read_bps(self) -> int | None:
        return None if self.read_mb_s is None else round(self.read_mb_s * MIB)

    @property
    def write_bps(self) -> int | None:
        return None if self.write_mb_s is None else round(self.write_mb_s * MIB)

    def text(self) -> str:
        """'3,000 IOPS, write 125 MiB/s': each cap set, one for both directions where they are alike; a
        bucket's unit said by its bucket."""
        parts = []
        bucketed = {b.unit for b in self.buckets}
        for key, read, write, shown in (("iops", self.read_iops, self.write_iops, "{:,}"),
                                        ("mb_s", self.read_mb_s, self.write_mb_s, "{:,g}")):
            unit = UNITS[key]
            if key in bucketed:
                continue
            if read is not None and read == write:
                parts.append(f"{shown.format(read)} {unit}")
                continue
            parts += [f"{d} {shown.format(v)} {unit}" for d, v in (("read", read), ("write", write)) if v is not None]
        parts += [b.text() for b in self.buckets]
        return ", ".join(parts) or "uncapped"

    def as_dict(self) -> dict[str, float]:
        return {key: getattr(self, key) for key in KEYS if getattr(self, key) is not None}


@dataclass(frozen=True)
class DeviceCap:
    """The caps on one device, and the placements that sit on it."""

    placements: tuple[str, ...]
    device: str  # the kernel's name: "loop3", "vda"
    dev: str  # "major:minor", as the cgroup files name it
    caps: IoCaps


@dataclass(frozen=True)
class GroupLimits:
    """What an instance's group holds back: IO on each capped device, and its memory (bytes, the page
    cache included); empty when the cell asks for neither."""

    devices: tuple[DeviceCap, ...] = ()
    memory_bytes: int | None = None

    def __bool__(self) -> bool:
        return bool(self.devices) or self.memory_bytes is not None


# -- the lines that set them -------------------------------------------------------------------


# v1: one file per direction and unit, each line "MAJ:MIN VALUE".
V1_FILES = (("read_iops", "blkio.throttle.read_iops_device"), ("write_iops", "blkio.throttle.write_iops_device"),
            ("read_bps", "blkio.throttle.read_bps_device"), ("write_bps", "blkio.throttle.write_bps_device"))


def v1_lines(cap: DeviceCap) -> list[tuple[str, str]]:
    """(file, line) for each cap set, in the blkio hierarchy's group."""
    return [(name, f"{cap.dev} {getattr(cap.caps, key)}") for key, name in V1_FILES
            if getattr(cap.caps, key) is not None]


def io_max_line(cap: DeviceCap) -> str:
    """v2's one line for a device: 'MAJ:MIN rbps=... wbps=... riops=... wiops=...', "max" where uncapped."""
    c = cap.caps

    def value(v: int | None) -> str:
        return "max" if v is None else str(v)

    return (f"{cap.dev} rbps={value(c.read_bps)} wbps={value(c.write_bps)} "
            f"riops={value(c.read_iops)} wiops={value(c.write_iops)}")


# -- the counters that say what they did ---------------------------------------------------------


@dataclass(frozen=True)
class IoCount:
    """IOs and bytes a device served, or a group was charged for, by direction."""

    read_ios: int = 0
    write_ios: int = 0
    read_bytes: int = 0
    write_bytes: int = 0

    def __sub__(self, before: "IoCount") -> "IoCount":
        return IoCount(self.read_ios - before.read_ios, self.write_ios - before.write_ios,
                       self.read_bytes - before.read_bytes, self.write_bytes - before.write_bytes)


class Malformed(ValueError):
    """A cgroup file that does not read as the kernel writes it."""


_DEV = re.compile(r"[0-9]+:[0-9]+")


def _count(text: str, where: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise Malformed(f"{where}: {text!r} is not a count")
    return int(text)


def v1_rwstat(text: str, where: str) -> dict[str, dict[str, int]]:
    """v1's blkio.throttle.io_serviced / io_service_bytes: 'MAJ:MIN Read N' lines (Write, Sync, Async,
    Discard, Total alike) and a last 'Total N' -> {dev: {"Read": N, ...}}."""
    found: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "Total":
            continue
        if len(parts) != 3 or not _DEV.fullmatch(parts[0]):
            raise Malformed(f"{where}: {line!r} is not 'MAJ:MIN Read N'")
        found.setdefault(parts[0], {})[parts[1]] = _count(parts[2], where)
    return found


def v1_io(serviced: str, service_bytes: str) -> dict[str, IoCount]:
    ios, nbytes = v1_rwstat(serviced, "blkio.throttle.io_serviced"), v1_rwstat(service_bytes, "blkio.throttle.io_service_bytes")
    return {dev: IoCount(ios.get(dev, {}).get("Read", 0), ios.get(dev, {}).get("Write", 0),
                         nbytes.get(dev, {}).get("Read", 0), nbytes.get(dev, {}).get("Write", 0))
            for dev in sorted(set(ios) | set(nbytes))}


def io_stat(text: str) -> dict[str, IoCount]:
    """v2's io.stat: 'MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N' (more keys on some
    kernels, ignored) per device."""
    found = {}
    for line in text.splitlines():
        dev, *pairs = line.split()
        if not _DEV.fullmatch(dev) or not all("=" in p for p in pairs):
            raise Malformed(f"io.stat: {line!r} is not 'MAJ:MIN key=value …'")
        values = dict(p.split("=", 1) for p in pairs)
        counts = {k: _count(values.get(k, "0"), "io.stat") for k in ("rios", "wios", "rbytes", "wbytes")}
        found[dev] = IoCount(counts["rios"], counts["wios"], counts["rbytes"], counts["wbytes"])
    return found


def flat_keyed(text: str, where: str) -> dict[str, int]:
    """A 'key value' file (v2 memory.events, v1 memory.oom_control's counters)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            raise Malformed(f"{where}: {line!r} is not 'key value'")
        found[parts[0]] = _count(parts[1], where)
    return found


def pressure_some_us(text: str) -> int:
    """The 'some' line's total (µs some task of the group stalled) of a v2 pressure file."""
    for line in text.splitlines():
        kind, *pairs = line.split()
        if kind == "some":
            values = dict(p.split("=", 1) for p in pairs if "=" in p)
            return _count(values.get("total", ""), "io.pressure")
    raise Malformed("io.pressure: no line 'some … total=N'")


def memory_value(text: str, where: str) -> int | None:
    """memory.max / memory.limit_in_bytes and the like: bytes, or None for "max" (no limit)."""
    text = text.strip()
    return None if text == "max" else _count(text, where)


@dataclass
class Reading:
    """The group's counters at one moment (None: the host does not count it)."""

    io: dict[str, IoCount] = field(default_factory=dict)  # "major:minor" -> charged to the group
    memory_bytes: int | None = None  # charged now, the page cache included
    memory_hits: int | None = None  # v1 memory.failcnt, v2 memory.events "max": times it reached the limit
    oom_kills: int | None = None
    peak_bytes: int | None = None  # v1 max_usage_in_bytes (reset at a run's start), v2 memory.peak
    io_pressure_us: int | None = None  # v2 only: some task of the group stalled on IO


def device_counts(dev: str, sys_block: Path = Path("/sys/block")) -> IoCount | None:
    """What a device has served since boot, from its sysfs `stat` (the counters /proc/diskstats shows),
    by "major:minor"; None when no such disk."""
    for entry in sys_block.glob("*/dev"):
        try:
            if entry.read_text().strip() != dev:
                continue
            fields = (entry.parent / "stat").read_text().split()
        except OSError:
            return None
        # reads completed, merged, sectors read, ms; writes completed, merged, sectors written, ms; …
        return IoCount(int(fields[0]), int(fields[4]), int(fields[2]) * 512, int(fields[6]) * 512)
    return None


def queue_value(device: str, name: str) -> int | None:
    """A number from a device's queue in sysfs (max_sectors_kb, max_hw_sectors_kb)."""
    try:
        return int((Path("/sys/block") / device / "queue" / name).read_text().strip())
    except (OSError, ValueError):
        return None


def dev_number(device: str) -> str | None:
    try:
        return (Path("/sys/block") / device / "dev").read_text().strip()
    except OSError:
        return None


def device_of(path: Path) -> tuple[str, str] | None:
    """The whole disk a cap on `path` holds (a folder not made yet: the one it will be made on): (kernel
    name, "major:minor"); None without one (tmpfs)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    device = mounts.block_device_of(path)
    dev = dev_number(device) if device else None
    return None if dev is None else (device, dev)


def resolve(placements: dict[str, Path], io_caps: dict[str, IoCaps], memory_bytes: int | None) -> GroupLimits:
    """The caps asked for each placement (`io_caps`, by name) on the devices under them. A cap holds a
    whole device: two placements on one device must ask the same caps (the file's load refused
    otherwise; here for a caller that did not load one)."""
    if not any(io_caps.values()):
        return GroupLimits((), memory_bytes)
    by_dev: dict[str, DeviceCap] = {}
    uncapped: dict[str, str] = {}  # "major:minor" -> a placement there that asks no cap
    for name, path in placements.items():
        asked = io_caps.get(name)
        found = device_of(path)
        if found is None:
            if asked:
                raise RunFailed(f"placements.{name}: {path} sits on no block device to cap")
            continue
        device, dev = found
        if not asked:
            uncapped.setdefault(dev, name)
            continue
        sharing = by_dev.get(dev)  # another placement's cap on the same device
        if sharing is not None and sharing.caps != asked:
            raise RunFailed(f"placements.{name}: its device {device} holds placements.{sharing.placements[0]} too, "
                            "with other caps (a cap holds a whole device)")
        by_dev[dev] = DeviceCap((*sharing.placements, name) if sharing else (name,), device, dev, asked)
    for dev, cap in by_dev.items():
        if dev in uncapped:
            raise RunFailed(f"placements.{uncapped[dev]}: its device {cap.device} is capped for "
                            f"placements.{cap.placements[0]} (a cap holds a whole device)")
    return GroupLimits(tuple(by_dev.values()), memory_bytes)
