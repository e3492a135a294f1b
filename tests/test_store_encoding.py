"""A shared store in a database whose encoding is SQL_ASCII, where psycopg hands text back as bytes:
storlab speaks UTF-8 to it, so `submit` and a worker read back what they wrote."""

from __future__ import annotations

import psycopg
import pytest

from storlab.engines.postgres import instance as postgres
from tests.commands import storlab
from tests.experiments import fleet_body

pytestmark = pytest.mark.engine


def test_a_worker_on_a_sql_ascii_store_runs_the_experiment(store_server, write_experiment, lab_root):
    with store_server.admin() as conn:
        # storlab's clusters have no template0, the only template a new encoding can come from: an
        # empty database's encoding is set in the catalogue instead.
        conn.execute("CREATE DATABASE ascii OWNER fleet")
        conn.execute("UPDATE pg_database SET encoding = pg_char_to_encoding('SQL_ASCII') WHERE datname = 'ascii'")
    dsn = store_server.dsn.replace("/fleet?", "/ascii?")
    source = write_experiment(fleet_body(name="ascii", reps=1, rows=500))
    submitted = storlab("submit", str(source), "--store", dsn, env=store_server.env())
    assert submitted.returncode == 0, submitted.stderr
    host = lab_root / "db1"
    host.mkdir()
    host.chmod(0o755)
    worker = storlab("worker", "--store", dsn, "--host", "db1", "--until-done", cwd=host, env=store_server.env(),
                     timeout=600)
    assert worker.returncode == 0, worker.stderr
    assert "Traceback" not in worker.stderr
    with psycopg.connect(host=str(store_server.socket_dir), port=postgres.PORT, user=postgres.SUPERUSER,
                         dbname="ascii", autocommit=True) as conn:
        assert conn.execute("SHOW server_encoding").fetchone()[0] == b"SQL_ASCII"
        assert conn.execute("SELECT name FROM storlab.experiments").fetchall() == [(b"ascii",)]
        assert conn.execute("SELECT count(*) FROM storlab_experiment_1.runs").fetchone()[0] == 2
