"""What a careless or hostile user does to storlab, and the one line it answers with (issue 17):
two runs into one results folder, nested brackets, absurd leases, a store file that is a folder or
in a read-only folder, a store deleted or filled up under a run, settings that let the server start
but fail every run, a closed terminal (SIGHUP), a password hidden in dbname=, and a worker asked
for an experiment it refuses."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from storlab import engines
from storlab.errors import UserError
from storlab.lab import owned, setting_failures
from storlab.probes.waits import Wait, WaitCapture
from storlab.results import folder_lock, shared_store
from storlab.results.folder_store import FILENAME
from storlab.results.runs import RunResult
from storlab.results.schema import MIGRATIONS
from storlab.results.store import Store
from tests.commands import invoke, start, storlab, together
from tests.conftest import storlab_processes
from tests.devicetools import needs_root
from tests.experiments import BASE, fleet_body, random_insert

TINY = random_insert("tiny")


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1 and "Traceback" not in text, text
    return text


def runs_in(folder: Path) -> list[tuple[str, int]]:
    with contextlib.closing(sqlite3.connect(folder / FILENAME)) as db:
        return sorted(db.execute("SELECT cell_id, repetition FROM runs").fetchall())


def failures_in(folder: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(folder / FILENAME)) as db:
        return [m for (m,) in db.execute("SELECT message FROM failures")]


def wait_for_runs(folder: Path, count: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (folder / FILENAME).exists() and len(runs_in(folder)) >= count:
                return
        except sqlite3.OperationalError:
            pass  # the file is made before its tables
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        time.sleep(0.2)
    raise AssertionError("runs did not appear in time")


def under_way(tiny, out: Path) -> subprocess.Popen:
    """A run of three repetitions into `out`, once its first run is recorded."""
    proc = start("run", str(tiny(reps=3, rows=6000)), "--no-trace", "--out", str(out))
    wait_for_runs(out, 1, proc)
    return proc


def stopped(proc: subprocess.Popen) -> str:
    """The one line `proc` ended with, exit 2."""
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2
    return one_line(err.splitlines(keepends=True)[-1])


def nothing_left(lab_dir: Path, said: str = "") -> None:
    """No server, folder or record of an instance left; `said`: what storlab wrote to its standard error,
    shown when something is (an instance's end that failed in a thread of its own says why only there)."""
    deadline = time.monotonic() + 10
    while storlab_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert storlab_processes() == [], said
    left = [(m.instance_id, m.dirs, m.server_pid, m.cgroup, m.kept) for m in owned.Manifest.all()]
    assert not list(lab_dir.glob("storlab-*")) and left == [], (left, said)


@pytest.fixture
def tiny(write_experiment, lab_dir):
    def make(reps: int = 1, rows: int = 2000, files: str = "1", settings: str = "", name: str = "exp.toml") -> Path:
        body = TINY.format(reps=reps, disk=lab_dir, rows=rows, files=files)
        return write_experiment(body + (f"\n[engine_settings]\n{settings}\n" if settings else ""), name)

    return make


@contextlib.contextmanager
def small_disk(path: Path, size: str = "4m"):
    """A tmpfs of its own at `path`: to fill up, or to make read-only."""
    path.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def a_result(elapsed: float = 2.0) -> RunResult:
    figures = [("elapsed_s", elapsed, "s"), ("rows_per_s", 1000 / elapsed, "rows/s")]
    return RunResult(time.time(), figures, WaitCapture("pg_wait_sampling", [Wait("IO:WALSync", 0.5)]), "16",
                     [(0.0, "rows_per_s", 10.0)])


def a_store(folder: Path) -> None:
    """A results folder holding one recorded run (the store as storlab run writes it)."""
    with Store.open(folder) as store:
        store.bind_experiment("tiny", "postgres", "src", {"k": 1}, 1, {}, [("c1", "(single cell)", {})])
        store.record_run("c1", 1, a_result(), store.record_facts({"cpu": {}}, {"cpu": {}}))


# -- nested brackets, a lease that is no number of seconds, a store file that is a folder --------


DEEP = "[" * 500 + "1" + "]" * 500


@pytest.mark.parametrize("old, new", [
    ("data_files = [1, 2]", f"data_files = {DEEP}"),
    ("batch = 100", f"batch = 100\n\n[engine_settings]\nwork_mem = {DEEP}"),
    ("batch = 100", "batch = 100\nx = " + "{ a = " * 500 + "1" + " }" * 500),
])
def test_nested_brackets_are_one_line_in_run_dry_run_and_submit(lab_root, old, new):
    path = lab_root / "deep.toml"
    path.write_text(BASE.format(disk=lab_root / "disk").replace(old, new, 1))
    for args in (["run", str(path), "--dry-run"], ["run", str(path), "--out", str(lab_root / "r")],
                 ["submit", str(path), "--store", "host=/nonexistent dbname=x"]):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert one_line(result.stderr) == "storlab: deep.toml: values nested too deeply; an experiment needs at most 16 levels\n"
    assert not (lab_root / "r").exists()


@pytest.mark.parametrize("lease", ["nan", "inf", "-inf", "-1", "0", "1e400", "86401"])
def test_a_lease_that_is_no_number_of_seconds_is_one_line(lease):
    result = invoke("worker", "--store", "host=/nonexistent dbname=x", f"--lease={lease}")
    assert result.exit_code == 2, result.output
    assert one_line(result.stderr).startswith(f"storlab: --lease {float(lease):g}: expected seconds from 3 to 86400")


def test_a_store_file_that_is_a_folder_is_one_line(tiny, tmp_path):
    out = tmp_path / "D"
    (out / FILENAME).mkdir(parents=True)
    expected = f"storlab: {out / FILENAME}: is not a file (a folder or device is in the way of storlab's results store)\n"
    for args in (["run", str(tiny()), "--out", str(out)], ["run", str(tiny()), "--out", str(out), "--dry-run"],
                 ["show", str(out)], ["report", str(out)], ["export", str(out)]):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert one_line(result.stderr) == expected
    assert sorted(p.name for p in out.iterdir()) == [FILENAME]


# -- read-only, full, deleted ------------------------------------------------------------------


@pytest.mark.device
@needs_root
def test_a_read_only_results_folder_is_called_read_only_not_damaged(tiny, lab_root):
    folder = lab_root / "ro"
    with small_disk(folder):
        a_store(folder)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        run = invoke("run", str(tiny()), "--out", str(folder))
        assert run.exit_code == 2
        assert one_line(run.stderr) == f"storlab: {folder}: cannot write the results folder: the folder is read-only\n"
        with pytest.raises(UserError) as caught:  # storlab io writes through the store directly
            with Store.open(folder):
                pass
        assert str(caught.value) == f"{folder / FILENAME}: cannot write the results store: the results folder {folder} is read-only"
        shown = invoke("show", str(folder))  # a reader needs no write
        assert shown.exit_code == 0, shown.output
        new = invoke("run", str(tiny()), "--out", str(folder / "new"))
        assert new.exit_code == 2 and one_line(new.stderr) == \
            f"storlab: {folder / 'new'}: cannot make the results folder: the folder is read-only\n"


@pytest.mark.device
@needs_root
def test_an_older_store_in_a_read_only_folder_is_read_brought_up_to_date_in_memory(lab_root):
    folder = lab_root / "ro"
    with small_disk(folder):
        with contextlib.closing(sqlite3.connect(folder / FILENAME, isolation_level=None)) as db:
            db.executescript(MIGRATIONS[0])  # a store of schema 1, as the first storlab wrote it
            db.execute("INSERT INTO experiment VALUES (1, 'old', 'postgres', 'src', '{}', 1, '{}', 0)")
            db.execute("PRAGMA user_version = 1")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        with Store.open(folder, create=False) as store:
            assert store.experiment().name == "old" and store.runs() == []
        with contextlib.closing(sqlite3.connect(f"file:{folder / FILENAME}?mode=ro", uri=True)) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == 1  # the folder is left as it was


@pytest.mark.device
@needs_root
def test_a_store_that_fills_up_says_so_with_the_runs_figures(lab_root):
    folder = lab_root / "small"
    with small_disk(folder, "1m"):
        with Store.open(folder) as store:
            store.bind_experiment("tiny", "postgres", "src", {"k": 1}, 2, {}, [("c1", "(single cell)", {})])
            facts = store.record_facts({"cpu": {}}, {"cpu": {}})
            store.record_run("c1", 1, a_result(), facts)
            filler = folder / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * 4096):
                    pass
            os.close(fd)
            big = a_result(4.0)
            big.timeline = [(i / 10, "rows_per_s", float(i)) for i in range(50_000)]  # more than fits
            with pytest.raises(UserError) as caught:
                store.record_run("c1", 2, big, facts)
            said = str(caught.value)
            assert "\n" not in said and said.startswith(f"{folder / FILENAME}: could not record run 2 of cell c1 ")
            assert "(elapsed_s 4 s, rows_per_s 250 rows/s)" in said and f"the disk holding {folder} is full" in said
            filler.unlink()
            assert store.done() == {("c1", 1)}  # the run before it is kept, whole


