"""Every wait while storlab provisions an instance ends: a server that does not answer at its start, at
storlab's first statements or while the workload prepares fails in one line naming it and its log, and
nothing of it is left running; a set-up tool that does not finish is stopped. What keeps each server
from answering is real: a setting that holds every new session, SIGSTOP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import psutil
import psycopg
import pytest

from storlab.engines import provision
from storlab.engines.postgres import instance as postgres
from storlab.errors import RunFailed
from storlab.lab import instances, os_users, owned, server_process, user_tools
from storlab.lab.layout import CellLayout, spec_for
from tests.commands import start
from tests.conftest import stop_instance, stop_storlab, stopped_processes, storlab_processes
from tests.disk_experiments import on_disk

START_S = 3  # the start's deadline here, so a test does not wait 120 s for a server that never answers
TITLES = {"postgres": "PostgreSQL", "mariadb": "MariaDB"}


@pytest.fixture
def short_start(monkeypatch):
    monkeypatch.setattr(server_process, "START_S", START_S)


@pytest.fixture
def stopped_at_start(monkeypatch):
    """Every server storlab starts is stopped (SIGSTOP) at once, before it can answer anyone."""
    start_server = instances.Workspace.start

    def start_stopped(self, argv):
        server = start_server(self, argv)
        os.kill(server.pid, signal.SIGSTOP)
        return server

    monkeypatch.setattr(instances.Workspace, "start", start_stopped)


def unanswered(title: str) -> str:
    """The one line of a start that got no answer (the server's last log lines after it)."""
    return (rf"{title} did not answer within {START_S} s of its start; its instance was stopped \(its log: "
            rf"/tmp/storlab-\w+/server\.log, kept with --keep\); the server's log says: [^\n]*")


def nothing_left(lab_dir) -> bool:
    return storlab_processes() == [] and list(lab_dir.iterdir()) == [] and owned.Manifest.all() == []


@pytest.mark.engine
def test_a_server_whose_sessions_never_start_fails_its_start_in_one_line(lab_dir, short_start):
    """pre_auth_delay holds every new session for 60 s before it even authenticates: the server is up,
    its socket accepts, and no session ever answers within the deadline."""
    spec = spec_for(CellLayout(data_on="disk"), {"pre_auth_delay": "60s"}, {"disk": lab_dir})
    with pytest.raises(RunFailed) as caught:
        with provision("postgres", spec, keep=False, connections=2):
            pass
    assert re.fullmatch(unanswered("PostgreSQL"), str(caught.value))
    assert nothing_left(lab_dir)


@pytest.mark.engine
@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_a_server_stopped_at_its_start_fails_in_one_line(engine, lab_dir, short_start, stopped_at_start):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with pytest.raises(RunFailed) as caught:
        with provision(engine, spec, keep=False, connections=2):
            pass
    assert re.fullmatch(unanswered(TITLES[engine]), str(caught.value))
    assert nothing_left(lab_dir)


SLEEPY = on_disk('kind = "custom"\nsetup = "setup.sql"\ntransaction = "t.sql"\nconnections = 1\n'
                 'transactions_per_connection = 1\nstall_after_s = 3', name="sleepy")
SETUP_SLEEP = "SELECT pg_sleep(600)"


def preparing() -> owned.Manifest | None:
    """The instance whose workload's setup is sleeping: the server up, the prepare under way."""
    for manifest in owned.Manifest.all():
        for folder in manifest.dirs:
            if not folder.startswith("/tmp/storlab-"):
                continue
            try:
                with psycopg.connect(host=folder, port=postgres.PORT, user=postgres.SUPERUSER, dbname=postgres.DATABASE,
                                     connect_timeout=5) as conn:
                    if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query = %s AND state = 'active'",
                                    (SETUP_SLEEP,)).fetchone()[0]:
                        return manifest
            except psycopg.OperationalError:
                continue  # not accepting sessions yet
    return None


@pytest.mark.engine
def test_a_server_that_stops_answering_while_the_workload_prepares_fails_its_run(write_experiment, lab_dir, tmp_path):
    write_experiment(SETUP_SLEEP + ";\n", "setup.sql")
    write_experiment("SELECT 1;\n", "t.sql")
    path = write_experiment(SLEEPY.format(disk=lab_dir), "sleepy.toml")
    proc = start("run", path, "--out", tmp_path / "results", stdout=subprocess.PIPE)
    stopped: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while (manifest := preparing()) is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
        stopped = stop_instance(manifest)
        output, errors = proc.communicate(timeout=300)  # a hang guard: it waited for good before
    finally:
        stop_storlab(proc)
        for pid in stopped_processes(stopped):  # whatever a failing test left, continued and ended
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 1, output + errors
    assert "#1: the server stopped answering for 3 s; its instance was stopped" in output
    assert errors.strip() == "storlab: 1 runs failed; run the same command again to retry them"
    assert stopped_processes(stopped) == [] and nothing_left(lab_dir)


def test_a_set_up_tool_that_does_not_finish_is_stopped_in_one_line():
    nap = f"600.{os.getpid()}"  # names this test's sleep among the machine's processes
    with pytest.raises(user_tools.ToolFailed) as caught:
        user_tools.run_as(os_users.server_user(), ["sh", "-c", f"echo initializing the cluster; sleep {nap}"],
                         "initdb", timeout=1)
    assert str(caught.value) == "initdb: sh did not finish within 1 s and was stopped; its output: initializing the cluster"
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", nap]]
    assert psutil.wait_procs(left, timeout=30)[1] == []  # a hang guard: SIGKILL has been sent to them
