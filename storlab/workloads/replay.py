"""replay (seed 004's pre-production test): a statement log captured on a server, replayed with its
captured timing, or `speed` times faster (a factor: 1, 2, 4 asks how much faster a layout can take the
same day): by pgreplay on PostgreSQL, by storlab's own replayer on MariaDB (mariadb_replay.py, which
reads MariaDB's general or slow log: mariadb_log.py). What follows is PostgreSQL's.

The log (`log`, a file in the experiment's folder: csvlog if its name ends in .csv, else a stderr log
written with log_line_prefix = '%m|%u|%d|%c|'; captured_log.py says what pgreplay reads of it) is
checked when the experiment file loads, and every captured session replays as the workload's role in
the workload's database (`database` picks the captured database to replay when the log has several).
The database it replays against is built in each run's fresh instance from `setup`, an SQL file or a
plain pg_dump (`pg_dump --no-owner --no-privileges`, its COPY data included), run as the workload's
role: every repetition starts from the same database, as the captured server did.

pgreplay keeps the captured order across sessions: a statement waits for the ones logged before it, so
one slow statement holds the others back, and the replay falls behind the captured schedule. Figures
from pgreplay's own statistics: the replay's elapsed time, how far it fell behind (its maximum lag, in
whole seconds, and how much later than the schedule it ended), statements, errors, statement
durations; the temporary files the server wrote; the errors by kind, as the server logged them
(replay_errors.py). A replay whose statements fail beyond
`max_failed_percent` (the log does not fit the setup's database) is a failed run, with the first error
the server logged.

The probes count the sessions of the log's opening (those begun in its first captured second;
pgreplay opens each when the log says it connected): a session that begins later is replayed, and its
IO is in the device timeline and the per-file IO, but not in the waits.

A log is read as the engine's by its first line (mariadb_log.is_mariadb): a MariaDB log on PostgreSQL,
or the other way round, is refused when the file loads."""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping

from pydantic import PrivateAttr, field_validator

from storlab import factors, processes
from storlab.engines.base import Engine, Instance
from storlab.errors import RunFailed, UserError
from storlab.lab.clients import ClientFolder
from storlab.probes.kept import KeptCell
from storlab.probes.part import Part
from storlab.workloads import captured_log, mariadb_log, mariadb_replay, rates, replay_errors
from storlab.workloads.replay_figures import (AT_ONCE, BEHIND, CALLS, CONNECTIONS, ERRORS, FAILED_PERCENT, LAG_MAX, SCHEDULE,
                                              STATEMENT_AVG, STATEMENT_MAX, STATEMENTS, LAG_P50, LAG_P99)
from storlab.workloads.statements import Statement
from storlab.workloads.custom import GRAMMARS, split
from storlab.workloads.driver import session_error
from storlab.workloads.kind import (ELAPSED, TEMPORARY, Load, Measurement, Progress, UnitOfWork, Workload,
                                    WorkloadParams)
from storlab.workloads.tool import ToolLoad, Ended
from storlab.session import Session

MAX_SPEED = 1000.0
MAX_FILE_BYTES = 64 * 2**20  # a log or a setup: read whole, kept with the experiment
DEFAULT_MAX_FAILED_PERCENT = 5.0
REPLAYED = "captured.log"  # the log as pgreplay reads it, in the client's folder
LOG_SINCE_BYTES = 4 * 2**20  # of the server's log, read for the replay's first error
NOBODY = 65534  # the log's parse check runs as nobody (the kernel's overflow uid: every Linux has it)
PARSE_TIMEOUT_S = 600
# A replayed session waiting this long for a lock held by another, idle in its transaction, is stuck:
# pgreplay waits for the first before it sends the second's next statement (a log whose statements do
# not take the rows they took when captured: random values, or two transactions that raced for a row).
STUCK_S = 30.0
STUCK_CHECK_S = 1.0
# pgreplay watches each session's socket with select(), whose set holds descriptors 0 to 1023: past
# that it writes beyond the set (memory corruption). It runs with at most SELECT_FILES descriptors, so
# the kernel refuses the one past them; its standard streams and the log take four, so a log holds at
# most MOST_AT_ONCE sessions open at once (measured: 1,020 replayed, the 1,021st refused).
SELECT_FILES = 1024
MOST_AT_ONCE = SELECT_FILES - 4


