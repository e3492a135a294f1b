"""The load that runs in the client: N sessions on N threads, each sending a transaction's
statements in turn, timing each transaction on the client. For loads that cannot be a procedure (a
user's own SQL); the seeds' loads run in the server (driver.py), where the client cannot become
the bottleneck."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from storlab.engines.base import Instance
from storlab.errors import RunFailed
from storlab.workloads.driver import PROGRESS_PERIOD_S, Transactions, measure, session_error
from storlab.workloads.kind import Measurement, Progress
from storlab.session import Session


@dataclass(frozen=True)
class Statement:
    sql: str
    where: str  # "txn.sql statement 2 (line 5)": named in any error it raises


@dataclass
class _Session:
    conn: Session
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    error: str | None = None


class StatementLoad:
    def __init__(self, instance: Instance, statements: list[Statement], transactions: int, connections: int,
                 warmup_s: float = 0.0):
        self.instance = instance
        self.warmup_s = warmup_s
        self.statements = statements
        self.transactions_per_session = transactions
        self.connections = connections
        self.sessions: list[_Session] = []
        self._stop = threading.Event()

    def open(self) -> list[int]:
        ids = []
        for _ in range(self.connections):
            conn = self.instance.connect()
            self.sessions.append(_Session(conn))
            ids.append(self.instance.session_id(conn))
        return ids

    def close(self) -> None:
        self._stop.set()
        for s in self.sessions:
            try:
                s.conn.close()
            except Exception:  # closing after a server failure must not hide the failure
                pass
        self.sessions = []

    def __enter__(self) -> "StatementLoad":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _work(self, session: _Session, go: threading.Barrier) -> None:
        execute = session.conn.cursor().execute
        clock = time.time  # epoch, the clock the server-side loads and the probes are placed by
        statement = None
        try:
            go.wait()
            for _ in range(self.transactions_per_session):
                if self._stop.is_set():
                    return
                session.starts.append(clock())
                execute("BEGIN")
                for statement in self.statements:
                    execute(statement.sql)
                execute("COMMIT")
                session.ends.append(clock())
        except BaseException as exc:
            session.error = f"{statement.where}: {session_error(exc)}" if statement else session_error(exc)
            self._stop.set()

    def run(self, on_progress: Progress | None = None) -> Measurement:
        go = threading.Barrier(len(self.sessions) + 1)
        threads = [threading.Thread(target=self._work, args=(s, go), daemon=True, name="storlab-session")
                   for s in self.sessions]
        for t in threads:
            t.start()
        go.wait()
        total = self.transactions_per_session * len(self.sessions)
        try:
            for t in threads:
                while t.is_alive():
                    t.join(PROGRESS_PERIOD_S)
                    if on_progress:
                        on_progress(sum(len(s.ends) for s in self.sessions), total)
        except BaseException:
            self._stop.set()
            for t in threads:
                t.join(10)
            raise
        failed = next((s.error for s in self.sessions if s.error is not None), None)
        if failed is not None:
            raise RunFailed(f"workload session failed: {failed}")
        starts = np.concatenate([np.asarray(s.starts[: len(s.ends)]) for s in self.sessions])
        ends = np.concatenate([np.asarray(s.ends) for s in self.sessions])
        spans = [(s.starts[0], s.ends[-1], s.starts[0], s.ends[-1]) for s in self.sessions if s.ends]
        return measure(Transactions(starts, ends, np.zeros(len(ends)), spans), rows=False, warmup_s=self.warmup_s)
