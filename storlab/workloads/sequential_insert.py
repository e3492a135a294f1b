"""sequential-insert (seed 001's table population): the seeds' rows under an ever-increasing key
(PostgreSQL identity, MariaDB AUTO_INCREMENT), so every insert appends to the end of the index: the
load where the log, its size and its growth decide the time.

MariaDB instances run with innodb_autoinc_lock_mode = 2 (engines/mariadb/instance.py says why); declaring 1 in
engine_settings brings back the statement-long AUTO-INC lock, which serialises the sessions' inserts."""

from __future__ import annotations

from typing import Literal

from storlab.workloads.inserts import InsertParams, InsertWorkload
from storlab.workloads.kind import Footprint, register
from storlab.workloads.tables import SERIAL_KEY


class SequentialInsertParams(InsertParams):
    kind: Literal["sequential-insert"]


@register
class SequentialInsert(InsertWorkload):
    name = "sequential-insert"
    Params = SequentialInsertParams
    tables = SERIAL_KEY
    # Measured, 4 x 100,000 rows: PostgreSQL 197 bytes a row of heap and index, 252 of WAL; MariaDB 409
    # of datadir (the clustered table, its undo).
    row_bytes = {"postgres": Footprint(210, 270), "mariadb": Footprint(420, 0)}
    statements = {
        "postgres": "INSERT INTO lab_insert SELECT FROM generate_series(1, take)",
        "mariadb": "INSERT INTO lab_insert (c4) SELECT 1 FROM seq_1_to_{batch} LIMIT take",
    }
