"""sysbench: its OLTP tests (Debian's sysbench 1.0.20), on PostgreSQL and MariaDB.

`test` (oltp_read_write, oltp_read_only, oltp_write_only, oltp_update_index, oltp_update_non_index,
oltp_point_select, oltp_insert, oltp_delete) over `tables` tables of `table_size` rows, `threads`
sessions, runs of `duration_s` after `warmup_s`; `rate` transactions a second (sysbench's Poisson
schedule: events wait in its queue, and an event's latency counts from when it was queued, so a slow
server cannot hide its queue), or "max" (closed loop).

Each run has a fresh instance whose tables `sysbench prepare` builds on one thread with its random
numbers seeded (sysbench 1.0.20 seeds them only for `run`: storlab's script seeds them for `prepare`,
then runs the test's own), so every build holds the same rows; then checkpointed before the run.

The figures are sysbench's own: transactions a second, errors and reconnects from its report; p50,
p95 and p99 from its latency histogram (`--histogram`: its single percentile is one bucket's value);
the per-second throughput and p99 from its intermediate reports. With `warmup_s`, its report
checkpoint at the end of the warm-up resets its counters and histogram, so the report at the end is
of the measured part. Beyond its rate, sysbench may stop with its queue full: the run is recorded as
not sustained, with the throughput and p99 of its last reports.
Under `duration_s = { max, until = "steady" }` its reports a second are read while it runs
(tool.SteadyWatch); once steady, storlab writes a file in the client's folder, each of its threads
ends at its next transaction without running it (the launcher's event() returns true, sysbench's own
way to end a thread), and sysbench prints its report and histogram as at the end of its -T: the
figures are of the measured part up to there, its length sysbench's own (transactions / their rate)."""

from __future__ import annotations

import math
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Literal, Mapping

from pydantic import field_validator, model_validator

from storlab import factors, timeline
from storlab.engines.base import ClientAddress, Instance
from storlab.errors import RunFailed, UserError
from storlab.lab.clients import ClientFolder
from storlab.workloads import rates
from storlab.workloads.kind import Connections, Figure, Footprint, Load, Measurement
from storlab.workloads.tool import STOP_S, ToolLoad, Ended, run_to_end, watch_of

TESTS = ("oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_update_index", "oltp_update_non_index",
         "oltp_point_select", "oltp_insert", "oltp_delete")
MAX_TABLES = 1024
MAX_TABLE_SIZE = 10**9
MAX_ROWS = 10**10
SEED = 1
PREPARE_ROWS_PER_S = 10_000  # generous: one thread inserts some 50,000 rows a second here

RECONNECTS = Figure("reconnects", "", "reconnects", shown=False)
QUEUE_FULL = Figure("queue_full", "", "queue full", shown=False)
FIGURES = (*rates.COMMON, RECONNECTS, QUEUE_FULL)

# Runs the test named by the environment, its random numbers seeded first when it prepares (once per
# Lua state: prepare runs on one thread, so the rows come out the same every time).
SCRIPT = """-- storlab: sysbench 1.0.20 seeds its random numbers only for `run`
if sysbench.cmdline.command == "prepare" then
   local ffi = require("ffi")
   ffi.cdef[[void srandom(unsigned int seed); void sb_rand_thread_init(void);]]
   ffi.C.srandom(tonumber(os.getenv("STORLAB_SEED")))
   ffi.C.sb_rand_thread_init()
end
dofile(os.getenv("STORLAB_TEST"))
"""
# Under until = "steady", after the test's script: once the stop file is there, each thread's next event
# returns true without running, which ends that thread's run (sysbench's thread_run); sysbench then
# reports as at the end of its run. One access() an event: a microsecond beside a transaction.
STOPS = """-- storlab: the run ends once steady
local stop = [==[{path}]==]
local ffi = require("ffi")
ffi.cdef[[int access(const char *path, int mode);]]
local event_of_test = event
function event(thread_id)
   if ffi.C.access(stop, 0) == 0 then
      return true
   end
   return event_of_test(thread_id)
end
"""

LAUNCHER = "storlab.lua"  # SCRIPT, in the client's folder
STOP = "stop"  # written beside it once the run is steady
# Once the stop file is written, the seconds its threads may take to end, a transaction each (a third of
# tool.STOP_S, past which the run fails: a Poisson schedule's gaps vary).
STOPS_WITHIN_S = STOP_S / 3

