"""Every wait of an instance's life ends by a deadline the experiment states, in one line naming what
held it, and leaves nothing: a set-up slower than the run's limit (storlab's first statement waiting
for a synchronous standby that never comes), an end whose server does not stop (frozen), and a delay
layer that dies mid-run or with storlab (its mount then answers every call with ENOTCONN), which
`storlab clean` unmounts before it judges the folders it hid, saying only what it removed."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import time
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from storlab.engines.postgres import instance as postgres
from storlab.errors import RunFailed
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab import instances, latency, owned
from storlab.running import cell_runs, plan
from tests.commands import start, storlab
from tests.conftest import stop_storlab, storlab_processes
from tests.devicetools import attached, mounted, wait_gone

can_delay = pytest.mark.skipif(latency.unavailable() is not None, reason=f"no delay layer here: {latency.unavailable()}")

# One small insert load on a directory placement; each test adds its name, its own keys and settings.
EXPERIMENT = """
name = "{name}"
engine = "postgres"
{top}
[placements]
disk = "{{disk}}"

[layout]
data_on = "disk"

[workload]
kind = "random-insert"
connections = 1
rows_per_connection = 100
batch = 100
{workload}
"""

SLOW_SET_UP = EXPERIMENT.format(name="slowsetup", top="repetitions = 1\norder_seed = 1\n", workload="run_limit_s = 10") + \
    '\n[engine_settings]\nsynchronous_standby_names = ["", "*"]\n'


def running_until_done(proc: subprocess.Popen, seen: dict[str, float]) -> tuple[str, str]:
    """`proc`'s output once it ends; meanwhile when each of its instances' manifests first appeared."""
    deadline = time.monotonic() + 300  # a hang guard: the set-up waited 120 s before
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the run never ended"
        for manifest in owned.Manifest.all():
            if manifest.engine == "postgres":
                seen.setdefault(manifest.instance_id, time.time())
        time.sleep(0.05)
    return proc.communicate()


@pytest.mark.engine
def test_a_set_up_slower_than_the_run_limit_fails_within_it_naming_the_step(write_experiment, lab_dir, tmp_path):
    """With a synchronous standby named and none connected, every commit waits for ever: storlab's
    first CREATE TABLESPACE never returns, as each waited 10 s for a 10 s flush. That run fails at its
    declared 10 s from its set-up's start (not at the server's 120 s start deadline, in words that
    blamed a server that had answered), naming the statement; the other cell's run is kept."""
    out = tmp_path / "results"
    proc = start("run", write_experiment(SLOW_SET_UP.format(disk=lab_dir)), "--no-trace", "--out", out,
                 stdout=subprocess.PIPE)
    seen: dict[str, float] = {}
    try:
        output, errors = running_until_done(proc, seen)
    finally:
        stop_storlab(proc)
    assert proc.returncode == 1, output + errors
    assert errors.strip() == "storlab: 1 runs failed; run the same command again to retry them"
    with sqlite3.connect(out / "storlab.sqlite") as db:
        ((message, at),) = db.execute("SELECT message, at FROM failures").fetchall()
        ((kept,),) = db.execute("SELECT c.label FROM runs r JOIN cells c ON c.id = r.cell_id").fetchall()
    assert re.fullmatch(r"set-up: CREATE TABLESPACE ts_disk LOCATION '/\S+/storlab-po\w+/tablespace' waited past "
                        r"the run's limit of 10 s \(workload\.run_limit_s\); its instance was stopped", message), message
    assert f'synchronous_standby_names="*" #1: {message}' in " ".join(output.split())
    assert kept == 'synchronous_standby_names=""'
    set_up_at = max(seen.values())  # order_seed 1 runs the cell that answers first
    # The limit counts from the set-up's start, a moment before its manifest is written and seen here.
    assert 10 - 1 <= at - set_up_at < 10 + 5
    assert storlab_processes() == [] and owned.Manifest.all() == [] and list(lab_dir.iterdir()) == []


STOPPING = EXPERIMENT.format(name="stopping", top="", workload="stall_after_s = 3")


