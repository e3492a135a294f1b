"""Seed 004 on MariaDB: a general log (the table's dump, with microseconds, or the file log, whole
seconds) replayed by storlab's own replayer: every statement of the log run once per run, counted in
the server; errors counted by their number without stopping the replay; the replayer a client like
every other (not root, in the run's clients' group, gone with its run); and every malformed or
hostile log refused in one line naming its line, exit 2, before anything starts."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest

from storlab.engines import provision
from storlab.errors import RunFailed
from storlab.lab import os_users, owned
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads import mariadb_log, mariadb_replay
from tests.commands import invoke, start, storlab
from tests.conftest import prepared, stop_storlab
from tests.experiments import REPLAY
from tests.store_edits import edit, single_cell, submit, worker_refuses

START = datetime(2026, 1, 5, 9, 0, 0)
SETUP = "CREATE TABLE known (id int PRIMARY KEY, session int NOT NULL);\n"
HEADER = "event_time\tthread_id\tcommand_type\targument"


def stamp(ms: float) -> str:
    return (START + timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")


def known_log(sessions: int = 3, each: int = 20, duplicate: bool = False, span_ms: float = 2000) -> str:
    """`sessions` sessions of a shop's user inserting `each` numbered rows apiece, interleaved over
    `span_ms`, as `mariadb --batch` dumps mysql.general_log; `duplicate`: every other insert repeats
    the one before it."""
    lines = [HEADER] + [f"{stamp(s)}\t{10 + s}\tConnect\tshop@localhost on orders using Socket" for s in range(sessions)]
    lines += [f"{stamp(s + 0.5)}\t{10 + s}\tQuery\tSET NAMES utf8mb4" for s in range(sessions)]
    k = 0
    step = (span_ms - 20) / each
    for i in range(each):
        for s in range(sessions):
            k += 1
            n = k // 2 + k % 2 if duplicate else k
            lines.append(f"{stamp(10 + i * step + s * 0.01)}\t{10 + s}\tQuery\tINSERT INTO known VALUES ({n}, {s})")
    lines += [f"{stamp(span_ms + s)}\t{10 + s}\tQuit\t" for s in range(sessions)]
    return "\n".join(lines) + "\n"


def many_log(sessions: int) -> str:
    """`sessions` sessions connected one after another, each inserting a row, all open at once."""
    lines = [HEADER] + [f"{stamp(s * 0.1)}\t{10 + s}\tConnect\tshop@localhost on orders using Socket"
                        for s in range(sessions)]
    lines += [f"{stamp(1000 + s * 0.1)}\t{10 + s}\tQuery\tINSERT INTO known VALUES ({s}, {s})" for s in range(sessions)]
    lines += [f"{stamp(2000 + s * 0.1)}\t{10 + s}\tQuit\t" for s in range(sessions)]
    return "\n".join(lines) + "\n"


FILE_LOG = """/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-0+deb12u1 (Debian 12). started with:
Tcp port: 0  Unix socket: /tmp/storlab-ma5270b93b/mysqld.sock
Time\t\t    Id Command\tArgument
260105  9:00:00\t     6 Connect\tshop@localhost on orders using Socket
\t\t     6 Query\tINSERT INTO known VALUES (1, 0)
\t\t     7 Connect\tshop@localhost on orders using Socket
\t\t     6 Query\tINSERT INTO known VALUES (2,
0)
260105  9:00:01\t     7 Query\tINSERT INTO known VALUES (3, 1)
\t\t     6 Init DB\torders
\t\t     6 Quit\t
\t\t     7 Quit\t
"""

SLOW_LOG = """/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-0+deb12u1-log (Debian 12). started with:
Tcp port: 0  Unix socket: /tmp/storlab-ma5270b93b/mysqld.sock
Time\t\t    Id Command\tArgument
# Time: 260105  9:00:00
# User@Host: shop[shop] @ localhost []
# Thread_id: 6  Schema: orders  QC_hit: No
# Query_time: 0.000200  Lock_time: 0.000045  Rows_sent: 0  Rows_examined: 0
# Rows_affected: 1  Bytes_sent: 11
use orders;
SET timestamp=1767603600;
INSERT INTO known VALUES (1, 0);
# User@Host: shop[shop] @ localhost []
# Thread_id: 7  Schema: orders  QC_hit: No
# Query_time: 0.300000  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 0
# Rows_affected: 0  Bytes_sent: 67
SET timestamp=1767603600;
INSERT INTO known
VALUES (2, 1);
# Time: 260105  9:00:01
# User@Host: shop[shop] @ localhost []
# Thread_id: 6  Schema: orders  QC_hit: No
# Query_time: 0.100000  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
# Rows_affected: 1  Bytes_sent: 11
SET timestamp=1767603600;
INSERT INTO known VALUES (3, 0);
"""
# MySQL's form: a microsecond stamp, the thread on the User@Host line.
SLOW_LOG_EXACT = """# Time: 2026-01-05T09:00:00.500000Z
# User@Host: shop[shop] @ localhost []  Id:     8
# Query_time: 0.250000  Lock_time: 0.000000 Rows_sent: 0  Rows_examined: 0
use orders;
SET timestamp=1767603600;
INSERT INTO known VALUES (1, 0);
# Time: 2026-01-05T09:00:00.900000Z
# User@Host: shop[shop] @ localhost []  Id:     8
# Query_time: 0.100000  Lock_time: 0.000000 Rows_sent: 0  Rows_examined: 0
SET timestamp=1767603600;
INSERT INTO known VALUES (2, 0);
"""


def replay_file(keys: str = "", engine: str = "mariadb") -> str:
    """The PostgreSQL replay tests' experiment (tests/test_replay.py), on MariaDB and its general log."""
    return REPLAY.format(engine=engine, layout="", keys=keys).replace('log = "day.log"', 'log = "day.tsv"')