def test_a_store_replaced_under_a_run_is_said_before_anything_is_written(lab_root):
    folder = lab_root / "results"
    a_store(folder)
    with Store.open(folder) as store:
        facts = store.record_facts({"cpu": {}}, {"cpu": {}})
        (folder / FILENAME).rename(folder / "moved.sqlite")
        (folder / FILENAME).write_bytes((folder / "moved.sqlite").read_bytes())
        with pytest.raises(UserError, match=r"the results store was replaced while storlab ran; run 2 of cell c1 "
                                            r"\(elapsed_s 2 s, rows_per_s 500 rows/s\) is not in it; stopped"):
            store.record_run("c1", 2, a_result(), facts)


@needs_root
@pytest.mark.engine
def test_a_store_that_fills_up_mid_run_stops_it_in_one_line_and_keeps_the_runs_before(tiny, lab_root, lab_dir):
    out = lab_root / "results"
    with small_disk(out, "2m"):
        proc = under_way(tiny, out)
        fd = os.open(out / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        os.close(fd)
        line = stopped(proc)
        assert line.startswith(f"storlab: {out / FILENAME}: could not record run ") and "(elapsed_s " in line
        assert line.endswith(f"the disk holding {out} is full; stopped (the runs recorded before it are kept)\n")
        (out / "filler").unlink()
        assert 1 <= len(runs_in(out)) < 3
        nothing_left(lab_dir)


@pytest.mark.engine
def test_a_store_deleted_mid_run_stops_the_run_and_says_so(tiny, tmp_path, lab_dir):
    out = tmp_path / "results"
    proc = under_way(tiny, out)
    for file in out.glob(f"{FILENAME}*"):
        file.unlink()
    line = stopped(proc)
    assert line.startswith(f"storlab: {out / FILENAME}: the results store was deleted while storlab ran; run ")
    nothing_left(lab_dir)


# -- one writer per results folder ---------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_first(tiny, tmp_path):
    out = tmp_path / "results"
    a_store(out)
    with folder_lock.writing(out):
        result, shown, exported = together(("run", tiny(), "--out", out), ("show", out), ("export", out))
    assert result.returncode == 2
    said = one_line(result.stderr)
    # The holder's command line is this process's: pytest's arguments, none in a pytest-xdist worker.
    assert said.startswith(f"storlab: {out}: in use by another storlab run, pid {os.getpid()} (storlab")
    assert "started 20" in said and "wait for it to end, or give another --out folder" in said
    assert shown.returncode == 0 and exported.returncode == 0  # readers are never blocked
    assert not (out / folder_lock.FILENAME).exists()  # released, and its file gone
    assert runs_in(out) == [("c1", 1)]


@pytest.mark.parametrize("holder", ["dead", "reused", "garbage"])
def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, holder):
    out = tmp_path / "results"
    out.mkdir()
    me = os.getpid()
    left = {"dead": {"pid": 2**22 + 1, "start": 1, "started_at": 0, "command": "storlab run x"},
            "reused": {"pid": me, "start": owned.pid_start(me) - 1, "started_at": 0, "command": "storlab run x"},
            "garbage": "not json"}[holder]
    (out / folder_lock.FILENAME).write_text(json.dumps(left) if holder != "garbage" else left)
    with folder_lock.writing(out):
        held = json.loads((out / folder_lock.FILENAME).read_text())
        assert (held["pid"], held["start"]) == (me, owned.pid_start(me))
    assert list(out.iterdir()) == []


