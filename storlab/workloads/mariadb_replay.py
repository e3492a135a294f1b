"""The replay kind on MariaDB: a general or slow log (mariadb_log.py) replayed by storlab's own replayer,
native/storlab-mariadb-replay.c (no maintained replayer keeps a session's timing from MariaDB's logs).

The replayer is a C client on MariaDB's client library, built by `make venv` beside the venv's
Python. The venv is root's and the client user may not reach it, and a copy in the client's folder
would not run where /tmp is mounted noexec: storlab opens the venv's program (a path only root can
change, as the venv's Python itself) and the client execs that descriptor, /proc/self/fd/N, after
dropping to the client user; no path another user could replace is opened by root. It runs as every
client does (tool.ToolLoad: as the OS user storlab-client, in the run's clients' group, in a folder
holding the log it reads, ended with storlab on every path).

Each captured session is a thread of the replayer with a connection of its own, opened and closed
where the log says, its statements sent in order when the captured schedule divided by `speed` says.
Unlike pgreplay, the sessions do not wait for each other: a slow statement holds back its own session
only, so a lock held by one session never stops the replay's clock. Every session replays as the
workload's user in the workload's database: a change to the captured database (`Init DB`, `USE`)
becomes a change to the workload's. Errors are counted by their MariaDB error number and never stop
the replay: the answer shows them by number (replay_errors.py); the figures are the replayer's (its
lag, from when each statement was due to when it was sent, in microseconds)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from storlab import timeline
from storlab.engines.base import Instance
from storlab.errors import RunFailed, UserError
from storlab.lab.clients import ClientFolder
from storlab.workloads import captured_log, mariadb_log, rates, replay_errors, replay_figures
from storlab.workloads.custom import GRAMMARS, split
from storlab.workloads.driver import session_error
from storlab.workloads.kind import ELAPSED, Measurement
from storlab.workloads.statements import Statement
from storlab.workloads.tool import Ended, ToolLoad

BINARY = "storlab-mariadb-replay"
REPLAYED = "events.tsv"  # the log as the replayer reads it, in the client's folder
# The most sessions a log may hold open at once: each is a thread of the replayer (256 KB of stack)
# and a connection, a thread of the server. Measured on the 2-core lab VM (benchmarks/mariadb_replay.py
# --sessions 2000 --rate 2000 --seconds 5): 2,000 sessions open at once replayed every statement with no
# error; connecting all 2,000 in the log's first millisecond put their first statements 3.6 s behind.
MOST_AT_ONCE = 2000
OPEN_FILES = MOST_AT_ONCE + 64  # a socket per session, and the replayer's own

LINE = re.compile(r"^(\w+) (-?[\d.]+)$")
SECOND = re.compile(r"^second (\d+) (\d+) ([\d.]+) ([\d.]+)$")
ERROR = re.compile(r"^error (\d+) (\d+) (\d+) ([^\t]*)\t(.*)$")


@dataclass(frozen=True)
class ReplayerOn:
    """What the replay kind needs of MariaDB: storlab's replayer, and the log forms it reads."""

    program: str = BINARY


def program() -> Path:
    found = Path(sys.executable).parent / BINARY
    if not found.is_file():
        raise UserError(f"{BINARY} not found beside {sys.executable}: make venv builds it (MariaDB's client library, "
                        "Debian's libmariadb-dev)")
    return found


def read(name: str, text: str, database: str | None = None) -> mariadb_log.MariadbLog:
    """The log `name` as the replay reads it; UserError naming its line where it cannot be replayed."""
    try:
        return mariadb_log.read(text, database)
    except captured_log.LogProblem as exc:
        raise UserError(f"{name} {exc}") from None


def setup_statements(text: str, name: str) -> list[Statement]:
    """The setup's statements (an SQL file, or mariadb-dump's output); refused naming the statement
    where it holds what storlab will not run (mariadb_log.refusal)."""
    statements = split(text, GRAMMARS["mariadb"], name)
    for statement in statements:
        why = mariadb_log.refusal(statement.sql)
        if why is not None:
            raise UserError(f"{statement.where}: {why}: storlab will not run it")
    return statements


def run_setup(instance: Instance, statements: list[Statement]) -> None:
    with instance.connect() as conn:
        cursor = conn.cursor()
        for statement in statements:
            try:
                cursor.execute(statement.sql)
                while cursor.nextset():
                    pass
            except Exception as exc:
                raise UserError(f"{statement.where}: {session_error(exc)}") from None


@dataclass
class Said:
    """What the replayer printed at its end: its figures, each second's (statements due, mean and
    largest lag in ms) and each error number's (count, the first one's log line, message, statement)."""

    figures: dict[str, float]
    seconds: list[tuple[int, int, float, float]]
    errors: list[tuple[int, int, int, str, str]]


def said(ended: Ended) -> Said:
    figures, seconds, errors = {}, [], []
    for line in ended.text:
        if (found := SECOND.match(line)) is not None:
            seconds.append((int(found[1]), int(found[2]), float(found[3]), float(found[4])))
        elif (found := ERROR.match(line)) is not None:
            errors.append((int(found[1]), int(found[2]), int(found[3]), found[4], found[5]))
        elif (found := LINE.match(line)) is not None:
            figures[found[1]] = float(found[2])
    return Said(figures, seconds, errors)


