"""What an experiment submits cannot run programs, load libraries or read the server's files (issue 26).
The workload's sessions connect as a role that cannot (PostgreSQL 15 and 18, MariaDB), so a custom
workload's SQL that tries is refused in one line naming the statement, and nothing of it is left
running; settings that run programs or load libraries are refused when the file loads unless it is
run here with `storlab run --allow-server-programs`, and a fleet never takes them (submit refuses them,
a worker refuses an experiment edited so in the store and goes on with the others); an include is
refused always, and no line of the file it names is ever repeated."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import psycopg
import pymysql
import pytest

from storlab.engines import provision
from storlab.engines.postgres.settings import PostgresSettings
from storlab.lab import os_users, owned
from storlab.lab.layout import CellLayout, spec_for
from tests.commands import invoke, storlab
from tests.disk_experiments import on_disk
from tests.experiments import BASE, MARIADB, changed
from tests.store_edits import edit, single_cell, submit, worker_refuses

PASSWD = [line for line in Path("/etc/passwd").read_text().splitlines() if line.strip()]

CUSTOM = on_disk('kind = "custom"\nsetup = "setup.sql"\ntransaction = "txn.sql"\nconnections = 1\n'
                 'transactions_per_connection = 10', name="hostile", engine="{engine}", head="{version}")


def server_user_processes() -> set[int]:
    """The live processes of the servers' OS user started for this test session's instances: every
    server storlab starts, and what it starts, carries its session's STORLAB_STATE_DIR (other
    sessions' tests, and storlab runs started by hand, run beside these with their own, or none)."""
    uid = os_users.server_user().uid
    mine = f"STORLAB_STATE_DIR={Path(os.environ['STORLAB_STATE_DIR']).parent}/".encode()
    found = set()
    for process in psutil.process_iter(["uids", "status"]):
        if process.info["uids"] is None or process.info["uids"].real != uid or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            environ = Path(f"/proc/{process.pid}/environ").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if mine not in environ:
            continue
        found.add(process.pid)
    return found


def left_since(before: set[int]) -> set[int]:
    """What the servers' user runs now that it did not before, once a moment has passed for a stopped
    server's processes to exit; anything found is killed, so that a failing test leaves nothing."""
    deadline = time.monotonic() + 10
    while (left := server_user_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    return left


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1 and "Traceback" not in text, text
    return text


# -- the workload's role ----------------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.parametrize("version", ["15", "18"])
def test_postgres_workloads_connect_as_a_role_that_cannot_run_programs_or_read_files(lab_dir, version):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir}, version)
    with provision("postgres", spec, keep=False, connections=2) as inst:
        with inst.connect() as conn:
            assert conn.execute("SELECT current_user, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
                                "FROM pg_roles WHERE rolname = current_user").fetchone() == ("lab", False, False, False,
                                                                                            False, False)
            held = conn.execute("SELECT r FROM unnest(ARRAY['pg_execute_server_program', 'pg_read_server_files', "
                                "'pg_write_server_files', 'pg_read_all_settings', 'pg_monitor']) AS r "
                                "WHERE pg_has_role(current_user, r, 'MEMBER')").fetchall()
            assert held == []
            for statement in ("COPY (SELECT 1) TO PROGRAM 'true'", "COPY (SELECT 1) TO '/tmp/storlab-lab-copy'",
                              "SELECT pg_read_file('/etc/passwd')", "SELECT lo_import('/etc/passwd')",
                              "LOAD 'auto_explain'", "ALTER SYSTEM SET archive_command = 'true'",
                              "SET session_preload_libraries = 'auto_explain'"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
            assert not Path("/tmp/storlab-lab-copy").exists()
        with inst.admin() as conn:  # storlab's own session, as the probes and checkpoints use it
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,)