def test_a_planted_link_is_not_followed(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    target = tmp_path / "victim"
    target.write_text("root's file\n")
    (out / folder_lock.FILENAME).symlink_to(target)
    with pytest.raises(UserError, match="is a symbolic link; storlab's lock file must be a plain file"):
        with folder_lock.writing(out):
            pass
    assert target.read_text() == "root's file\n"


def test_a_refused_run_leaves_no_folder_it_made(tiny, tmp_path):
    out = tmp_path / "new" / "results"
    result = invoke("run", str(tiny(settings="no_such_setting = 1")), "--out", str(out))
    assert result.exit_code == 2 and "engine_settings.no_such_setting" in result.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.engine
def test_two_runs_into_one_folder_at_once(tiny, tmp_path, lab_dir):
    out = tmp_path / "results"
    path = tiny(reps=2, rows=4000, files="[1, 2]")
    first = start("run", str(path), "--no-trace", "--out", str(out))
    # The first holds its folder's lock once it has written who it is in the lock file; stopped there, it
    # keeps holding it while the second starts, however long the second's start takes on a loaded machine
    # (once the first had already finished when the second looked, and the second found nothing to do).
    lock = out / folder_lock.FILENAME
    while not (lock.exists() and lock.read_bytes()):
        assert first.poll() is None, f"the first run ended before it locked its folder: {first.communicate()[1]}"
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)
    try:
        second = storlab("run", str(path), "--out", str(out))
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert second.returncode == 2
    assert one_line(second.stderr).startswith(f"storlab: {out}: in use by another storlab run, pid {first.pid} (storlab run ")
    assert len(runs_in(out)) == 4 and failures_in(out) == []
    assert not (out / folder_lock.FILENAME).exists()
    nothing_left(lab_dir)


