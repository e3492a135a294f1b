"""A MariaDB statement log as storlab's replayer reads it, in one of three forms:

- the general log written as a table (`log_output = 'TABLE'`), dumped with its microsecond stamps:
  `mariadb --batch` of `SELECT event_time, thread_id, command_type, CONVERT(argument USING utf8mb4) AS
  argument FROM mysql.general_log` writes it (a header line `event_time<TAB>thread_id<TAB>command_type
  <TAB>argument`, then one event a line, tab-separated, a tab, newline, carriage return, NUL or
  backslash in the argument escaped as \\t \\n \\r \\0 \\\\, as --batch escapes them);
- the general log written as a file (`log_output = 'FILE'`): whole seconds (a line without a stamp
  shares the one before's), so the events of one second are spread evenly over it in their logged order;
- the slow log with `long_query_time = 0` (every statement, written when it ends): each statement
  starts at its logged time minus its `Query_time`, in its entry's thread (`# Thread_id:`, or `Id:`
  on the `# User@Host:` line as MySQL writes it) and database (`Schema:`, else the log's last `use
  db;` line, which the log writes when the database differs from its previous entry's, any thread's).
  MariaDB stamps whole seconds (`# Time:`, written when the second changes; an entry before the
  first takes its `SET timestamp=` second), so the entries ending in one second are spread evenly
  over it in their logged order, as in the file log; a microsecond stamp (MySQL's) is taken as it
  is. The log has no connect or quit: a session connects at its first statement and quits when its
  last one ends. `SET timestamp=...;` is the logger's, not the session's, and is not replayed.

Read once when the experiment file loads, and refused in one line naming the line where it is
malformed (a time no clock has, a thread id that is not a number, a session used after it quit, a
command the general log does not write) or hostile: what storlab will not replay (LOAD DATA LOCAL
reads the client's files; SHUTDOWN, KILL, SET GLOBAL and the privilege statements reach beyond the
replayed sessions). What is replayed: each session's connect and quit, its statements (`Query`, and
`Execute` with its parameters written in, as the general log writes it, sent as text), and its `Init
DB` (a change of database). The rest (Prepare, Close stmt, Ping, Statistics, ...) is logged around a
statement and replays as nothing."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from storlab.engines.mariadb.general_log import HEADER, escape
from storlab.workloads.captured_log import OPENING_S, LogProblem

TABLE_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}")
# The file log: "YYMMDD HH:MM:SS" (a day under 10 padded with a space in some versions), the thread id
# right-aligned, the command, a tab, the argument; a line without its time starts with two tabs.
FILE_EVENT = re.compile(r"^(?:(\d{6} [ \d]\d:\d\d:\d\d)|)\t\s*(\S+) ([A-Za-z][A-Za-z _]*?)\t(.*)$")
FILE_PREAMBLE = re.compile(r"^(.* started with:|Tcp port: .*|Time\s+Id Command\s+Argument)$")
THREAD_ID = re.compile(r"[1-9]\d{0,18}")
MAX_THREAD_ID = 2**64 - 1
UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\", "Z": "\x1a", "b": "\b"}
# A Connect's argument: "user@host on database using Socket" (the database empty when none was named).
CONNECT_DATABASE = re.compile(r" on (\S*)(?: using \S+)?$")

# What the general log writes, by what a replay does with it.
REPLAYED = {"Connect": "connect", "Quit": "quit", "Query": "query", "Execute": "query", "Init DB": "use"}
PASSED = frozenset({"Prepare", "Close stmt", "Reset stmt", "Long Data", "Fetch", "Ping", "Statistics",
                    "Field List", "Set option", "Change user", "Refresh", "Processlist", "Debug", "Sleep", "Time",
                    "Delayed insert", "Daemon", "Error", "Bulk_execute", "Reset connection", "Binlog Dump",
                    "Table Dump", "Connect Out", "Register Slave", "Slave_worker", "Slave_IO", "Slave_SQL"})
REFUSED_COMMANDS = {"Shutdown": "a SHUTDOWN command stops the server", "Kill": "a KILL command ends another session",
                    "Create DB": "a CREATE DATABASE command", "Drop DB": "a DROP DATABASE command"}

# Statements storlab will not replay, by their first words (comments and MariaDB's executable-comment
# markers taken out first, so /*!50000 SET GLOBAL x = 1 */ is seen for what the server runs).
REFUSED_STATEMENTS = [
    (re.compile(r"LOAD\s+(DATA|XML)\b[^;]*?\bLOCAL\b", re.I), "LOAD DATA LOCAL reads a file of the client's machine"),
    (re.compile(r"LOAD\s+(DATA|XML)\b", re.I), "LOAD DATA reads a file of the server's machine"),
    (re.compile(r"SHUTDOWN\b", re.I), "SHUTDOWN stops the server"),
    (re.compile(r"KILL\b", re.I), "KILL ends another session"),
    (re.compile(r"SET\b[^;]*?(\bGLOBAL\b|@@GLOBAL\.)", re.I), "SET GLOBAL changes the server for every session"),
    (re.compile(r"(GRANT|REVOKE)\b", re.I), "a privilege statement"),
    (re.compile(r"(CREATE|DROP|ALTER|RENAME)\s+(USER|ROLE)\b", re.I), "a privilege statement"),
    (re.compile(r"SET\s+(PASSWORD|DEFAULT\s+ROLE|ROLE)\b", re.I), "a privilege statement"),
    (re.compile(r"(INSTALL|UNINSTALL)\s+(PLUGIN|SONAME)\b", re.I), "a plugin changes the server"),
    (re.compile(r"(CHANGE\s+MASTER|START\s+SLAVE|STOP\s+SLAVE|START\s+REPLICA|STOP\s+REPLICA|RESET|PURGE|FLUSH)\b",
                re.I), "an administration statement"),
]
INTO_FILE = re.compile(r"\bINTO\s+(OUTFILE|DUMPFILE)\b", re.I)
DEFINER = re.compile(r"(CREATE|ALTER)\b[^;]*?\bDEFINER\s*=", re.I)
COMMENT = re.compile(r"/\*(?![!M])(?:.|\n)*?\*/|(?:--[ \t]|#)[^\n]*", re.S)
EXECUTABLE = re.compile(r"/\*M?!\d*|\*/")
QUOTED = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`", re.S)


@dataclass(frozen=True)
class Event:
    """One replayed event: its time from the log's first event (s), its session (0, 1, ... in the
    order they first appear), what it does, its statement (a query's) or database (a use's), its line."""

    at_s: float
    session: int
    kind: str  # connect, query, use, quit
    text: str
    line: int


@dataclass(frozen=True)
class MariadbLog:
    """What a replay of the log does: its events, its statements, its sessions, how long it took when
    captured, the sessions begun in its opening second, the most open at once (and the line where
    that many were first open), its databases, and whether its stamps are whole seconds."""

    events: tuple[Event, ...]
    statements: int
    sessions: int
    span_s: float
    span_lines: tuple[int, int]
    opening: int
    most_at_once: int
    most_line: int
    databases: tuple[str, ...]
    whole_seconds: bool
    csv: bool = False  # what the PostgreSQL replay reads of its own logs; never a csvlog here


def is_mariadb(text: str) -> bool:
    """A MariaDB log by its first line (the table dump's header, the file log's preamble, a slow log's entry)."""
    first = text.split("\n", 1)[0].rstrip("\r")
    return (first.startswith("event_time") or bool(FILE_PREAMBLE.match(first)) or bool(FILE_EVENT.match(first))
            or bool(SLOW_ENTRY.match(first)))


def _unescape(field: str, line: int) -> str:
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        c = field[i]
        if c == "\\":
            if i + 1 == len(field) or field[i + 1] not in UNESCAPE:
                raise LogProblem(line, f"{field[i:i + 2]!r} is not an escape mariadb --batch writes (\\t \\n \\r \\0 \\\\)")
            out.append(UNESCAPE[field[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _thread(text: str, line: int) -> int:
    if not THREAD_ID.fullmatch(text) or int(text) > MAX_THREAD_ID:
        raise LogProblem(line, f"{text[:30]!r} is not a thread id (a whole number from 1 to {MAX_THREAD_ID})")
    return int(text)


def _table_events(text: str) -> Iterator[tuple[int, float, int, str, str]]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines or lines[0].rstrip("\r") != HEADER:
        raise LogProblem(1, "the first line is not the dump's header (event_time, thread_id, command_type, argument "
                         "separated by tabs, as mariadb --batch writes it)")
    for number, raw in enumerate(lines[1:], start=2):
        fields = raw.split("\t")
        if len(fields) != 4:
            raise LogProblem(number, f"{len(fields)} tab-separated fields; an event has 4 (event_time, thread_id, "
                             "command_type, argument)")
        stamp, thread, command, argument = fields
        if not TABLE_TIME.fullmatch(stamp):
            raise LogProblem(number, f"{stamp[:30]!r} is not a time as the general log's table stamps it "
                             "(YYYY-MM-DD HH:MM:SS.ffffff)")
        try:
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()
        except (ValueError, OverflowError):
            raise LogProblem(number, f"{stamp!r} is not a time: no such date or time of day") from None
        yield number, at, _thread(thread, number), command, _unescape(argument, number)


def _file_events(text: str) -> Iterator[tuple[int, float, int, str, str]]:
    """The file log's events, each second's spread over it in logged order (the stamp is whole seconds)."""
    pending: list[tuple[int, int, str, str]] = []
    second: float | None = None

    def spread() -> Iterator[tuple[int, float, int, str, str]]:
        for k, (number, thread, command, argument) in enumerate(pending):
            yield number, second + k / len(pending), thread, command, argument
        pending.clear()

    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        if FILE_PREAMBLE.match(raw):
            continue
        found = FILE_EVENT.match(raw)
        if found is None:
            if not pending:
                raise LogProblem(number, "neither the header of mysql.general_log's dump (event_time, thread_id, "
                                 "command_type, argument separated by tabs, as mariadb --batch writes it) nor an event "
                                 "of the general log's file (a time or two tabs, the thread id, the command, a tab, "
                                 "its argument)")
            # A statement of several lines: the log writes its newlines as they are.
            last = pending[-1]
            pending[-1] = (last[0], last[1], last[2], last[3] + "\n" + raw)
            continue
        stamp, thread, command, argument = found.groups()
        if stamp is not None:
            try:
                at = datetime.strptime(stamp[:7] + stamp[7:].replace(" ", "0", 1), "%y%m%d %H:%M:%S").timestamp()
            except ValueError:
                raise LogProblem(number, f"{stamp!r} is not a time: no such date or time of day") from None
            if second is not None and at != second:
                yield from spread()
            second = at
        elif second is None:
            raise LogProblem(number, "an event before the log's first time")
        pending.append((number, _thread(thread, number), command.strip(), argument))
    if pending:
        yield from spread()


SLOW_ENTRY = re.compile(r"^# (Time|User@Host): ")
SLOW_WHOLE_SECOND = re.compile(r"\d{6} [ \d]\d:\d\d:\d\d")
SLOW_MICROSECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)?")
SLOW_EXACT = re.compile(r"^# Time: \d{4}-", re.M)
SLOW_THREAD = re.compile(r"(?:^# Thread_id|\sId):\s+(\S+)")
SLOW_SCHEMA = re.compile(r"\sSchema: (\S*)")
SLOW_USER = re.compile(r"^# User@Host: (\S*?)\[")
SLOW_QUERY_TIME = re.compile(r"^# Query_time: (\S+)")
SLOW_TIMESTAMP = re.compile(r"^SET timestamp=(.*);$")
SLOW_USE = re.compile(r"^use (`(?:[^`]|``)+`|\S+);$")
ADMINISTRATOR = "# administrator command: "  # a protocol command (Ping, Quit, ...): replays as nothing
# A Query_time longer than a day (a run's default limit, run_limit_s) is a malformed number, not a statement.
MAX_QUERY_TIME_S = 86400.0


def is_slow(text: str) -> bool:
    """The slow log: its first line past the server's preamble begins an entry."""
    for raw in text.split("\n", 4):
        if not FILE_PREAMBLE.match(raw.rstrip("\r")):
            return bool(SLOW_ENTRY.match(raw))
    return False


@dataclass
class _SlowEntry:
    line: int
    second: float | None = None  # its `# Time:`'s (the latest one), or its SET timestamp's
    exact: bool = False  # a microsecond stamp
    thread: int | None = None
    user: str = ""
    schema: str | None = None
    query_time: float | None = None
    sql: list[str] | None = None
    sql_line: int = 0
    use: tuple[str, int] | None = None  # its `use db;` line (a statement of its own when nothing follows)


def _slow_stamp(text: str, line: int) -> tuple[float, bool]:
    if SLOW_WHOLE_SECOND.fullmatch(text):
        try:
            return datetime.strptime(text[:7] + text[7:].replace(" ", "0", 1), "%y%m%d %H:%M:%S").timestamp(), False
        except ValueError:
            raise LogProblem(line, f"{text!r} is not a time: no such date or time of day") from None
    if SLOW_MICROSECOND.fullmatch(text):
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp(), True
        except ValueError:
            raise LogProblem(line, f"{text!r} is not a time: no such date or time of day") from None
    raise LogProblem(line, f"{text[:30]!r} is not a time as the slow log stamps it (YYMMDD HH:MM:SS, or "
                     "YYYY-MM-DDTHH:MM:SS.ffffff)")


def _slow_entries(text: str) -> Iterator[_SlowEntry]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    entry: _SlowEntry | None = None
    second, exact = None, False
    logged_database: str | None = None  # the log's last `use` line's
    for number, raw in enumerate(lines, start=1):
        if FILE_PREAMBLE.match(raw):  # the server started again: its preamble is written again
            continue
        begins = SLOW_ENTRY.match(raw)
        if begins and (entry is None or entry.sql is not None or begins.group(1) == "Time"):
            if entry is not None:
                yield entry
            entry = _SlowEntry(number)
        if entry is None:
            raise LogProblem(number, "not a line of the slow log: an entry begins with '# Time:' or '# User@Host:'")
        if entry.sql is not None:  # the statement, up to the next entry: the log writes its newlines as they are
            entry.sql.append(raw)
        elif raw.startswith("# Time: "):
            second, exact = _slow_stamp(raw[len("# Time: "):].strip(), number)
        elif raw.startswith("# User@Host: "):
            user = SLOW_USER.match(raw)
            entry.user = user.group(1) if user else ""
            if (thread := SLOW_THREAD.search(raw)) is not None:
                entry.thread = _thread(thread.group(1), number)
        elif raw.startswith("# Thread_id: "):
            entry.thread = _thread(SLOW_THREAD.search(raw).group(1), number)
            if (schema := SLOW_SCHEMA.search(raw)) is not None:
                entry.schema = schema.group(1)
        elif raw.startswith("# Query_time: "):
            value = SLOW_QUERY_TIME.match(raw).group(1)
            try:
                entry.query_time = float(value)
            except ValueError:
                entry.query_time = math.nan
            if not 0 <= entry.query_time <= MAX_QUERY_TIME_S:
                raise LogProblem(number, f"{value[:30]!r} is not a Query_time (seconds, from 0 to {MAX_QUERY_TIME_S:g})")
        elif raw.startswith("#"):
            continue  # more of what the server says of the statement (rows, log_slow_verbosity's lines)
        elif (use := SLOW_USE.match(raw)) is not None:
            logged_database = use.group(1).strip("`").replace("``", "`")
            entry.use = (raw, number)
        elif (stamp := SLOW_TIMESTAMP.match(raw)) is not None:
            if not stamp.group(1).isdigit() or int(stamp.group(1)) > 2**37:
                raise LogProblem(number, f"{stamp.group(1)[:30]!r} is not a time in seconds since 1970")
            if second is None:  # before the log's first `# Time:`: the second the statement started in
                entry.second = float(stamp.group(1))
        else:
            entry.sql, entry.sql_line = [raw], number
        if second is not None:
            entry.second, entry.exact = second, exact
        if entry.schema is None and logged_database is not None:
            entry.schema = logged_database
    if entry is not None:
        yield entry


def _slow_events(text: str) -> Iterator[tuple[int, float, int, str, str]]:
    """The slow log's entries as the general log's events (module docstring): each session's Connect
    at its first statement's start, its Init DB where its database changes, its Quit where its last
    statement ends; in the order they start."""
    entries = list(_slow_entries(text))
    by_second: dict[float, list[_SlowEntry]] = {}
    for entry in entries:
        if entry.sql is None and entry.use is not None:
            entry.sql, entry.sql_line = [entry.use[0]], entry.use[1]
        if entry.sql is None:
            raise LogProblem(entry.line, "an entry without its statement")
        if entry.thread is None:
            raise LogProblem(entry.line, "an entry without its thread ('# Thread_id:', or 'Id:' on its '# User@Host:' line)")
        if entry.query_time is None:
            raise LogProblem(entry.line, "an entry without its '# Query_time:'")
        if entry.second is None:
            raise LogProblem(entry.line, "an entry without its time (a '# Time:' line before it, or its 'SET timestamp=')")
        if not entry.exact:
            by_second.setdefault(entry.second, []).append(entry)
    ended: dict[int, float] = {}  # the entry's line -> when it ended
    for second, group in by_second.items():
        for k, entry in enumerate(group):
            ended[entry.line] = second + k / len(group)
    events: list[tuple[float, int, int, str, str]] = []  # (at, order, thread, command, argument) with its line
    last_start: dict[int, float] = {}
    database: dict[int, str] = {}
    last_entry: dict[int, tuple[_SlowEntry, float]] = {}
    for entry in entries:
        sql = "\n".join(entry.sql)
        if sql.startswith(ADMINISTRATOR):
            continue
        sql = sql[:-1] if sql.endswith(";") else sql
        end = ended.get(entry.line, entry.second)
        # A session's statements do not overlap: one spread within its second keeps its place after the last.
        start = max(end - entry.query_time, last_start.get(entry.thread, -math.inf))
        last_start[entry.thread] = start
        if entry.thread not in database:
            database[entry.thread] = entry.schema or ""
            events.append((start, len(events), entry.thread, "Connect",
                           f"{entry.user}@localhost on {entry.schema or ''}", entry.line))
        elif entry.schema and entry.schema != database[entry.thread]:
            database[entry.thread] = entry.schema
            events.append((start, len(events), entry.thread, "Init DB", entry.schema, entry.line))
        events.append((start, len(events), entry.thread, "Query", sql, entry.sql_line))
        last_entry[entry.thread] = (entry, max(start, end))
    for thread, (entry, end) in last_entry.items():
        events.append((end, len(events), thread, "Quit", "", entry.sql_line))
    for at, _, thread, command, argument, number in sorted(events):
        yield number, at, thread, command, argument


def _skeleton(sql: str) -> str:
    """The statement as the server parses it: comments out, executable comments opened, quoted text emptied."""
    sql = QUOTED.sub("''", sql)
    sql = COMMENT.sub(" ", sql)
    return EXECUTABLE.sub(" ", sql)


def refusal(sql: str) -> str | None:
    """Why storlab will not replay `sql` (any of its statements, when it holds several), or None."""
    for statement in _skeleton(sql).split(";"):
        statement = statement.strip().lstrip("(").strip()
        if not statement:
            continue
        for pattern, why in REFUSED_STATEMENTS:
            if pattern.match(statement):
                return why
        if INTO_FILE.search(statement):
            return "SELECT ... INTO OUTFILE writes a file on the server's machine"
        if DEFINER.match(statement):
            return "a DEFINER clause runs code as another account"
    return None


@functools.lru_cache(maxsize=8)
def read(text: str, database: str | None = None) -> MariadbLog:
    """What a replay of the log does (of the sessions in `database`, or all); LogProblem naming the
    line where it is malformed or holds what storlab will not replay, or when it replays nothing."""
    table = text.startswith("event_time")
    slow = not table and is_slow(text)
    raw = _table_events(text) if table else _slow_events(text) if slow else _file_events(text)
    sessions: dict[int, int] = {}  # thread id -> session number
    quit_at: dict[int, int] = {}  # thread id -> the line of its Quit
    last_at: dict[int, float] = {}
    in_database: dict[int, str] = {}
    found: list[tuple[float, int, str, str, int]] = []
    for number, at, thread, command, argument in raw:
        if command in REFUSED_COMMANDS:
            raise LogProblem(number, f"{REFUSED_COMMANDS[command]}: storlab will not replay it")
        if command not in REPLAYED and command not in PASSED:
            raise LogProblem(number, f"{command[:30]!r} is not a command the general log writes")
        if thread in quit_at:
            raise LogProblem(number, f"thread {thread} is used after it quit (line {quit_at[thread]})")
        if thread in last_at and at < last_at[thread]:
            raise LogProblem(number, f"thread {thread}'s event is earlier than its event before: a session's events "
                             "are logged in the order they happen")
        last_at[thread] = at
        what = REPLAYED.get(command)
        if what is None:
            continue
        if what == "connect":
            if thread in sessions:
                raise LogProblem(number, f"thread {thread} connects again without quitting")
            named = CONNECT_DATABASE.search(argument)
            if named and named.group(1):
                in_database[thread] = named.group(1)
            argument = ""
        elif what == "use":
            argument = argument.strip()
            if not argument:
                raise LogProblem(number, "an Init DB without its database")
            in_database.setdefault(thread, argument)
        elif what == "query":
            why = refusal(argument)
            if why is not None:
                raise LogProblem(number, f"{why}: storlab will not replay it ({argument.strip()[:80]!r})")
            use = re.fullmatch(r"\s*USE\s+`?([^`\s;]+)`?\s*;?\s*", argument, re.I)
            if use:
                in_database.setdefault(thread, use.group(1))
                what, argument = "use", use.group(1)
        else:
            quit_at[thread] = number
            if thread not in sessions:  # a session begun before the capture: nothing of it is replayed
                continue
            argument = ""
        sessions.setdefault(thread, len(sessions))
        found.append((at, sessions[thread], what, argument, number))
    databases = tuple(dict.fromkeys(in_database.values()))
    if database is not None:
        of_database = {sessions[t] for t, d in in_database.items() if d == database}
        found = [f for f in found if f[1] in of_database]
    if not any(f[2] == "query" for f in found):
        raise LogProblem(1, "no statement to replay: capture with general_log = ON (Query and Execute events)")
    first = min(f[0] for f in found)
    latest = max(found, key=lambda f: f[0])
    renumbered: dict[int, int] = {}
    events, open_now, opening = [], set(), set()
    most = most_line = 0
    statements = 0
    for at, session, what, argument, number in found:
        session = renumbered.setdefault(session, len(renumbered))
        events.append(Event(at - first, session, what, argument, number))
        if at - first <= OPENING_S:
            opening.add(session)
        if what == "quit":
            open_now.discard(session)
        else:
            open_now.add(session)
        if len(open_now) > most:
            most, most_line = len(open_now), number
        statements += what == "query"
    return MariadbLog(tuple(events), statements, len(renumbered), latest[0] - first, (found[0][4], latest[4]),
                      max(1, len(opening)), max(1, most), most_line, databases,
                      not table and not (slow and SLOW_EXACT.search(text)))


REPLAYER_KINDS = {"connect": "C", "query": "Q", "use": "U", "quit": "X"}


def for_replayer(log: MariadbLog, replayed_database: str | None) -> str:
    """The log as storlab's replayer reads it: a line per event, `microseconds<TAB>session<TAB>C|Q|U|X<TAB>
    the captured log's line<TAB>statement`, the statement escaped as --batch escapes it. A change to the replayed database (the
    one named, or the log's only one) becomes a change to the workload's; to another, it is kept and fails."""
    out = []
    for event in log.events:
        kind = REPLAYER_KINDS[event.kind]
        text = event.text
        if event.kind == "use":
            if replayed_database is None or text == replayed_database:
                text = ""
            else:
                kind, text = "Q", f"USE `{text}`"
        out.append(f"{round(event.at_s * 1e6)}\t{event.session}\t{kind}\t{event.line}\t{escape(text)}\n")
    return "".join(out)
