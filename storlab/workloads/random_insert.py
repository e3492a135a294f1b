"""random-insert (seeds 000 and 003): the seeds' rows under a random GUID key, so every insert lands
on a random page of the key's index: the load that shows allocation and page-latch contention."""

from __future__ import annotations

from storlab.workloads.inserts import InsertWorkload, insert_sql, params_of
from storlab.workloads.kind import Footprint
from storlab.workloads.tables import RANDOM_KEY_MARIADB, RANDOM_KEY_POSTGRES

# MariaDB's UUID() is version 1 (time-based) and the UUID type stores it in index order, so UUID()
# keys would append. 10.11 has no UUID_v4(): one from 16 random bytes, version and variant bits set.
RANDOM_UUID = "INSERT(INSERT(HEX(RANDOM_BYTES(16)), 13, 1, '4'), 17, 1, HEX(8 + FLOOR(RAND() * 4)))"

RandomInsertParams = params_of("random-insert")


class RandomInsert(InsertWorkload):
    name = "random-insert"
    Params = RandomInsertParams
    # PostgreSQL heap and btree 222-226 bytes a row measured, WAL 210-294 (more full-page images as the
    # index grows); InnoDB clusters on the random key, so its pages split half full: 392-461. The key
    # from gen_random_uuid() on PostgreSQL, a version 4 UUID on MariaDB.
    engines = insert_sql(RANDOM_KEY_POSTGRES, Footprint(230, 300), RANDOM_KEY_MARIADB,
                         "INSERT INTO lab_insert (c1) SELECT " + RANDOM_UUID + " FROM seq_1_to_{batch} LIMIT take",
                         Footprint(460, 0))