STATISTICS = {
    "runtime": re.compile(r"^Total run time:(?: (\d+) hours)?(?: (\d+) minutes)? ([\d.]+) seconds$", re.M),
    "lag": re.compile(r"^Maximum lag behind schedule: (\d+) seconds$", re.M),
    "calls": re.compile(r"^Calls to the server: (\d+)$", re.M),
    "connections": re.compile(r"^Total number of connections: (\d+)$", re.M),
    "at_once": re.compile(r"^Maximum number of concurrent connections: (\d+)$", re.M),
    "statements": re.compile(r"^SQL statements executed: (\d+)$", re.M),
    "errors": re.compile(r"^\((\d+) or [\d.]+% of these completed with error\)$", re.M),
    "average": re.compile(r"^Average SQL statement duration: ([\d.]+) seconds$", re.M),
    "longest": re.compile(r"^Maximum SQL statement duration: ([\d.]+) seconds$", re.M),
}
# pgreplay's lines that say what went wrong (its statistics and schedule warnings are not among them).
FAILED = re.compile(r"^(Error|Connection .* failed|Cannot )", re.M)
PARSE_ERROR_LINE = re.compile(r"line (\d+)")
SERVER_ERROR = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] ERROR:  (.*)$")
SERVER_STATEMENT = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] STATEMENT:  (.*)$")
# A plain pg_dump's COPY ... FROM stdin; its rows follow, up to a line "\.".
COPY_BLOCK = re.compile(r"^(COPY\b[^;]*\bFROM\s+stdin\b[^;]*);[ \t]*\n(.*?)^\\\.[ \t]*(?:\n|\Z)", re.M | re.S | re.I)
# Any other COPY with the client at its end (TO stdout, FROM stdin without rows).
CLIENT_COPY = re.compile(r"\s*COPY\b.*\b(TO\s+STDOUT|FROM\s+STDIN)\b", re.S | re.I)
COPY_MARK = "storlab_copy {n}"  # in the setup's place, a statement of its own (a comment would be skipped)


@dataclass(frozen=True)
class PgreplayOn:
    """What pgreplay needs of an engine (a PostgreSQL server's socket: it reaches any version through
    libpq), and how a replay stuck in its captured order is seen there: `stuck` finds a replayed session
    waiting, longer than `waited_s`, for a lock that another replayed session holds while idle in its
    transaction (pgreplay sends that one's next statement only after the waiting one's)."""

    stuck: str
    program: str = "pgreplay"


PGREPLAY = PgreplayOn("""
    SELECT w.pid, left(w.query, 200), b.pid, left(b.query, 200)
    FROM pg_stat_activity w, unnest(pg_blocking_pids(w.pid)) AS blocker(pid), pg_stat_activity b
    WHERE b.pid = blocker.pid AND w.application_name = %(tag)s AND b.application_name = %(tag)s
      AND w.wait_event_type = 'Lock' AND b.state = 'idle in transaction'
      AND w.query_start < clock_timestamp() - make_interval(secs => %(waited_s)s)
    LIMIT 1""")
ENGINES = {"postgres": PGREPLAY, "mariadb": mariadb_replay.ReplayerOn()}
LOG_OF = {"postgres": "a PostgreSQL statement log (a csvlog, or a stderr log)", "mariadb": "a MariaDB general or slow log"}


def program() -> str:
    found = shutil.which(PGREPLAY.program)
    if found is None:
        raise UserError("pgreplay not found: install Debian's pgreplay package (make demo does)")
    return found


def _speed(v: Any, what: str) -> float | int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"expected {what} or a list of them, got {factors.show(v)}")
    if v > MAX_SPEED:
        raise ValueError(f"{v:g} times the captured speed is more than the limit of {MAX_SPEED:g}")
    return v


