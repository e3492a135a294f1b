"""The fleet's queue of runs, in a shared store's catalogue: one row per planned run (experiment, cell,
repetition, and the host that must run it, or any). A worker claims a row under a lease it renews:
the claim is one UPDATE of the first open row taken FOR UPDATE SKIP LOCKED, so workers never wait on
one another, and a row whose lease ran out (its worker died) is open again. The run is recorded and
its row closed in one transaction that first locks the row and checks the claim is still this
worker's (its token): a run is recorded once, by the worker that holds it. Lease times are the
store's clock (now()), so the hosts' clocks never need to agree.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from storlab import interrupts
from storlab.results.dialects import Connection

OPEN = ("queued", "claimed")

ENQUEUE = """
    INSERT INTO storlab.queue (experiment_id, cell_id, repetition, host, position) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (experiment_id, cell_id, repetition) DO NOTHING"""
REQUEUE_FAILED = """
    UPDATE storlab.queue SET state = 'queued', token = NULL, lease_until = NULL, updated_at = now()
    WHERE id = ANY(?) AND state = 'failed'"""
ROWS = "SELECT id, cell_id, repetition, state FROM storlab.queue WHERE experiment_id = ? ORDER BY id"
CLAIM = """
    UPDATE storlab.queue
    SET state = 'claimed', token = ?, worker = ?, attempts = attempts + 1,
        lease_until = now() + make_interval(secs => ?), updated_at = now()
    WHERE id = (
        SELECT id FROM storlab.queue
        WHERE state IN ('queued', 'claimed') AND (state = 'queued' OR lease_until < now())
          AND experiment_id = ANY(?) AND (host IS NULL OR host = ?) {cell}
        ORDER BY position, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED)
    RETURNING id, experiment_id, cell_id, repetition, attempts"""
RENEW = """
    UPDATE storlab.queue SET lease_until = now() + make_interval(secs => ?), updated_at = now()
    WHERE id = ? AND token = ? AND state = 'claimed'
    RETURNING id"""
HOLD = "SELECT state, token FROM storlab.queue WHERE id = ? FOR UPDATE"
DONE = """
    UPDATE storlab.queue SET state = 'done', run_id = ?, token = NULL, lease_until = NULL, updated_at = now()
    WHERE id = ?"""
FAILED = """
    UPDATE storlab.queue SET state = 'failed', token = NULL, lease_until = NULL, updated_at = now()
    WHERE id = ?"""
RELEASE = """
    UPDATE storlab.queue SET state = 'queued', token = NULL, lease_until = NULL, updated_at = now()
    WHERE id = ? AND token = ? AND state = 'claimed'"""
OUTSTANDING = """
    SELECT count(*) FROM storlab.queue
    WHERE state IN ('queued', 'claimed') AND experiment_id = ANY(?) AND (host IS NULL OR host = ?)"""
LOCK_EXPERIMENT = "SELECT id FROM storlab.experiments WHERE id = ? FOR UPDATE"


class LeaseLost(Exception):
    """The claim is no longer this worker's: its lease ran out and another worker may have the run."""


@dataclass(frozen=True)
class Claim:
    id: int
    experiment_id: int
    cell_id: str
    repetition: int
    attempts: int  # this claim included: more than 1 when an earlier holder lost it
    token: str


def enqueue(db: Connection, experiment_id: int, planned: list[tuple[str, int, str | None, int]]) -> None:
    """(cell id, repetition, host or None, position) for every planned run; rows already there stay."""
    db.executemany(ENQUEUE, [(experiment_id, *row) for row in planned])


@dataclass(frozen=True)
class Row:
    id: int
    cell_id: str
    repetition: int
    state: str


def rows(db: Connection, experiment_id: int) -> list[Row]:
    """Every row of the experiment's queue, as anyone who can submit may have written it."""
    return [Row(*row) for row in db.execute(ROWS, (experiment_id,)).fetchall()]


