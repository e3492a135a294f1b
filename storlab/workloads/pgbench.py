"""pgbench: PostgreSQL's own load generator, on PostgreSQL 15 and 18 (the pgbench of the cell's server).

Its built-in scripts (`tpcb-like`, `simple-update`, `select-only`) or the user's script files, alone
or weighted (`script = { "new_order.sql" = 3, "tpcb-like" = 1 }`); `clients` sessions on `jobs`
threads, `protocol` (simple, extended, prepared); runs of `duration_s` (after `warmup_s`) or of
`transactions` per client; `rate` transactions a second on pgbench's Poisson schedule (open loop: a
slow server does not slow the schedule, and each latency counts from the transaction's scheduled
start, so the queue shows), or "max" (closed loop); `latency_limit_ms` (under a rate, transactions
already that late when due are skipped; every one over it is counted late).

Each run has a fresh instance whose data set `pgbench -i` builds at `scale` (its rows generated in the
server, so every build holds the same rows), vacuumed, then checkpointed before the run: every
repetition starts from the same data.

The figures are pgbench's own: transactions a second, the average latency, the schedule lag and the
counts of failed, skipped and late transactions as it prints them; the percentiles and the
per-second timeline from its per-transaction log (`--log`: its aggregate log has no percentiles),
streamed (pgbench_log.py: the run's percentiles within 0.5 %, storlab's memory the same however long
the run).
With `warmup_s`, the run lasts warmup_s + duration_s and every figure comes from the log, of the
transactions scheduled after the warm-up, per second of duration_s. With `warmup_s = "found"`, the
warm-up MSER-5 finds in the log's per-second throughput once the run has ended is cut the same way.
Under `duration_s = { max, until = "steady" }` pgbench prints its throughput each second (-P 1), read
while it runs (tool.SteadyWatch); once steady its sessions' statements are cancelled, it ends its
clients and writes its logs whole, and the figures are the log's up to the moment the rule held."""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, ClassVar, Literal, Mapping

from pydantic import field_validator, model_validator

from storlab import engines, factors, timeline
from storlab.engines.base import Instance
from storlab.errors import RunFailed, UserError
from storlab.lab.clients import ClientFolder
from storlab.workloads import pgbench_log, rates
from storlab.workloads.kind import (MAX_CONNECTIONS, ClientProgram, Connections, Figure, Footprint, Load, Measurement,
                                    found_cut)
from storlab.workloads.tool import ToolLoad, Ended, run_to_end, watch_of

BUILTIN = ("tpcb-like", "simple-update", "select-only")
PROTOCOLS = ("simple", "extended", "prepared")
MAX_SCALE = 100_000  # 1.5 TB of pgbench_accounts
MAX_WEIGHT = 1000
MAX_TRANSACTIONS = 10**7  # per run: each is a line of the per-transaction log (about 40 bytes on /tmp)
MAX_LATENCY_LIMIT_MS = 3_600_000
# pgbench opens a session of its own first (the server's version, its tables), under its clients'
# application name, and closes it before they connect: a session seen then and gone this much later
# was that one (with one client it alone looked like the load).
OWN_SESSION_S = 0.1
# pgbench -i: drop, create the tables, generate the rows in the server, vacuum, primary keys.
INIT_STEPS = "dtGvp"
INIT_S_PER_SCALE = 10.0  # generous: a scale unit (100,000 accounts) builds in well under a second here
# Measured (scale 10): a scale unit holds 15 MB of tables and keys, and its build writes 16.6 MB of WAL.
PER_SCALE = Footprint(15 * 2**20, 17 * 2**20)

SCHEDULE_LAG = Figure("schedule_lag_ms", "ms", "lag ms", "lower", shown=False)
SCHEDULE_LAG_MAX = Figure("schedule_lag_max_ms", "ms", "max lag ms", "lower", shown=False)
SKIPPED = Figure("skipped", "txn", "skipped", shown=False)
LATE = Figure("late", "txn", "late", shown=False)
FIGURES = (*rates.COMMON, SCHEDULE_LAG, SCHEDULE_LAG_MAX, SKIPPED, LATE)