# -- settings that fail every run once the server is up ------------------------------------------


@pytest.mark.parametrize("engine, text, settings, blamed", [
    ("postgres", "QueryCanceled: canceling statement due to statement timeout",
     {"statement_timeout": "1ms"}, "statement_timeout"),
    ("postgres", "x\nFATAL: terminating connection due to idle-session timeout",
     {"idle_session_timeout": "1ms", "work_mem": "4MB"}, "idle_session_timeout"),
    ("postgres", "ERROR: cannot execute CREATE TABLE in a read-only transaction",
     {"default_transaction_read_only": "on"}, "default_transaction_read_only"),
    ("postgres", "canceling statement due to statement timeout", {"lock_timeout": "1ms"}, None),
    ("postgres", 'psycopg.errors.InvalidSchemaName: no schema has been selected to create in\nLINE 1: CREATE TABLE',
     {"search_path": "nosuchschema"}, "search_path"),
    ("postgres", "server closed the connection unexpectedly", {"statement_timeout": "1ms"}, None),
    ("postgres", "canceling statement due to statement timeout", {"statement_timeout": 0}, None),
    ("postgres", "FATAL: could not map anonymous shared memory: Cannot allocate memory",
     {"huge_pages": "off", "shared_buffers": "1TB"}, None),
    ("postgres", "FATAL: could not map anonymous shared memory: Cannot allocate memory", {"huge_pages": "on"}, "huge_pages"),
    ("postgres", "FATAL: terminating connection due to idle-in-transaction timeout",
     {"transaction_timeout": "1s", "idle_in_transaction_session_timeout": "1ms"}, "idle_in_transaction_session_timeout"),
    ("mariadb", "Query execution was interrupted (max_statement_time exceeded)",
     {"max-statement-time": 0.001}, "max-statement-time"),
    ("mariadb", "The MariaDB server is running with the --read-only option so it cannot execute this statement",
     {"read_only": 1}, "read_only"),
])
def test_a_failure_is_blamed_on_the_setting_whose_symptom_it_shows(engine, text, settings, blamed):
    found = setting_failures.caused_by(engines.engine(engine).symptoms, text, settings)
    assert (found[0] if found else None) == blamed


