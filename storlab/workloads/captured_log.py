"""A PostgreSQL statement log as pgreplay reads it (pgreplay 1.2's parse.c): a server's csvlog, or its
stderr log written with `log_line_prefix = '%m|%u|%d|%c|'`, from a server that logged every statement
(`log_statement = 'all'`), its connections and disconnections, in English (`lc_messages`).

Read once when the experiment file loads: each entry is checked as pgreplay checks it (its time, its
session id, its separators), so a log it cannot parse is refused with the line to blame before
anything starts; what is replayed is counted (statements, sessions, the captured span, the sessions
open when the first statement runs) and the log is written again for the replay, every session as
the workload's role in the workload's database (a captured role or database is not the instance's).

pgreplay replays what it recognises and skips the rest: `connection authorized:`, `disconnection:`,
`statement:`, `execute <name>:` (with its `DETAIL:  parameters:`), and a canceled statement; a line
written by `log_min_duration_statement` (`duration: ... statement: ...`) is not one of them. A session
whose connection was not logged is connected at its first entry."""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterator

SEPARATOR = "|"  # the stderr prefix's: '%m|%u|%d|%c|'
NAME_LENGTH = 64  # pgreplay's longest user or database name
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}")  # the first 23 characters of %m; a zone after them is ignored
SESSION = re.compile(r"([0-9a-f]{1,8})\.([0-9a-f]{1,8})")
CSV_FIELDS = 15  # pgreplay reads the first 15 of csvlog's columns
# csvlog's columns: 0 time, 1 user, 2 database, 5 session id, 11 severity, 13 message, 14 detail.
CSV_USER, CSV_DATABASE, CSV_SESSION, CSV_SEVERITY, CSV_MESSAGE = 1, 2, 5, 11, 13
MEMORY_DUMP = "TopMemoryContext: "  # stderr lines pgreplay skips, with the blank-led lines after them


class LogProblem(ValueError):
    """A log pgreplay cannot parse: the line to blame (1-based) and what is wrong there."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass
class Entry:
    """One log entry: its first physical line, and its fields as pgreplay splits them."""

    line: int
    time: str
    user: str
    database: str
    session: str
    severity: str
    message: str
    fields: list[str] = field(default_factory=list)  # csvlog: every column; stderr: [rest after the prefix]
    continuation: str = ""  # stderr: the tab-led lines after the first

    @property
    def item(self) -> str | None:
        """What pgreplay makes of it: connect, disconnect, statement, execute, cancel, or None (skipped)."""
        if self.severity == "LOG":
            for prefix, kind in (("connection authorized: ", "connect"), ("disconnection: ", "disconnect"),
                                 ("statement: ", "statement"), ("execute ", "execute")):
                if self.message.startswith(prefix):
                    return kind
        if self.severity == "ERROR" and self.message.startswith("canceling statement due to user request"):
            return "cancel"
        return None


# The log's opening: its sessions that have begun within this many captured seconds of its start are
# the ones a replay's probes count (a pool of connections opens at once; a client starting its
# sessions one after another takes milliseconds each).
OPENING_S = 1.0
# Past the log's opening (at the cell's speed), how long its sessions may take to connect: a replayer
# connects each when it is due, in milliseconds.
OPENING_GRACE_S = 2.0


@dataclass(frozen=True)
class CapturedLog:
    """What a replay of the log does: its statements, its sessions, how long it took when captured
    (from its first replayed entry to its latest), how many sessions begin in its opening second, and
    the most open at once."""

    csv: bool
    statements: int
    sessions: int
    span_s: float
    span_lines: tuple[int, int]  # the lines of its first entry and of its latest
    opening: int
    most_at_once: int  # the most sessions open at once
    most_line: int  # the line where that many were first open
    databases: tuple[str, ...]  # the databases whose sessions it replays, in order of first use


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def _check(line: int, time: str, user: str, database: str, session: str) -> None:
    if not TIME.match(time):
        raise LogProblem(line, f"{time[:30]!r} is not a time as %m writes it (YYYY-MM-DD HH:MM:SS.FFF)")
    try:
        _seconds(time)
    except (ValueError, OverflowError):  # a month 13, a 25th hour, the year 0
        raise LogProblem(line, f"{time[:23]!r} is not a time: no such date or time of day") from None
    if len(user) > NAME_LENGTH or len(database) > NAME_LENGTH:
        raise LogProblem(line, f"a user or database name longer than {NAME_LENGTH} characters")
    if not SESSION.fullmatch(session):
        raise LogProblem(line, f"{session[:30]!r} is not a session id as %c writes it (hex.hex)")


def _stderr_entries(text: str) -> Iterator[Entry]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    in_dump = False
    i = 0
    while i < len(lines):
        number, first = i + 1, lines[i]
        i += 1
        if first.startswith(MEMORY_DUMP) or (in_dump and first.startswith(" ")):
            in_dump = True
            continue
        if first == "":
            raise LogProblem(number, "an empty line (pgreplay reads it as the end of the log)")
        following = []
        while i < len(lines) and lines[i].startswith("\t"):
            following.append(lines[i])
            i += 1
        parts = first.split(SEPARATOR, 4)
        if len(parts) < 5:
            raise LogProblem(number, f"{len(parts) - 1} of the prefix's four '|' found: each line must start as "
                             "log_line_prefix = '%m|%u|%d|%c|' writes it")
        time, user, database, session, rest = parts
        _check(number, time, user, database, session)
        severity, found, message = rest.partition(":  ")
        if not found:
            raise LogProblem(number, "the message does not begin with a severity (LOG:  , ERROR:  , ...)")
        message = message + "".join("\n" + more[1:] for more in following)
        yield Entry(number, time, user, database, session, severity, message, [rest], "\n".join(following))


def _csv_entries(text: str) -> Iterator[Entry]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    number = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise LogProblem(number, f"not a csvlog record: {exc}") from None
        if len(row) < CSV_FIELDS:
            raise LogProblem(number, f"{len(row)} columns; a csvlog record has at least {CSV_FIELDS}")
        _check(number, row[0], row[CSV_USER], row[CSV_DATABASE], row[CSV_SESSION])
        yield Entry(number, row[0], row[CSV_USER], row[CSV_DATABASE], row[CSV_SESSION], row[CSV_SEVERITY],
                    row[CSV_MESSAGE], row)
        number = reader.line_num + 1


def looks_like(text: str) -> bool:
    """A PostgreSQL log by its first line: it starts with %m's time (a stderr log's, or a csvlog's)."""
    return bool(TIME.match(text.lstrip('"')))


