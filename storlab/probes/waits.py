"""Wait statistics: the records every engine's probe produces, and the arithmetic shared by every engine
(deltas, the benign filter, the seeds' top-95 % cut)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol


TOP_PERCENT = 95.0


@dataclass
class FileIO:
    """One file's IO over one run (or a cell's mean per run)."""

    file: str  # as the engine names it: base/5/16390.1, pg_wal/000000010000000000000003, lab/lab_insert#P#p3.ibd
    object: str  # what it holds: lab_insert_3, lab_insert_3_id_idx, WAL, redo log
    placement: str  # the placement it lives on ("" when it is outside the instance's placements)
    reads: float = 0
    read_bytes: float = 0
    read_s: float = 0.0
    writes: float = 0
    write_bytes: float = 0
    write_s: float = 0.0
    syncs: float | None = None  # None where the source does not count them apart
    sync_s: float | None = None
    # Power-of-two latency buckets (lower bound in ns -> IOs); empty where the source keeps no histogram.
    read_histogram: dict[int, int] = field(default_factory=dict)
    write_histogram: dict[int, int] = field(default_factory=dict)
    source: str = ""

    @property
    def stall_s(self) -> float:
        return self.read_s + self.write_s + (self.sync_s or 0.0)


@dataclass
class Wait:
    """One row of a wait table. Counts and per-wait signal time only where the source measures them;
    `traced_s`: the time the engine's trace points measured over `wait_count` waits, where the
    sampled `wait_s` comes from another source."""

    wait_type: str
    wait_s: float
    wait_count: int | None = None
    signal_s: float | None = None
    traced_s: float | None = None


@dataclass
class TracedWait:
    """The waits of one type on one resource over a run (or a cell's mean per run)."""

    wait_type: str  # as pg_wait_sampling names it: Lock:extend, LWLock:WALWrite
    resource: str  # a lock wait's relation (lab_insert_3), or the lock's kind; "" for an LWLock
    waits: float
    seconds: float
    histogram: dict[int, int] = field(default_factory=dict)  # power-of-two buckets: lower bound in ns -> waits


@dataclass
class WaitCapture:
    """What a wait probe saw over one run: its waits and the counters shown beside the table."""

    source: str
    waits: list[Wait]
    extras: dict[str, float] = field(default_factory=dict)
    traced: list[TracedWait] = field(default_factory=list)  # each wait counted by the engine's trace points
    files: list[FileIO] = field(default_factory=list)  # IO per file of the instance
    # What the engine's trace saw happen (t in time.monotonic() seconds, timeline metric, value).
    events: list[tuple[float, str, float]] = field(default_factory=list)


class WaitProbe(Protocol):
    """Started on the workload's sessions just before the load, stopped just after it."""

    source: str

    def start(self, sessions: list[int]) -> None: ...

    def so_far(self) -> dict[str, float]:
        """Seconds in each wait since start() (CPU included where measured, benign waits left out),
        read while the load runs: the waits on the time axis are differences of two readings."""

    def stop(self) -> WaitCapture: ...


class RunWaitProbe(WaitProbe, Protocol):
    """An instance's wait probe as a run records it (Probed.wait_probe): a sampled WaitProbe and what
    the engine adds around it, with one more step after the load."""

    def ended(self, capture: WaitCapture) -> WaitCapture:
        """`capture` (what stop() returned) completed once the load's sessions have exited: what the
        server counts for a session as it exits."""


@dataclass
class WaitingTask:
    """The seeds' sys.dm_os_waiting_tasks, summed over a run: the time sessions were seen waiting in
    one wait on one resource ("" when the engine does not name it), and how many samples saw it."""

    wait_type: str
    resource: str
    seconds: float
    samples: int


@dataclass
class WaitRow:
    """A row of the seeds' wait table; None where the source cannot honestly fill a column."""

    wait_type: str
    wait_s: float
    percentage: float
    wait_count: float | None
    avg_wait_s: float | None
    signal_s: float | None


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Cumulative counters after minus before, dropping what did not move."""
    out = {}
    for key, value in after.items():
        moved = value - before.get(key, 0)
        if moved > 0:
            out[key] = moved
    return out


def is_benign(wait_type: str, benign: frozenset[str]) -> bool:
    """An exact name, or a class given as 'Class:*' (idle waits that say nothing about storage)."""
    return wait_type in benign or wait_type.split(":", 1)[0] + ":*" in benign


def top_share(waits: list[Wait], percent: float = TOP_PERCENT) -> list[WaitRow]:
    """Largest first, keeping rows until the running total reaches `percent`; the row that crosses
    it is kept (the seeds' `HAVING SUM(W2.Percentage) - W1.Percentage < 95`)."""
    total = sum(w.wait_s for w in waits)
    if total <= 0:
        return []
    rows, running = [], 0.0
    for w in sorted(waits, key=lambda w: (-w.wait_s, w.wait_type)):
        if running >= percent:
            break
        share = 100.0 * w.wait_s / total
        running += share
        rows.append(
            WaitRow(
                wait_type=w.wait_type,
                wait_s=w.wait_s,
                percentage=share,
                wait_count=w.wait_count,
                avg_wait_s=((w.wait_s if w.traced_s is None else w.traced_s) / w.wait_count) if w.wait_count else None,
                signal_s=w.signal_s,
            )
        )
    return rows


def mean_per_run(runs: list[list[Wait]]) -> list[Wait]:
    """A cell's waits as the mean over its runs; a count or signal is kept only if every run had it."""
    n = len(runs)
    if n == 0:
        return []
    wait_s: dict[str, float] = defaultdict(float)
    counts: dict[str, float | None] = {}
    signals: dict[str, float | None] = {}
    traced: dict[str, float | None] = {}
    for run in runs:
        for w in run:
            wait_s[w.wait_type] += w.wait_s
            counts[w.wait_type] = _add(counts.get(w.wait_type, 0), w.wait_count)
            signals[w.wait_type] = _add(signals.get(w.wait_type, 0), w.signal_s)
            traced[w.wait_type] = _add(traced.get(w.wait_type, 0), w.traced_s)
    return [
        Wait(
            wait_type=name,
            wait_s=total / n,
            wait_count=None if counts[name] is None else counts[name] / n,
            signal_s=None if signals[name] is None else signals[name] / n,
            traced_s=None if traced[name] is None else traced[name] / n,
        )
        for name, total in wait_s.items()
    ]


def _add(acc: float | None, value: float | None) -> float | None:
    return None if acc is None or value is None else acc + value