def _huge_pages_available() -> bool:
    meminfo = Path("/proc/meminfo").read_text()
    return any(line.split()[1] != "0" for line in meminfo.splitlines() if line.startswith("HugePages_Total"))


@pytest.mark.engine
@pytest.mark.parametrize("engine, setting, symptom", [
    ("postgres", 'statement_timeout = "1ms"', "statement timeout"),
    ("postgres", 'default_transaction_read_only = "on"', "read-only transaction"),
    ("postgres", 'idle_session_timeout = "1ms"', "idle-session timeout"),
    ("postgres", 'search_path = "nosuchschema"', "no schema has been selected to create in"),
    pytest.param("postgres", 'huge_pages = "on"', "could not map anonymous shared memory", marks=pytest.mark.skipif(
        _huge_pages_available(), reason="this machine has huge pages: the server starts")),
    ("mariadb", "max_statement_time = 0.001", "max_statement_time exceeded"),
])
def test_a_setting_that_fails_every_run_stops_at_the_first_and_is_named(tiny, tmp_path, lab_dir, engine, setting,
                                                                         symptom):
    out = tmp_path / "results"
    path = tiny(reps=2, files="[1, 2]", settings=setting)
    path.write_text(path.read_text().replace('engine = "postgres"', f'engine = "{engine}"'))
    done = storlab("run", str(path), "--out", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    name = setting.split(" ")[0]
    said = one_line(done.stderr.splitlines(keepends=True)[-1])
    assert said.startswith(f"storlab: exp.toml:22: engine_settings.{name}: the server refuses it (cell data_files=")
    assert symptom in said and " UTC [" not in said  # the server's words, without the log line's prefix
    assert said.endswith("stopped before the other runs\n")
    assert len(failures_in(out)) == 1 and runs_in(out) == []
    nothing_left(lab_dir)


# -- SIGHUP --------------------------------------------------------------------------------------


@pytest.mark.engine
def test_sighup_stops_everything_and_keeps_the_finished_runs(tiny, tmp_path, lab_dir):
    out = tmp_path / "results"
    proc = under_way(tiny, out)
    time.sleep(0.5)  # most likely inside the next run
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted; finished runs are kept" in err, err
    nothing_left(lab_dir, err)
    assert 1 <= len(runs_in(out)) < 3 and not (out / folder_lock.FILENAME).exists()


@pytest.mark.engine
def test_a_closed_terminal_stops_everything_too(tiny, tmp_path, lab_dir):
    """The run's output goes to a terminal that is then closed (its writes fail) before the SIGHUP."""
    out = tmp_path / "results"
    terminal, seat = os.openpty()
    proc = start("run", "--no-trace", tiny(reps=3, rows=6000), "--out", out, stdin=subprocess.DEVNULL, stdout=seat,
                 stderr=seat)
    os.close(seat)
    read = threading.Event()
    reader = threading.Thread(target=_drain, args=(terminal, read))
    reader.start()
    wait_for_runs(out, 1, proc)  # the results file is made before its tables: CI read it between once
    read.set()
    reader.join()
    os.close(terminal)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=60) == 130
    nothing_left(lab_dir)
    assert 1 <= len(runs_in(out)) < 3


def _drain(terminal: int, done: threading.Event) -> None:
    """Read what the run writes to its terminal (a full one would block it) until told to stop."""
    while not done.is_set():
        if select.select([terminal], [], [], 0.1)[0]:
            with contextlib.suppress(OSError):
                os.read(terminal, 65536)


# -- the shared store ------------------------------------------------------------------------------


@pytest.mark.parametrize("dsn", [
    "host=/nonexistent dbname='user=fleet password=hunter2-pw'",
    "dbname=postgresql://fleet:hunter2-pw@/fleet?host=/nonexistent",
    "postgresql://fleet@/?host=/nonexistent&dbname=password%3Dhunter2-pw",
])
def test_a_password_inside_dbname_is_refused_and_never_repeated(dsn):
    for args in (["show", "--store", dsn], ["worker", "--store", dsn]):
        result = invoke(*args)
        assert result.exit_code == 2
        assert one_line(result.output) == f"storlab: {shared_store.PASSWORD_REFUSED}\n"
        assert "hunter2" not in result.output


