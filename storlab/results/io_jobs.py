"""What a device can do, as `storlab io` measured it: each fio job's IOPS, MiB/s and latencies, kept in
the store of its results folder with the machine's facts, for the report to draw beside the runs."""

from __future__ import annotations

import json
import time
from typing import Any

from storlab.results.damage import parsed
from storlab.results.dialects import Connection

_COLUMNS = ("id", "run_at", "target", "job", "rw", "block_size", "iodepth", "iops", "mb_s", "lat_p50_ms",
            "lat_p99_ms", "lat_p999_ms", "flags")


class IoJobs:
    """The store's part that keeps device capability (a part of storlab.results.store.Store)."""

    db: Connection
    where: str

    def record_io(self, results, target: str, facts: dict | None = None, comparable: dict | None = None) -> None:
        facts_id = self.record_facts(facts, comparable or facts) if facts is not None else None
        now = time.time()
        with self.transaction() as db:
            for result in results:
                row = result.as_row()
                db.execute(
                    """INSERT INTO io_jobs (run_at, target, job, rw, block_size, iodepth, iops, mb_s,
                           lat_p50_ms, lat_p99_ms, lat_p999_ms, flags, facts_id)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (now, target, row["job"], row["rw"], row["block_size"], row["iodepth"], row["iops"],
                     row["mb_s"], row["lat_p50_ms"], row["lat_p99_ms"], row["lat_p999_ms"],
                     json.dumps(row["flags"]), facts_id),
                )

    def io_jobs(self) -> list[dict[str, Any]]:
        """Each job as a row: its columns by name, its flags a list of text."""
        found = []
        for job_id, *row in self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM io_jobs ORDER BY id").fetchall():
            job = dict(zip(_COLUMNS[1:], row))
            job["flags"] = parsed(job["flags"], list[str], self.where, f"table io_jobs (id {job_id}): column flags")
            found.append(job)
        return found
