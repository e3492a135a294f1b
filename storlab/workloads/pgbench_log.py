"""pgbench's per-transaction log (`--log`: one file per thread, a line per transaction as it ended:
client, transaction, time in us or the word for why it did not complete, script, epoch s, epoch us,
and under a rate the schedule lag in us), read as a stream: storlab's memory holds a chunk of each
thread's file and one second of transactions, whatever the run's length or rate.

Read twice: once for when the run began and ended (the first transaction's start, the last commit),
which places the one-second buckets of the timeline and the end of the warm-up; then bucket by
bucket, every thread's file read up to the bucket's end (each file is in the order its transactions
ended), so each second's percentiles are of its own transactions, exactly as the driver's timeline
computes them. The run's percentiles come from a histogram of buckets 1 % wide on a log scale
(HdrHistogram's idea, at two significant digits): each within 0.5 % of the latency of the transaction
at its rank (docs/explaining.md)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import IO, Iterator

import numpy as np

from storlab import timeline as timeline_metrics
from storlab.errors import RunFailed
from storlab.workloads.driver import buckets

CHUNK_BYTES = 2**18  # a quarter of a MiB of a thread's file, some 6,000 transactions, at a time
# The words pgbench writes for a transaction that did not complete, as numbers the parser reads (not
# whole, so no latency pgbench writes, in whole microseconds, is ever taken for one).
SKIPPED, FAILED = -1.5, -2.5
WORDS = ((b" skipped ", b" -1.5 "), (b" failed ", b" -2.5 "), (b" serialization ", b" -2.5 "), (b" deadlock ", b" -2.5 "))
LATENCY, EPOCH_S, EPOCH_US, LAG = 2, 4, 5, 6  # columns

# The histogram: buckets RATIO wide from LOWEST_MS (pgbench's resolution, 1 us) up to a day.
RATIO = 1.01
LOWEST_MS = 0.001
BUCKETS = math.ceil(math.log(86_400_000 / LOWEST_MS) / math.log(RATIO)) + 1


class Histogram:
    """Latencies counted in buckets RATIO wide on a log scale: a fixed size, however many are added."""

    def __init__(self) -> None:
        self.counts = np.zeros(BUCKETS, dtype=np.int64)
        self.lowest = math.inf
        self.highest = -math.inf

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def add(self, latency_ms: np.ndarray) -> None:
        if not len(latency_ms):
            return
        at = np.floor(np.log(np.maximum(latency_ms, LOWEST_MS) / LOWEST_MS) / math.log(RATIO)).astype(np.int64)
        self.counts += np.bincount(np.clip(at, 0, BUCKETS - 1), minlength=BUCKETS)
        self.lowest = min(self.lowest, float(latency_ms.min()))
        self.highest = max(self.highest, float(latency_ms.max()))

    def percentile(self, p: float) -> float:
        """The latency at rank ceil(p % of the count) (the nearest-rank percentile): its bucket's
        geometric middle, inside the lowest and highest latency seen."""
        rank = max(1, math.ceil(p / 100 * self.count))
        bucket = int(np.searchsorted(np.cumsum(self.counts), rank))
        return float(min(max(LOWEST_MS * RATIO ** (bucket + 0.5), self.lowest), self.highest))


def chunks(file: IO[bytes]) -> Iterator[np.ndarray]:
    """A thread's log as arrays of rows (floats; the words for an incomplete transaction as SKIPPED
    and FAILED), about CHUNK_BYTES of the file at a time."""
    # pandas' C reader is the quick one for a long log; imported here, as it takes a tenth of a second and
    # every command that reads an experiment file imports this module.
    import pandas as pd

    rest = b""
    while True:
        block = file.read(CHUNK_BYTES)
        if block:
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rows, rest = block[:cut], block[cut:]
        else:  # the end: a last line without its newline, if any
            rows, rest = rest, b""
        for word, number in WORDS:
            rows = rows.replace(word, number)
        if rows.strip():
            yield pd.read_csv(io.BytesIO(rows), sep=" ", header=None, engine="c", dtype=np.float64).to_numpy()
        if not block:
            return


def _ends(rows: np.ndarray) -> np.ndarray:
    return rows[:, EPOCH_S] + rows[:, EPOCH_US] / 1e6


def _starts(done: np.ndarray) -> np.ndarray:
    """A completed transaction's start: its end less its latency (under a rate, its scheduled start)."""
    return _ends(done) - done[:, LATENCY] / 1e6


def _done(rows: np.ndarray) -> np.ndarray:
    return rows[:, LATENCY] >= 0


