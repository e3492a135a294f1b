"""The size of every IO a placement's device served, per direction (seed 002's IO-size histogram).

The block layer's `block:block_rq_issue` tracepoint, through one bpftrace program (probes/bpftrace.py):
the kernel keeps power-of-two histograms per device and direction in BPF maps and nothing is printed
per event, so tracing costs the workload little; the maps are read once after the load. Where
tracing is impossible (not root, no bpftrace, no tracefs, or bpftrace fails), /proc/diskstats gives
the average size over the same interval, labelled as an average: it cannot show a mix of small and
large IOs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storlab.lab import mounts
from storlab.probes import bpftrace
from storlab.probes.kept import Adapted, Db, Probe, RunScope

TRACED = "bpftrace"
AVERAGE = "diskstats average"
DIRECTIONS = ("read", "write")
_TRACEPOINT = bpftrace.TRACEFS / "events/block/block_rq_issue"
_SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own sector size

# One histogram map per direction keyed by the device; the filter keeps other devices' IO out in
# the kernel. rwbs starts with R or W, or with F (a preflush) before a write; requests without data
# (flushes) carry no bytes.
_PROGRAM = """tracepoint:block:block_rq_issue /({devices}) && args->bytes > 0/ {{
  if (strncmp(args->rwbs, "R", 1) == 0) {{ @read[args->dev] = hist(args->bytes); }}
  else if (strncmp(args->rwbs, "W", 1) == 0 || strncmp(args->rwbs, "FW", 2) == 0) {{ @write[args->dev] = hist(args->bytes); }}
}}
"""


@dataclass
class IoSizes:
    """sizes[placement][direction] maps a size in bytes to a number of requests. With source
    "bpftrace" a size is the lower bound of a power-of-two bucket ([4096, 8192) is 4096); with
    "diskstats average" each direction has one entry, the average size over the interval."""

    source: str
    sizes: dict[str, dict[str, dict[int, int]]]
    devices: dict[str, str]  # placement -> "major:minor"; placements sharing a device share its counts
    note: str = ""  # why the sizes are averages


def device_numbers(placements: dict[str, Path]) -> dict[str, str]:
    """placement -> "major:minor" of the whole disk behind it (requests are issued to the disk, not
    a partition); placements without a block device (tmpfs) are left out."""
    found = {}
    for name, path in placements.items():
        disk = mounts.block_device_of(path)
        if disk is None:
            continue
        try:
            found[name] = (Path("/sys/block") / disk / "dev").read_text().strip()
        except OSError:
            continue
    return found


def _kernel_dev(number: str) -> int:
    """The kernel's internal dev_t, as the tracepoint reports it: major in the high 12 bits, minor in the low 20."""
    major, minor = (int(part) for part in number.split(":"))
    return (major << 20) | minor


def program(numbers: list[str]) -> str:
    return _PROGRAM.format(devices=" || ".join(f"args->dev == {dev}" for dev in sorted({_kernel_dev(n) for n in numbers})))


def groups() -> list[tuple[str, str | None]]:
    """For `storlab check`: the IO-size trace, and why it cannot run here (None when it can)."""
    return [("the size of every IO (block:block_rq_issue)", why_not_traced("bpftrace"))]


def why_not_traced(command: str | None) -> str | None:
    """None when tracing can work; otherwise the reason, for the note beside the averages."""
    if command is None:
        return "tracing turned off"
    reason = bpftrace.why_not(command)
    if reason is not None:
        return reason
    if not _TRACEPOINT.exists():
        return f"this kernel has no {_TRACEPOINT.relative_to(bpftrace.TRACEFS)} tracepoint"
    return None


def _read_diskstats() -> dict[str, tuple[int, int, int, int]]:
    """"major:minor" -> (reads, sectors read, writes, sectors written)."""
    stats = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) >= 10:
            stats[f"{f[0]}:{f[1]}"] = (int(f[3]), int(f[5]), int(f[7]), int(f[9]))
    return stats