@pytest.mark.engine
def test_a_worker_refuses_a_broken_experiment_in_one_line_goes_on_and_exits_non_zero_when_asked_for_it(
        store_server, write_experiment, lab_root):
    env = store_server.env()
    for name in ("broken", "other"):
        source = write_experiment(fleet_body(name=name, reps=1).replace("data_files = [1, 2]", "data_files = 1"),
                                  f"{name}.toml")
        assert storlab("submit", str(source), "--store", store_server.dsn, env=env).returncode == 0
    with store_server.admin() as conn:  # as a hostile submitter could leave it
        schema = conn.execute("SELECT schema_name FROM storlab.experiments WHERE name = 'broken'").fetchone()[0]
        conn.execute(f"UPDATE {schema}.experiment SET source = replace(source, 'data_files = 1', %s)",
                     (f"data_files = {DEEP}",))
    here = lab_root / "db1"
    here.mkdir()
    here.chmod(0o755)
    refusal = "broken: not taken by db1: broken.toml: values nested too deeply; an experiment needs at most 16 levels"
    anything = storlab("worker", "--store", store_server.dsn, "--host", "db1", "--until-done", env=env, cwd=here)
    assert anything.returncode == 0, anything.stderr
    assert f"{refusal}\n" in anything.stdout and "other: (single cell) #1: recorded" in anything.stdout
    assert "Traceback" not in anything.stderr
    asked = storlab("worker", "--store", store_server.dsn, "--host", "db1", "--experiment", "broken", "--until-done",
                    env=env, cwd=here)
    assert asked.returncode == 2
    assert one_line(asked.stderr) == f"storlab: {refusal}\n"
    assert set(storlab_processes()) == {store_server.server_pid}


@needs_root
def test_an_immutable_store_is_one_line_and_keeps_its_runs(tiny, lab_root, lab_dir):
    """`chattr +i` on the store: SQLite would open it read-only without a word (its writes failing,
    or landing only in a write-ahead log that can never be written back). Every command that writes
    the store says so in one line, exit 2, before it runs anything; readers read it; a store made
    immutable under a run stops that run before its next record, the runs before it kept."""
    folder = lab_root / "results"
    a_store(folder)
    store_file = folder / FILENAME
    if subprocess.run(["chattr", "+i", str(store_file)], capture_output=True).returncode != 0:
        pytest.skip("this file system keeps no file attributes")
    said = (f"{store_file}: cannot write the results store: the file is immutable (chattr +i): nothing can write "
            "it until chattr -i clears that")
    try:
        for args in (["run", tiny(), "--no-trace", "--out", folder], ["io", lab_dir, "--out", folder]):
            result = invoke(*map(str, args))
            assert (result.exit_code, one_line(result.stderr)) == (2, f"storlab: {said}\n"), args
        assert list(lab_dir.iterdir()) == []  # fio never ran
        for command in ("show", "waits", "compare", "report", "export"):
            assert invoke(command, str(folder)).exit_code == 0, command
    finally:
        subprocess.run(["chattr", "-i", str(store_file)], check=True)
    assert runs_in(folder) == [("c1", 1)]

    with Store.open(folder) as store:
        facts = store.record_facts({"cpu": {}}, {"cpu": {}})
        subprocess.run(["chattr", "+i", str(store_file)], check=True)
        try:
            with pytest.raises(UserError) as caught:
                store.record_run("c1", 2, a_result(), facts)
        finally:
            subprocess.run(["chattr", "-i", str(store_file)], check=True)
    assert str(caught.value) == (f"{store_file}: could not record run 2 of cell c1 (elapsed_s 2 s, rows_per_s 500 "
                                 "rows/s): the file is immutable (chattr +i): nothing can write it until chattr -i "
                                 "clears that; stopped (the runs recorded before it are kept)")
    assert runs_in(folder) == [("c1", 1)]