class ReplayParams(WorkloadParams):
    kind: Literal["replay"]
    log: str | list[str]
    setup: str | None = None
    speed: float | int | list[float | int] = 1
    database: str | None = None  # the captured database whose sessions are replayed (a log of several)
    max_failed_percent: float = DEFAULT_MAX_FAILED_PERCENT
    _engine: str | None = PrivateAttr(default=None)  # the experiment's: its logs are read as that engine's

    @field_validator("log", "setup", mode="before")
    @classmethod
    def _files(cls, v):
        return factors.optional(v, factors.text, "a file's path")

    @field_validator("speed", mode="before")
    @classmethod
    def _speeds(cls, v):
        return factors.factor(v, _speed, "a speed factor above 0 (1: the captured timing; 2: twice as fast)")

    @field_validator("max_failed_percent", mode="before")
    @classmethod
    def _failed(cls, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
            raise ValueError(f"expected a percentage from 0 to 100 (one value, not a factor), got {factors.show(v)}")
        return float(v)

    def check_engine(self, engine: Engine) -> None:
        self._engine = engine.name

    def sql_files(self) -> list[tuple[str, str]]:
        setup = [("setup", self.setup)] if self.setup is not None else []
        return setup + [("log", name) for name in factors.values(self.log)]

    @property
    def file_bytes(self) -> dict[str, int]:
        return {"log": MAX_FILE_BYTES, "setup": MAX_FILE_BYTES}


def is_csv(name: str) -> bool:
    """A csvlog by its name (PostgreSQL names its own .csv); any other name is a stderr log."""
    return name.lower().endswith(".csv")


def captured(params: ReplayParams, files: Mapping[str, str], name: str | None = None) -> captured_log.CapturedLog:
    """What the log (one cell's, or `name`) replays; UserError naming its line where pgreplay cannot read it."""
    name = name or params.log
    try:
        return captured_log.read(files[name], is_csv(name), params.database)
    except captured_log.LogProblem as exc:
        raise UserError(f"{name} {exc}") from None


def _parse_check(text: str, csv: bool, origin: list[int]) -> str | None:
    """pgreplay's own parse of the log as it will replay it (when pgreplay is installed here): its
    first error, the line named as the log the user gave numbers it; None when it parses. A C parser
    fed the user's file runs as nobody, never as root, the log on its standard input."""
    found = shutil.which(PGREPLAY.program)
    if found is None:
        return None
    nobody = {"uid": NOBODY, "gid": NOBODY} if os.getuid() == 0 else {}
    try:
        code, said_all = processes.run([found, "-f", *(["-c"] if csv else []), "-o", "/dev/null"], PARSE_TIMEOUT_S,
                                       text, errors="replace", **nobody)
    except subprocess.TimeoutExpired:
        return f"pgreplay did not finish parsing it within {PARSE_TIMEOUT_S} s"
    if code == 0:
        return None
    said = next((line for line in said_all.splitlines() if line.startswith(("Error", "Warning: "))), None) \
        or (said_all.strip().splitlines() or [f"exit code {code}"])[-1]
    at = PARSE_ERROR_LINE.search(said)
    # A stderr log's entry is parsed once pgreplay has read the line after it (a continuation line?).
    index = int(at.group(1)) - (1 if csv else 2) if at is not None else -1
    if 0 <= index < len(origin):
        said = f"{said[:at.start(1)]}{origin[index]}{said[at.end(1):]}"
    return f"pgreplay cannot parse it: {said}"


def setup_statements(text: str, name: str) -> list[Statement | tuple[Statement, str]]:
    """The setup's statements in order, each COPY ... FROM stdin with its rows (a plain pg_dump's)."""
    copies: list[tuple[str, str, int]] = []

    def mark(match: re.Match) -> str:
        copies.append((match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1))
        # The same number of lines, so the statements after it keep their line numbers.
        return COPY_MARK.format(n=len(copies) - 1) + ";" + "\n" * match.group(0).count("\n")

    marked = COPY_BLOCK.sub(mark, text)
    found: list[Statement | tuple[Statement, str]] = []
    for statement in split(marked, GRAMMARS["postgres"], name):
        copy = re.fullmatch(r"storlab_copy (\d+)", statement.sql)
        if copy is None:
            found.append(statement)
        else:
            sql, rows, line = copies[int(copy.group(1))]
            found.append((Statement(sql, f"{name} COPY (line {line})"), rows))
    return found


def run_setup(conn: Session, statements: list[Statement | tuple[Statement, str]]) -> None:
    cursor = conn.cursor()
    for step in statements:
        statement = step[0] if isinstance(step, tuple) else step
        try:
            if isinstance(step, tuple):
                with cursor.copy(statement.sql) as copy:
                    copy.write(step[1])
            else:
                cursor.execute(statement.sql)
        except Exception as exc:
            raise UserError(f"{statement.where}: {session_error(exc)}") from None


def _logged_errors(logged: str) -> Iterator[tuple[str, str | None]]:
    """Each error the server logged, in order, with the statement it logged for it (None: none)."""
    lines = logged.splitlines()
    for i, line in enumerate(lines):
        error = SERVER_ERROR.match(line)
        if error is not None:
            yield error.group(2), next((m.group(2) for later in lines[i + 1:i + 4]
                                        if (m := SERVER_STATEMENT.match(later)) and m.group(1) == error.group(1)), None)


def first_error(logged: str) -> str | None:
    """The first error the server logged, with the statement it logged for it."""
    for message, statement in _logged_errors(logged):
        return message + (f" (statement: {statement[:200]})" if statement else "")
    return None


def server_errors(logged: str, errors: float) -> list[tuple[str, int, int, str, str]]:
    """pgreplay's `errors` by kind, as the server logged them: (message, count, 0, message, its first
    statement), the most frequent first; those not in what was read of the log counted apart."""
    kinds: dict[str, list] = {}
    for message, statement in _logged_errors(logged):
        kinds.setdefault(message, [0, statement or ""])[0] += 1
    found = [(message, count, 0, message, statement) for message, (count, statement) in kinds.items()]
    unread = int(errors) - sum(k[1] for k in found)
    if unread > 0:
        found.append(("unread", unread, 0, f"not in the server log storlab read (its first {LOG_SINCE_BYTES // 2**20} "
                      "MiB from the replay's start)", ""))
    return sorted(found, key=lambda k: -k[1])


def _number(name: str, text: str) -> float:
    found = STATISTICS[name].search(text)
    if found is None:
        raise RunFailed(f"pgreplay printed no statistics ({name}): {text.strip().splitlines()[-1:] or 'nothing'}")
    return float(found.group(1))


def measurement_of(ended: Ended, params: ReplayParams, log: captured_log.CapturedLog, server_cpu_s: float,
             errors_logged: str) -> Measurement:
    """The run's figures from pgreplay's statistics (module docstring)."""
    text = "\n".join(ended.text)
    if ended.code != 0:
        raise RunFailed(f"pgreplay failed: {ended.last_words()}")
    runtime = STATISTICS["runtime"].search(text)
    if runtime is None:
        raise RunFailed(f"pgreplay printed no statistics: {ended.last_words()}")
    hours, minutes, seconds = runtime.groups()
    elapsed = int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds)
    statements = _number("statements", text)
    errors = float(STATISTICS["errors"].search(text).group(1)) if STATISTICS["errors"].search(text) else 0.0
    failed = 100 * errors / statements if statements else 0.0
    if failed > params.max_failed_percent:
        raise RunFailed(f"{errors:.0f} of {statements:.0f} statements failed ({failed:.1f} %, more than "
                        f"max_failed_percent = {params.max_failed_percent:g}): the log does not fit the setup's "
                        f"database; the first error: {first_error(errors_logged) or 'not in the server log'}")
    schedule = log.span_s / params.speed
    figures = {
        ELAPSED.name: elapsed, BEHIND.name: elapsed - schedule, SCHEDULE.name: schedule,
        LAG_MAX.name: _number("lag", text), STATEMENTS.name: statements, ERRORS.name: errors,
        FAILED_PERCENT.name: failed, CONNECTIONS.name: _number("connections", text),
        AT_ONCE.name: _number("at_once", text), CALLS.name: _number("calls", text) / elapsed if elapsed > 0 else 0.0,
        **rates.cpu_figures(ended.cpu_s, server_cpu_s, ended.wall_s, 1),
    }
    if statements:
        figures[STATEMENT_AVG.name] = 1000 * _number("average", text)
        figures[STATEMENT_MAX.name] = 1000 * _number("longest", text)
    return Measurement(elapsed, figures, [], ended.lines[0][0] if ended.lines else 0.0,
                       kept=replay_errors.kept(server_errors(errors_logged, errors), params.log) if errors else None)


