"""Workloads and the driver that runs them: N connections, each on its own thread, one statement per
transaction, per-transaction latency recorded on the client.

The hot loop does nothing but time the statement and append two floats, so the driver costs the
server no more than pgbench does (benchmarks/driver_overhead.py measures it).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from storlab.errors import RunFailed


@dataclass
class DriveResult:
    elapsed_s: float  # first transaction start to last commit
    rows: int
    transactions: int
    latencies_s: np.ndarray
    commit_times_s: np.ndarray  # on the run's time axis (0 = first transaction start)
    start: float  # time.monotonic() of the first transaction start

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def latency_ms(self, percentile: float) -> float:
        return float(np.percentile(self.latencies_s, percentile) * 1000) if len(self.latencies_s) else 0.0

    def rows_per_second_timeline(self, rows_per_txn: float) -> list[tuple[float, float]]:
        """Throughput in one-second buckets, from the commit times (no sampler needed)."""
        if not len(self.commit_times_s):
            return []
        buckets = np.bincount(np.floor(self.commit_times_s).astype(int))
        return [(float(i), float(n * rows_per_txn)) for i, n in enumerate(buckets)]


@dataclass
class _Session:
    conn: Any
    statements: list[tuple[str, tuple]]
    rows: list[int]
    starts: list[float]
    ends: list[float]
    error: BaseException | None = None


class Driver:
    """Opens the sessions first (so probes can be pointed at them), then runs them all at once."""

    def __init__(self, instance, connections: int, rows_per_connection: int, batch: int):
        self.instance = instance
        self.connections = connections
        self.rows_per_connection = rows_per_connection
        self.batch = batch
        self.sessions: list[_Session] = []
        self._stop = threading.Event()

    @property
    def transactions_per_connection(self) -> int:
        return math.ceil(self.rows_per_connection / self.batch)

    def _batches(self) -> list[int]:
        full, rest = divmod(self.rows_per_connection, self.batch)
        return [self.batch] * full + ([rest] if rest else [])

    def open(self) -> list[int]:
        """Connect every session; returns the engine's session ids."""
        ids = []
        for _ in range(self.connections):
            conn = self.instance.connect()
            ids.append(self.instance.session_id(conn))
            batches = self._batches()
            statements = [self.instance.random_insert_statement(rows) for rows in batches]
            self.sessions.append(_Session(conn, statements, batches, [], []))
        return ids

    def close(self) -> None:
        for s in self.sessions:
            try:
                s.conn.close()
            except Exception:  # closing after a server failure must not hide the failure
                pass
        self.sessions = []

    def __enter__(self) -> "Driver":
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.close()

    def _work(self, session: _Session, go: threading.Barrier) -> None:
        # One cursor for the whole session: a new one per statement is measurable client overhead.
        execute = session.conn.cursor().execute
        clock = time.monotonic
        starts, ends = session.starts, session.ends
        try:
            go.wait()
            for sql, params in session.statements:
                if self._stop.is_set():
                    return
                starts.append(clock())
                execute(sql, params)
                ends.append(clock())
        except BaseException as exc:
            session.error = exc
            self._stop.set()

    def done_transactions(self) -> int:
        return sum(len(s.ends) for s in self.sessions)

    def run(self, on_progress: Callable[[int, int], None] | None = None) -> DriveResult:
        """Release every session at once and wait; progress is polled here, off the hot loop."""
        go = threading.Barrier(len(self.sessions) + 1)
        threads = [threading.Thread(target=self._work, args=(s, go), daemon=True, name="storlab-session")
                   for s in self.sessions]
        for t in threads:
            t.start()
        go.wait()
        total = sum(len(s.statements) for s in self.sessions)
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
                    if on_progress:
                        on_progress(self.done_transactions(), total)
        except BaseException:
            self._stop.set()
            for t in threads:
                t.join(10)
            raise
        failed = next((s.error for s in self.sessions if s.error is not None), None)
        if failed is not None:
            raise RunFailed(f"workload session failed: {str(failed).strip().splitlines()[0] if str(failed).strip() else type(failed).__name__}")
        return self._result()

    def _result(self) -> DriveResult:
        starts = np.concatenate([np.asarray(s.starts) for s in self.sessions])
        ends = np.concatenate([np.asarray(s.ends) for s in self.sessions])
        first = float(starts.min())
        rows = sum(sum(s.rows[: len(s.ends)]) for s in self.sessions)
        return DriveResult(
            elapsed_s=float(ends.max() - first),
            rows=rows,
            transactions=len(ends),
            latencies_s=ends - starts,
            commit_times_s=ends - first,
            start=first,
        )


def prepare(instance, kind: str) -> None:
    """Create what the workload needs before any probe starts."""
    if kind != "random-insert":
        raise ValueError(f"unknown workload {kind}")
    with instance.connect() as conn:
        for statement in instance.random_insert_setup():
            conn.execute(statement)