def requeue_failed(db: Connection, ids: list[int]) -> int:
    """Those of the rows `ids` that failed get another chance (as `storlab run` retries failed runs
    when run again); how many."""
    return db.execute(REQUEUE_FAILED, (ids,)).rowcount


def claim(db: Connection, experiments: list[int], host: str, worker: str, lease_s: float,
          cell: str | None = None) -> Claim | None:
    """The first open run of `experiments` that `host` may run, now this worker's for `lease_s`;
    with `cell`, only a run of that cell (the next repetition on the instance a worker keeps)."""
    token = secrets.token_hex(16)
    if cell is None:
        row = db.execute(CLAIM.format(cell=""), (token, worker, lease_s, experiments, host)).fetchone()
    else:
        row = db.execute(CLAIM.format(cell="AND cell_id = ?"), (token, worker, lease_s, experiments, host, cell)).fetchone()
    return None if row is None else Claim(*row, token)


def renew(db: Connection, claim: Claim, lease_s: float) -> bool:
    return db.execute(RENEW, (lease_s, claim.id, claim.token)).fetchone() is not None


@interrupts.owning
def holding(store, claim: Claim) -> Iterator[Connection]:
    """A transaction of `store` in which the claim is locked and known to be this worker's; raises
    LeaseLost (nothing written) when it is not."""
    with store.transaction() as db:
        row = db.execute(HOLD, (claim.id,)).fetchone()
        if row is None or row[0] != "claimed" or row[1] != claim.token:
            raise LeaseLost(f"run {claim.cell_id} #{claim.repetition}: the lease ran out and the run was taken back")
        yield db


def done(db: Connection, claim: Claim, run_id: int) -> None:
    db.execute(DONE, (run_id, claim.id))


def failed(db: Connection, claim: Claim) -> None:
    db.execute(FAILED, (claim.id,))


def release(db: Connection, claim: Claim) -> None:
    """Give a claim back at once (an interrupted worker), so the next worker need not wait for its lease."""
    db.execute(RELEASE, (claim.id, claim.token))


def outstanding(db: Connection, experiments: list[int], host: str) -> int:
    """Runs of `experiments` that `host` may run and that are not recorded yet (queued or claimed)."""
    return db.execute(OUTSTANDING, (experiments, host)).fetchone()[0]


def lock_experiment(db: Connection, experiment_id: int) -> None:
    """Until the transaction ends, no other worker gets past this for the same experiment."""
    db.execute(LOCK_EXPERIMENT, (experiment_id,))


class Lease:
    """Keeps a claim while its run goes: renewed every third of its length from a connection of its
    own. `lost` is set when the claim is refused (another worker took it) or when the store has been
    out of reach for a whole lease (another worker may have taken it)."""

    def __init__(self, connect: Callable[[], Connection], claim: Claim, lease_s: float):
        self.connect = connect
        self.claim = claim
        self.lease_s = lease_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._db: Connection | None = None
        self._thread = threading.Thread(target=self._keep, name="storlab-lease", daemon=True)

    def __enter__(self) -> "Lease":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self._db is not None:
            self._db.close()

    def give_up(self) -> None:
        """Renew no more (its run stalled, or passed its limit): the claim is released, failed or lapses."""
        self._stop.set()

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"run {self.claim.cell_id} #{self.claim.repetition}: the lease was lost")

    def _keep(self) -> None:
        renewed_at = time.monotonic()
        while not self._stop.wait(self.lease_s / 3):
            try:
                if self._db is None:
                    self._db = self.connect()
                if not renew(self._db, self.claim, self.lease_s):
                    self.lost.set()
                    return
                renewed_at = time.monotonic()
            except Exception:  # psycopg's errors, or the store refusing a new connection: out of reach
                if self._db is not None:
                    self._db.close()
                    self._db = None
                if time.monotonic() - renewed_at > self.lease_s:
                    self.lost.set()
                    return