class _Thread:
    """One thread's file as a stream of rows in the order its transactions ended."""

    def __init__(self, file: IO[bytes]):
        self.reading = chunks(file)
        self.pending = np.empty((0, 0))
        self.pending_ends = np.empty(0)
        self.over = False

    def take(self, before: float) -> np.ndarray:
        """Its rows that ended before `before` (every one left, with math.inf)."""
        while not self.over and (not len(self.pending_ends) or self.pending_ends.max() < before):
            more = next(self.reading, None)
            if more is None:
                self.over = True
                break
            self.pending = more if not len(self.pending) else np.concatenate([self.pending, more])
            self.pending_ends = _ends(self.pending)
        if not len(self.pending):
            return self.pending
        now = self.pending_ends < before
        taken = self.pending[now]
        self.pending, self.pending_ends = self.pending[~now], self.pending_ends[~now]
        return taken


@dataclass
class Span:
    """When a run's completed transactions began and ended (epoch s), and how many there were."""

    first_start: float = math.inf
    last_end: float = -math.inf
    done: int = 0


def span(files: list[IO[bytes]]) -> Span:
    """The first pass: the first completed transaction's start (its end less its latency; under a rate,
    its scheduled start) and the last one's end."""
    found = Span()
    for file in files:
        for rows in chunks(file):
            latency = rows[:, LATENCY]
            if ((latency < 0) & (latency != SKIPPED) & (latency != FAILED)).any():
                raise RunFailed(f"pgbench logged a negative latency ({latency[latency < 0].min():g} us): its "
                                "schedule or clock went wrong, and no figure of the run can be trusted")
            done = rows[_done(rows)]
            if len(done):
                ends = _ends(done)
                found.first_start = min(found.first_start, float(_starts(done).min()))
                found.last_end = max(found.last_end, float(ends.max()))
                found.done += len(done)
        file.seek(0)
    return found


@dataclass
class Summary:
    """What the log says of a run: of the completed transactions that began after the warm-up, their
    count, latencies (a histogram, and their sum), schedule lags (sum and most, in ms) and how many
    were later than a limit; how many were skipped or failed after the warm-up; and the timeline of
    the whole run (every completed transaction, by the second it ended in)."""

    span: Span
    begins: float
    latency: Histogram = field(default_factory=Histogram)
    latency_sum_ms: float = 0.0
    lag_sum_ms: float = 0.0
    lag_max_ms: float = 0.0
    late: int = 0
    skipped: int = 0
    failed: int = 0
    timeline: list[tuple[float, str, float]] = field(default_factory=list)

    @property
    def counted(self) -> int:
        return self.latency.count

    def add(self, rows: np.ndarray, latency_limit_ms: float | None) -> None:
        ends = _ends(rows)
        after = ends >= self.begins
        self.skipped += int(((rows[:, LATENCY] == SKIPPED) & after).sum())
        self.failed += int(((rows[:, LATENCY] == FAILED) & after).sum())
        done = rows[_done(rows)]
        latency_ms = done[:, LATENCY] / 1000
        measured = _starts(done) >= self.begins
        self.latency.add(latency_ms[measured])
        self.latency_sum_ms += float(latency_ms[measured].sum())
        if done.shape[1] > LAG and measured.any():
            lag_ms = done[measured, LAG] / 1000
            self.lag_sum_ms += float(lag_ms.sum())
            self.lag_max_ms = max(self.lag_max_ms, float(lag_ms.max()))
        if latency_limit_ms is not None:
            self.late += int((latency_ms[measured] > latency_limit_ms).sum())


def summary(files: list[IO[bytes]], warmup_s: float, latency_limit_ms: float | None) -> Summary:
    """The run's log summed up (Summary), in two passes over the threads' files."""
    found = Summary(span(files), 0.0)
    if not found.span.done:
        return found
    start = found.span.first_start
    found.begins = start + warmup_s
    edges = buckets(found.span.last_end - start)
    if len(edges) < 2:  # one transaction, or all ended at once: no second to draw
        edges = np.array([0.0, math.inf])
    threads = [_Thread(file) for file in files]
    for i in range(len(edges) - 1):
        before = start + edges[i + 1] if i < len(edges) - 2 else math.inf
        taken = [rows for thread in threads if len(rows := thread.take(before))]
        rows = np.concatenate(taken) if taken else np.empty((0, LAG))
        found.add(rows, latency_limit_ms)
        done = rows[_done(rows)] if len(rows) else rows
        width, t = edges[i + 1] - edges[i], float(edges[i])
        if math.isinf(width):
            continue
        found.timeline.append((t, timeline_metrics.TRANSACTIONS_PER_S.name, len(done) / width))
        if len(done):
            values = np.percentile(done[:, LATENCY] / 1000, list(timeline_metrics.LATENCY))
            found.timeline += [(t, metric.name, float(value))
                               for metric, value in zip(timeline_metrics.LATENCY.values(), values)]
    return found