def refused(write_experiment, lab_root: Path, log: str, keys: str = "", setup: str = SETUP,
            engine: str = "mariadb") -> str:
    (lab_root / "day.tsv").write_text(log)
    (lab_root / "setup.sql").write_text(setup)
    body = replay_file(keys, engine)
    done = invoke("run", write_experiment(body), "--dry-run")
    assert done.exit_code == 2, done.output
    assert done.output.count("\n") == 1 and "Traceback" not in done.output, done.output
    return done.output.strip()


# -- the log, without a server -------------------------------------------------------------------


def test_the_table_s_dump_is_read_to_the_microsecond():
    log = mariadb_log.read(known_log(sessions=3, each=20))
    assert (log.statements, log.sessions, log.opening, log.most_at_once) == (63, 3, 3, 3)
    assert log.span_s == pytest.approx(2.002) and log.databases == ("orders",) and not log.whole_seconds
    inserts = [e for e in log.events if e.text.startswith("INSERT")]
    assert inserts[3].at_s == pytest.approx(0.010 + 99 / 1000, abs=1e-6)  # 10 ms + one step of 99 ms


def test_an_argument_s_escapes_are_undone_and_written_again_for_the_replayer():
    text = HEADER + "\n" + f"{stamp(0)}\t5\tQuery\tINSERT INTO t VALUES ('a\\tb\\nc\\\\d')\n"
    log = mariadb_log.read(text)
    assert log.events[0].text == "INSERT INTO t VALUES ('a\tb\nc\\d')"
    assert mariadb_log.for_replayer(log, None) == "0\t0\tQ\t2\tINSERT INTO t VALUES ('a\\tb\\nc\\\\d')\n"


def test_the_file_log_spreads_each_second_s_events_in_their_logged_order():
    log = mariadb_log.read(FILE_LOG)
    assert log.whole_seconds and (log.statements, log.sessions) == (3, 2)
    assert [(e.at_s, e.kind, e.line) for e in log.events] == [
        (0.0, "connect", 4), (0.25, "query", 5), (0.5, "connect", 6), (0.75, "query", 7),
        (1.0, "query", 9), (1.25, "use", 10), (1.5, "quit", 11), (1.75, "quit", 12)]
    assert log.events[3].text == "INSERT INTO known VALUES (2,\n0)"  # a statement's newline as the file writes it


