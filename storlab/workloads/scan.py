"""scan (seed 002): a full scan of a heap of the seeds' wide rows, from cold.

The table (`table_mb` of seed 002's eleven-column rows, generated in the server) is built once per
cell, spread over the cell's data files and placements (the `data_on` ratio and `striping` apply),
vacuumed so no scan sets hint bits; then every repetition scans it cold: the server restarted (its
buffers empty), the table's files evicted from the OS page cache, then one
`SELECT count(col1), …, count(col11)` with `dop` parallel workers (PostgreSQL's
max_parallel_workers_per_gather; MariaDB runs a query on one thread). The repetitions of a cell share
the table and run one after another on its instance; `show` says so.

Figures: elapsed, MB/s (the table's bytes over the elapsed time), and the server's CPU time for the
query, its parallel workers included (seed 002's CPU time against elapsed time)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from pydantic import field_validator

from storlab import factors
from storlab.engines.base import Engine, Instance, Table
from storlab.workloads.inserts import MARIADB_LOOP, POSTGRES_LOOP, Loop
from storlab.workloads.kind import ELAPSED, Figure, Footprint, Measurement, Progress, UnitOfWork, Workload, WorkloadParams
from storlab.workloads.tables import WIDE_MARIADB, WIDE_POSTGRES, WIDE_VALUES
from storlab.session import Session

MAX_TABLE_MB = 1024 * 1024
MAX_DOP = 64
SCAN = "SELECT " + ", ".join(f"count(col{i})" for i in range(1, 12)) + " FROM lab_wide"
# Rows written by the insert procedure in transactions of this many, so the build's WAL is recycled.
BUILD_BATCH = 200_000
# The rows built first, then measured: how many bytes a row takes there decides how many make table_mb
# (InnoDB's dynamic rows took half what a fixed estimate said: 67 MB were built for a declared 150).
SAMPLE_ROWS = 20_000
SAMPLE_ESTIMATE = 200  # bytes a row, to size the sample's build only
# InnoDB's pages fill differently as a table grows: the rows still missing are measured again, until
# the table is within CLOSE_ENOUGH of its size (it never needed more than FILLS builds).
FILLS = 4
CLOSE_ENOUGH = 0.02


@dataclass(frozen=True)
class ScanSQL:
    """What the scan builds its table with on one engine."""

    loop: Loop
    table: Table
    # Inserts `take` rows numbered from `{offset}` on, batch after batch; `{batch}`: the rows a transaction.
    build: str
    freeze: str  # after the build: no scan then sets hint bits or reads stale statistics
    drop_loop: str


ENGINES = {
    # Row numbers go on from batch to batch: the loop's transaction number (PostgreSQL) or the rows it
    # has inserted so far (MariaDB).
    "postgres": ScanSQL(POSTGRES_LOOP, WIDE_POSTGRES,
                        "INSERT INTO lab_wide SELECT " + WIDE_VALUES.format(g="(g + (i - 1)::bigint * batch + {offset})")
                        + " FROM generate_series(1, take) AS g", "VACUUM (FREEZE, ANALYZE) lab_wide",
                        "DROP PROCEDURE lab_insert_loop"),
    "mariadb": ScanSQL(MARIADB_LOOP, WIDE_MARIADB,
                       "INSERT INTO lab_wide SELECT " + WIDE_VALUES.format(g="(seq + done + {offset})")
                       + " FROM seq_1_to_{batch} LIMIT take", "ANALYZE TABLE lab_wide", "DROP PROCEDURE lab_insert_loop"),
}


class ScanParams(WorkloadParams):
    kind: Literal["scan"]
    table_mb: int | list[int] = 256
    dop: int | list[int] | None = None

    @field_validator("table_mb", mode="before")
    @classmethod
    def _size(cls, v):
        return factors.factor(v, factors.at_most(MAX_TABLE_MB), "a number of MB")

    @field_validator("dop", mode="before")
    @classmethod
    def _dop(cls, v):
        if v is None:
            return v
        dop = factors.factor(v, factors.non_negative_int, "a number of parallel workers (0 for none)")
        if max(factors.values(dop)) > MAX_DOP:
            raise ValueError(f"{max(factors.values(dop))} is more than the limit of {MAX_DOP}")
        return dop

    def check_engine(self, engine: Engine) -> None:
        if not engine.parallel_query and self.dop is not None:
            raise factors.KeyProblem(("workload", "dop"), f"{engine.title} runs a query on one thread: dop is a "
                                     "query's parallel workers, for an engine that has them")


class ScanLoad:
    """One session, one cold scan."""

    def __init__(self, instance: Instance, dop: int):
        self.instance = instance
        self.dop = dop
        self.conn: Session | None = None

    def open(self) -> list[int]:
        self.conn = self.instance.connect()
        self.instance.parallel_workers(self.conn, self.dop)
        return [self.instance.session_id(self.conn)]

    def run(self, on_progress: Progress | None = None) -> Measurement:
        figures = {"workers_planned": float(self.instance.planned_workers(self.conn, SCAN))}
        cpu_before = self.instance.cpu_s()
        started = time.time()
        self.conn.cursor().execute(SCAN)
        elapsed = time.time() - started
        figures["cpu_s"] = self.instance.cpu_s() - cpu_before
        size_mb = self.instance.table_bytes(self.conn, "lab_wide") / 2**20
        figures.update(elapsed_s=elapsed, table_mb=size_mb, mb_per_s=size_mb / elapsed if elapsed > 0 else 0.0)
        if on_progress:
            on_progress(1, 1)
        return Measurement(elapsed, figures, [], started)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class Scan(Workload):
    name = "scan"
    unit_of_work = UnitOfWork("table_mb", "GB scanned", 1024)
    throughput = None
    answer_keys = frozenset()
    Params = ScanParams
    figures = (
        ELAPSED,
        Figure("mb_per_s", "MB/s", "MB/s", "higher"),
        Figure("cpu_s", "s", "CPU s", "lower"),
        Figure("workers_planned", "workers", "workers", shown=False),
        Figure("table_mb", "MB", "table MB", shown=False),
    )
    note = ("scan: each cell's table is built once; every repetition scans it cold (server restarted, the "
            "table's files evicted from the OS page cache), one after another on the same instance")
    cold = True
    prepared_once = True
    engines = ENGINES

    def footprint(self, engine: str, params: ScanParams) -> Footprint:
        size = params.table_mb * 2**20
        # The build's log (PostgreSQL's WAL, and its freeze's); an engine with a fixed-size log holds no more.
        return Footprint(data=size, log=size)

    def prepare(self, instance: Instance, params: ScanParams, files: dict[str, str]) -> None:
        sql = self.engines[instance.engine]
        target = params.table_mb * 2**20
        with instance.connect() as conn:
            instance.create_table(conn, sql.table)
            built, more = 0, min(SAMPLE_ROWS, max(1, target // SAMPLE_ESTIMATE))
            for _ in range(FILLS):
                if built:
                    conn.execute(sql.drop_loop)
                self._build(conn, instance, sql, built, more)
                built += more
                size = instance.table_bytes(conn, sql.table.name)
                if size >= (1 - CLOSE_ENOUGH) * target or size <= 0:
                    break
                more = max(1, round((target - size) * built / size))
            conn.execute(sql.freeze)

    def _build(self, conn: Session, instance: Instance, sql: ScanSQL, offset: int, rows: int) -> None:
        """`rows` rows numbered from `offset` + 1, by the insert procedure in the server."""
        batch = min(rows, BUILD_BATCH)
        conn.execute(sql.loop.create.replace("{insert}", sql.build.format(batch=batch, offset=offset)))
        instance.call_load(conn, sql.loop.call, (rows, batch))

    def load(self, instance: Instance, params: ScanParams, files: dict[str, str]) -> ScanLoad:
        return ScanLoad(instance, params.dop or 0)
