"""What the seeds' insert workloads share: N sessions, each inserting `rows_per_connection` rows
generated in the server, `batch` rows per transaction, through one procedure per engine that loops
in the server with COMMIT inside its loop and records every transaction's start and commit.

A kind built on this brings, for each engine, its table, its INSERT statement and the bytes a row
writes (InsertSQL); the statement inserts `take` rows (a variable of the procedure) and, on MariaDB,
may read them from the Sequence engine's `seq_1_to_{batch}`. It may number its rows from the loop's
position: PostgreSQL's `i` (the transaction, from 1) and `batch`, MariaDB's `done` (the rows
inserted before this transaction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, Mapping

from pydantic import create_model, field_validator, model_validator

from storlab import factors, timeline
from storlab.engines.base import Instance, Table
from storlab.workloads.driver import TRANSACTION_LATENCY, ProcedureLoad, batches
from storlab.workloads.kind import (ELAPSED, Connections, Figure, Footprint, Load, UnitOfWork, Warmup, Workload,
                                    WorkloadParams)

# Limits that keep a run finite (docs/experiment-file.md, "Limits"). Transactions per run are bounded
# because each session records two times per transaction in the server (two arrays, or a MEMORY table) and the
# client then holds them all; the seeds' largest runs had 160,000 (seed 000).
MAX_ROWS_PER_CONNECTION = 10**9
MAX_BATCH = 10**6
MAX_TRANSACTIONS = 10**7

@dataclass(frozen=True)
class Loop:
    """A load procedure that loops in the server with COMMIT inside its loop: `create` makes it around
    an `{insert}` of `take` rows, `call` runs it for (total rows, rows a transaction)."""

    create: str
    call: str


POSTGRES_LOOP = Loop("""
CREATE PROCEDURE lab_insert_loop(total bigint, batch int,
                                 INOUT starts float8[] DEFAULT NULL, INOUT ends float8[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    n int := ceil(total::numeric / batch);
    take int;
BEGIN
    starts := array_fill(0::float8, ARRAY[n]);
    ends := array_fill(0::float8, ARRAY[n]);
    FOR i IN 1..n LOOP
        take := least(batch, total - (i - 1)::bigint * batch);
        starts[i] := date_part('epoch', clock_timestamp());
        {insert};
        COMMIT;
        ends[i] := date_part('epoch', clock_timestamp());
    END LOOP;
END $$""", "CALL lab_insert_loop(%s, %s)")

# NOW() inside a routine is the time its CALL began: SYSDATE(6) is the real time. The commit times go
# to a MEMORY temporary table (no IO, outside the transactions) and come back as the last result set.
MARIADB_LOOP = Loop("""
CREATE PROCEDURE lab_insert_loop(total BIGINT, batch INT)
BEGIN
    DECLARE done BIGINT DEFAULT 0;
    DECLARE take INT;
    DECLARE t0 DECIMAL(20,6);
    SET max_heap_table_size = 1073741824;
    DROP TEMPORARY TABLE IF EXISTS lab_commits;
    CREATE TEMPORARY TABLE lab_commits (started DECIMAL(20,6) NOT NULL, committed DECIMAL(20,6) NOT NULL) ENGINE=MEMORY;
    WHILE done < total DO
        SET take = LEAST(batch, total - done);
        SET t0 = UNIX_TIMESTAMP(SYSDATE(6));
        START TRANSACTION;
        {insert};
        COMMIT;
        INSERT INTO lab_commits VALUES (t0, UNIX_TIMESTAMP(SYSDATE(6)));
        SET done = done + take;
    END WHILE;
    SELECT started, committed FROM lab_commits;
    DROP TEMPORARY TABLE lab_commits;
END""", "CALL lab_insert_loop(%s, %s)")


@dataclass(frozen=True)
class InsertSQL:
    """What an insert kind runs on one engine."""

    loop: Loop
    table: Table
    insert: str  # inserts `take` rows; `{batch}`: the rows a transaction
    row_bytes: Footprint  # what each row writes (measured: `du` before and after)


def insert_sql(postgres: Table, postgres_row: Footprint, mariadb: Table, mariadb_insert: str,
               mariadb_row: Footprint) -> dict[str, InsertSQL]:
    """An insert kind's `engines`: its table on each engine and what a row writes there. On PostgreSQL
    every column comes from its default, the rows made in the server; on MariaDB `mariadb_insert` makes
    them from the Sequence engine."""
    return {"postgres": InsertSQL(POSTGRES_LOOP, postgres, "INSERT INTO lab_insert SELECT FROM generate_series(1, take)",
                                  postgres_row),
            "mariadb": InsertSQL(MARIADB_LOOP, mariadb, mariadb_insert, mariadb_row)}

INSERT_FIGURES = (
    ELAPSED,
    Figure("rows_per_s", "rows/s", "rows/s", "higher"),
    *TRANSACTION_LATENCY,
    Figure("transactions_per_s", "txn/s", "txn/s", "higher", shown=False),
    Figure("rows", "rows", "rows", shown=False),
    Figure("transactions", "txn", "transactions", shown=False),
)


class InsertParams(Warmup, WorkloadParams):
    connections: Connections = 16
    rows_per_connection: int | list[int] = 100_000
    batch: int | list[int] = 1000

    @field_validator("rows_per_connection", mode="before")
    @classmethod
    def _rows(cls, v):
        return factors.factor(v, factors.at_most(MAX_ROWS_PER_CONNECTION), "a positive integer")

    @field_validator("batch", mode="before")
    @classmethod
    def _batch(cls, v):
        return factors.factor(v, factors.at_most(MAX_BATCH), "a positive integer")

    @model_validator(mode="after")
    def _finite(self):
        most = max(factors.values(self.connections)) * math.ceil(
            max(factors.values(self.rows_per_connection)) / min(factors.values(self.batch)))
        if most > MAX_TRANSACTIONS:
            raise factors.KeyProblem(("workload", "batch"), f"up to {most:,} transactions in one run; the limit is "
                                     f"{MAX_TRANSACTIONS:,} (connections x rows_per_connection / batch)")
        return self


def params_of(kind: str) -> type[InsertParams]:
    """The `[workload]` keys of the insert kind named `kind`: InsertParams', with `kind` the value that picks
    it among every kind's (the experiment file's union of them)."""
    title = "".join(word.title() for word in kind.split("-"))
    return create_model(f"{title}Params", __base__=InsertParams, kind=(Literal[kind], ...))


class InsertWorkload(Workload):
    """Subclasses set `name`, `Params` (params_of(name)) and `engines`: what they run on each engine
    they support."""

    Params: ClassVar[type[WorkloadParams]] = InsertParams
    figures = INSERT_FIGURES
    engines: ClassVar[dict[str, InsertSQL]]
    unit_of_work = UnitOfWork("rows", "1,000 rows", 1000)
    throughput = timeline.ROWS_PER_S
    answer_keys = frozenset()

    def sessions(self, params: InsertParams, files: Mapping[str, str] | None = None) -> int:
        return params.connections

    def rows(self, params: InsertParams) -> int:
        return params.connections * params.rows_per_connection

    def footprint(self, engine: str, params: InsertParams) -> Footprint:
        per_row, rows = self.engines[engine].row_bytes, self.rows(params)
        return Footprint(data=rows * per_row.data, log=rows * per_row.log)

    def prepare(self, instance: Instance, params: InsertParams, files: dict[str, str]) -> None:
        self.create(instance, params.batch)

    def load(self, instance: Instance, params: InsertParams, files: dict[str, str]) -> Load:
        return self.insert_load(instance, params.connections, params.rows_per_connection, params.batch,
                                params.warmup_s or 0.0)

    def create(self, instance: Instance, batch: int) -> None:
        """The table, and the procedure that inserts into it `batch` rows a transaction."""
        sql = self.engines[instance.engine]
        with instance.connect() as conn:
            instance.create_table(conn, sql.table)
            conn.execute(sql.loop.create.replace("{insert}", sql.insert.format(batch=batch)))

    def insert_load(self, instance: Instance, connections: int, rows: int, batch: int, warmup_s: float) -> Load:
        """`connections` sessions, each calling the procedure once for `rows` rows."""
        call = self.engines[instance.engine].loop.call
        plan = batches(rows, batch)
        return ProcedureLoad(instance, [(call, (rows, batch), plan) for _ in range(connections)], warmup_s)
