"""The metrics of a run's timeline, each declared once: the name it is stored under (or the prefix of a
family, stored as `<prefix>:<member>`: one per placement, one per wait type), its unit, its axis
label, and how a point's value covers time. The driver, the probes and the report all name metrics
through this module; the stored names are those of every store written so far.

How a value covers time:
- RATE: an amount over an interval divided by the time that interval really covers (rows, IOs,
  bytes, seconds waited);
- VALUE: a value of the interval, not divided by its time (a percentile of its transactions'
  latency, an average IO size, CPU %);
- EVENT: something that happened at t (a checkpoint, its value the duration in s; a WAL switch, 1).

Where t sits in the interval:
- START: t opens the interval, which runs to the next point of the same metric, the last to the
  end of the run (the driver's one-second buckets, the wait timeline's intervals);
- END: t closes the interval that began at the point before (the device sampler reads its counters
  at t: what moved since the reading before);
- AT: an instant (events).
"""

from __future__ import annotations

from dataclasses import dataclass

RATE, VALUE, EVENT = "rate", "value", "event"
START, END, AT = "start", "end", "at"


@dataclass(frozen=True)
class Metric:
    name: str  # the stored name, or a family's prefix
    unit: str
    label: str  # the axis label
    how: str  # RATE, VALUE or EVENT
    stamp: str  # START, END or AT
    member: str | None = None  # a family's member ("placement", "wait type"); None: one metric

    def of(self, member: str) -> str:
        """The stored name of one member of a family."""
        return f"{self.name}:{member}"

    def holds(self, stored: str) -> bool:
        """`stored` is this metric, or a member of this family."""
        return stored.startswith(self.name + ":") if self.member else stored == self.name

    def member_of(self, stored: str) -> str:
        """The member's name in a family's stored name ("disk" of "mb_s:disk")."""
        return stored[len(self.name) + 1:]

    @property
    def steps(self) -> bool:
        """Drawn as steps over the interval each value covers, not as a line through its points."""
        return self.stamp == START


# The driver's one-second buckets of the server's commit times.
ROWS_PER_S = Metric("rows_per_s", "rows/s", "rows/s", RATE, START)
TRANSACTIONS_PER_S = Metric("transactions_per_s", "txn/s", "txn/s", RATE, START)
LATENCY_P50_MS = Metric("latency_p50_ms", "ms", "p50 ms", VALUE, START)
LATENCY_P95_MS = Metric("latency_p95_ms", "ms", "p95 ms", VALUE, START)
LATENCY_P99_MS = Metric("latency_p99_ms", "ms", "p99 ms", VALUE, START)
LATENCY = {50: LATENCY_P50_MS, 95: LATENCY_P95_MS, 99: LATENCY_P99_MS}  # by percentile
THROUGHPUT = (ROWS_PER_S, TRANSACTIONS_PER_S)  # in the order the report prefers them
# storlab's MariaDB replayer's one-second buckets of its statements' schedule: how late they were sent.
REPLAY_LAG_MS = Metric("replay_lag_ms", "ms", "replay lag ms (mean)", VALUE, START)
REPLAY_LAG_MAX_MS = Metric("replay_lag_max_ms", "ms", "replay lag ms (largest)", VALUE, START)

# The device sampler: /proc/diskstats per placement's device, and the machine's CPU.
IOPS = Metric("iops", "IO/s", "IOPS", RATE, END, member="placement")
MIB_S = Metric("mb_s", "MiB/s", "MiB/s", RATE, END, member="placement")  # 2^20 bytes, as fio counts
IO_KB = Metric("io_kb", "KiB", "average IO KiB", VALUE, END, member="placement")
CPU_PERCENT = Metric("cpu_percent", "%", "CPU %", VALUE, END)

# The instance's control group (probes/limits.py): the interval's IO through a capped placement's device
# as a share of its tightest cap, and the memory charged to the group, the page cache included.
CAP_USE = Metric("cap_use", "%", "% of the IO cap", VALUE, END, member="placement")
SERVER_MEMORY = Metric("server_memory_mb", "MiB", "server memory MiB (cache included)", VALUE, END)
# A credit bucket (storlab.lab.credits), by its unit: the cap in force at t and the credits left, as a
# share of the bucket.
BUCKET_CAP = {"iops": Metric("iops_cap", "IO/s", "IOPS cap in force", VALUE, END, member="placement"),
              "mb_s": Metric("mb_s_cap", "MiB/s", "MiB/s cap in force", VALUE, END, member="placement")}
CREDITS_LEFT = {"iops": Metric("iops_credits", "%", "% of the IOPS bucket left", VALUE, END, member="placement"),
                "mb_s": Metric("mb_s_credits", "%", "% of the MiB/s bucket left", VALUE, END, member="placement")}

# The wait timeline: seconds waited per second of the interval (the sessions waiting, on average).
WAIT = Metric("wait", "s/s", "sessions waiting (average)", RATE, START, member="wait type")

# Traced events.
CHECKPOINT = Metric("event:checkpoint", "s", "checkpoint", EVENT, AT)
WAL_SWITCH = Metric("event:wal_switch", "", "WAL switch", EVENT, AT)
EVENTS = (CHECKPOINT, WAL_SWITCH)
# A checkpoint seen by storlab's once-a-second reading of the engine (probes/checkpoints.py, every engine), to
# the second; its value 1. Not drawn: the traced checkpoint is, where traced.
CHECKPOINT_SEEN = Metric("event:checkpoint_seen", "", "checkpoint (seen)", EVENT, AT)

METRICS = (ROWS_PER_S, TRANSACTIONS_PER_S, *LATENCY.values(), REPLAY_LAG_MS, REPLAY_LAG_MAX_MS, IOPS, MIB_S, IO_KB, CPU_PERCENT, CAP_USE, SERVER_MEMORY,
           *BUCKET_CAP.values(), *CREDITS_LEFT.values(), WAIT, *EVENTS, CHECKPOINT_SEEN)


def find(stored: str) -> Metric | None:
    """The declared metric a stored name belongs to; None for a name no storlab writes."""
    return next((m for m in METRICS if m.holds(stored)), None)