class ReplayLoad(ToolLoad):
    """pgreplay as a client (tool.ToolLoad): the sessions it opens at the log's start are the ones
    found for the probes; it may open fewer before they are looked for (a short session), or end first."""

    def __init__(self, instance: Instance, params: ReplayParams, log: captured_log.CapturedLog, replayed: str):
        tag = f"storlab-replay-{secrets.token_hex(6)}"
        address = instance.client_address()
        self.log_at = 0
        self.speed = params.speed

        def argv(folder: ClientFolder) -> list[str]:
            return [program(), *(["-c"] if log.csv else []), "-h", str(address.socket), "-p", str(address.port),
                    "-s", f"{params.speed:g}", str(folder.path / REPLAYED)]

        def measure(ended: Ended, folder: ClientFolder, cpu: float) -> Measurement:
            return measurement_of(ended, params, log, cpu, instance.logged_since(self.log_at, LOG_SINCE_BYTES))

        # Never taken for stuck however far behind it falls (that is the answer): the run's wall-clock
        # limit (run_limit_s) and the stall watchdog end a replay that does not end.
        super().__init__(instance, argv, {"PGAPPNAME": tag}, tag, log.opening, log.span_s / params.speed, measure,
                         lambda folder: folder.write(REPLAYED, replayed), errors=FAILED, grace_s=None,
                         open_files=SELECT_FILES)

    def run(self, on_progress: Progress | None = None) -> Measurement:
        checked = time.monotonic()
        # One session watches the whole run: a session opened each second is a server process started
        # each second, counted in the server's CPU.
        with self.instance.admin() as watcher:
            def watched(done: int, total: int) -> None:
                nonlocal checked
                if on_progress is not None:
                    on_progress(done, total)
                if time.monotonic() - checked >= STUCK_CHECK_S:
                    checked = time.monotonic()
                    self._check_stuck(watcher)

            return super().run(watched)

    def _check_stuck(self, conn: Session) -> None:
        row = conn.execute(PGREPLAY.stuck, {"tag": self.tag, "waited_s": STUCK_S}).fetchone()
        if row is not None:
            waiter, waiting, holder, holding = row
            raise RunFailed(f"the replay is stuck: session {waiter} has waited over {STUCK_S:g} s for a lock session "
                            f"{holder} holds, idle in its transaction after {holding!r}, and pgreplay sends that one's next "
                            f"statement only after {waiting!r}: the log's statements do not take the rows they took "
                            "when captured (random values in them, or two transactions that raced for a row)")

    def open(self) -> list[int]:
        """The sessions of the log's opening, once all are open or its opening is over (replayed at
        the cell's speed; a session in it may have ended before it was seen); fewer if pgreplay ends first."""
        self.log_at = self.instance.log_position()
        self.start()
        return self.opened_within(captured_log.OPENING_S / self.speed + captured_log.OPENING_GRACE_S, "pgreplay")


