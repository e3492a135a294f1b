"""The checkpoints inside a run, read once a second on storlab's own session, and what paces them
(checkpoint_timeout; innodb_log_file_size). A run shorter than its engine's checkpoint cycle measures a
system without its checkpoint's writes (and, for PostgreSQL, without the full-page images after one):
the answer says so (answer/steadiness.py).

- PostgreSQL: its checkpoints done (pg_stat_checkpointer from 17, pg_stat_bgwriter before) count one
  when it ends, a spread checkpoint most of a cycle after it started; so a checkpoint is placed at the
  first second its checkpointer is seen out of its idle wait, or, one too short to be seen so, at the
  second the counter moved. One still being written when the run ends is inside it, and counted.
- MariaDB: InnoDB has no count of checkpoints; its last checkpoint LSN (Innodb_lsn_last_checkpoint)
  moves each time one is made: each second it moved in is a checkpoint.

One short query a second, on a session of its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from storlab import timeline
from storlab.errors import RunFailed
from storlab.probes.kept import Db, Probe, RunScope
from storlab.probes.recorders import TimelinePoint
from storlab.probes.target import Probed
from storlab.sampler import Sampler
from storlab.session import Session

PERIOD_S = 1.0


@dataclass
class Checkpoints:
    """What one run recorded: the counter at its start and end, the seconds (from the samplers' t0) a
    checkpoint was seen at, and what paces the engine's checkpoints."""

    counter_before: float
    counter_after: float
    setting: str  # checkpoint_timeout, innodb_log_file_size
    value: str  # as the server shows it
    cycle_s: float | None  # the setting in seconds, where it is a time
    cycle_bytes: float | None  # in bytes of log, where it is a size
    log_before: float  # the WAL or redo written so far (its LSN)
    log_after: float
    seen: list[float] = field(default_factory=list)  # seconds from t0

    @property
    def counted(self) -> int:
        return len(self.seen)


class _Recording:
    def __init__(self, instance: Probed):
        self.instance = instance
        self.conn: Session | None = None
        self.found: Checkpoints | None = None
        self.sampler = Sampler(PERIOD_S, self._record)
        self.elapsed = 0.0
        self.writing = False  # a checkpoint seen being written, not yet counted done

    def start(self, sessions: list[int], t0: float) -> None:
        self.conn = self.instance.admin()
        setting, value, cycle_s, cycle_bytes = self.instance.checkpoint_cycle(self.conn)
        count, self.writing = self.instance.checkpoint_reading(self.conn)
        log = self.instance.log_written(self.conn)
        self.found = Checkpoints(count, count, setting, value, cycle_s, cycle_bytes, log, log,
                                 [0.0] if self.writing else [])
        self.sampler.start()

    def _record(self, weight_s: float) -> None:
        self.elapsed += weight_s
        count, writing = self.instance.checkpoint_reading(self.conn)
        done = count != self.found.counter_after
        if not self.writing and (writing or done):  # begun; or begun and done between two readings
            self.found.seen.append(self.elapsed)
        self.writing = writing
        self.found.counter_after = count

    def stop(self) -> Checkpoints:
        self.sampler.stop()
        try:
            if self.sampler.error is not None:
                raise RunFailed(f"checkpoint counter failed: {self.sampler.error}")
            self._record(0.0)
            self.found.log_after = self.instance.log_written(self.conn)
        finally:
            self.conn.close()
        return self.found


def _recording(run: RunScope) -> _Recording:
    return _Recording(run.instance)


def points(found: Checkpoints) -> list[TimelinePoint]:
    return [TimelinePoint(t, timeline.CHECKPOINT_SEEN.name, 1.0) for t in found.seen]


def _write(db: Db, run_id: int, found: Checkpoints) -> None:
    db.execute("INSERT INTO checkpoints (run_id, counter_before, counter_after, counted, setting, value, cycle_s, "
               "cycle_bytes, log_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (run_id, found.counter_before, found.counter_after, found.counted, found.setting, found.value, found.cycle_s,
                found.cycle_bytes, found.log_after - found.log_before))


@dataclass(frozen=True)
class Kept:
    """A run's checkpoints as the store keeps them (their times are on the run's timeline)."""

    counted: int
    setting: str
    value: str
    cycle_s: float | None
    cycle_bytes: float | None
    log_bytes: float  # the WAL or redo the whole run wrote (its warm-up included)


def _read(db: Db, run_id: int) -> Kept | None:
    row = db.execute("SELECT counted, setting, value, cycle_s, cycle_bytes, log_bytes FROM checkpoints WHERE run_id = ?",
                     (run_id,)).fetchone()
    return None if row is None else Kept(int(row[0]), row[1], row[2], row[3], row[4], float(row[5]))


PROBE = Probe(
    "checkpoints",
    ("""
    CREATE TABLE checkpoints (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        counter_before REAL NOT NULL,
        counter_after REAL NOT NULL,
        counted INTEGER NOT NULL,
        setting TEXT NOT NULL,
        value TEXT NOT NULL,
        cycle_s REAL,
        cycle_bytes REAL,
        log_bytes REAL NOT NULL
    );
    CREATE INDEX checkpoints_run ON checkpoints(run_id);
    """,),
    _write, _read, recorder=_recording, timeline=points,
)