SUMMARY = {
    "processed": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "skipped": re.compile(r"^number of transactions skipped: (\d+)", re.M),
    "late": re.compile(r"^number of transactions above the [\d.]+ ms latency limit: (\d+)/", re.M),
    "latency_avg": re.compile(r"^latency average = ([\d.]+) ms", re.M),
    "lag": re.compile(r"^rate limit schedule lag: avg ([\d.]+) \(max ([\d.]+)\) ms", re.M),
    "tps": re.compile(r"^tps = ([\d.]+) \(without initial connection time\)", re.M),
}
LOG_PREFIX = "txn"  # its per-transaction log's files, in the client's folder: txn.<pid>[.<thread>]


@dataclass(frozen=True)
class PgbenchOn:
    """What pgbench needs of an engine: the pgbench shipped with the cell's server, by its version
    (SHOW server_version)."""

    program: Callable[[str], Path]


ENGINES = {"postgres": PgbenchOn(lambda version: engines.engine("postgres").client_program("pgbench", version))}


def _script(v: Any, what: str) -> str | dict[str, int]:
    """A built-in script's name, a script file's, or a table of them with weights."""
    names = {v: 1} if isinstance(v, str) else v
    if not isinstance(names, dict) or not names:
        raise ValueError(f"expected {what} or a list of them, got {factors.show(v)}")
    for name, weight in names.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"expected {what} or a list of them, got {factors.show(v)}")
        if name not in BUILTIN and "." not in Path(name).name:
            raise ValueError(f"unknown script {factors.show(name)}: pgbench's built-in scripts are "
                             f"{', '.join(BUILTIN)}; a script file's name has a suffix, such as .sql")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise ValueError(f"the weight of {factors.show(name)} must be an integer from 1 to {MAX_WEIGHT}, "
                             f"got {factors.show(weight)}")
    return v


def _files(script: str | dict[str, int]) -> list[str]:
    return [name for name in ({script: 1} if isinstance(script, str) else script) if name not in BUILTIN]


class PgbenchParams(rates.RateParams):
    kind: Literal["pgbench"]
    figures: ClassVar[tuple[Figure, ...]] = FIGURES
    cannot_cut_found: ClassVar[str | None] = None  # its log holds every transaction: any second can start the figures
    script: str | dict[str, int] | list[str | dict[str, int]] = "tpcb-like"
    scale: int | list[int] = 1
    clients: Connections = 4
    jobs: int | list[int] | None = None  # pgbench's threads; by default one per client, up to the cores
    protocol: str | list[str] = "simple"
    transactions: int | list[int] | None = None  # per client, instead of duration_s
    latency_limit_ms: float | list[float] | None = None

    @field_validator("script", mode="before")
    @classmethod
    def _scripts(cls, v):
        return factors.factor(v, _script, "a built-in script's name, a script file, or a table of them with weights")

    @field_validator("scale", mode="before")
    @classmethod
    def _scale(cls, v):
        return factors.factor(v, factors.at_most(MAX_SCALE), "a positive integer (pgbench -i's scale)")

    @field_validator("jobs", mode="before")
    @classmethod
    def _jobs(cls, v):
        return factors.optional(v, factors.at_most(MAX_CONNECTIONS), "a positive integer")

    @field_validator("protocol", mode="before")
    @classmethod
    def _protocol(cls, v):
        return factors.factor(v, factors.choice(PROTOCOLS), "one of " + ", ".join(PROTOCOLS))

    @field_validator("transactions", mode="before")
    @classmethod
    def _transactions(cls, v):
        return factors.optional(v, factors.positive_int, "a positive integer (per client)")

    @field_validator("latency_limit_ms", mode="before")
    @classmethod
    def _limit(cls, v):
        if v is None:
            return v
        found = factors.factor(v, factors.seconds(MAX_LATENCY_LIMIT_MS), "milliseconds above 0")
        if min(factors.values(found)) <= 0:
            raise ValueError("expected milliseconds above 0, got 0")
        return found

    @model_validator(mode="after")
    def _consistent(self):
        if self.transactions is not None:
            if self.duration_s is not None:
                raise factors.KeyProblem(("workload", "transactions"), "give duration_s or transactions, not both")
            if rates.under_rate(self.rate):
                raise factors.KeyProblem(("workload", "rate"), "a run of a fixed number of transactions at a rate "
                                         "lasts as long as the rate makes it, so rates would be compared over runs "
                                         "of different lengths; give duration_s with a rate")
            if self.warmup_s is not None:
                raise factors.KeyProblem(("workload", "warmup_s"), "a warm-up is the first seconds of a run by "
                                         "duration; give duration_s with warmup_s")
            most = max(factors.values(self.clients)) * max(factors.values(self.transactions))
            if most > MAX_TRANSACTIONS:
                raise factors.KeyProblem(("workload", "transactions"), f"up to {most:,} transactions in one run; "
                                         f"the limit is {MAX_TRANSACTIONS:,} (clients x transactions)")
        for jobs in factors.values(self.jobs):
            if jobs is not None and jobs > min(factors.values(self.clients)):
                raise factors.KeyProblem(("workload", "jobs"), f"{jobs} threads for {min(factors.values(self.clients))} "
                                         "clients; pgbench runs at most one thread per client")
        return self

    def sql_files(self) -> list[tuple[str, str]]:
        return [("script", name) for level in factors.values(self.script) for name in _files(level)]

    @property
    def threads(self) -> int:
        return self.jobs or min(self.clients, rates.cores())