REPORT = re.compile(r"^\[ (\d+)s \] thds: \d+ tps: ([\d.]+) .* lat \(ms,\d+%\): ([\d.]+) err/s: ([\d.]+) reconn/s: ([\d.]+)")
HISTOGRAM = re.compile(r"^\s*([\d.]+) \|\**\s+(\d+)$")
FINAL = {
    "transactions": re.compile(r"^\s*transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)"),
    "errors": re.compile(r"^\s*ignored errors:\s+(\d+)"),
    "reconnects": re.compile(r"^\s*reconnects:\s+(\d+)"),
    "average": re.compile(r"^\s*avg:\s+([\d.]+)"),
}
QUEUE_IS_FULL = "The event queue is full"
ERRORS = re.compile(r"FATAL|ALERT|error", re.I)  # sysbench's lines that say what went wrong


@dataclass(frozen=True)
class SysbenchOn:
    """What sysbench needs of an engine: its driver's options to reach the instance, and what tells the
    instance which sessions are sysbench's (PostgreSQL: PGAPPNAME, by a tag)."""

    driver: Callable[[ClientAddress], list[str]]
    env: Callable[[str], dict[str, str]]
    row_bytes: Footprint  # a row of sbtest with its keys, and the log its insert writes


# Rows measured with 50,000-row tables, after prepare (an int key, an int, 120 and 60 characters):
# PostgreSQL 255 bytes and 328 of WAL a row, InnoDB 290 (its redo log is a fixed size: it holds no more).
ENGINES = {
    "postgres": SysbenchOn(lambda a: ["--db-driver=pgsql", f"--pgsql-host={a.socket}", f"--pgsql-port={a.port}",
                                      f"--pgsql-user={a.user}", f"--pgsql-db={a.database}"],
                           lambda tag: {"PGAPPNAME": tag}, Footprint(260, 330)),
    "mariadb": SysbenchOn(lambda a: ["--db-driver=mysql", f"--mysql-socket={a.socket}", f"--mysql-user={a.user}",
                                     f"--mysql-db={a.database}"],
                          lambda tag: {}, Footprint(300, 0)),
}


def program() -> Path:
    found = shutil.which("sysbench")
    if found is None:
        # Every run would fail alike: the user's to fix (UserError), said once.
        raise UserError("sysbench not found: install Debian's sysbench package (make demo does)")
    return Path(found)


def test_script(test: str) -> Path:
    """The test's Lua script, where the sysbench package keeps them."""
    return program().resolve().parent.parent / "share" / "sysbench" / f"{test}.lua"


class SysbenchParams(rates.RateParams):
    kind: Literal["sysbench"]
    figures: ClassVar[tuple[Figure, ...]] = FIGURES
    cannot_cut_found: ClassVar[str | None] = (
        "its percentiles come from one histogram of everything after a report checkpoint set before the run "
        "starts, and its reports a second give no histogram to recompute them from")
    test: str | list[str] = "oltp_read_write"
    tables: int | list[int] = 4
    table_size: int | list[int] = 10_000
    threads: Connections = 4

    @field_validator("test", mode="before")
    @classmethod
    def _test(cls, v):
        def one(value, what):
            if value not in TESTS:
                raise ValueError(f"unknown test {factors.show(value)} (sysbench's OLTP tests: {', '.join(TESTS)})")
            return value
        return factors.factor(v, one, "one of " + ", ".join(TESTS))

    @field_validator("tables", mode="before")
    @classmethod
    def _tables(cls, v):
        return factors.factor(v, factors.at_most(MAX_TABLES), "a positive integer")

    @field_validator("table_size", mode="before")
    @classmethod
    def _size(cls, v):
        found = factors.factor(v, factors.at_most(MAX_TABLE_SIZE), "a positive integer (rows a table)")
        return found

    @model_validator(mode="after")
    def _whole_rates(self):
        for rate in factors.values(self.rate):
            if rates.target(rate) is not None and rate != int(rate):
                raise factors.KeyProblem(("workload", "rate"), f"{rate:g}: sysbench takes whole transactions a second")
        if max(factors.values(self.tables)) * max(factors.values(self.table_size)) > MAX_ROWS:
            raise factors.KeyProblem(("workload", "table_size"), f"more than {MAX_ROWS:,} rows (tables x table_size)")
        return self

    @model_validator(mode="after")
    def _ends_soon_once_steady(self):
        # Once steady each thread ends at its next transaction: under a slow rate a thread waits for one.
        slowest = min((rates.target(rate) for rate in factors.values(self.rate) if rates.target(rate) is not None),
                      default=None)
        threads = max(factors.values(self.threads))
        if slowest is not None and any(rates.until(level) for level in factors.values(self.duration_s)) and \
                threads / slowest > STOPS_WITHIN_S:
            raise factors.KeyProblem(("workload", "rate"), f'{slowest:g} a second: under until = "{rates.STEADY}" each '
                                     f"of sysbench's {threads} threads ends at its next transaction, some "
                                     f"{threads / slowest:.0f} s for them all; give a rate of at least "
                                     f"{math.ceil(threads / STOPS_WITHIN_S)} or fewer threads")
        return self

    @property
    def rows(self) -> int:
        return self.tables * self.table_size


