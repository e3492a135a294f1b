"""IO per file of the instance over a run (SQL Server's sys.dm_io_virtual_file_stats): reads, writes,
bytes, the time the server spent in them (the stall) and, where traced, a latency histogram per file.
Each engine measures its own files (PostgreSQL: trace points and syscalls through bpftrace, MariaDB:
performance_schema's file summaries); this module holds the record, a cell's mean per run, and the
table `storlab waits --files` prints."""

from __future__ import annotations

import json

from storlab.probes.kept import Db, Probe, histogram
from storlab.probes.waits import FileIO

# In a record's source, what it did not measure: its reads (a PostgreSQL record from before reads
# were counted by default, a file that is not a relation's), their times (PostgreSQL's reads counted
# by the server, timed with --trace-reads), its writes and syncs (PostgreSQL's, traced with --trace-io).
READS_UNTRACED = "reads not traced"
READS_UNTIMED = "reads untimed"
WRITES_UNTRACED = "writes not traced"


# What a file's record counted, each a group of its numbers: its reads, their times, its writes and syncs.
_MEASURES = (("reads", "read_bytes"), ("read_s",), ("writes", "write_bytes", "write_s", "syncs", "sync_s"))
_HISTOGRAMS = (None, "read_histogram", "write_histogram")


def measured(one: FileIO) -> tuple[bool, bool, bool]:
    """Whether the record counted its file's reads, timed them, and counted its writes and syncs."""
    counted = READS_UNTRACED not in one.source
    return counted, counted and READS_UNTIMED not in one.source, WRITES_UNTRACED not in one.source


def mean_per_run(runs: list[list[FileIO]]) -> list[FileIO]:
    """A cell's files: counts, bytes and times as the mean over its runs (a file a run did not touch
    counts 0 there), histograms summed over the runs. Files are matched by placement, object and name.
    Each group of numbers (_MEASURES) is the mean over the runs that measured it: a cell whose runs
    mixed tracing levels has its read times from the runs that timed them, never diluted by the
    others' zeros. A file's source is that of its most fully measured record."""
    if not runs:
        return []
    measuring = [0] * len(_MEASURES)
    found: dict[tuple[str, str, str], FileIO] = {}
    for run in runs:
        for i in range(len(_MEASURES)):
            measuring[i] += any(measured(one)[i] for one in run)
        for one in run:
            key = (one.placement, one.object, one.file)
            acc = found.setdefault(key, FileIO(one.file, one.object, one.placement, source=one.source,
                                               syncs=None if one.syncs is None else 0.0,
                                               sync_s=None if one.sync_s is None else 0.0))
            mine = measured(one)
            if sum(mine) > sum(measured(acc)):
                acc.source = one.source
            for counted, names, buckets in zip(mine, _MEASURES, _HISTOGRAMS):
                if not counted:
                    continue
                for name in names:
                    value = getattr(one, name)
                    if value is not None and getattr(acc, name) is not None:
                        setattr(acc, name, getattr(acc, name) + value)
                if buckets is not None:
                    merged = getattr(acc, buckets)
                    for bucket, count in getattr(one, buckets).items():
                        merged[bucket] = merged.get(bucket, 0) + count
    for acc in found.values():
        for runs_measuring, names in zip(measuring, _MEASURES):
            for name in names:
                if getattr(acc, name) is not None:
                    setattr(acc, name, getattr(acc, name) / max(runs_measuring, 1))
    return sorted(found.values(), key=lambda f: (-f.stall_s, -(f.read_bytes + f.write_bytes), f.placement, f.object,
                                                 f.file))


def percentile_bound(histogram: dict[int, int], q: float) -> float | None:
    """The upper bound (seconds) of the power-of-two bucket holding the q-th quantile, None when empty."""
    total = sum(histogram.values())
    if not total:
        return None
    running = 0
    for bucket in sorted(histogram):
        running += histogram[bucket]
        if running >= q * total:
            return max(2 * bucket, 1) / 1e9
    return None


def _write(db: Db, run_id: int, files: list[FileIO]) -> None:
    db.executemany(
        "INSERT INTO file_io (run_id, file, object, placement, reads, read_bytes, read_s, writes, write_bytes, "
        "write_s, syncs, sync_s, read_histogram, write_histogram, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(run_id, f.file, f.object, f.placement, f.reads, f.read_bytes, f.read_s, f.writes, f.write_bytes, f.write_s,
          f.syncs, f.sync_s, json.dumps(f.read_histogram), json.dumps(f.write_histogram), f.source) for f in files])


def _read(db: Db, run_id: int) -> list[FileIO]:
    return [FileIO(*row[:11], read_histogram=histogram(row[11]), write_histogram=histogram(row[12]), source=row[13])
            for row in db.execute(
                "SELECT file, object, placement, reads, read_bytes, read_s, writes, write_bytes, write_s, syncs, sync_s, "
                "read_histogram, write_histogram, source FROM file_io WHERE run_id = ? ORDER BY file", (run_id,))]



PROBE = Probe(
    "file_io",
    # The IO of each file of the instance in a run; histograms JSON, power-of-two buckets in ns.
    ("""
    CREATE TABLE file_io (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        file TEXT NOT NULL,
        object TEXT NOT NULL,
        placement TEXT NOT NULL,
        reads INTEGER NOT NULL,
        read_bytes INTEGER NOT NULL,
        read_s REAL NOT NULL,
        writes INTEGER NOT NULL,
        write_bytes INTEGER NOT NULL,
        write_s REAL NOT NULL,
        syncs INTEGER,
        sync_s REAL,
        read_histogram TEXT NOT NULL,
        write_histogram TEXT NOT NULL,
        source TEXT NOT NULL
    );
    CREATE INDEX file_io_run ON file_io(run_id);
    """,),
    _write, _read,
    from_capture=lambda capture: capture.files,
)