def _check_replayable(name: str, log: Any, params: ReplayParams, most: int, replayer: str, why: str) -> None:
    """What either engine's log must hold to be replayed here: no more sessions at once than its replayer
    holds, a span its slowest speed replays within the run's limit, and one database (or the one named)."""
    if log.most_at_once > most:
        raise factors.KeyProblem(("workload", "log"), f"{name} line {log.most_line}: {log.most_at_once:,} sessions "
                                 f"open at once; {replayer} holds at most {most:,} ({why})")
    slowest = min(factors.values(params.speed))
    if log.span_s / slowest > params.run_limit:
        first, latest = log.span_lines
        raise factors.KeyProblem(("workload", "log"), f"{name} spans {log.span_s:,.0f} s (line {first} to line "
                                 f"{latest}): replayed at speed {slowest:g} it would run {log.span_s / slowest:,.0f} s, "
                                 f"past the run's limit of {params.run_limit:,.0f} s (workload.run_limit_s)")
    if params.database is None and len(log.databases) > 1:
        raise factors.KeyProblem(("workload", "log"), f"{name} replays sessions of the databases "
                                 f"{', '.join(log.databases)}: name the one to replay with database = "
                                 f"{factors.show(log.databases[0])}")


class Replay(Workload):
    name = "replay"
    unit_of_work = UnitOfWork(STATEMENTS.name, "1,000 statements", 1000)
    throughput = None
    answer_keys = frozenset()
    Params = ReplayParams
    figures = (ELAPSED, BEHIND, ERRORS, LAG_P99, LAG_MAX, LAG_P50, SCHEDULE, STATEMENTS, FAILED_PERCENT, STATEMENT_AVG, STATEMENT_MAX,
               CONNECTIONS, AT_ONCE, CALLS, rates.CLIENT_CPU, rates.SERVER_CPU, rates.CLIENT_SHARE, rates.SERVER_SHARE,
               *TEMPORARY)
    note = ("replay: pgreplay replays the captured log in its captured order across sessions (a slow statement holds "
            "the later ones back), storlab's replayer each MariaDB session on its own schedule; each run has a fresh instance built from the setup; behind s: how much later than "
            "the captured schedule (divided by the speed) the replay ended; waits counted for the sessions begun in "
            "the log's first captured second")
    engines = ENGINES

    def part(self, cells: list[KeptCell]) -> Part | None:
        return replay_errors.part(cells)

    def check_files(self, params: ReplayParams, files: Mapping[str, str]) -> None:
        first = files[factors.values(params.log)[0]]
        engine = params._engine or ("mariadb" if mariadb_log.is_mariadb(first) else "postgres")
        for name in factors.values(params.log):
            other = {"postgres": "mariadb", "mariadb": "postgres"}[engine]
            if (mariadb_log.is_mariadb if other == "mariadb" else captured_log.looks_like)(files[name]):
                raise factors.KeyProblem(("workload", "log"), f"{name} is not {LOG_OF[engine]} (it reads as "
                                         f"{LOG_OF[other]}): replay a log captured on the experiment's engine")
        if engine == "mariadb":
            self._check_mariadb(params, files)
            return
        if params.setup is not None:
            for step in setup_statements(files[params.setup], params.setup):
                if not isinstance(step, tuple) and CLIENT_COPY.match(step.sql):
                    raise factors.KeyProblem(("workload", "setup"), f"{step.where}: a COPY to or from the client "
                                             "(TO stdout, or FROM stdin without its rows after it) has no client to "
                                             "talk to in a setup; give the rows as a plain pg_dump writes them")
        for name in factors.values(params.log):
            try:
                log = captured_log.read(files[name], is_csv(name))
                if params.database is not None and params.database not in log.databases:
                    raise factors.KeyProblem(("workload", "database"), f"{name} has no session in database "
                                             f"{factors.show(params.database)} (its databases: {', '.join(log.databases)})")
                if params.database is not None:
                    log = captured_log.read(files[name], is_csv(name), params.database)
            except captured_log.LogProblem as exc:
                raise factors.KeyProblem(("workload", "log"), f"{name} {exc}") from None
            _check_replayable(name, log, params, MOST_AT_ONCE, "pgreplay", "it watches each session's socket "
                              "with select(), which holds 1,024 descriptors")
            # Any role and database: pgreplay only parses it here.
            text, origin = captured_log.for_replay(files[name], log.csv, "lab", "lab", params.database)
            problem = _parse_check(text, log.csv, origin)
            if problem:
                raise factors.KeyProblem(("workload", "log"), f"{name}: {problem}")

    def _check_mariadb(self, params: ReplayParams, files: Mapping[str, str]) -> None:
        if params.setup is not None:
            try:
                mariadb_replay.setup_statements(files[params.setup], params.setup)
            except UserError as exc:
                raise factors.KeyProblem(("workload", "setup"), str(exc)) from None
        for name in factors.values(params.log):
            try:
                log = mariadb_log.read(files[name])
                if params.database is not None and params.database not in log.databases:
                    raise factors.KeyProblem(("workload", "database"), f"{name} has no session in database "
                                             f"{factors.show(params.database)} (its databases: "
                                             f"{', '.join(log.databases) or 'none named'})")
                if params.database is not None:
                    log = mariadb_log.read(files[name], params.database)
            except captured_log.LogProblem as exc:
                raise factors.KeyProblem(("workload", "log"), f"{name} {exc}") from None
            _check_replayable(name, log, params, mariadb_replay.MOST_AT_ONCE, "storlab's replayer",
                              "a thread and a connection each, measured on this lab's machine")

    def sessions(self, params: ReplayParams, files: Mapping[str, str] | None = None) -> int:
        if files is None:
            return 1
        return max((mariadb_replay.read(name, files[name], params.database) if mariadb_log.is_mariadb(files[name])
                    else captured(params, files, name)).most_at_once for name in factors.values(params.log))

    def prepare(self, instance: Instance, params: ReplayParams, files: dict[str, str]) -> None:
        if params.setup is None:
            return
        if instance.engine == "mariadb":
            mariadb_replay.run_setup(instance, mariadb_replay.setup_statements(files[params.setup], params.setup))
            return
        with instance.connect() as conn:
            run_setup(conn, setup_statements(files[params.setup], params.setup))

    def load(self, instance: Instance, params: ReplayParams, files: dict[str, str]) -> Load:
        if instance.engine == "mariadb":
            return mariadb_replay.load(instance, params, files[params.log])
        log = captured(params, files)
        address = instance.client_address()
        replayed, _ = captured_log.for_replay(files[params.log], log.csv, address.user, address.database, params.database)
        return ReplayLoad(instance, params, log, replayed)
