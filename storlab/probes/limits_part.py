"""The limits probe's part of the answer (storlab.probes.limits makes it): what each cell's IO caps,
credit buckets and server memory limit did, typed here apart from the probe, which reads them from the
lab's control groups, so that the answer's model holds it without reaching the lab."""

from __future__ import annotations

from storlab.probes.part import Part, PartTable, Section
from storlab.sizes import format_bytes
from storlab.typed import Typed

# A cap's and a bucket's units as the lab words them (storlab.lab.caps UNITS and CREDIT; a test holds
# them equal), said again here: this module imports only the ground, so the model that holds it does not
# reach the lab.
UNITS = {"iops": "IOPS", "mb_s": "MiB/s"}
CREDIT = {"iops": "IO", "mb_s": "MiB"}


class CapRow(Typed):
    """What a cell's IO cap on one device did, per run (the means of its runs)."""

    cell: str
    label: str
    device: str  # the kernel's name: a directory placement's cap holds its whole disk
    placements: list[str]
    caps: dict[str, float]  # read_iops, write_iops, read_mb_s, write_mb_s: those set
    max_sectors_kb: int | None  # the largest request the device was issued: an IOPS cap counts each
    at_cap_share: float | None  # of the runs' time, the group's IO at 90 % of its tightest cap or more
    device_written_bytes: float
    charged_written_bytes: float  # to the instance's control group: less than the device wrote when
    device_read_bytes: float  # writeback went around a v1 cap
    charged_read_bytes: float
    said: str  # all of it in words, as `show` prints it
    io_pressure_s: float | None = None  # v2: some of the group's processes stalled on IO, a run (io.pressure)


class MemoryRow(Typed):
    """What a cell's server memory limit did (its control group's limit, the page cache included)."""

    cell: str
    label: str
    limit_bytes: int
    runs: int
    runs_hit: int  # runs that reached the limit
    hits_per_run: float  # v1 memory.failcnt, v2 memory.events max
    oom_kills: int
    peak_bytes: float | None
    device_read_bytes: float  # what the placements' devices read, a run
    said: str


class DryRun(Typed):
    """A run whose credit bucket ran dry."""

    round: int
    at_s: float  # from the run's start


class CapStep(Typed):
    """A cap's level from `at_s` on, until the next step or the run's end."""

    at_s: float  # on the run's timeline (from the load's first start), as its other series
    cap: float  # IOs or MiB a second


class CapInForce(Typed):
    """One cap on one device over one run: its level at the start and at each change (a credit bucket
    running dry, or holding a second of bursting again); a cap without a bucket is one step."""

    cell: str
    round: int
    device: str
    placements: list[str]
    key: str  # read_iops, write_iops, read_mb_s or write_mb_s
    steps: list[CapStep]


class BucketRow(Typed):
    """What a cell's credit bucket on one device did: a cap at its burst rate while the bucket held
    credits, at its baseline once it was empty."""

    cell: str
    label: str
    device: str
    placements: list[str]
    unit: str  # "iops" or "mb_s": what it earns and pays
    baseline: float  # a second
    burst: float
    size: float  # credits: IOs, or MiB
    start: float  # credits at each run's start
    runs: int
    dry: list[DryRun]  # the runs it ran dry in, and when
    dry_share: float  # of the runs' time, the baseline in force
    spent_per_run: float  # credits
    said: str

    def text(self) -> str:
        """'100 IOPS, bursts to 1,000 from a bucket of 4,500 IO (full at the start)', as the lab's Bucket says it."""
        unit, credit = UNITS[self.unit], CREDIT[self.unit]
        start = "full" if self.start == self.size else "empty" if self.start == 0 else f"{self.start:,g} {credit}"
        return (f"{self.baseline:,g} {unit}, bursts to {self.burst:,g} from a bucket of {self.size:,g} {credit} "
                f"({start} at the start)")


class Limits(Part):
    """What the cells' IO caps, credit buckets and server memory limits did, and what a cap holds back on
    the host that ran them (cgroup v1 or v2)."""

    covers: list[str]
    caps: list[CapRow]
    memory: list[MemoryRow]
    lines: list[str]  # all of it in words
    buckets: list[BucketRow] = []
    in_force: list[CapInForce] = []  # each cap of each run, over its time

    def sentences(self) -> list[str]:
        return list(self.lines)

    def section(self) -> Section:
        """A table per kind of limit: the IO caps, the credit buckets, the memory limit; a row a cell's runs,
        the means over them."""
        tables = []
        if self.caps:
            tables.append(PartTable(
                ["cell", "placement", "caps", "at its cap", "device wrote", "charged", "device read", "charged",
                 "IO stall s"],
                [[r.label, f"{', '.join(r.placements)} on {r.device}", _caps(r.caps), _share(r.at_cap_share),
                  format_bytes(r.device_written_bytes), _charged(r.device_written_bytes, r.charged_written_bytes),
                  format_bytes(r.device_read_bytes), _charged(r.device_read_bytes, r.charged_read_bytes),
                  "—" if r.io_pressure_s is None else f"{r.io_pressure_s:,.1f}"] for r in self.caps],
                "a run's means: the time its IO ran at 90 % of its tightest cap or more; what the device served "
                "against what the instance's control group was charged (less where writeback went around a v1 cap); "
                "the time some of the group's processes stalled on IO (v2's io.pressure)", left=3))
        if self.buckets:
            tables.append(PartTable(
                ["cell", "placement", "bucket", "ran dry", "when", "at its baseline", "credits spent a run"],
                [[r.label, f"{', '.join(r.placements)} on {r.device}", r.text(), f"{len(r.dry)} of {r.runs}",
                  ", ".join(f"round {d.round} at {d.at_s:.1f} s" for d in r.dry) or "—", _share(r.dry_share),
                  f"{r.spent_per_run:,.0f}"] for r in self.buckets], left=3, words=(4,)))
        if self.memory:
            tables.append(PartTable(
                ["cell", "memory limit", "reached", "times a run", "peak", "devices read a run", "OOM kills"],
                [[r.label, format_bytes(r.limit_bytes), f"{r.runs_hit} of {r.runs}", f"{r.hits_per_run:,.1f}",
                  "—" if r.peak_bytes is None else format_bytes(r.peak_bytes), format_bytes(r.device_read_bytes),
                  str(r.oom_kills)] for r in self.memory]))
        return Section("IO caps, credit buckets and the server's memory", tables, "; ".join(self.covers))


def _caps(caps: dict[str, float]) -> str:
    """'write 300 IOPS, read 125 MiB/s': each cap set."""
    return ", ".join(f"{key.split('_')[0]} {value:,g} {UNITS[key.split('_', 1)[1]]}" for key, value in caps.items())


def _share(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.0f} %"


def _charged(device: float, charged: float) -> str:
    return format_bytes(charged) + (f" ({100 * charged / device:.0f} %)" if device else "")
