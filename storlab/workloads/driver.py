"""The load that runs in the server: each session makes one call to a procedure that runs all its
transactions with COMMIT inside its loop and records each transaction's start and commit time in the
server, handed back when the call returns. While the load runs the client does nothing but wait (one
thread per session blocked in its call) and read a commit counter once a second for the progress bar,
so the lab measures the storage, not its own client (benchmarks/driver_overhead.py compares it with
pgbench and a C client).

The same `Transactions` record comes from the client-side loop (client.py), so figures and
timelines are computed one way for both."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from storlab import timeline as timeline_metrics
from storlab.engines.base import Instance
from storlab.errors import RunFailed
from storlab.workloads.kind import Figure, Measurement, Progress

PROGRESS_PERIOD_S = 1.0
# A last bucket shorter than this is folded into the one before: a rate over a sliver of a second
# is noise, and an unfolded partial bucket divided by a whole second draws a false tail-off.
MIN_LAST_BUCKET_S = 0.5
# The transactions' latency `measure` gives, as the kinds it measures declare it (p99 shown).
TRANSACTION_LATENCY = (
    Figure("latency_p99_ms", "ms", "p99 txn ms", "lower"),
    Figure("latency_p50_ms", "ms", "p50 txn ms", "lower", shown=False),
    Figure("latency_p95_ms", "ms", "p95 txn ms", "lower", shown=False),
)


@dataclass
class Transactions:
    """Every transaction of one run: start and commit, epoch seconds, and the rows each wrote."""

    starts: np.ndarray
    ends: np.ndarray
    rows: np.ndarray
    sessions: list[tuple[float, float, float, float]]  # per session: client call start/end, server first start/last end

    @property
    def start_epoch(self) -> float:
        return float(self.starts.min())

    @property
    def elapsed_s(self) -> float:
        """First transaction start to last commit."""
        return float(self.ends.max() - self.starts.min())


def session_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ProcedureLoad:
    """`calls[i]` is session i's procedure call and the rows of each transaction it will run."""

    def __init__(self, instance: Instance, calls: list[tuple[str, tuple, np.ndarray]], warmup_s: float = 0.0):
        self.instance = instance
        self.calls = calls
        self.warmup_s = warmup_s
        self.conns: list[Any] = []
        self.ids: list[int] = []
        self.monitor: Any = None

    def open(self) -> list[int]:
        """Connect every session, several at once (a PostgreSQL backend takes milliseconds to fork)."""
        with ThreadPoolExecutor(max_workers=min(len(self.calls), 8)) as pool:
            for conn in pool.map(lambda _: self.instance.connect(), self.calls):
                self.conns.append(conn)
        self.ids = [self.instance.session_id(conn) for conn in self.conns]
        self.monitor = self.instance.connect()
        return list(self.ids)

    def close(self) -> None:
        for conn in [*self.conns, self.monitor]:
            if conn is None:
                continue
            try:
                conn.close()
            except Exception:  # closing after a server failure must not hide the failure
                pass
        self.conns, self.monitor = [], None

    def __enter__(self) -> "ProcedureLoad":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _session(self, i: int, go: threading.Barrier, out: list, errors: list) -> None:
        call, params, _ = self.calls[i]
        try:
            go.wait()
            began = time.time()
            starts, ends = self.instance.call_load(self.conns[i], call, params)
            out[i] = (began, time.time(), starts, ends)
        except BaseException as exc:
            errors.append(exc)

    def transactions(self, on_progress: Progress | None = None) -> Transactions:
        total = sum(len(rows) for _, _, rows in self.calls)
        out: list = [None] * len(self.calls)
        errors: list[BaseException] = []
        go = threading.Barrier(len(self.calls) + 1)
        threads = [threading.Thread(target=self._session, args=(i, go, out, errors), daemon=True,
                                    name="storlab-session") for i in range(len(self.calls))]
        for t in threads:
            t.start()
        base = self.instance.committed(self.monitor)
        go.wait()
        try:
            while not errors:
                running = [t for t in threads if t.is_alive()]
                if not running:
                    break
                running[0].join(PROGRESS_PERIOD_S)
                if on_progress:
                    on_progress(min(self.instance.committed(self.monitor) - base, total), total)
        except BaseException:
            self._abandon(threads)
            raise
        if errors:
            self._abandon(threads)
            raise RunFailed(f"workload session failed: {session_error(errors[0])}")
        return _collect(out, [rows for _, _, rows in self.calls])

    def run(self, on_progress: Progress | None = None) -> Measurement:
        return measure(self.transactions(on_progress), warmup_s=self.warmup_s)

    def _abandon(self, threads: list[threading.Thread]) -> None:
        """Cancel the calls still running (a failed session or Ctrl-C) and wait for their threads."""
        try:
            self.instance.cancel(self.ids)
        except Exception:  # the server may be gone; the instance is torn down next anyway
            pass
        for t in threads:
            t.join(10)