def test_the_slow_log_starts_each_statement_its_query_time_before_it_was_logged():
    log = mariadb_log.read(SLOW_LOG)
    assert log.whole_seconds and (log.statements, log.sessions, log.databases) == (3, 2, ("orders",))
    # The two entries of 9:00:00 ended at 0 and 0.5 s (spread over their second), the third at 1 s; each
    # started its Query_time earlier (the first 0.2 ms before 9:00:00, the log's start).
    assert [(round(e.at_s, 6), e.session, e.kind, e.text, e.line) for e in log.events] == [
        (0.0, 0, "connect", "", 4), (0.0, 0, "query", "INSERT INTO known VALUES (1, 0)", 11),
        (0.2002, 1, "connect", "", 12), (0.2002, 1, "query", "INSERT INTO known\nVALUES (2, 1)", 17),
        (0.5002, 1, "quit", "", 17), (0.9002, 0, "query", "INSERT INTO known VALUES (3, 0)", 25),
        (1.0002, 0, "quit", "", 25)]
    exact = mariadb_log.read(SLOW_LOG_EXACT)
    assert not exact.whole_seconds and exact.sessions == 1
    assert [(round(e.at_s, 6), e.kind) for e in exact.events] == [(0.0, "connect"), (0.0, "query"), (0.55, "query"),
                                                                   (0.65, "quit")]


def test_a_change_to_the_replayed_database_becomes_the_workload_s():
    log = mariadb_log.read(FILE_LOG)
    lines = mariadb_log.for_replayer(log, "orders").splitlines()
    assert lines[5] == "1250000\t0\tU\t10\t"
    assert mariadb_log.for_replayer(log, "stock").splitlines()[5] == "1250000\t0\tQ\t10\tUSE `orders`"


@pytest.mark.parametrize("sql", [
    "SET GLOBAL max_connections = 10", "/*!50000 SET GLOBAL innodb_flush_log_at_trx_commit = 0 */",
    "set session a = 1, @@global.b = 2", "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t", "SHUTDOWN",
    "KILL 5", "SELECT 1; KILL QUERY 7", "GRANT ALL ON *.* TO x", "REVOKE ALL ON *.* FROM x",
    "CREATE USER x IDENTIFIED BY 'y'", "SET PASSWORD FOR x = PASSWORD('y')", "# a comment\nSHUTDOWN",
    "SELECT * INTO OUTFILE '/tmp/x' FROM t", "CREATE DEFINER = root@localhost PROCEDURE p() SELECT 1",
    "INSTALL SONAME 'ha_connect'"])
def test_what_storlab_will_not_replay_is_seen_however_written(sql):
    assert mariadb_log.refusal(sql) is not None


@pytest.mark.parametrize("sql", ["SELECT 'SET GLOBAL x = 1'", "SELECT 1 -- KILL 5", "SET SESSION sql_mode = ''",
                                 "INSERT INTO kill_list VALUES (1)", "SELECT @@global.max_connections"])
def test_a_statement_that_only_names_a_refused_one_is_replayed(sql):
    assert mariadb_log.refusal(sql) is None


# -- refused before anything starts ----------------------------------------------------------------

LOG = known_log()


