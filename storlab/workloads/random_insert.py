"""random-insert (seeds 000 and 003): the seeds' rows under a random GUID key, so every insert lands
on a random page of the key's index: the load that shows allocation and page-latch contention."""

from __future__ import annotations

from typing import Literal

from storlab.workloads.inserts import MARIADB_LOOP, POSTGRES_LOOP, InsertParams, InsertSQL, InsertWorkload
from storlab.workloads.kind import Footprint
from storlab.workloads.tables import RANDOM_KEY_MARIADB, RANDOM_KEY_POSTGRES

# MariaDB's UUID() is version 1 (time-based) and the UUID type stores it in index order, so UUID()
# keys would append. 10.11 has no UUID_v4(): one from 16 random bytes, version and variant bits set.
RANDOM_UUID = "INSERT(INSERT(HEX(RANDOM_BYTES(16)), 13, 1, '4'), 17, 1, HEX(8 + FLOOR(RAND() * 4)))"


class RandomInsertParams(InsertParams):
    kind: Literal["random-insert"]


class RandomInsert(InsertWorkload):
    name = "random-insert"
    Params = RandomInsertParams
    # PostgreSQL heap and btree 222-226 bytes a row measured, WAL 210-294 (more full-page images as the
    # index grows); InnoDB clusters on the random key, so its pages split half full: 392-461.
    engines = {
        # Every column from its default (the key from gen_random_uuid()), the rows made in the server.
        "postgres": InsertSQL(POSTGRES_LOOP, RANDOM_KEY_POSTGRES, "INSERT INTO lab_insert SELECT FROM generate_series(1, take)",
                              Footprint(230, 300)),
        "mariadb": InsertSQL(MARIADB_LOOP, RANDOM_KEY_MARIADB,
                             "INSERT INTO lab_insert (c1) SELECT " + RANDOM_UUID + " FROM seq_1_to_{batch} LIMIT take",
                             Footprint(460, 0)),
    }