def _collect(out: list, rows: list[np.ndarray]) -> Transactions:
    sessions, starts, ends, weights = [], [], [], []
    for (began, returned, s, e), r in zip(out, rows):
        if len(s) != len(r):
            raise RunFailed(f"a load procedure recorded {len(s)} transactions, {len(r)} were planned")
        sessions.append((began, returned, float(s.min()) if len(s) else began, float(e.max()) if len(e) else began))
        starts.append(s)
        ends.append(e)
        weights.append(r)
    return Transactions(np.concatenate(starts), np.concatenate(ends), np.concatenate(weights).astype(float), sessions)


def batches(rows: int, batch: int) -> np.ndarray:
    """The rows of each transaction: full batches, then the rest."""
    full, rest = divmod(rows, batch)
    return np.asarray([batch] * full + ([rest] if rest else []), dtype=float)


def buckets(elapsed_s: float) -> np.ndarray:
    """One-second bucket edges over [0, elapsed], a short last bucket folded into the one before."""
    edges = np.arange(0.0, np.floor(elapsed_s) + 1.0)
    if elapsed_s - edges[-1] < MIN_LAST_BUCKET_S and len(edges) > 1:
        edges = edges[:-1]
    return np.append(edges, elapsed_s) if elapsed_s > edges[-1] else edges


def timeline(tx: Transactions, rows: bool = True) -> list[tuple[float, str, float]]:
    """Throughput and latency percentiles (p50, p95, p99 of the transactions committed in the bucket)
    per bucket, each rate divided by the time its bucket really covers."""
    commits = tx.ends - tx.start_epoch
    edges = buckets(tx.elapsed_s)
    which = np.clip(np.searchsorted(edges, commits, side="right") - 1, 0, max(len(edges) - 2, 0))
    latency_ms = (tx.ends - tx.starts) * 1000
    points = []
    for i in range(len(edges) - 1):
        width = edges[i + 1] - edges[i]
        mask = which == i
        t = float(edges[i])
        if rows:
            points.append((t, timeline_metrics.ROWS_PER_S.name, float(tx.rows[mask].sum() / width)))
        points.append((t, timeline_metrics.TRANSACTIONS_PER_S.name, float(mask.sum() / width)))
        if mask.any():
            found = np.percentile(latency_ms[mask], list(timeline_metrics.LATENCY))
            points += [(t, metric.name, float(value)) for metric, value in zip(timeline_metrics.LATENCY.values(), found)]
    return points


def after_warmup(tx: Transactions, warmup_s: float) -> Transactions:
    """The transactions that started after the first `warmup_s` seconds of the load."""
    if not warmup_s:
        return tx
    keep = tx.starts >= tx.start_epoch + warmup_s
    if not keep.any():
        raise RunFailed(f"warmup_s = {warmup_s:g} is as long as the whole run ({tx.elapsed_s:.2f} s): nothing is left to measure")
    return Transactions(tx.starts[keep], tx.ends[keep], tx.rows[keep], tx.sessions)


def measure(tx: Transactions, rows: bool = True, warmup_s: float = 0.0) -> Measurement:
    """The figures every transactional load reports, the warm-up left out (its timeline keeps the whole
    run, on the axis of the load's first start); `rows` when its transactions write counted rows."""
    whole, tx = tx, after_warmup(tx, warmup_s)
    latency_ms = (tx.ends - tx.starts) * 1000
    elapsed = tx.elapsed_s
    figures = {
        "elapsed_s": elapsed,
        "transactions": float(len(tx.ends)),
        "transactions_per_s": len(tx.ends) / elapsed if elapsed > 0 else 0.0,
        "latency_p50_ms": float(np.percentile(latency_ms, 50)),
        "latency_p95_ms": float(np.percentile(latency_ms, 95)),
        "latency_p99_ms": float(np.percentile(latency_ms, 99)),
    }
    if rows:
        figures["rows"] = float(tx.rows.sum())
        figures["rows_per_s"] = float(tx.rows.sum()) / elapsed if elapsed > 0 else 0.0
    return Measurement(elapsed, figures, timeline(whole, rows), whole.start_epoch)