@pytest.mark.parametrize("log, said", [
    (LOG.replace(HEADER, "event_time\tid\tcommand\targument"), "workload.log: day.tsv line 1: the first line is not "
     "the dump's header (event_time, thread_id, command_type, argument separated by tabs, as mariadb --batch writes it)"),
    (LOG.replace(HEADER, "time\tid\tcommand\targument"), "workload.log: day.tsv line 1: neither the header of "
     "mysql.general_log's dump"),
    (LOG.replace("2026-01-05 09:00:00.010000", "2026-01-05 09:00:00", 1), "day.tsv line 8: '2026-01-05 09:00:00' "
     "is not a time as the general log's table stamps it (YYYY-MM-DD HH:MM:SS.ffffff)"),
    (LOG.replace("2026-01-05 09:00:00.010000", "2026-13-45 09:00:00.010000", 1), "day.tsv line 8: "
     "'2026-13-45 09:00:00.010000' is not a time: no such date or time of day"),
    (LOG.replace("\t11\tQuery", "\t-11\tQuery", 1), "day.tsv line 6: '-11' is not a thread id (a whole number from 1"),
    (LOG.replace("\t11\tQuery", "\t0x1f\tQuery", 1), "day.tsv line 6: '0x1f' is not a thread id"),
    (LOG + f"{stamp(3000)}\t10\tQuery\tSELECT 1\n", "day.tsv line 71: thread 10 is used after it quit (line 68)"),
    (LOG.replace("VALUES (4, 0)", "VALUES (4, 0); SET GLOBAL general_log = OFF"), "day.tsv line 11: SET GLOBAL "
     "changes the server for every session: storlab will not replay it"),
    (LOG.replace("INSERT INTO known VALUES (4, 0)", "LOAD DATA LOCAL INFILE '/etc/shadow' INTO TABLE known"),
     "day.tsv line 11: LOAD DATA LOCAL reads a file of the client's machine: storlab will not replay it"),
    (LOG.replace("INSERT INTO known VALUES (4, 0)", "GRANT ALL ON *.* TO shop"), "day.tsv line 11: a privilege "
     "statement: storlab will not replay it"),
    (LOG.replace("\tQuery\tINSERT INTO known VALUES (4, 0)", "\tKill\t12"), "day.tsv line 11: a KILL command ends "
     "another session: storlab will not replay it"),
    (LOG.replace("\tQuery\tINSERT INTO known VALUES (4, 0)", "\tShutdown\t"), "day.tsv line 11: a SHUTDOWN command "
     "stops the server: storlab will not replay it"),
    (LOG.replace("\tQuery\tINSERT INTO known VALUES (4, 0)", "\tDrop table\tknown"), "day.tsv line 11: 'Drop table' "
     "is not a command the general log writes"),
    (LOG.replace("VALUES (4, 0)", "VALUES (4, '\\q')"), "day.tsv line 11: '\\\\q' is not an escape mariadb --batch "
     "writes"),
    (LOG.replace("\tQuery\tINSERT INTO known VALUES (4, 0)", "\tQuery"), "day.tsv line 11: 3 tab-separated fields; "
     "an event has 4"),
    (LOG.replace("2026-01-05 09:00:00.109", "2026-01-05 08:59:59.109", 1), "day.tsv line 11: thread 10's event is "
     "earlier than its event before"),
    (LOG.replace("\tQuery\t", "\tPrepare\t"), "day.tsv line 1: no statement to replay"),
    (LOG.replace("2026-01-05 09:00:02", "2029-01-05 09:00:02"), "workload.log: day.tsv spans 94,694,402 s (line 2 to "
     "line 70): replayed at speed 1 it would run 94,694,402 s, past the run's limit of 86,400 s"),
    (many_log(2001), "workload.log: day.tsv line 2002: 2,001 sessions open at once; storlab's "
     "replayer holds at most 2,000"),
    (FILE_LOG.replace("260105  9:00:01", "260105 25:00:01"), "day.tsv line 9: '260105 25:00:01' is not a time: no "
     "such date or time of day"),
    (FILE_LOG.replace("\t\t     6 Query", "\t\t     x6 Query", 1), "day.tsv line 5: 'x6' is not a thread id"),
    (SLOW_LOG.replace("# Time: 260105  9:00:01", "# Time: 260105 25:00:01"), "day.tsv line 19: '260105 25:00:01' is "
     "not a time: no such date or time of day"),
    (SLOW_LOG.replace("# Time: 260105  9:00:01", "# Time: yesterday"), "day.tsv line 19: 'yesterday' is not a time as "
     "the slow log stamps it"),
    (SLOW_LOG.replace("# Thread_id: 7 ", "# Thread_id: 7x "), "day.tsv line 13: '7x' is not a thread id"),
    (SLOW_LOG.replace("# Thread_id: 7  Schema: orders  QC_hit: No\n", ""), "day.tsv line 12: an entry without its "
     "thread"),
    (SLOW_LOG.replace("# Query_time: 0.300000", "# Query_time: -0.3"), "day.tsv line 14: '-0.3' is not a Query_time"),
    (SLOW_LOG.replace("# Query_time: 0.300000", "# Query_time: nan"), "day.tsv line 14: 'nan' is not a Query_time"),
    (SLOW_LOG.replace("# Query_time: 0.300000  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 0\n", ""),
     "day.tsv line 12: an entry without its '# Query_time:'"),
    (SLOW_LOG.replace("SET timestamp=1767603600;\nINSERT INTO known\n", "SET timestamp=now();\nINSERT INTO known\n"),
     "day.tsv line 16: 'now()' is not a time in seconds since 1970"),
    (SLOW_LOG.replace("INSERT INTO known VALUES (3, 0);", "SET GLOBAL slow_query_log = OFF;"), "day.tsv line 25: SET "
     "GLOBAL changes the server for every session: storlab will not replay it"),
    (SLOW_LOG.replace("INSERT INTO known VALUES (3, 0);", "LOAD DATA LOCAL INFILE '/etc/shadow'\nINTO TABLE known;"),
     "day.tsv line 25: LOAD DATA LOCAL reads a file of the client's machine: storlab will not replay it"),
    (SLOW_LOG.replace("INSERT INTO known VALUES (3, 0);\n", ""), "day.tsv line 19: an entry without its statement"),
    (SLOW_LOG.replace("# Time: 260105  9:00:00\n", "# Time: 260105  9:00:00\nSELECT 1;\n"), "day.tsv line 4: an "
     "entry without its thread"),
    ("SELECT 1;\n" + SLOW_LOG.split("\n", 3)[3], "line 1: neither the header"),
])
def test_a_malformed_or_hostile_log_is_refused_naming_its_line(write_experiment, lab_root, log, said):
    assert said in refused(write_experiment, lab_root, log)