def _number(pattern: re.Pattern, text: str, group: int = 1) -> float | None:
    found = pattern.search(text)
    return float(found.group(group)) if found else None


# A meta-command as pgbench's lexer reads one: an unquoted backslash, blanks or backslash-newlines, then
# a word (matched here in quotes and comments too: a false alarm costs a line, a miss a program run).
META_COMMAND = re.compile(r"\\(?:[ \t\r\f\v]|\\\r?\n)*([^ \t\r\f\v\n]+)")
RUNS_PROGRAMS = ("shell", "setshell")  # pgbench compares meta-commands' names case-insensitively


def programs_run(name: str, text: str) -> list[ClientProgram]:
    """Each \\shell and \\setshell in a script file, with its line."""
    found = []
    for match in META_COMMAND.finditer(text):
        word = match.group(1).strip("\\")
        if word.lower() in RUNS_PROGRAMS:
            found.append(ClientProgram("script", name, text.count("\n", 0, match.start()) + 1, f"\\{word}"))
    return found


ABORTED = re.compile(r"script (\d+) aborted")
# pgbench's lines that say what went wrong (not its closing "Run was aborted; the above results are incomplete").
ERRORS = re.compile(r"aborted in command|ERROR:|FATAL:|error: (?!Run was aborted)")


def failure(script: str | dict[str, int], said: str) -> Exception:
    """pgbench's words when it failed: the user's (UserError, every run would fail alike) when they name
    one of the user's script files, or a script of theirs that aborted; else the run's (RunFailed)."""
    names = list({script: 1} if isinstance(script, str) else script)
    aborted = ABORTED.search(said)
    named = names[int(aborted.group(1))] if aborted is not None and int(aborted.group(1)) < len(names) else None
    if named is not None and named not in BUILTIN:
        return UserError(f"{named}: pgbench could not run it: {said}")
    return (UserError if any(name in said for name in _files(script)) else RunFailed)(f"pgbench failed: {said}")


def _as_printed(text: str, params: PgbenchParams, log: pgbench_log.Summary) -> tuple[float, float, dict[str, float | None]]:
    """txn/s, the measured seconds and the counts as pgbench printed them, for a run without warm-up."""
    tps = _number(SUMMARY["tps"], text)
    if tps is None:
        raise RunFailed("pgbench printed no tps")
    figures = {rates.AVERAGE.name: _number(SUMMARY["latency_avg"], text),
               rates.ERRORS.name: _number(SUMMARY["failed"], text) or 0.0,
               SKIPPED.name: _number(SUMMARY["skipped"], text) or 0.0, LATE.name: _number(SUMMARY["late"], text)}
    if params.target is not None:
        figures[SCHEDULE_LAG.name] = _number(SUMMARY["lag"], text)
        figures[SCHEDULE_LAG_MAX.name] = _number(SUMMARY["lag"], text, 2)
    elapsed = params.duration if params.transactions is None else log.span.last_end - log.span.first_start
    return tps, elapsed, figures