def percentiles(histogram: list[tuple[float, int]], wanted: tuple[float, ...]) -> list[float]:
    """Percentiles of sysbench's histogram, read as sysbench reads its own (the first bucket whose
    running count reaches the rank)."""
    total = sum(n for _, n in histogram)
    found = []
    for p in wanted:
        rank, running = math.floor(total * p / 100 + 0.5), 0
        value = histogram[-1][0]
        for bucket, n in histogram:
            running += n
            if running >= rank:
                value = bucket
                break
        found.append(value)
    return found


def _per_second(line: str) -> tuple[float, float] | None:
    found = REPORT.match(line)
    return (float(found.group(1)), float(found.group(2))) if found else None


def measurement_of(ended: Ended, params: SysbenchParams, server_cpu_s: float) -> Measurement:
    """The run's figures from what sysbench printed."""
    lines = ended.text
    full = any(QUEUE_IS_FULL in line for line in lines)
    if ended.code != 0 and not full:
        raise RunFailed(f"sysbench failed: {ended.last_words()}")
    reports = [(arrived, m) for arrived, line in ended.lines if (m := REPORT.match(line))]
    # The run's axis starts when sysbench's clock did: each report says how far into it it was made.
    start = min((arrived - int(m.group(1)) for arrived, m in reports), default=ended.lines[0][0] if ended.lines else 0.0)
    points = []
    for _, m in reports:
        t = float(m.group(1)) - 1
        points += [(t, timeline.TRANSACTIONS_PER_S.name, float(m.group(2))), (t, timeline.LATENCY_P99_MS.name, float(m.group(3)))]
    warmup = params.warmup_s or 0.0
    figures: dict[str, float] = {QUEUE_FULL.name: 1.0 if full else 0.0}
    if full:
        after = [m for _, m in reports if int(m.group(1)) > warmup]
        if not after:
            return Measurement(0.0, {**figures, **rates.rate_figures(params.target, 0.0, params.duration, False)},
                               points, start)
        tps = sum(float(m.group(2)) for m in after) / len(after)
        figures.update({rates.P99.name: float(after[-1].group(3)), rates.TPS.name: tps,
                        rates.ERRORS.name: sum(float(m.group(4)) for m in after),
                        RECONNECTS.name: sum(float(m.group(5)) for m in after)})
        elapsed = float(len(after))
    else:
        last = max(i for i, line in enumerate(lines) if line.startswith("SQL statistics:"))
        final = {}
        for line in lines[last:]:
            for name, pattern in FINAL.items():
                m = pattern.match(line)
                if m and name not in final:
                    final[name] = m
        histogram = [(float(m.group(1)), int(m.group(2))) for line in lines if (m := HISTOGRAM.match(line))]
        if "transactions" not in final or not histogram:
            raise RunFailed(f"sysbench printed no report: {ended.last_words()}")
        tps = float(final["transactions"].group(2))
        # Stopped once steady, it measured until its threads ended: its count over its rate is that time.
        stopped_early = ended.stopped_at is not None and tps > 0
        p50, p95, p99 = percentiles(histogram, (50, 95, 99))
        figures.update({rates.TPS.name: tps, rates.P50.name: p50, rates.P95.name: p95, rates.P99.name: p99,
                        rates.AVERAGE.name: float(final["average"].group(1)),
                        rates.TRANSACTIONS.name: float(final["transactions"].group(1)),
                        rates.ERRORS.name: float(final["errors"].group(1)),
                        RECONNECTS.name: float(final["reconnects"].group(1))})
        elapsed = float(final["transactions"].group(1)) / tps if stopped_early else params.duration
    figures.update({rates.ELAPSED.name: elapsed, **rates.rate_figures(params.target, tps, elapsed, not full),
                    **rates.cpu_figures(ended.cpu_s, server_cpu_s, ended.wall_s, params.threads)})
    return Measurement(elapsed, figures, points, start, stopped=ended.stopped)