class IoSizeTracer:
    """Start before the workload, stop after it; stopped on every path as a context manager:

        with IoSizeTracer(device_numbers(placements)) as tracer:
            run_workload()
        sizes = tracer.result

    `devices` maps placement -> "major:minor"; `command` is the bpftrace to run, None to use the
    diskstats averages only."""

    def __init__(self, devices: dict[str, str], command: str | None = "bpftrace") -> None:
        self.devices = dict(devices)
        self.command = command
        self.result: IoSizes | None = None
        self.note = ""
        self._trace: bpftrace.Trace | None = None
        self._before: dict[str, tuple[int, int, int, int]] = {}

    @property
    def pid(self) -> int | None:
        return self._trace.pid if self._trace is not None else None

    def start(self) -> None:
        self._before = _read_diskstats()
        if not self.devices:
            return
        self.note = why_not_traced(self.command) or ""
        if self.note:
            return
        self._trace = bpftrace.Trace(program(list(self.devices.values())), self.command)
        self._trace.start()
        self.note = self._trace.note

    def stop(self) -> IoSizes:
        """The histograms, or the averages when tracing was impossible or failed."""
        if self.result is not None:
            return self.result
        maps = None
        if self._trace is not None:
            try:
                maps = self._trace.stop()
                self.note = self._trace.note
            finally:
                self._kill()
        self.result = (IoSizes(TRACED, self.sizes(maps), dict(self.devices)) if maps is not None
                       else IoSizes(AVERAGE, self._averages(), dict(self.devices), self.note))
        return self.result

    def _kill(self) -> None:
        if self._trace is not None:
            self._trace.kill()
            self._trace = None

    def sizes(self, maps: bpftrace.Maps) -> dict[str, dict[str, dict[int, int]]]:
        """The traced maps as sizes per placement and direction."""
        by_dev = {(int(key[0]), direction): buckets for direction in DIRECTIONS
                  for key, buckets in maps.get(direction, {}).items()}
        return {p: {d: dict(by_dev.get((_kernel_dev(n), d), {})) for d in DIRECTIONS} for p, n in self.devices.items()}

    def _averages(self) -> dict[str, dict[str, dict[int, int]]]:
        after = _read_diskstats()
        sizes = {}
        for placement, number in self.devices.items():
            a, b = self._before.get(number), after.get(number)
            sizes[placement] = {d: {} for d in DIRECTIONS}
            if a is None or b is None:
                continue
            for direction, (ios, sectors) in zip(DIRECTIONS, ((b[0] - a[0], b[1] - a[1]), (b[2] - a[2], b[3] - a[3]))):
                if ios > 0:
                    sizes[placement][direction] = {round(sectors * _SECTOR / ios): ios}
        return sizes

    def __enter__(self) -> "IoSizeTracer":
        self.start()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.stop()
        else:
            self._kill()


def _recording(run: RunScope) -> Adapted:
    tracer = IoSizeTracer(device_numbers(run.instance.spec.placements), "bpftrace" if run.traced else None)
    return Adapted(lambda sessions, t0: tracer.start(), tracer.stop)


def _write(db: Db, run_id: int, found: IoSizes) -> None:
    db.executemany("INSERT INTO io_sizes (run_id, placement, direction, size_bytes, requests, source) VALUES (?, ?, ?, ?, ?, ?)",
                   [(run_id, placement, direction, size, count, found.source)
                    for placement, by_direction in found.sizes.items()
                    for direction, counts in by_direction.items() for size, count in counts.items()])


def _read(db: Db, run_id: int) -> list[tuple[str, str, int, int, str]]:
    """(placement, direction, size in bytes, requests, source) of one run."""
    return list(db.execute("SELECT placement, direction, size_bytes, requests, source FROM io_sizes WHERE run_id = ? "
                           "ORDER BY placement, direction, size_bytes", (run_id,)))


PROBE = Probe(
    "io_sizes",
    # The size of the IOs each placement's device served during a run: traced requests by power-of-two
    # bucket, or one average per direction from /proc/diskstats (source says which).
    ("""
    CREATE TABLE io_sizes (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        placement TEXT NOT NULL,
        direction TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        requests INTEGER NOT NULL,
        source TEXT NOT NULL
    );
    CREATE INDEX io_sizes_run ON io_sizes(run_id);
    """,),
    _write, _read,
    recorder=_recording,
)