def entries(text: str, is_csv: bool) -> Iterator[Entry]:
    """The log's entries in order; LogProblem at the first one pgreplay could not parse."""
    return _csv_entries(text) if is_csv else _stderr_entries(text)


@functools.lru_cache(maxsize=8)
def read(text: str, is_csv: bool, database: str | None = None) -> CapturedLog:
    """What a replay of the log does (of `database`'s sessions, or all); LogProblem if pgreplay
    could not parse it, or it replays nothing. Read once per log and database: the experiment's check,
    each instance's session count and each run's load ask the same (a str's hash is kept with it)."""
    first = last = None
    first_line = last_line = 0
    statements = 0
    seen: dict[str, str] = {}  # session -> its database
    open_now: set[str] = set()
    opening: set[str] = set()
    most = most_line = 0
    for entry in entries(text, is_csv):
        item = entry.item
        if item is None:
            continue
        if item == "execute" and ":" not in entry.message[len("execute "):]:
            raise LogProblem(entry.line, "an execute message without its statement's name")
        if database is not None and entry.database != database:
            continue
        at = _seconds(entry.time)
        if first is None:
            first, first_line = at, entry.line
        if last is None or at >= last:  # a server's processes log a moment out of order
            last, last_line = at, entry.line
        seen.setdefault(entry.session, entry.database)
        if at - first <= OPENING_S:
            opening.add(entry.session)
        if item == "disconnect":
            open_now.discard(entry.session)
        else:
            open_now.add(entry.session)
        if len(open_now) > most:
            most, most_line = len(open_now), entry.line
        statements += item in ("statement", "execute")
    if not statements:
        raise LogProblem(1, "no statement to replay: log the statements with log_statement = 'all' (pgreplay skips "
                         "what log_min_duration_statement writes)")
    return CapturedLog(is_csv, statements, len(seen), last - first, (first_line, last_line), max(1, len(opening)),
                       max(1, most), most_line, tuple(dict.fromkeys(seen.values())))


def for_replay(text: str, is_csv: bool, user: str, database: str, keep: str | None = None) -> tuple[str, list[int]]:
    """The log as the replay reads it: every entry of `keep`'s sessions (or every entry) as `user` in
    `database`; and for each of its lines, the line of the log it came from (pgreplay's errors name
    lines of the log it reads)."""
    out: list[str] = []
    origin: list[int] = []
    if is_csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        for entry in entries(text, True):
            if keep is not None and entry.database != keep:
                continue
            row = list(entry.fields)
            row[CSV_USER], row[CSV_DATABASE] = user, database
            start = buffer.tell()
            writer.writerow(row)
            written = buffer.getvalue()[start:]
            out.append(written)
            origin += [entry.line + k for k in range(written.count("\n"))]
        return "".join(out), origin
    for entry in entries(text, False):
        if keep is not None and entry.database != keep:
            continue
        out.append(SEPARATOR.join([entry.time, user, database, entry.session, entry.fields[0]]) + "\n")
        origin.append(entry.line)
        if entry.continuation:
            out.append(entry.continuation + "\n")
            origin += [entry.line + k for k in range(1, entry.continuation.count("\n") + 2)]
    return "".join(out), origin