def _after_warmup(log: pgbench_log.Summary, params: PgbenchParams, seconds: float) -> dict[str, float]:
    """The log's figures of the transactions scheduled after the warm-up: txn/s over the measured
    `seconds`, the average latency and lag, and the counts (pgbench's report covers the whole run)."""
    if not log.counted:
        raise RunFailed(f"warmup_s = {params.warmup_s}: pgbench completed no transaction after it")
    figures = {rates.TPS.name: log.counted / seconds, rates.AVERAGE.name: log.latency_sum_ms / log.counted,
               SKIPPED.name: float(log.skipped), rates.ERRORS.name: float(log.failed)}
    if params.target is not None:
        figures.update({SCHEDULE_LAG.name: log.lag_sum_ms / log.counted, SCHEDULE_LAG_MAX.name: log.lag_max_ms})
    if params.latency_limit_ms is not None:
        figures[LATE.name] = float(log.late)
    return figures


# What pgbench says of a client whose statement storlab cancelled to stop a run once steady.
CANCELLED = "canceling statement due to user request"
PROGRESS = re.compile(r"^progress: ([\d.]+) s, ([\d.]+) tps")  # -P 1: a line a second


def _per_second(line: str) -> tuple[float, float] | None:
    found = PROGRESS.match(line)
    return (float(found.group(1)), float(found.group(2))) if found else None


def _stopped_well(ended: Ended) -> bool:
    """pgbench ended because storlab stopped it once steady: every error it printed is a cancel."""
    return ended.stopped_at is not None and all(CANCELLED in line for line in ended.text if ERRORS.search(line))


def _ended_at(file: IO[bytes], line_start: int) -> float:
    file.seek(line_start)
    fields = file.readline().split()
    return float(fields[pgbench_log.EPOCH_S]) + float(fields[pgbench_log.EPOCH_US]) / 1e6 if fields else math.inf


class _Before:
    """A thread's log up to its first transaction that ended at or after `end` (epoch s), found by
    bisection (a thread's lines are in the order its transactions ended): what a run stopped once
    steady measured, its cancelled last transactions left out."""

    def __init__(self, file: IO[bytes], end: float):
        self.file = file
        size = file.seek(0, 2)

        def line_start(at: int) -> int:  # the first line starting at or after `at`
            if at == 0:
                return 0
            file.seek(at - 1)
            file.readline()
            return file.tell()

        low, high = 0, size
        while low < high:
            middle = (low + high) // 2
            start = line_start(middle)
            if start >= size or _ended_at(file, start) >= end:
                high = middle
            else:
                low = middle + 1
        self.size = line_start(low)
        self.seek(0)

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.at
        data = self.file.read(left if n < 0 else min(n, left))
        self.at += len(data)
        return data

    def seek(self, at: int) -> int:
        self.at = self.file.seek(at)
        return self.at


def measurement_of(ended: Ended, folder: ClientFolder, params: PgbenchParams, server_cpu_s: float) -> Measurement:
    """The run's figures from what pgbench printed and logged (module docstring)."""
    early = _stopped_well(ended)
    if ended.code != 0 and not early:
        raise failure(params.script, ended.last_words().replace(f"{folder.path}/", ""))
    cut = params.declared_warmup
    with folder.written(LOG_PREFIX) as files:
        if early:
            files = [_Before(file, ended.stopped_at) for file in files]
        log = pgbench_log.summary(files, cut, params.latency_limit_ms)
        if params.finds_warmup and log.span.done:
            cut = found_cut(log.timeline, timeline.TRANSACTIONS_PER_S)
            for file in files:
                file.seek(0)
            log = pgbench_log.summary(files, cut, params.latency_limit_ms) if cut else log
    if not log.span.done:
        raise RunFailed(f"pgbench completed no transaction: {ended.last_words()}")
    if cut or early:
        # The measured part: from the cut to where the run was stopped, or to the end of its -T.
        elapsed = ended.stopped_at - log.begins if early else params.declared_warmup + params.duration - cut
        figures = _after_warmup(log, params, elapsed)
        tps = figures[rates.TPS.name]
    else:
        tps, elapsed, figures = _as_printed("\n".join(ended.text), params, log)
    figures.update({
        rates.TPS.name: tps, **{metric.name: log.latency.percentile(p) for p, metric in
                                ((50, rates.P50), (95, rates.P95), (99, rates.P99))},
        rates.ELAPSED.name: elapsed, rates.TRANSACTIONS.name: float(log.counted),
        **rates.rate_figures(params.target, tps, elapsed),
        **rates.cpu_figures(ended.cpu_s, server_cpu_s, ended.wall_s, params.threads),
    })
    figures = {name: value for name, value in figures.items() if value is not None}
    return Measurement(elapsed, figures, log.timeline, log.span.first_start,
                       warmup_cut_s=cut if params.finds_warmup else None, stopped=ended.stopped)