def _options(engine: SysbenchOn, instance: Instance, params: SysbenchParams) -> list[str]:
    return [*engine.driver(instance.client_address()), f"--tables={params.tables}", f"--table-size={params.table_size}"]


def _write_launcher(folder: ClientFolder, stops: bool = False) -> None:
    folder.write(LAUNCHER, SCRIPT + (STOPS.replace("{path}", str(folder.path / STOP)) if stops else ""))


def _stop(folder: ClientFolder) -> None:
    """The run ended once steady: the file each of sysbench's threads looks for before its next transaction."""
    if not (folder.path / STOP).exists():
        folder.write(STOP, "")


def _env(test: str, tag: str, engine: SysbenchOn) -> dict[str, str]:
    return {"STORLAB_TEST": str(test_script(test)), "STORLAB_SEED": str(SEED), **engine.env(tag)}


class Sysbench(rates.RateWorkload):
    name = "sysbench"
    Params = SysbenchParams
    figures = FIGURES
    note = ("sysbench: each run has a fresh instance whose tables sysbench prepare rebuilds on one thread, its random "
            "numbers seeded (the same rows every time), checkpointed; figures as sysbench printed them, percentiles "
            "from its histogram, latency under a rate from when an event was queued; waits counted from when storlab "
            "finds sysbench's sessions, a fraction of a second after they connect")
    engines = ENGINES

    def sessions(self, params: SysbenchParams, files: Mapping[str, str] | None = None) -> int:
        return params.threads

    def footprint(self, engine: str, params: SysbenchParams) -> Footprint:
        per_row = self.engines[engine].row_bytes
        return Footprint(data=params.rows * per_row.data, log=params.rows * per_row.log)

    def prepare(self, instance: Instance, params: SysbenchParams, files: dict[str, str]) -> None:
        engine = self.engines[instance.engine]
        ended = run_to_end(instance, lambda folder: [str(program()), str(folder.path / LAUNCHER),
                                                     *_options(engine, instance, params), "--threads=1", "prepare"],
                           _env(params.test, "storlab-prepare", engine), 120 + params.rows / PREPARE_ROWS_PER_S, ERRORS,
                           _write_launcher)
        if ended.code != 0:
            raise RunFailed(f"sysbench prepare failed: {ended.last_words()}")

    def load(self, instance: Instance, params: SysbenchParams, files: dict[str, str]) -> Load:
        engine = self.engines[instance.engine]
        tag = f"storlab-sysbench-{secrets.token_hex(6)}"
        warmup = round(params.warmup_s or 0)
        run_s = warmup + params.duration
        extra = [f"--rate={params.target:.0f}"] if params.target is not None else []
        extra += [f"--report-checkpoints={warmup}"] if warmup else []

        def argv(folder: ClientFolder) -> list[str]:
            return [str(program()), str(folder.path / LAUNCHER), *_options(engine, instance, params),
                    f"--threads={params.threads}", f"--time={run_s:.0f}", "--report-interval=1", "--histogram=on",
                    "--percentile=99", *extra, "run"]

        watch = watch_of(params, _per_second)
        return ToolLoad(instance, argv, _env(params.test, tag, engine), tag, params.threads, run_s,
                        lambda ended, folder, cpu: measurement_of(ended, params, cpu),
                        lambda folder: _write_launcher(folder, stops=watch is not None), errors=ERRORS, watch=watch,
                        stop_by=_stop)
