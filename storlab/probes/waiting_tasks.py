"""Who waits on what: the seeds' sys.dm_os_waiting_tasks, sampled through a run and summed. Each engine
reads its waiting sessions (wait and resource, SQL in its adapter); this module samples them with the
probes' Sampler and sums each (wait, resource) by the time its samples cover, and shares out a cell's
top waits among their resources for `storlab waits --resources` and the report."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from storlab.errors import RunFailed
from storlab.probes.kept import Adapted, Db, Probe
from storlab.sampler import Sampler
from storlab.probes.target import WaitingSessions
from storlab.probes.waits import WaitingTask, WaitRow

# A reading on PostgreSQL reads pg_locks, which takes every lock-manager partition's lock: at 10 a
# second it cost 16 sessions extending relations 8 % of their throughput (benchmarks/probe_overhead.py,
# median of 5 rounds). At 20 a second (waiting_tasks:x10) it now takes 1.0 % [0.2, 1.9] of a 2-core
# machine's CPU beside the sessions, 1.4 % [0.0, 2.8] on MariaDB: every half second, a tenth of that.
PERIOD_S = 0.5
# Resources listed under one wait, the rest summed in one row: partitions can be many.
MAX_RESOURCES = 8


class WaitingTasksSampler:
    """Reads the waiting sessions every `period_s` and adds each sample's weight (the time since the
    previous one) to its (wait, resource)."""

    def __init__(self, reader: WaitingSessions, period_s: float = PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None):
        self.reader = reader
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.samples: dict[tuple[str, str], int] = defaultdict(int)
        self._lock = threading.Lock()
        self.sampler = Sampler(period_s, self.record, clock=clock, wait=wait)

    def record(self, weight_s: float) -> None:
        seen = self.reader.read()
        with self._lock:
            for key in seen:
                self.seconds[key] += weight_s
                self.samples[key] += 1

    def start(self, sessions: list[int]) -> None:
        self.reader.open(sessions)
        self.sampler.start()

    def stop(self) -> list[WaitingTask]:
        try:
            self.sampler.stop()
        finally:
            self.reader.close()
        if self.sampler.error is not None:
            raise RunFailed(f"waiting-task sampler failed: {self.sampler.error}")
        return self.tasks()

    def tasks(self) -> list[WaitingTask]:
        with self._lock:
            return [WaitingTask(w, r, s, self.samples[(w, r)])
                    for (w, r), s in sorted(self.seconds.items(), key=lambda kv: (-kv[1], kv[0]))]


@dataclass
class ResourceShare:
    resource: str  # "" when the engine does not name it
    seconds: float  # per run
    share: float  # % of the wait's sampled time
    samples: int  # over all runs
    others: int = 0  # > 0: this row sums that many resources beyond MAX_RESOURCES


@dataclass
class WaitResources:
    wait_type: str
    resources: list[ResourceShare]  # empty: the sampler never caught a session in this wait


def mean_per_run(runs: list[list[WaitingTask]]) -> list[WaitingTask]:
    """A cell's waiting tasks: seconds as the mean over its runs, samples as the total."""
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    samples: dict[tuple[str, str], int] = defaultdict(int)
    for run in runs:
        for t in run:
            seconds[(t.wait_type, t.resource)] += t.seconds
            samples[(t.wait_type, t.resource)] += t.samples
    n = max(len(runs), 1)
    return [WaitingTask(w, r, s / n, samples[(w, r)]) for (w, r), s in seconds.items()]


def resources_of(top: list[WaitRow], tasks: list[WaitingTask], limit: int = MAX_RESOURCES) -> list[WaitResources]:
    """For each top wait (in the wait table's order), the resources its sampled time was spent on,
    largest first, each with its share of that wait."""
    by_wait: dict[str, list[WaitingTask]] = defaultdict(list)
    for t in tasks:
        by_wait[t.wait_type].append(t)
    out = []
    for row in top:
        found = sorted(by_wait.get(row.wait_type, []), key=lambda t: (-t.seconds, t.resource))
        total = sum(t.seconds for t in found)
        shares = [ResourceShare(t.resource, t.seconds, 100.0 * t.seconds / total, t.samples)
                  for t in found if total > 0]
        if len(shares) > limit:
            rest = shares[limit - 1:]
            shares = shares[:limit - 1] + [ResourceShare("", sum(r.seconds for r in rest), sum(r.share for r in rest),
                                                         sum(r.samples for r in rest), others=len(rest))]
        out.append(WaitResources(row.wait_type, shares))
    return out


def resource_label(share: ResourceShare) -> str:
    if share.others:
        return f"{share.others} others"
    return share.resource or "— (not named)"


def _recording(sampler: WaitingTasksSampler) -> Adapted:
    return Adapted(lambda sessions, t0: sampler.start(sessions), sampler.stop)


def _write(db: Db, run_id: int, tasks: list[WaitingTask]) -> None:
    db.executemany("INSERT INTO waiting_tasks (run_id, wait_type, resource, seconds, samples) VALUES (?, ?, ?, ?, ?)",
                   [(run_id, t.wait_type, t.resource, t.seconds, t.samples) for t in tasks])


def _read(db: Db, run_id: int) -> list[WaitingTask]:
    return [WaitingTask(*row) for row in db.execute(
        "SELECT wait_type, resource, seconds, samples FROM waiting_tasks WHERE run_id = ? "
        "ORDER BY seconds DESC, wait_type, resource", (run_id,))]


PROBE = Probe(
    "waiting_tasks",
    # Each run's waiting tasks: a wait and the resource the engine names ('' when it names none),
    # summed over the run's samples.
    ("""
    CREATE TABLE waiting_tasks (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        wait_type TEXT NOT NULL,
        resource TEXT NOT NULL,
        seconds REAL NOT NULL,
        samples INTEGER NOT NULL,
        PRIMARY KEY (run_id, wait_type, resource)
    );
    """,),
    _write, _read,
    recorder=lambda run: _recording(WaitingTasksSampler(run.instance.waiting_tasks_probe())),
)