def _connection(instance: Instance) -> list[str]:
    address = instance.client_address()
    return ["-h", str(address.socket), "-p", str(address.port), "-U", address.user]


def _scripts(script: str | dict[str, int], folder: ClientFolder) -> list[str]:
    options = []
    for name, weight in ({script: 1} if isinstance(script, str) else script).items():
        options.append(f"--builtin={name}@{weight}" if name in BUILTIN else f"--file={folder.path / name}@{weight}")
    return options


def _write_scripts(script: str | dict[str, int], files: dict[str, str], folder: ClientFolder) -> None:
    """The user's script files, under the names they have in the experiment's folder (pgbench's errors
    then name them)."""
    for name in _files(script):
        folder.write(name, files[name])


class Pgbench(rates.RateWorkload):
    name = "pgbench"
    Params = PgbenchParams
    figures = FIGURES
    note = ("pgbench: each run has a fresh instance whose data set pgbench -i rebuilds at the cell's scale (the rows "
            "generated in the server: the same rows every time), vacuumed and checkpointed; figures as pgbench printed "
            "and logged them, latency under a rate from each transaction's scheduled start; waits counted from when "
            "storlab finds pgbench's sessions, a fraction of a second after they connect")
    engines = ENGINES

    def client_programs(self, params: PgbenchParams, files: Mapping[str, str]) -> list[ClientProgram]:
        return [found for name in sorted({name for level in factors.values(params.script) for name in _files(level)})
                for found in programs_run(name, files[name])]

    def sessions(self, params: PgbenchParams, files: Mapping[str, str] | None = None) -> int:
        return params.clients

    def footprint(self, engine: str, params: PgbenchParams) -> Footprint:
        return Footprint(data=params.scale * PER_SCALE.data, log=params.scale * PER_SCALE.log)

    def _program(self, instance: Instance) -> str:
        return str(self.engines[instance.engine].program(instance.version))

    def prepare(self, instance: Instance, params: PgbenchParams, files: dict[str, str]) -> None:
        address = instance.client_address()
        ended = run_to_end(instance, lambda folder: [self._program(instance), "-i", "-I", INIT_STEPS, "-s",
                                                     str(params.scale), *_connection(instance), address.database],
                           {}, 60 + INIT_S_PER_SCALE * params.scale, ERRORS)
        if ended.code != 0:
            raise RunFailed(f"pgbench -i failed: {ended.last_words()}")

    def load(self, instance: Instance, params: PgbenchParams, files: dict[str, str]) -> Load:
        tag = f"storlab-pgbench-{secrets.token_hex(6)}"
        address = instance.client_address()
        run_s = params.declared_warmup + params.duration
        length = ["-T", f"{run_s:.0f}"] if params.transactions is None else ["-t", str(params.transactions)]
        # Until steady: its throughput each second (-P 1, on its output) read while it runs.
        watch = watch_of(params, _per_second)
        if watch is not None:
            length += ["-P", "1"]
        schedule = []
        if params.target is not None:
            schedule += ["--rate", f"{params.target:g}"]
        if params.latency_limit_ms is not None:
            schedule += ["--latency-limit", f"{params.latency_limit_ms:g}"]

        def argv(folder: ClientFolder) -> list[str]:
            return [self._program(instance), *_connection(instance), "-n", "-c", str(params.clients),
                    "-j", str(params.threads), "-M", params.protocol, *length, *schedule,
                    *_scripts(params.script, folder), "--log", f"--log-prefix={folder.work / LOG_PREFIX}",
                    address.database]

        return ToolLoad(instance, argv, {"PGAPPNAME": tag}, tag, params.clients,
                        run_s if params.transactions is None else None,
                        lambda ended, folder, cpu: measurement_of(ended, folder, params, cpu),
                        lambda folder: _write_scripts(params.script, files, folder),
                        lambda said: failure(params.script, said), ERRORS, settle_s=OWN_SESSION_S, watch=watch)