def test_a_log_of_several_databases_asks_which_to_replay(write_experiment, lab_root):
    two = known_log() + "".join(line.replace("\t1", "\t3", 1).replace(" on orders ", " on stock ") + "\n"
                                for line in known_log().splitlines()[1:])
    assert ('workload.log: day.tsv replays sessions of the databases orders, stock: name the one to replay with '
            'database = "orders"') in refused(write_experiment, lab_root, two)
    assert 'workload.database: day.tsv has no session in database "shop"' in refused(
        write_experiment, lab_root, known_log(), keys='database = "shop"')


def test_a_log_of_the_other_engine_is_refused(write_experiment, lab_root):
    pg = "2026-01-05 09:00:00.000 CET|shop|orders|6a.1|LOG:  statement: SELECT 1\n"
    assert ("workload.log: day.tsv is not a MariaDB general or slow log (it reads as a PostgreSQL statement log (a csvlog, or a "
            "stderr log)): replay a log captured on the experiment's engine") in refused(write_experiment, lab_root, pg)
    assert "day.tsv is not a PostgreSQL statement log" in refused(write_experiment, lab_root, known_log(),
                                                                   engine="postgres")


def test_a_setup_that_changes_the_server_is_refused_naming_its_statement(write_experiment, lab_root):
    said = refused(write_experiment, lab_root, known_log(), setup=SETUP + "SET GLOBAL general_log = ON;\n")
    assert said.endswith("workload.setup: setup.sql statement 2 (line 2): SET GLOBAL changes the server for every "
                         "session: storlab will not run it")


# -- against real servers --------------------------------------------------------------------------

# The statements the server ran for the workload's user, by kind: the replayed sessions' alone.
STATEMENTS_RUN = """
    SELECT substring_index(EVENT_NAME, '/', -1), COUNT_STAR
    FROM performance_schema.events_statements_summary_by_user_by_event_name
    WHERE USER = 'lab' AND EVENT_NAME IN ('statement/sql/insert', 'statement/sql/set_option')"""


def replayed(lab_dir: Path, files: dict, **params):
    """The log replayed once on a fresh MariaDB: its measurement, the rows, and the server's count of
    the INSERTs and SETs the workload's user ran."""
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("mariadb", spec, keep=False, connections=4) as instance:
        work, validated = prepared(instance, "replay", files, setup="setup.sql", **params)
        with instance.admin() as conn:
            before = dict(conn.execute(STATEMENTS_RUN).fetchall())
        load = work.load(instance, validated, files)
        try:
            opened = load.open()
            measured = load.run()
        finally:
            load.close()
        with instance.admin() as conn:
            after = dict(conn.execute(STATEMENTS_RUN).fetchall())
            rows = [tuple(row) for row in conn.execute("SELECT id, session FROM lab.known ORDER BY id").fetchall()]
    counted = {name: int(after[name]) - int(before[name]) for name in after}
    return opened, measured, rows, counted


