"""bulk-insert (seed 002's table population): one `INSERT … SELECT` of `rows` wide rows, generated in
the server, into a heap spread over the data files, timed in the server as one transaction.
PostgreSQL 15 plans an INSERT without parallel workers, and MariaDB runs a statement on one thread."""

from __future__ import annotations

from typing import Literal, Mapping

from pydantic import field_validator

from storlab import factors
from storlab.engines.base import Instance
from storlab.workloads.inserts import MARIADB_LOOP, POSTGRES_LOOP, InsertSQL, InsertWorkload
from storlab.workloads.kind import ELAPSED, Figure, Footprint, Load, Measurement, Progress, WorkloadParams
from storlab.workloads.tables import WIDE_MARIADB, WIDE_POSTGRES, WIDE_VALUES

# The procedure counts a transaction's rows in a 32-bit integer.
MAX_ROWS = 2**31 - 1


class BulkInsertParams(WorkloadParams):
    kind: Literal["bulk-insert"]
    rows: int | list[int] = 1_000_000

    @field_validator("rows", mode="before")
    @classmethod
    def _rows(cls, v):
        rows = factors.factor(v, factors.positive_int, "a positive integer")
        if max(factors.values(rows)) > MAX_ROWS:
            raise ValueError(f"at most {MAX_ROWS:,} rows in one statement")
        return rows


class _SizedLoad:
    """The insert, then the size of what it wrote: MB/s is the table's bytes over the elapsed time."""

    def __init__(self, instance: Instance, inner: Load, table: str):
        self.instance = instance
        self.inner = inner
        self.table = table

    def open(self) -> list[int]:
        return self.inner.open()

    def run(self, on_progress: Progress | None = None) -> Measurement:
        measured = self.inner.run(on_progress)
        with self.instance.connect() as conn:
            size = self.instance.table_bytes(conn, self.table)
        measured.figures["table_mb"] = size / 2**20
        measured.figures["mb_per_s"] = size / 2**20 / measured.elapsed_s if measured.elapsed_s > 0 else 0.0
        return measured

    def close(self) -> None:
        self.inner.close()


class BulkInsert(InsertWorkload):
    name = "bulk-insert"
    Params = BulkInsertParams
    figures = (
        ELAPSED,
        Figure("rows_per_s", "rows/s", "rows/s", "higher"),
        Figure("mb_per_s", "MB/s", "MB/s", "higher"),
        Figure("table_mb", "MB", "table MB", shown=False),
        Figure("rows", "rows", "rows", shown=False),
    )
    # Measured, 400,000 rows: PostgreSQL 157 bytes a row of heap, 168 of WAL; MariaDB 336 of datadir.
    engines = {
        "postgres": InsertSQL(POSTGRES_LOOP, WIDE_POSTGRES,
                              f"INSERT INTO lab_wide SELECT {WIDE_VALUES.format(g='g')} FROM generate_series(1, take) AS g",
                              Footprint(165, 180)),
        "mariadb": InsertSQL(MARIADB_LOOP, WIDE_MARIADB,
                             f"INSERT INTO lab_wide SELECT {WIDE_VALUES.format(g='seq')} FROM seq_1_to_{{batch}} LIMIT take",
                             Footprint(350, 0)),
    }

    def sessions(self, params: BulkInsertParams, files: Mapping[str, str] | None = None) -> int:
        return 1

    def rows(self, params: BulkInsertParams) -> int:
        return params.rows

    # One session, one transaction of every row: the insert loop run once.
    def prepare(self, instance: Instance, params: BulkInsertParams, files: dict[str, str]) -> None:
        self.create(instance, params.rows)

    def load(self, instance: Instance, params: BulkInsertParams, files: dict[str, str]) -> Load:
        return _SizedLoad(instance, self.insert_load(instance, 1, params.rows, params.rows, 0.0),
                          self.engines[instance.engine].table.name)
