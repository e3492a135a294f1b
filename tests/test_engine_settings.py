"""engine_settings against the real engines: names and values checked before anything starts, storlab's
preload library kept, values written so that no line can be added, and a setting the server refuses
only at start stops the experiment with exit 2 and the server's own message."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from storlab.engines import provision
from storlab.engines.mariadb.settings import conf_value as mariadb_value
from storlab.engines.postgres.settings import conf_value as postgres_value
from storlab.lab import owned
from storlab.lab.layout import CellLayout, spec_for
from tests.commands import storlab
from tests.conftest import storlab_processes
from tests.disk_experiments import on_disk

pytestmark = pytest.mark.engine


@pytest.fixture
def experiment_with(write_experiment, lab_dir):
    def make(settings: str, engine: str = "postgres") -> Path:
        body = on_disk('kind = "random-insert"\nconnections = 2\nrows_per_connection = 500\nbatch = 100', name="settings",
                       engine=engine, repetitions=2, disk=lab_dir, layout="data_files = [1, 2]", settings=settings)
        return write_experiment(body, "settings.toml")

    return make


@pytest.mark.parametrize("engine, settings, expected", [
    ("postgres", 'shared_bufers = "1MB"',
     "settings.toml:19: engine_settings.shared_bufers: unknown setting: PostgreSQL has no shared_bufers; "
     "did you mean shared_buffers?"),
    ("postgres", 'wal_level = "bogus"',
     'settings.toml:19: engine_settings.wal_level: PostgreSQL refuses "bogus": invalid value for parameter '
     '"wal_level": "bogus" (HINT: Available values: minimal, replica, logical.)'),
    ("postgres", 'work_mem = ["4MB", "lots"]',
     'settings.toml:19: engine_settings.work_mem: PostgreSQL refuses "lots": invalid value for parameter '
     '"work_mem": "lots"'),
    ("postgres", "fsync = 7",
     'settings.toml:19: engine_settings.fsync: PostgreSQL refuses 7: parameter "fsync" requires a Boolean value'),
    ("postgres", '"auto_explain.log_min_duration" = 0',
     "settings.toml:19: engine_settings.auto_explain.log_min_duration: unknown setting: PostgreSQL knows an "
     "extension's settings only with the extension in shared_preload_libraries (now: pg_wait_sampling)"),
    ("mariadb", "innodb_buffer_pool_sise = 1",
     "settings.toml:19: engine_settings.innodb_buffer_pool_sise: unknown setting: MariaDB has no "
     "innodb_buffer_pool_sise; did you mean innodb_buffer_pool_size?"),
    ("mariadb", '"innodb-flush-method" = "bogus"',
     "settings.toml:19: engine_settings.innodb-flush-method: MariaDB refuses \"bogus\": /usr/sbin/mariadbd: Error "
     "while setting value 'bogus' to 'innodb-flush-method'"),
    ("mariadb", 'innodb_buffer_pool_size = "abc"',
     "settings.toml:19: engine_settings.innodb_buffer_pool_size: MariaDB refuses \"abc\": Unknown suffix 'a' used "
     "for variable 'innodb-buffer-pool-size' (value 'abc'). Legal suffix characters are: K, M, G, T, P, E"),
])
def test_names_and_values_the_engine_refuses(experiment_with, tmp_path, engine, settings, expected):
    for dry in (["--dry-run"], []):
        result = storlab("run", str(experiment_with(settings, engine)), *dry, "--out", str(tmp_path / "r"))
        assert result.returncode == 2, result.stderr
        assert result.stderr == f"storlab: {expected}\n"
        assert not (tmp_path / "r").exists()
    assert storlab_processes() == []


def test_a_preload_library_that_is_not_installed_is_named(experiment_with, tmp_path):
    path = experiment_with('shared_preload_libraries = "auto_explain,nope"')
    result = storlab("run", str(path), "--dry-run", "--allow-server-programs", "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert result.stderr == ("storlab: settings.toml:19: engine_settings.shared_preload_libraries: no library nope in "
                             "/usr/lib/postgresql/15/lib\n")


def test_a_value_the_engine_adjusts_is_a_warning(experiment_with, tmp_path):
    result = storlab("run", str(experiment_with("innodb_flush_log_at_trx_commit = 7", "mariadb")), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert ("warning: engine_settings.innodb_flush_log_at_trx_commit: MariaDB: option "
            "'innodb-flush-log-at-trx-commit': unsigned value 7 adjusted to 3") in result.stdout


@pytest.mark.parametrize("engine, setting, said", [
    # postgres -C accepts wal_level = minimal; the server refuses it when it starts (max_wal_senders > 0).
    ("postgres", 'wal_level = "minimal"', 'FATAL: WAL streaming (max_wal_senders > 0) requires wal_level "replica" or "logical"'),
    # mariadbd --help accepts 100T; InnoDB cannot map it at install, and names its ceiling, not the setting.
    ("mariadb", 'innodb_buffer_pool_size = "100T"', "[ERROR] InnoDB: Cannot map innodb_buffer_pool_size_max="),
])
def test_a_setting_refused_only_at_start_stops_the_experiment(experiment_with, tmp_path, lab_dir, engine, setting, said):
    out = tmp_path / "r"
    result = storlab("run", str(experiment_with(setting, engine)), "--out", str(out))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    name = setting.split()[0]
    # Each round runs its cells in a random order: whichever cell ran first is the one named.
    assert re.match(rf"storlab: settings\.toml:19: engine_settings\.{name}: the server refuses it \(cell data_files=[12]\): ", line), line
    assert said in line
    assert line.endswith("; stopped before the other runs")
    with sqlite3.connect(out / "storlab.sqlite") as db:
        assert db.execute("SELECT count(*) FROM failures").fetchone()[0] == 1  # not one per run
    assert storlab_processes() == [] and not list(lab_dir.glob("storlab-*")) and owned.Manifest.all() == []


def test_preload_libraries_are_added_to_storlabs_and_values_stay_one_line(lab_dir):
    value = "it's \\ a # 'value'"
    settings = {"shared_preload_libraries": "auto_explain", "auto_explain.log_min_duration": 0,
                "application_name": value}
    spec = spec_for(CellLayout(data_on="disk"), settings, {"disk": lab_dir})
    with provision("postgres", spec, keep=False, connections=2) as inst:
        with inst.admin() as conn:
            assert conn.execute("SHOW shared_preload_libraries").fetchone()[0] == "pg_wait_sampling,auto_explain"
            assert conn.execute("SHOW auto_explain.log_min_duration").fetchone()[0] == "0"
            assert conn.execute("SHOW application_name").fetchone()[0] == value
        assert inst.wait_probe().source == "pg_wait_sampling"


def test_mariadb_values_stay_one_line(lab_dir):
    value = 'a "b" # c \\ d'
    spec = spec_for(CellLayout(data_on="disk"), {"init_connect": f"SET @x = '{value}'"}, {"disk": lab_dir})
    with provision("mariadb", spec, keep=False, connections=2) as inst:
        with inst.admin() as conn:
            assert conn.execute("SELECT @@init_connect").fetchone()[0] == f"SET @x = '{value}'"


def test_values_are_written_so_that_no_line_can_be_added():
    assert postgres_value("x'\\") == "'x''\\\\'"
    assert mariadb_value('x"\\') == '"x\\"\\\\"'
    assert mariadb_value("") == '""'
