"""Seed 004's pre-production test: a captured statement log replayed by pgreplay (every statement's
effect found in the database, once), a replay whose statements fail refused as a failed run with the
server's first error, `storlab capture` writing a log the replay reads, the temporary files moved by
temp_on on both engines and shown as their own object, and every refusal one line, exit 2, before
anything starts."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from storlab.engines import provision
from storlab.errors import RunFailed
from storlab.experiment import file as experiment
from storlab.lab.layout import CellLayout, spec_for
from storlab.probes import bpftrace
from storlab.probes.bpftrace import Tracing
from storlab.workloads import captured_log
from storlab.workloads.replay import setup_statements
from tests.commands import invoke, storlab
from tests.conftest import prepared
from tests.experiments import REPLAY
from tests.store_edits import edit, single_cell, submit, worker_refuses

START = datetime(2026, 1, 5, 9, 0, 0)
SETUP = "CREATE TABLE known (id int PRIMARY KEY, session int NOT NULL);\n"


def stamp(ms: float) -> str:
    return (START + timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")[:23] + " CET"


def known_log(sessions: int = 3, each: int = 20, duplicate: bool = False) -> str:
    """`sessions` sessions of a shop's role inserting `each` numbered rows apiece, interleaved over two
    captured seconds (as log_line_prefix = '%m|%u|%d|%c|' writes them); `duplicate`: every other
    insert repeats the one before it."""
    lines = [f"{stamp(s)}|shop|orders|6a{s:02x}.1|LOG:  connection authorized: user=shop database=orders"
             for s in range(sessions)]
    k = 0
    for i in range(each):
        for s in range(sessions):
            k += 1
            n = k // 2 + k % 2 if duplicate else k  # 1, 1, 2, 2, ...
            lines.append(f"{stamp(10 + i * 90 + s)}|shop|orders|6a{s:02x}.1|LOG:  statement: "
                         f"INSERT INTO known VALUES ({n}, {s})")
    lines += [f"{stamp(2000 + s)}|shop|orders|6a{s:02x}.1|LOG:  disconnection: session time: 0:00:02.000 "
              f"user=shop database=orders host=[local]" for s in range(sessions)]
    return "\n".join(lines) + "\n"




def refused(write_experiment, lab_root: Path, keys: str = "", layout: str = "", engine: str = "postgres",
            log: str | None = None) -> str:
    (lab_root / "day.log").write_text(known_log() if log is None else log)
    (lab_root / "setup.sql").write_text(SETUP)
    done = invoke("run", write_experiment(REPLAY.format(engine=engine, layout=layout, keys=keys)), "--dry-run")
    assert done.exit_code == 2, done.output
    assert done.output.count("\n") == 1 and "Traceback" not in done.output
    return done.output.strip()


# -- the log, without a server -------------------------------------------------------------------


def test_a_log_is_read_as_pgreplay_reads_it():
    log = captured_log.read(known_log(sessions=3, each=20), is_csv=False)
    assert (log.statements, log.sessions, log.opening, log.most_at_once) == (60, 3, 3, 3)
    assert log.span_s == pytest.approx(2.002) and log.databases == ("orders",)


def test_a_csvlog_is_read_and_rewritten_for_the_workload_s_role_and_database():
    import csv
    import io

    rows = [[stamp(0), "shop", "orders", "1", "[local]", "6a.1", "1", "idle", stamp(0), "3/1", "0", "LOG", "00000",
             "statement: INSERT INTO known VALUES (1, 'a, \"quoted\"\nline')", "", "", "", "", "", "", "", "", "client", "0"],
             [stamp(500), "shop", "orders", "1", "[local]", "6a.1", "2", "idle", stamp(0), "3/1", "0", "LOG", "00000",
              "disconnection: session time: 0:00:00.500", "", "", "", "", "", "", "", "", "client", "0"]]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    log = captured_log.read(buffer.getvalue(), is_csv=True)
    assert (log.statements, log.sessions, log.span_s) == (1, 1, pytest.approx(0.5))
    text, origin = captured_log.for_replay(buffer.getvalue(), True, "lab", "postgres")
    again = list(csv.reader(io.StringIO(text, newline="")))
    assert [r[1:3] for r in again] == [["lab", "postgres"]] * 2 and again[0][13] == rows[0][13]
    assert origin == [1, 2, 3]  # the statement spans two lines, each named as the log numbers it


def test_the_replay_s_log_keeps_each_line_s_place_in_the_captured_one():
    text = known_log(sessions=1, each=2).replace("VALUES (2, 0)", "VALUES (2,\n\t0)")
    out, origin = captured_log.for_replay(text, False, "lab", "postgres")
    assert out.count("|lab|postgres|") == 4 and "|shop|" not in out
    assert origin == [1, 2, 3, 4, 5] and out.splitlines()[3] == "\t0)"


def test_a_plain_dump_s_copy_rows_are_sent_as_they_are():
    dump = ("SET client_encoding = 'UTF8';\nCREATE TABLE t (a int, b text);\n\n"
            "COPY public.t (a, b) FROM stdin;\n1\tx;y\n2\t'quoted'\n\\.\n\nCREATE INDEX ON t (a);\n")
    steps = setup_statements(dump, "dump.sql")
    assert [s.where if not isinstance(s, tuple) else s[0].where for s in steps] == [
        "dump.sql statement 1 (line 1)", "dump.sql statement 2 (line 2)", "dump.sql COPY (line 4)",
        "dump.sql statement 4 (line 9)"]
    assert steps[2][0].sql == "COPY public.t (a, b) FROM stdin" and steps[2][1] == "1\tx;y\n2\t'quoted'\n"


# -- refused before anything starts ----------------------------------------------------------------


@pytest.mark.parametrize("log, said", [
    ("2026-01-05 09:00:00.000 CET LOG:  statement: SELECT 1\n",
     "workload.log: day.log line 1: 0 of the prefix's four '|' found: each line must start as log_line_prefix = "
     "'%m|%u|%d|%c|' writes it"),
    (known_log().replace("|6a01.1|", "|6a01|", 1), "workload.log: day.log line 2: '6a01' is not a session id"),
    (known_log().replace("2026-01-05 09:00:00.100", "09:00:00", 1), "day.log line 7: '09:00:00 CET' is not a time as "
     "%m writes it (YYYY-MM-DD HH:MM:SS.FFF)"),
    (known_log().replace("VALUES (4, 0)", "VALUES (4, 'open)"), "day.log: pgreplay cannot parse it: Error: string "
     "literal not closed near line 7"),
    (known_log().replace("statement: ", "duration: 0.1 ms  statement: "), "day.log line 1: no statement to replay"),
    (known_log() + "\n" + known_log(), "day.log line 67: an empty line"),
    (known_log().replace("2026-01-05 09:00:00.100", "2026-13-45 09:00:00.100", 1),
     "day.log line 7: '2026-13-45 09:00:00.100' is not a time: no such date or time of day"),
    (known_log().replace("2026-01-05 09:00:00.100", "2026-01-05 99:99:99.100", 1), "day.log line 7: '2026-01-05 "
     "99:99:99.100' is not a time"),
    (known_log().replace("2026-01-05 09:00:00.100", "0000-01-05 09:00:00.100", 1), "day.log line 7: '0000-01-05 "
     "09:00:00.100' is not a time"),
    (known_log(sessions=1021, each=1), "workload.log: day.log line 1021: 1,021 sessions open at once; pgreplay holds at "
     "most 1,020 (it watches each session's socket with select(), which holds 1,024 descriptors)"),
    (known_log().replace("2026-01-05 09:00:02", "2029-01-05 09:00:02"), "workload.log: day.log spans 94,694,402 s (line "
     "1 to line 66): replayed at speed 1 it would run 94,694,402 s, past the run's limit of 86,400 s "
     "(workload.run_limit_s)"),
])
def test_a_log_pgreplay_cannot_parse_is_refused_naming_its_line(write_experiment, lab_root, log, said):
    assert said in refused(write_experiment, lab_root, log=log)


@pytest.mark.parametrize("keys, layout, said", [
    ("speed = 0", "", "exp.toml:15: workload.speed: expected a speed factor above 0 (1: the captured timing; 2: "
                      "twice as fast) or a list of them, got 0"),
    ("speed = [1, -2]", "", "workload.speed: expected a speed factor above 0"),
    ("speed = 5000", "", "workload.speed: 5000 times the captured speed is more than the limit of 1000"),
    ("max_failed_percent = 120", "", "workload.max_failed_percent: expected a percentage from 0 to 100"),
    ("", 'temp_on = "fast"', 'exp.toml:10: layout.temp_on: unknown placement "fast" (declared: disk, ram)'),
    ("", 'temp_on = ["ram", "nvme"]', 'layout.temp_on: unknown placement "nvme"'),
    ("", "temp_on = { disk = 1, ram = 1 }", "layout.temp_on: the temporary files live on one placement"),
    ('database = "stock"', "", 'workload.database: day.log has no session in database "stock" (its databases: orders)'),
])
def test_bad_replay_input_is_one_line(write_experiment, lab_root, keys, layout, said):
    text = REPLAY.format(engine="postgres", layout=layout, keys="")
    (lab_root / "day.log").write_text(known_log())
    (lab_root / "setup.sql").write_text(SETUP)
    done = invoke("run", write_experiment(text.replace('setup = "setup.sql"', f'setup = "setup.sql"\n{keys}')),
                  "--dry-run")
    assert done.exit_code == 2 and done.output.count("\n") == 1, done.output
    assert said in done.output


@pytest.mark.parametrize("copy", ["COPY known TO stdout;", "copy (SELECT 1) to STDOUT WITH (FORMAT csv);",
                                  "COPY known FROM stdin;"])
def test_a_setup_s_copy_to_or_from_the_client_is_refused_naming_its_line(write_experiment, lab_root, copy):
    (lab_root / "day.log").write_text(known_log())
    (lab_root / "setup.sql").write_text(SETUP + copy + "\n")
    done = invoke("run", write_experiment(REPLAY.format(engine="postgres", layout="", keys="")), "--dry-run")
    assert done.exit_code == 2 and done.output.count("\n") == 1, done.output
    assert done.output == ("storlab: exp.toml:14: workload.setup: setup.sql statement 2 (line 2): a COPY to or from the "
                           "client (TO stdout, or FROM stdin without its rows after it) has no client to talk to in a "
                           "setup; give the rows as a plain pg_dump writes them\n")


def test_a_log_of_several_databases_asks_which_to_replay(write_experiment, lab_root):
    two = known_log() + known_log().replace("|orders|", "|reports|").replace("|6a0", "|7b0")
    assert ('workload.log: day.log replays sessions of the databases orders, reports: name the one to replay with '
            'database = "orders"') in refused(write_experiment, lab_root, log=two)


def test_a_setting_that_temp_on_sets_is_refused(write_experiment, lab_root):
    said = refused(write_experiment, lab_root, keys='\n[engine_settings]\ntemp_tablespaces = "x"',
                   layout='temp_on = "ram"')
    assert "engine_settings.temp_tablespaces: layout.temp_on sets it in this experiment" in said


def test_the_log_and_the_setup_are_part_of_the_experiment(write_experiment, lab_root):
    (lab_root / "day.log").write_text(known_log())
    (lab_root / "setup.sql").write_text(SETUP)
    path = write_experiment(REPLAY.format(engine="postgres", layout='temp_on = ["disk", "ram"]', keys="speed = [1, 4]"))
    loaded = experiment.load(path)
    first = loaded.identity()
    assert sorted(first["sql"]) == ["day.log", "setup.sql"] and first["layout"]["temp_on"] == ["disk", "ram"]
    assert sorted(loaded.factors) == ["layout.temp_on", "workload.speed"]
    (lab_root / "day.log").write_text(known_log(each=5))
    assert experiment.load(path).identity()["sql"]["day.log"] != first["sql"]["day.log"]


def test_capture_refuses_a_file_already_there(write_experiment, lab_root):
    (lab_root / "day.log").write_text("")
    body = REPLAY.format(engine="postgres", layout="", keys="").replace('kind = "replay"', 'kind = "custom"') \
        .replace('log = "day.log"', 'transaction = "setup.sql"')
    (lab_root / "setup.sql").write_text(SETUP)
    done = invoke("capture", write_experiment(body), "--out", lab_root / "day.log")
    assert done.exit_code == 2 and "day.log: already there; capture writes a new file" in done.output


@pytest.mark.device
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only folder needs root")
def test_capture_refuses_a_folder_it_cannot_write_before_the_load_runs(write_experiment, lab_root):
    body = REPLAY.format(engine="postgres", layout="", keys="").replace('kind = "replay"', 'kind = "custom"') \
        .replace('log = "day.log"', 'transaction = "setup.sql"')
    (lab_root / "setup.sql").write_text(SETUP)
    folder = lab_root / "read-only"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=True)
    try:
        done = invoke("capture", write_experiment(body), "--out", folder / "day.log")
        assert done.exit_code == 2, done.output
        assert done.stderr == f"storlab: {folder}: cannot write the log there (not writable: permissions, or a " \
            "read-only filesystem)\n"
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.skipif(os.getuid() != 0, reason="a link another user made is refused only when storlab runs as root")
def test_capture_refuses_a_folder_reached_through_another_user_s_link_and_no_folder_before_the_load_runs(
        write_experiment, lab_root):
    body = REPLAY.format(engine="postgres", layout="", keys="").replace('kind = "replay"', 'kind = "custom"') \
        .replace('log = "day.log"', 'transaction = "setup.sql"')
    (lab_root / "setup.sql").write_text(SETUP)
    target = lab_root / "elsewhere"
    target.mkdir()
    linked = lab_root / "linked"
    linked.symlink_to(target)
    os.lchown(linked, 65534, 65534)  # nobody's link
    path = write_experiment(body)
    done = invoke("capture", path, "--out", linked / "day.log")
    assert done.exit_code == 2, done.output
    assert done.stderr == (f"storlab: {linked}: linked is a link storlab did not make; capture writes the log through "
                           "no link another user made\n")
    done = invoke("capture", path, "--out", "")
    assert done.exit_code == 2 and done.stderr == "storlab: --out: give the name of the log file to write, not a folder\n"
    assert not list(target.iterdir()) and not (lab_root / "disk").exists()  # nothing ran


# -- against real servers --------------------------------------------------------------------------


@pytest.mark.engine
def test_every_row_the_log_inserts_is_there_once(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    files = {"day.log": known_log(sessions=3, each=20), "setup.sql": SETUP}
    with provision("postgres", spec, keep=False, connections=3) as instance:
        work, params = prepared(instance, "replay", files, log="day.log", setup="setup.sql", speed=4)
        load = work.load(instance, params, files)
        try:
            assert len(load.open()) == 3  # the log's opening: its three sessions, for the probes
            measured = load.run()
        finally:
            load.close()
        with instance.connect() as conn:
            rows = conn.execute("SELECT id, session FROM known ORDER BY id").fetchall()
    assert rows == [(n, (n - 1) % 3) for n in range(1, 61)]
    f = measured.figures
    assert (f["statements"], f["errors"], f["connections"]) == (60, 0, 3)
    assert f["schedule_s"] == pytest.approx(2.002 / 4) and f["elapsed_s"] == measured.elapsed_s
    assert f["behind_s"] == pytest.approx(f["elapsed_s"] - f["schedule_s"])


@pytest.mark.engine
def test_a_replay_whose_statements_fail_is_a_failed_run_with_the_first_error(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    files = {"day.log": known_log(sessions=1, each=6, duplicate=True), "setup.sql": SETUP}
    with provision("postgres", spec, keep=False, connections=3) as instance:
        work, params = prepared(instance, "replay", files, log="day.log", setup="setup.sql", speed=10)
        load = work.load(instance, params, files)
        try:
            load.open()
            with pytest.raises(RunFailed) as failed:
                load.run()
        finally:
            load.close()
    assert str(failed.value).startswith("3 of 6 statements failed (50.0 %, more than max_failed_percent = 5): the log "
                                        "does not fit the setup's database; the first error: duplicate key value "
                                        'violates unique constraint "known_pkey" (statement: INSERT INTO known VALUES (1, 0))')


@pytest.mark.engine
def test_a_replay_keeps_its_errors_by_kind_as_the_server_logged_them(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    files = {"day.log": known_log(sessions=1, each=6, duplicate=True), "setup.sql": SETUP}
    with provision("postgres", spec, keep=False, connections=3) as instance:
        work, params = prepared(instance, "replay", files, log="day.log", setup="setup.sql", speed=10,
                                max_failed_percent=100)
        load = work.load(instance, params, files)
        try:
            load.open()
            measured = load.run()
        finally:
            load.close()
    message = 'duplicate key value violates unique constraint "known_pkey"'
    assert measured.kept == {"log": "day.log", "errors": [
        {"error": message, "count": 3, "line": 0, "message": message, "statement": "INSERT INTO known VALUES (1, 0)"}]}


@pytest.mark.engine
def test_a_captured_workload_replays(write_experiment, lab_root, tmp_path):
    """storlab capture of a custom workload, then storlab run of its replay: the log holds the load's
    statements (not the setup's, nor storlab's own), and the replay runs every one of them."""
    (lab_root / "setup.sql").write_text(SETUP.replace("int PRIMARY KEY", "int GENERATED ALWAYS AS IDENTITY PRIMARY KEY"))
    (lab_root / "txn.sql").write_text("INSERT INTO known (session) VALUES (7);\n")
    body = REPLAY.format(engine="postgres", layout="", keys="connections = 2\ntransactions_per_connection = 5") \
        .replace('kind = "replay"', 'kind = "custom"').replace('log = "day.log"', 'transaction = "txn.sql"')
    done = storlab("capture", write_experiment(body, "capture.toml"), "--out", lab_root / "day.log")
    assert done.returncode == 0, done.stderr
    assert "captured 32 statements in 2 sessions" in done.stdout  # 2 x (its pid, 5 x BEGIN, INSERT, COMMIT)
    text = (lab_root / "day.log").read_text()
    assert "CREATE TABLE" not in text and "|storlab|" not in text and text.count("INSERT INTO known") == 10
    out = tmp_path / "replayed"
    ran = storlab("run", write_experiment(REPLAY.format(engine="postgres", layout="", keys="speed = 2")), "--out", out)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    with sqlite3.connect(out / "storlab.sqlite") as db:
        found = dict(db.execute("SELECT name, value FROM figures").fetchall())
    assert (found["statements"], found["errors"]) == (32, 0) and found["elapsed_s"] > 0


SPILL = "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY md5(g::text)) AS r FROM generate_series(1, 200000) AS g) AS t"


@pytest.mark.engine
def test_temp_on_moves_postgresql_s_temporary_files(lab_root):
    disk, fast = lab_root / "disk", lab_root / "fast"
    disk.mkdir(), fast.mkdir()
    # log_temp_files = 0: the server logs each temporary file's path as it deletes it.
    spec = spec_for(CellLayout(data_on="disk", temp_on="fast"), {"work_mem": "1MB", "log_temp_files": 0},
                    {"disk": disk, "fast": fast})
    with bpftrace.attached_across_runs(), provision("postgres", spec, keep=False, connections=2) as instance:
        before = instance.temporary_files()
        position = instance.log_position()
        with instance.connect() as conn:
            probe = instance.wait_probe(Tracing.IO)  # the temporary files' IO is traced with --trace-io
            probe.start([instance.session_id(conn)])
            conn.execute(SPILL).fetchall()
            capture = probe.stop()
        spilled = instance.temporary_files()
        with instance.admin() as conn:
            fast_oid = conn.execute("SELECT oid FROM pg_tablespace WHERE spcname = 'ts_fast'").fetchone()[0]
        logged = [line for line in instance.logged_since(position, 2**20).splitlines() if "temporary file: path" in line]
    assert logged and all(f'"pg_tblspc/{fast_oid}/' in line for line in logged)
    assert spilled["temp_files"] - before["temp_files"] == len(logged) and spilled["temp_mb"] - before["temp_mb"] > 1
    temp = [f for f in capture.files if f.object == "temporary files"]
    if probe.trace is not None:  # bpftrace traced the run
        assert [(f.placement, f.file) for f in temp] == [("fast", "pgsql_tmp/pgsql_tmp*")]
        assert temp[0].write_bytes > 2**20


@pytest.mark.engine
def test_temp_on_moves_mariadb_s_temporary_files(lab_root):
    disk, fast = lab_root / "disk", lab_root / "fast"
    disk.mkdir(), fast.mkdir()
    spec = spec_for(CellLayout(data_on="disk", temp_on="fast"), {"tmp_table_size": "1M", "max_heap_table_size": "1M"},
                    {"disk": disk, "fast": fast})
    with provision("mariadb", spec, keep=False, connections=2) as instance:
        before = instance.temporary_files()
        with instance.connect() as conn:
            conn.execute("CREATE TABLE s (id int PRIMARY KEY, note char(32)) SELECT seq AS id, md5(seq) AS note "
                         "FROM seq_1_to_100000")
            probe = instance.wait_probe()
            probe.start([instance.session_id(conn)])
            conn.execute("SELECT count(*) FROM (SELECT note, count(*) FROM s GROUP BY note) AS t").fetchall()
            capture = probe.stop()
        with instance.admin() as conn:
            tmpdir, innodb = conn.execute("SELECT @@tmpdir, @@innodb_temp_data_file_path").fetchone()
        after = instance.temporary_files()
        ibtmp1 = instance.roots["fast"] / "tmp" / "ibtmp1"
        assert ibtmp1.is_file() and not list(instance.roots["disk"].rglob("ibtmp1"))
    assert Path(tmpdir) == ibtmp1.parent and innodb.startswith(str(ibtmp1) + ":")
    assert after["tmp_disk_tables"] - before["tmp_disk_tables"] >= 1
    assert [(f.file, f.placement) for f in capture.files if f.object == "temporary files"] == [
        ("temporary tables (deleted)", "fast")]


@pytest.mark.engine
def test_a_worker_skips_a_stored_log_it_cannot_read_and_serves_the_others(store_server, write_experiment, lab_root):
    (lab_root / "day.log").write_text(known_log())
    (lab_root / "setup.sql").write_text(SETUP)
    replayed = write_experiment(REPLAY.format(engine="postgres", layout="", keys="").replace("./disk", "disk"),
                                "edited.toml")
    submit(store_server, replayed, write_experiment(single_cell("other"), "other.toml"))
    edit(store_server, "replayed", "files = %s", json.dumps(  # a line no clock has
        {"day.log": known_log().replace("2026-01-05 09:00:00.100", "2026-13-45 09:00:00.100", 1), "setup.sql": SETUP}))
    worker_refuses(store_server, lab_root, "replayed", "replayed: not taken by db1: replayed.toml:13: workload.log: "
                   "day.log line 7: '2026-13-45 09:00:00.100' is not a time: no such date or time of day",
                   starts=2)  # however often the worker is started again