def cgroup2() -> Path | None:
    """Where cgroup v2 is mounted (alone, or beside v1 as `unified`), if it is."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


@contextmanager
def frozen(pid: int, manifest: owned.Manifest) -> Iterator[None]:
    """The server `pid` frozen by cgroup v2's freezer: SIGCONT does not wake it (storlab's stop continues
    a server stopped by SIGSTOP) and SIGKILL still ends it, as it ends a process stuck on a hung device.
    Its instance's own group where that is v2, else a group of this test's own; thawed on every way out."""
    group = Path(manifest.cgroup or "")
    ours = None
    if not (manifest.cgroup and (group / "cgroup.freeze").exists()):
        mount = cgroup2()
        if mount is None:
            pytest.skip("no cgroup v2 here: nothing freezes a process as a hung device does")
        group = ours = mount / f"storlab-test-frozen-{os.getpid()}-{manifest.instance_id}"
        ours.mkdir()
    try:
        if ours is not None:
            (ours / "cgroup.procs").write_text(f"{pid}\n")
        (group / "cgroup.freeze").write_text("1\n")
        yield
    finally:
        try:
            (group / "cgroup.freeze").write_text("0\n")
        except OSError:
            pass  # removed with its instance
        if ours is not None:
            for _ in range(100):  # its process killed, the group empties
                try:
                    ours.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.mark.engine
@pytest.mark.parametrize("background", [False, True], ids=["after-its-run", "while-the-next-sets-up"])
def test_a_server_that_does_not_stop_is_killed_at_the_stall_deadline(write_experiment, lab_dir, background):
    """An instance whose server is frozen as it ends: killed with everything in its group once the
    declared stall_after_s has passed (it waited 60 s before, and said nothing), and said in one line
    naming the server: raised where nothing listens (`storlab capture` ends its instance so), told where
    it ends while the next run sets up (`storlab run` warns: its run is recorded already)."""
    exp = experiment.load(write_experiment(STOPPING.format(disk=lab_dir)))
    (cell,) = matrix.cells(exp)
    lab = cell_runs.Lab(exp, plan.prepare_placements(exp), keep=False)
    told: list[str] = []
    failure = None
    with ExitStack() as thawed:
        try:
            with instances.ending_in_background(told.append) if background else nullcontext(), \
                    cell_runs.cell_instance(lab, cell, cell_runs.cell_paths(cell, lab.paths, None),
                                            time.monotonic()) as instance:
                server = instance.workspace.server.pid
                (manifest,) = owned.Manifest.all()
                thawed.enter_context(frozen(server, manifest))
                ending = time.monotonic()
        except RunFailed as exc:
            failure = exc
        took = time.monotonic() - ending
    said = (f"PostgreSQL (pid {server}) did not stop within 3 s (workload.stall_after_s) of SIGQUIT; "
            "everything of the instance was killed")
    if background:
        assert failure is None and told == [f"the end of instance {manifest.instance_id}: {said}"]
    else:
        assert str(failure) == f"the instance's end: {said}" and told == []
    assert 3 <= took < 3 + 10
    assert not owned.running(server, manifest.server_start)
    assert storlab_processes() == [] and owned.Manifest.all() == [] and list(lab_dir.iterdir()) == []


LAYERED = """
name = "layered"
engine = "postgres"
repetitions = 1

[placements]
vol = {{ loop = "256MB", image_dir = "{images}", flush_latency_ms = 1 }}

[layout]
data_on = "vol"
log_on = "vol"

[workload]
kind = "random-insert"
connections = 1
rows_per_connection = 100000
batch = 1
"""


def loading() -> bool:
    """An instance of this test's runs its workload: one of the workload role's sessions is active."""
    for folder in [d for manifest in owned.Manifest.all() for d in manifest.dirs if d.startswith("/tmp/storlab-po")]:
        try:
            with psycopg.connect(host=folder, port=postgres.PORT, user=postgres.SUPERUSER, dbname=postgres.DATABASE,
                                 connect_timeout=5) as conn:
                if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state = 'active'",
                                (postgres.WORKLOAD_ROLE,)).fetchone()[0]:
                    return True
        except psycopg.OperationalError:
            continue  # not set up yet
    return False


def layer_of_a_run_under_way(proc: subprocess.Popen) -> dict:
    """Once the run's workload is under way: its device's manifest entry (the layer's mount and process)."""
    deadline = time.monotonic() + 120
    while not loading():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    ((entry,),) = [m.devices for m in owned.Manifest.all() if m.devices]
    return entry


@pytest.mark.engine
@pytest.mark.device
@can_delay
def test_a_layer_that_dies_mid_run_is_named_and_clean_then_says_only_what_it_removes(write_experiment, images,
                                                                                        tmp_path):
    """The layer killed under a running load: the run fails naming the layer and its placement (it said
    "Transport endpoint is not connected", or "Software caused connection abort" for a call under way
    as it died, alone). The instance's end could not remove its folder behind
    the dead mount, which then went with the device: the next clean forgets it without a word (it said
    "removed" of it, and of the socket folder the end had removed)."""
    proc = start("run", write_experiment(LAYERED.format(images=images)), "--no-trace", "--out", tmp_path / "r",
                 stdout=subprocess.PIPE)
    try:
        entry = layer_of_a_run_under_way(proc)
        os.kill(entry["layer_pid"], signal.SIGKILL)
        output, errors = proc.communicate(timeout=120)
        left = [d for m in owned.Manifest.all() for d in m.dirs]
        cleaned = storlab("clean")
    finally:
        stop_storlab(proc)
    assert proc.returncode == 1, output + errors
    said = " ".join(output.split())
    assert re.search(r"\(single cell\) #1: the delay layer serving placements\.vol ended \(", said), said
    assert cleaned.returncode == 0, cleaned.stderr
    assert left and not any(d in cleaned.stdout for d in left), cleaned.stdout
    assert owned.Manifest.all() == [] and not attached(images) and not mounted(images) and storlab_processes() == []


@pytest.mark.engine
@pytest.mark.device
@can_delay
def test_clean_after_kill_9_unmounts_the_dead_layer_before_it_judges_the_folders_it_hid(write_experiment, images,
                                                                                          tmp_path):
    """storlab killed with -9 mid-run, its layer dead too, its mount left answering ENOTCONN. clean
    unmounts it first, then finds the instance's folder gone from there (it is on the device, removed
    with it), rather than calling it "not storlab's folder now"."""
    proc = start("run", write_experiment(LAYERED.format(images=images)), "--no-trace", "--out", tmp_path / "r")
    try:
        entry = layer_of_a_run_under_way(proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not wait_gone(entry["layer_pid"], 1):  # the kernel ends it with storlab, while its death signal holds
            os.kill(entry["layer_pid"], signal.SIGKILL)
        assert wait_gone(entry["layer_pid"], 20)  # its mount stays
        cleaned = storlab("clean")
    finally:
        stop_storlab(proc)
    assert cleaned.returncode == 0, cleaned.stderr
    assert "not storlab's folder now" not in cleaned.stdout and f"unmounted {entry['layer']}" in cleaned.stdout, \
        cleaned.stdout
    assert owned.Manifest.all() == [] and not attached(images) and not mounted(images) and storlab_processes() == []