@pytest.mark.engine
def test_mariadb_workloads_connect_as_a_user_without_global_privileges(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("mariadb", spec, keep=False, connections=2) as inst:
        with inst.admin() as conn:
            granted = conn.execute("SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES "
                                   "WHERE GRANTEE = \"'lab'@'localhost'\"").fetchall()
            databases = conn.execute("SELECT Db FROM mysql.db WHERE User = 'lab'").fetchall()
            tables = conn.execute("SELECT count(*) FROM mysql.tables_priv WHERE User = 'lab'").fetchone()
        assert granted == (("USAGE",),)  # no FILE, SUPER, PROCESS or any other global privilege
        assert databases == (("lab",),) and tables == (0,)  # nothing on mysql.*: no UDF can be added
        with inst.connect() as conn:
            for statement in ("SELECT 1 INTO OUTFILE '/tmp/storlab-lab-outfile'",
                              "CREATE FUNCTION lab_udf RETURNS STRING SONAME 'lab_udf.so'",
                              "INSTALL SONAME 'ha_example'", "SET GLOBAL init_connect = 'SELECT 1'",
                              "SHOW GRANTS FOR 'root'@'localhost'"):
                with pytest.raises(pymysql.err.MySQLError, match="denied|privilege"):
                    conn.execute(statement)
            assert conn.execute("SELECT LOAD_FILE('/etc/passwd')").fetchone() == (None,)
        assert not Path("/tmp/storlab-lab-outfile").exists()


@pytest.mark.engine
@pytest.mark.parametrize("engine, version, setup, txn, where, said", [
    # PostgreSQL 15 says "must be superuser or have privileges of the pg_execute_server_program role to ...",
    # 18 "permission denied to ...".
    ("postgres", "15", "CREATE TABLE t (x int);", "COPY (SELECT 1) TO PROGRAM '(setsid sleep 1000 &)';",
     "txn.sql statement 1 (line 1)", "to COPY to or from an external program"),
    ("postgres", "18", "CREATE TABLE t (x int);", "COPY (SELECT 1) TO PROGRAM '(setsid sleep 1000 &)';",
     "txn.sql statement 1 (line 1)", "to COPY to or from an external program"),
    ("postgres", "15", "CREATE TABLE t (x int);\nSELECT pg_read_file('/etc/passwd');", "SELECT 1;",
     "setup.sql statement 2 (line 2)", "permission denied for function pg_read_file"),
    ("postgres", "18", "SELECT pg_read_file('/etc/passwd');", "SELECT 1;",
     "setup.sql statement 1 (line 1)", "permission denied for function pg_read_file"),
    ("mariadb", None, "CREATE TABLE t (x int);", "SELECT 1 INTO OUTFILE '/tmp/storlab-hostile-outfile';",
     "txn.sql statement 1 (line 1)", "Access denied; you need (at least one of) the FILE privilege(s) for this operation"),
    # LOAD_FILE reads nothing without the FILE privilege: NULL, which a NOT NULL column refuses.
    ("mariadb", None, "CREATE TABLE t (x LONGBLOB NOT NULL);\nINSERT INTO t VALUES (LOAD_FILE('/etc/passwd'));",
     "SELECT 1;", "setup.sql statement 2 (line 2)", "Column 'x' cannot be null"),
])
def test_custom_sql_that_runs_a_program_or_reads_a_file_is_refused_in_one_line(write_experiment, lab_dir, tmp_path,
                                                                                engine, version, setup, txn, where,
                                                                                said):
    path = write_experiment(CUSTOM.format(engine=engine, disk=lab_dir,
                                          version=f'engine_version = "{version}"' if engine == "postgres" else ""),
                            "hostile.toml")
    (path.parent / "setup.sql").write_text(setup + "\n")
    (path.parent / "txn.sql").write_text(txn + "\n")
    before = server_user_processes()
    result = storlab("run", str(path), "--no-trace", "--out", str(tmp_path / "r"))
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_line(result.stderr)
    assert line.startswith(f"storlab: {where}: ") and said in line, line
    assert left_since(before) == set()
    assert not Path("/tmp/storlab-hostile-outfile").exists()
    assert not list(lab_dir.glob("storlab-*")) and owned.Manifest.all() == []


# -- settings that run programs or load libraries ---------------------------------------------


PROGRAMS = [
    ("postgres", 'archive_command = "(setsid sleep 902 &)"', "archive_command", "runs a program on the server"),
    ("postgres", 'restore_command = "cp %f %p"', "restore_command", "runs a program on the server"),
    ("postgres", 'archive_cleanup_command = "true"', "archive_cleanup_command", "runs a program on the server"),
    ("postgres", 'recovery_end_command = "true"', "recovery_end_command", "runs a program on the server"),
    ("postgres", 'ssl_passphrase_command = "echo x"', "ssl_passphrase_command", "runs a program on the server"),
    ("postgres", 'archive_library = "basic_archive"', "archive_library", "loads a library into the server"),
    ("postgres", 'shared_preload_libraries = "/tmp/evil.so"', "shared_preload_libraries",
     "loads a library into the server"),
    ("postgres", 'Session_Preload_Libraries = "auto_explain"', "Session_Preload_Libraries",
     "loads a library into the server"),
    ("postgres", 'local_preload_libraries = "auto_explain"', "local_preload_libraries",
     "loads a library into the server"),
    ("postgres", 'jit_provider = "/tmp/evil"', "jit_provider", "loads a library into the server"),
    ("postgres", 'dynamic_library_path = "/tmp"', "dynamic_library_path",
     "loads a library into the server from where it names"),
    ("postgres", 'extension_destdir = "/tmp"', "extension_destdir",
     "loads a library into the server from where it names (Debian's setting)"),
    ("mariadb", 'plugin_load = "evil.so"', "plugin_load", "loads a library into the server"),
    ("mariadb", '"plugin-load-add" = "evil.so"', "plugin-load-add", "loads a library into the server"),
    ("mariadb", '"loose-plugin-dir" = "/tmp"', "loose-plugin-dir", "loads a library into the server from where it names"),
    ("mariadb", 'wsrep_notify_cmd = "/tmp/evil"', "wsrep_notify_cmd",
     "loads a library into the server and runs programs (Galera replication)"),
]


def _settings_file(lab_root: Path, engine: str, settings: str) -> Path:
    path = lab_root / "fz.toml"
    path.write_text(changed("batch = 100", f"batch = 100\n\n[engine_settings]\n{settings}", lab_root / "disk",
                          BASE if engine == "postgres" else MARIADB))
    return path


@pytest.mark.parametrize("engine, setting, name, what", PROGRAMS, ids=[p[2] for p in PROGRAMS])
def test_a_setting_that_runs_a_program_or_loads_a_library_is_refused_when_the_file_loads(lab_root, engine, setting,
                                                                                         name, what):
    path = _settings_file(lab_root, engine, setting)
    for args in (["run", path, "--dry-run"], ["run", path], ["submit", path, "--store", "host=/nonexistent dbname=x"]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert one_line(result.stderr) == (f"storlab: fz.toml:21: engine_settings.{name}: {what}; taken only with "
                                           "storlab run --allow-server-programs (a fleet worker never takes it)\n")
    assert not (lab_root / "disk").exists() and not Path("results/fz").exists()


def test_the_switch_is_for_a_results_folder_only(lab_root):
    path = _settings_file(lab_root, "postgres", 'archive_command = "true"')
    result = invoke("run", path, "--allow-server-programs", "--store", "host=/nonexistent dbname=x")
    assert result.exit_code == 2
    assert one_line(result.stderr).startswith("storlab: --allow-server-programs: only into a results folder; ")


@pytest.mark.engine
@pytest.mark.parametrize("engine, setting", [
    ("postgres", 'archive_command = "true"\nshared_preload_libraries = "auto_explain"'),
    ("mariadb", '"plugin-load-add" = "ha_blackhole.so"'),
])
def test_with_the_switch_they_are_checked_as_any_setting(lab_root, engine, setting):
    path = _settings_file(lab_root, engine, setting)
    result = storlab("run", path, "--dry-run", "--allow-server-programs", "--out", lab_root / "results")
    assert result.returncode == 0, result.stderr
    assert "2 cells x 2 repetitions" in result.stdout


@pytest.mark.engine
def test_a_worker_refuses_an_experiment_given_such_a_setting_in_the_store_and_goes_on(store_server, write_experiment,
                                                                                      lab_root):
    submit(store_server, *(write_experiment(single_cell(name), f"{name}.toml") for name in ("edited", "other")))
    edit(store_server, "edited", "source = source || %s",
         '\n[engine_settings]\narchive_command = "(setsid sleep 903 &)"\n')
    before = server_user_processes()
    worker_refuses(store_server, lab_root, "edited", "edited: not taken by db1: edited.toml:23: "
                   "engine_settings.archive_command: runs a program on the server; taken only with storlab run "
                   "--allow-server-programs (a fleet worker never takes it)")
    assert left_since(before) == set()


# -- includes ---------------------------------------------------------------------------------


INCLUDES = [
    ("postgres", 'include_if_exists = "/etc/passwd"', "include_if_exists"),
    ("postgres", 'include = "/etc/passwd"', "include"),
    ("postgres", 'INCLUDE_DIR = "/etc"', "INCLUDE_DIR"),
]


@pytest.mark.parametrize("engine, setting, name", INCLUDES, ids=[i[2] for i in INCLUDES])
def test_an_include_is_refused_even_with_the_switch_and_no_line_of_its_file_is_repeated(lab_root, engine, setting,
                                                                                       name):
    path = _settings_file(lab_root, engine, setting)
    for switch in ([], ["--allow-server-programs"]):
        result = invoke("run", path, "--dry-run", *switch)
        assert result.exit_code == 2
        assert one_line(result.stderr) == (
            f"storlab: fz.toml:21: engine_settings.{name}: brings in another file's settings, which would go around "
            "every check here (and the settings storlab sets); write them in [engine_settings]\n")
        assert not any(line in result.output for line in PASSWD)


@pytest.mark.parametrize("engine, setting, said", [
    ("mariadb", '"!include" = "/etc/passwd"', "engine_settings.!include: not a setting name"),
    ("mariadb", '"!includedir" = "/etc"', "engine_settings.!includedir: not a setting name"),
    ("mariadb", 'init_file = "/etc/passwd"', "engine_settings.init_file: runs a file's SQL as the server's superuser"),
    ("mariadb", '"loose-init-file" = "/etc/passwd"', "engine_settings.loose-init-file: runs a file's SQL as the server's"),
])
def test_mariadb_option_file_directives_and_init_file_are_refused(lab_root, engine, setting, said):
    result = invoke("run", _settings_file(lab_root, engine, setting), "--dry-run", "--allow-server-programs")
    assert result.exit_code == 2
    assert one_line(result.stderr).startswith(f"storlab: fz.toml:21: {said}")


@pytest.mark.engine
def test_the_engines_word_on_a_value_never_repeats_another_files_lines():
    """Even were an include to reach the engine's check (the file's load refuses one first), what
    PostgreSQL says about the file it names is not repeated: it quotes the token it could not read."""
    name, problem = PostgresSettings().verdict({"include_if_exists": "/etc/passwd"}, set(), [])
    assert name == "include_if_exists"
    assert not any(line in problem for line in PASSWD) and "near token" not in problem, problem
    assert problem.startswith("PostgreSQL refuses these settings: FATAL: configuration file ")
