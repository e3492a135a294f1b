"""sequential-insert (seed 001's table population): the seeds' rows under an ever-increasing key
(PostgreSQL identity, MariaDB AUTO_INCREMENT), so every insert appends to the end of the index: the
load where the log, its size and its growth decide the time.

MariaDB instances run with innodb_autoinc_lock_mode = 2 (engines/mariadb/instance.py says why); declaring 1 in
engine_settings brings back the statement-long AUTO-INC lock, which serialises the sessions' inserts."""

from __future__ import annotations

from storlab.workloads.inserts import InsertWorkload, insert_sql, params_of
from storlab.workloads.kind import Footprint
from storlab.workloads.tables import SERIAL_KEY_MARIADB, SERIAL_KEY_POSTGRES

SequentialInsertParams = params_of("sequential-insert")


class SequentialInsert(InsertWorkload):
    name = "sequential-insert"
    Params = SequentialInsertParams
    # Measured, 4 x 100,000 rows: PostgreSQL 197 bytes a row of heap and index, 252 of WAL; MariaDB 409
    # of datadir (the clustered table, its undo).
    engines = insert_sql(SERIAL_KEY_POSTGRES, Footprint(210, 270), SERIAL_KEY_MARIADB,
                         "INSERT INTO lab_insert (c4) SELECT 1 FROM seq_1_to_{batch} LIMIT take", Footprint(420, 0))
