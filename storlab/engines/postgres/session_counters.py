"""What PostgreSQL's cumulative statistics count for a run, read before and after it: the temporary
files of the workload's database (pg_stat_database) and the blocks each relation read
(pg_statio_all_tables and pg_statio_all_indexes: into shared buffers from the kernel, whether its
page cache held them or the device did; untimed). A session reports its counts at most once a
second while busy, up to ten seconds late once idle (PGSTAT_IDLE_INTERVAL) and whole as it exits, so
the reading after a run waits for its sessions to have exited.

PostgreSQL 15 counts a block added to a relation as read (ReadBufferExtended with P_NEW counts it
fetched, not found): 200,000 rows inserted into a table and its index added 6,061 and 550 blocks and
counted 6,064 and 551 reads, where PostgreSQL 18 counted 0 and 1. So a server before 16 has the
blocks its relations' main forks grew by taken off their reads (the free space and visibility maps
are extended without it, then read for real)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from storlab.session import Session

# The workload's sessions have exited within this, once their client let them go.
SESSIONS_END_S = 5.0
ROLE_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
THESE_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
TEMPORARY_FILES = "SELECT temp_files, temp_bytes FROM pg_stat_database WHERE datname = current_database()"
# Every relation with storage of the workload's database and the shared catalogs: a table's heap (its
# free space and visibility maps counted with it), each index, each TOAST table; the blocks it read so
# far and its main fork's size in blocks.
RELATION_READS = """
    SELECT pg_relation_filepath(c.oid), c.oid::regclass::text, c.reltablespace, s.blocks,
           pg_relation_size(c.oid) / current_setting('block_size')::int
    FROM (SELECT relid, heap_blks_read FROM pg_statio_all_tables
          UNION ALL SELECT indexrelid, idx_blks_read FROM pg_statio_all_indexes) AS s (oid, blocks)
    JOIN pg_class c ON c.oid = s.oid
    WHERE pg_relation_filepath(c.oid) IS NOT NULL"""
SERVER = "SELECT current_setting('block_size')::int, current_setting('server_version_num')::int < 160000"


def wait_for_exit(conn: Session, sessions_left: str, param: Any) -> None:
    """Until the sessions `sessions_left` counts (ROLE_SESSIONS, THESE_SESSIONS) have exited, at most
    SESSIONS_END_S: a session still there by then has its last second's counts left out."""
    deadline = time.monotonic() + SESSIONS_END_S
    while conn.execute(sessions_left, (param,)).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.02)


def temporary_files(conn: Session) -> dict[str, float]:
    """What the workload's database has sent to temporary files so far: the files and their MB."""
    files, written = conn.execute(TEMPORARY_FILES).fetchone()
    return {"temp_files": float(files), "temp_mb": written / 2**20}


@dataclass(frozen=True)
class RelationReads:
    """Each relation by its file (its path in the data directory, as pg_relation_filepath gives it):
    (relation, tablespace OID, blocks read so far, its main fork's blocks now)."""

    relations: dict[str, tuple[str, int, int, int]]
    block_size: int
    counts_extends: bool  # the server counts a block added to a relation as read (before PostgreSQL 16)

    def since(self, before: RelationReads) -> dict[str, tuple[str, int, int]]:
        """The blocks each relation read between `before` and this reading, the relations that read
        any: (relation, tablespace OID, blocks)."""
        found = {}
        for path, (relation, tablespace, blocks, size) in self.relations.items():
            _, _, blocks_before, size_before = before.relations.get(path, ("", 0, 0, 0))
            added = max(size - size_before, 0) if self.counts_extends else 0
            read = blocks - blocks_before - added
            if read > 0:
                found[path] = (relation, tablespace, read)
        return found


def relation_reads(conn: Session) -> RelationReads:
    block_size, counts_extends = conn.execute(SERVER).fetchone()
    return RelationReads({path: (relation, tablespace, blocks, size)
                          for path, relation, tablespace, blocks, size in conn.execute(RELATION_READS).fetchall()},
                         block_size, counts_extends)