@pytest.mark.engine
def test_every_statement_of_the_log_runs_once_counted_in_the_server(lab_dir):
    files = {"day.tsv": known_log(sessions=3, each=20), "setup.sql": SETUP}
    opened, measured, rows, counted = replayed(lab_dir, files, log="day.tsv", speed=4)
    assert len(opened) == 3  # the log's opening: its three sessions, for the probes
    assert rows == [(n, (n - 1) % 3) for n in range(1, 61)]
    assert counted == {"insert": 60, "set_option": 3}
    f = measured.figures
    assert (f["statements"], f["errors"], f["connections"], f["connections_max"]) == (63, 0, 3, 3)
    assert f["schedule_s"] == pytest.approx(2.002 / 4) and f["elapsed_s"] >= f["schedule_s"]
    assert f["behind_s"] == pytest.approx(f["elapsed_s"] - f["schedule_s"])
    assert 0 <= f["lag_p50_ms"] <= f["lag_p99_ms"] <= 1000 * f["lag_max_s"] * 1.01
    # Each second of the schedule on the run's timeline: its mean and its largest lag, in milliseconds.
    lags = {(t, metric): value for t, metric, value in measured.timeline}
    seconds = sorted({t for t, _ in lags})
    assert seconds and seconds == [float(s) for s in range(len(seconds))] and len(lags) == 2 * len(seconds)
    assert all(0 <= lags[(t, "replay_lag_ms")] <= lags[(t, "replay_lag_max_ms")] for t in seconds)
    assert max(lags[(t, "replay_lag_max_ms")] for t in seconds) == pytest.approx(1000 * f["lag_max_s"], rel=0.01)


@pytest.mark.engine
def test_the_file_log_replays_every_statement(lab_dir):
    files = {"day.tsv": FILE_LOG, "setup.sql": SETUP}
    _, measured, rows, counted = replayed(lab_dir, files, log="day.tsv", speed=2)
    assert rows == [(1, 0), (2, 0), (3, 1)] and counted["insert"] == 3
    assert (measured.figures["statements"], measured.figures["errors"]) == (3, 0)


def slow_log_of(lab_dir: Path) -> str:
    """MariaDB's own slow log (long_query_time = 0) of two sessions of the workload's user inserting
    rows, one of them first changing its database."""
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("mariadb", spec, keep=False, connections=4) as instance:
        with instance.admin() as admin:
            admin.execute(SETUP.replace("known", "lab.known"))
            path = Path(admin.execute("SELECT @@datadir").fetchone()[0]) / "storlab-slow.log"
            admin.execute(f"SET GLOBAL slow_query_log_file = '{path}'")
            admin.execute("SET GLOBAL long_query_time = 0")
            admin.execute("SET GLOBAL slow_query_log = ON")
            with instance.connect() as one, instance.connect() as two:
                one.execute("USE lab")
                for n in range(1, 11):
                    (one if n % 2 else two).execute(f"INSERT INTO known VALUES ({n}, {n % 2})")
                    time.sleep(0.01)
            admin.execute("SET GLOBAL slow_query_log = OFF")
        return path.read_text()


@pytest.mark.engine
def test_mariadb_s_own_slow_log_replays_every_statement(lab_dir):
    text = slow_log_of(lab_dir)
    assert mariadb_log.is_slow(text) and "# Query_time:" in text and "SET timestamp=" in text
    _, measured, rows, counted = replayed(lab_dir, {"day.log": text, "setup.sql": SETUP}, log="day.log", speed=2)
    assert rows == [(n, n % 2) for n in range(1, 11)] and counted["insert"] == 10
    assert counted["set_option"] == 2  # each session's SET NAMES, as the driver sent it
    assert (measured.figures["statements"], measured.figures["errors"]) == (12, 0)
    assert measured.figures["connections"] == 2


@pytest.mark.engine
def test_errors_are_counted_by_number_and_never_stop_the_replay(lab_dir):
    files = {"day.tsv": known_log(sessions=1, each=6, duplicate=True), "setup.sql": SETUP}
    _, measured, rows, counted = replayed(lab_dir, files, log="day.tsv", speed=10, max_failed_percent=100)
    assert rows == [(1, 0), (2, 0), (3, 0)] and counted["insert"] == 6  # every one sent
    assert (measured.figures["statements"], measured.figures["errors"]) == (7, 3)
    with pytest.raises(RunFailed) as failed:
        replayed(lab_dir, files, log="day.tsv", speed=10)
    assert str(failed.value).startswith(
        "3 of 7 statements failed (42.9 %, more than max_failed_percent = 5): the log does not fit the setup's "
        "database: 3 x error 1062 (Duplicate entry '1' for key 'PRIMARY'), first at day.tsv line 5: "
        "'INSERT INTO known VALUES (1, 0)'")


