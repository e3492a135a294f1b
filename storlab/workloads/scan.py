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
from typing import Any, Literal

from pydantic import field_validator

from storlab import factors
from storlab.engines.base import Engine, Instance, Table
from storlab.workloads.inserts import MARIADB_LOOP, POSTGRES_LOOP, Loop
from storlab.workloads.kind import ELAPSED, Figure, Footprint, Measurement, Progress, Workload, WorkloadParams, register
from storlab.workloads.tables import WIDE_MARIADB, WIDE_POSTGRES, WIDE_VALUES

MAX_TABLE_MB = 1024 * 1024
MAX_DOP = 64
SCAN = "SELECT " + ", ".join(f"count(col{i})" for i in range(1, 12)) + " FROM lab_wide"
# Rows written by the insert procedure in transactions of this many, so the build's WAL is recycled.
BUILD_BATCH = 200_000


@dataclass(frozen=True)
class ScanSQL:
    """What the scan builds its table with on one engine."""

    loop: Loop
    table: Table
    build: str  # inserts `take` rows numbered on from batch to batch; `{batch}`: the rows a transaction
    freeze: str  # after the build: no scan then sets hint bits or reads stale statistics
    row_bytes: int  # heap each wide row takes (measured): the rows to generate for `table_mb`


ENGINES = {
    # Row numbers go on from batch to batch: the loop's transaction number (PostgreSQL) or the rows it
    # has inserted so far (MariaDB). 157 bytes a row with PostgreSQL's tuple headers, 336 in InnoDB's
    # clustered pages.
    "postgres": ScanSQL(POSTGRES_LOOP, WIDE_POSTGRES,
                        "INSERT INTO lab_wide SELECT " + WIDE_VALUES.format(g="(g + (i - 1)::bigint * batch)")
                        + " FROM generate_series(1, take) AS g", "VACUUM (FREEZE, ANALYZE) lab_wide", 157),
    "mariadb": ScanSQL(MARIADB_LOOP, WIDE_MARIADB,
                       "INSERT INTO lab_wide SELECT " + WIDE_VALUES.format(g="(seq + done)")
                       + " FROM seq_1_to_{batch} LIMIT take", "ANALYZE TABLE lab_wide", 336),
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
        self.conn: Any = None

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


@register
class Scan(Workload):
    name = "scan"
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
        rows = params.table_mb * 2**20 // sql.row_bytes
        batch = min(rows, BUILD_BATCH)
        with instance.connect() as conn:
            instance.create_table(conn, sql.table)
            conn.execute(sql.loop.create.replace("{insert}", sql.build.format(batch=batch)))
            instance.call_load(conn, sql.loop.call, (rows, batch))
            conn.execute(sql.freeze)

    def load(self, instance: Instance, params: ScanParams, files: dict[str, str]) -> ScanLoad:
        return ScanLoad(instance, params.dop or 0)
