"""What PostgreSQL's cumulative statistics count for a run, read before and after it: the temporary
files of the workload's database (pg_stat_database) and the blocks each relation read
(pg_statio_all_tables and pg_statio_all_indexes: into shared buffers from the kernel, whether its
page cache held them or the device did; untimed). A session reports its counts at most once a
second while busy, up to ten seconds late once idle (PGSTAT_IDLE_INTERVAL) and whole as it exits, so
the reading after a run waits for its sessions to have exited."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

# The workload's sessions have exited within this, once their client let them go.
SESSIONS_END_S = 5.0
ROLE_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
THESE_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
TEMPORARY_FILES = "SELECT temp_files, temp_bytes FROM pg_stat_database WHERE datname = current_database()"
# Every relation with storage of the workload's database and the shared catalogs that read a block:
# a table's heap (its free space and visibility maps counted with it), each index, each TOAST table.
RELATION_READS = """
    SELECT pg_relation_filepath(c.oid), c.oid::regclass::text, c.reltablespace, s.blocks,
           current_setting('block_size')::int
    FROM (SELECT relid, heap_blks_read FROM pg_statio_all_tables
          UNION ALL SELECT indexrelid, idx_blks_read FROM pg_statio_all_indexes) AS s (oid, blocks)
    JOIN pg_class c ON c.oid = s.oid
    WHERE s.blocks > 0 AND pg_relation_filepath(c.oid) IS NOT NULL"""


def wait_for_exit(conn: Any, sessions_left: str, param: Any) -> None:
    """Until the sessions `sessions_left` counts (ROLE_SESSIONS, THESE_SESSIONS) have exited, at most
    SESSIONS_END_S: a session still there by then has its last second's counts left out."""
    deadline = time.monotonic() + SESSIONS_END_S
    while conn.execute(sessions_left, (param,)).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.02)


def temporary_files(conn: Any) -> dict[str, float]:
    """What the workload's database has sent to temporary files so far: the files and their MB."""
    files, written = conn.execute(TEMPORARY_FILES).fetchone()
    return {"temp_files": float(files), "temp_mb": written / 2**20}


@dataclass(frozen=True)
class RelationReads:
    """Each relation's blocks read so far, by its file (its path in the data directory, as
    pg_relation_filepath gives it): (relation, tablespace OID, blocks)."""

    blocks: dict[str, tuple[str, int, int]]
    block_size: int

    def since(self, before: RelationReads) -> dict[str, tuple[str, int, int]]:
        """The blocks each relation read between `before` and this reading, the relations that read any."""
        found = {}
        for path, (relation, tablespace, blocks) in self.blocks.items():
            read = blocks - before.blocks.get(path, ("", 0, 0))[2]
            if read > 0:
                found[path] = (relation, tablespace, read)
        return found


def relation_reads(conn: Any) -> RelationReads:
    rows = conn.execute(RELATION_READS).fetchall()
    return RelationReads({path: (relation, tablespace, blocks) for path, relation, tablespace, blocks, _ in rows},
                         rows[0][4] if rows else 0)  # no rows: nothing to multiply