def clients_seen(run: subprocess.Popen, seconds: float) -> dict[int, tuple[int, str, str]]:
    """Every replayer the run started while it ran: pid -> (its real uid, its control groups, its program)."""
    seen: dict[int, tuple[int, str, str]] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and run.poll() is None:
        for process in psutil.Process(run.pid).children(recursive=True):
            try:
                if process.pid not in seen and process.name() == "storlab-mariadb-replay" and process.cmdline():
                    seen[process.pid] = (process.uids().real, Path(f"/proc/{process.pid}/cgroup").read_text(),
                                         process.exe())
            except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError):
                continue
        if seen:
            return seen
        time.sleep(0.02)
    return seen


@pytest.mark.engine
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_the_replayer_is_the_client_user_s_and_ends_with_its_run(write_experiment, lab_root, tmp_path, how):
    (lab_root / "day.tsv").write_text(known_log(sessions=3, each=100, span_ms=60_000))
    (lab_root / "setup.sql").write_text(SETUP)
    run = start("run", write_experiment(replay_file()), "--no-trace", "--out", tmp_path / "r")
    try:
        seen = clients_seen(run, 120)
        assert seen, run.stderr.read() if run.poll() is not None else "no replayer seen"
        client = os_users.client_user()
        for uid, groups, program in seen.values():
            assert uid == client.uid and uid != 0 and "-clients" in groups
            # The venv's own program, run from root's descriptor: no copy in /tmp (which may be noexec).
            assert program == str(mariadb_replay.program())
        run.send_signal(how)
        run.wait(60)
        if how == signal.SIGINT:
            assert run.returncode == 130
        deadline = time.monotonic() + 10  # the kernel ends the replayer with storlab (its parent-death signal)
        while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in seen):
            time.sleep(0.05)
        assert not [pid for pid in seen if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    finally:
        stop_storlab(run)
    assert owned.Manifest.all() == []


@pytest.mark.engine
def test_a_replay_s_errors_are_shown_by_kind_in_show_and_the_report(write_experiment, lab_root, tmp_path):
    (lab_root / "day.tsv").write_text(known_log(sessions=1, each=6, duplicate=True))
    (lab_root / "setup.sql").write_text(SETUP)
    out = tmp_path / "r"
    done = storlab("run", str(write_experiment(replay_file("speed = 10\nmax_failed_percent = 100"))), "--no-trace",
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    detailed = storlab("show", str(out), "--details")
    assert detailed.returncode == 0, detailed.stderr
    assert ("replay errors in (single cell) (" in detailed.stdout and "): 3 x error 1062 (Duplicate entry '1' for key "
            "'PRIMARY') in 1 of 1 runs, first at day.tsv line 5: 'INSERT INTO known VALUES (1, 0)'"
            in " ".join(detailed.stdout.split())), detailed.stdout
    assert storlab("report", str(out)).returncode == 0
    page = (out / "report.html").read_text()
    section = page[page.index("<h2>Replay errors by kind</h2>"):]
    assert "error 1062 (Duplicate entry &#x27;1&#x27; for key &#x27;PRIMARY&#x27;)" in section[:2000]
    assert "day.tsv line 5" in section[:2000]


@pytest.mark.engine
def test_a_worker_skips_a_stored_mariadb_log_it_cannot_read(store_server, write_experiment, lab_root):
    (lab_root / "day.tsv").write_text(known_log())
    (lab_root / "setup.sql").write_text(SETUP)
    replayed = write_experiment(replay_file().replace("./disk", "disk"), "edited.toml")
    submit(store_server, replayed, write_experiment(single_cell("other"), "other.toml"))
    edit(store_server, "replayed", "files = %s", json.dumps(  # a time no clock has
        {"day.tsv": known_log().replace("2026-01-05 09:00:00.010000", "2026-13-45 09:00:00.010000", 1),
         "setup.sql": SETUP}))
    worker_refuses(store_server, lab_root, "replayed", "replayed: not taken by db1: replayed.toml:13: workload.log: "
                   "day.tsv line 8: '2026-13-45 09:00:00.010000' is not a time: no such date or time of day")