def errors_text(errors: list[tuple[int, int, int, str, str]], log_name: str) -> str:
    """Each kind of error, the most frequent first, with its first statement and the log line it came from."""
    return "; ".join(f"{count:,} x error {number} ({message}), first at {log_name} line {line}: {statement[:120]!r}"
                     for number, count, line, message, statement in sorted(errors, key=lambda e: -e[1]))


def measurement_of(ended: Ended, params, log: mariadb_log.MariadbLog, server_cpu_s: float, started: float) -> Measurement:
    """The run's figures from the replayer's (module docstring)."""

    if ended.code != 0:
        raise RunFailed(f"{BINARY} failed: {ended.last_words()}")
    found = said(ended)
    f = found.figures
    if "elapsed_s" not in f or "statements" not in f:
        raise RunFailed(f"{BINARY} printed no figures: {ended.last_words()}")
    statements, errors = f["statements"], f["errors"]
    failed = 100 * errors / statements if statements else 0.0
    if failed > params.max_failed_percent:
        raise RunFailed(f"{errors:.0f} of {statements:.0f} statements failed ({failed:.1f} %, more than "
                        f"max_failed_percent = {params.max_failed_percent:g}): the log does not fit the setup's "
                        f"database: {errors_text(found.errors, params.log)}")
    elapsed = f["elapsed_s"]
    figures = {
        ELAPSED.name: elapsed, replay_figures.BEHIND.name: elapsed - f["schedule_s"], replay_figures.SCHEDULE.name: f["schedule_s"],
        replay_figures.STATEMENTS.name: statements, replay_figures.ERRORS.name: errors, replay_figures.FAILED_PERCENT.name: failed,
        replay_figures.CONNECTIONS.name: f["connections"], replay_figures.AT_ONCE.name: f["connections_max"],
        replay_figures.CALLS.name: statements / elapsed if elapsed > 0 else 0.0,
        **rates.cpu_figures(ended.cpu_s, server_cpu_s, ended.wall_s, max(1, log.most_at_once)),
    }
    if statements:
        figures |= {replay_figures.LAG_MAX.name: f["lag_max_ms"] / 1000, replay_figures.LAG_P50.name: f["lag_p50_ms"],
                    replay_figures.LAG_P99.name: f["lag_p99_ms"], replay_figures.STATEMENT_AVG.name: f["statement_avg_ms"],
                    replay_figures.STATEMENT_MAX.name: f["statement_max_ms"]}
    # Each second of the schedule, with statements due in it, on the run's axis (the replay's start is its 0).
    lags = [(float(second), metric.name, lag) for second, due, mean, most in found.seconds if due
            for metric, lag in ((timeline.REPLAY_LAG_MS, mean), (timeline.REPLAY_LAG_MAX_MS, most))]
    errors = [(str(number), count, line, message, statement) for number, count, line, message, statement in found.errors]
    return Measurement(elapsed, figures, lags, started, kept=replay_errors.kept(errors, params.log) if errors else None)


class MariadbReplayLoad(ToolLoad):
    """storlab's replayer as a client (tool.ToolLoad); the sessions it opens at the log's start are
    the ones found for the probes."""

    def __init__(self, instance: Instance, params, log: mariadb_log.MariadbLog, replayed: str):
        address = instance.client_address()
        self.speed = params.speed

        def argv(folder: ClientFolder) -> list[str]:
            return [BINARY, str(address.socket), address.user, address.database, f"{params.speed!r}",
                    str(folder.path / REPLAYED)]

        def prepare(folder: ClientFolder) -> None:
            folder.write(REPLAYED, replayed)

        def measure(ended: Ended, folder: ClientFolder, cpu: float) -> Measurement:
            return measurement_of(ended, params, log, cpu, self.client.started)

        # Never taken for stuck however far behind it falls (that is the answer): the run's limit
        # (run_limit_s) and the stall watchdog end a replay that does not end.
        super().__init__(instance, argv, {}, BINARY, log.opening, log.span_s / params.speed, measure, prepare,
                         grace_s=None, open_files=OPEN_FILES)

    def start(self) -> None:
        """The program run from a descriptor of the venv's (module docstring), closed here once the
        client has exec'd it."""
        fd = os.open(program(), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.popen = {"executable": f"/proc/self/fd/{fd}", "pass_fds": (fd,)}
            super().start()
        finally:
            self.popen = {}
            os.close(fd)

    def open(self) -> list[int]:
        """The sessions of the log's opening, once all are open or its opening is over (at the cell's
        speed); fewer if the replayer ends first."""
        self.start()
        return self.opened_within(captured_log.OPENING_S / self.speed + captured_log.OPENING_GRACE_S, BINARY)


def load(instance: Instance, params, text: str) -> MariadbReplayLoad:
    log = read(params.log, text, params.database)
    replayed = mariadb_log.for_replayer(log, params.database or (log.databases[0] if log.databases else None))
    return MariadbReplayLoad(instance, params, log, replayed)
