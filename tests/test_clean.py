"""`storlab clean` touches only what a dead storlab left: two runs on one machine go on untouched,
`clean --all` is the explicit way to stop a live one, and a killed instance's shared memory goes too."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from storlab.engines.postgres import shared_memory
from storlab.lab import os_users, owned
from storlab.running import cleanup
from tests.commands import start, storlab
from tests.conftest import instances_up, stop_storlab, storlab_processes
from tests.disk_experiments import on_disk

TINY = on_disk('kind = "random-insert"\nconnections = 2\nrows_per_connection = {rows}\nbatch = 500', name="{name}",
               repetitions="{reps}", layout="data_files = [1, 2]")


def ready_instances(count: int, procs: list[subprocess.Popen], timeout: float = 120) -> list[owned.Manifest]:
    """Wait until `count` instances are up at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        up = instances_up()
        if len(up) >= count:
            return up
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.poll() is not None]
        time.sleep(0.05)
    raise AssertionError(f"{count} instances were not up at once in time")


def failures(out: Path) -> list[str]:
    with sqlite3.connect(out / "storlab.sqlite") as db:
        return [m for (m,) in db.execute("SELECT message FROM failures")]


@pytest.fixture
def tiny(write_experiment, lab_dir):
    def make(name: str, reps: int = 3, rows: int = 6000) -> Path:
        return write_experiment(TINY.format(name=name, reps=reps, disk=lab_dir, rows=rows), f"{name}.toml")

    return make


@pytest.mark.engine
def test_clean_while_two_runs_go_stops_nothing(tiny, tmp_path):
    outs = [tmp_path / "a", tmp_path / "b"]
    procs = [start("run", tiny("a", rows=30_000), "--out", outs[0]), start("run", tiny("b", rows=30_000), "--out", outs[1])]
    try:
        ready_instances(2, procs)
        cleaned = storlab("clean")
        assert cleaned.returncode == 0, cleaned.stderr
        assert cleaned.stdout.startswith("nothing to clean (")
        assert "--all stops them" in cleaned.stdout
        for proc in procs:
            assert proc.wait(timeout=600) == 0, proc.stderr.read()
    finally:
        for proc in procs:
            stop_storlab(proc)
    for out in outs:
        assert failures(out) == []
        with sqlite3.connect(out / "storlab.sqlite") as db:
            assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 6
    assert storlab_processes() == [] and owned.Manifest.all() == []


@pytest.mark.engine
def test_clean_all_stops_a_live_run_and_says_so(tiny, tmp_path):
    out = tmp_path / "r"
    # Runs of seconds each: `clean --all` (a new process, half a second to start) must find the instance
    # it was shown still up (with 20,000 rows a session the run had gone on to its next instance's set-up).
    proc = start("run", tiny("live", reps=1, rows=300_000), "--out", out)
    try:
        (manifest,) = ready_instances(1, [proc])
        cleaned = storlab("clean", "--all")
        assert cleaned.returncode == 0, cleaned.stderr
        assert f"{manifest.instance_id}: stopped a running instance, removed " in cleaned.stdout
        assert proc.wait(timeout=600) == 1  # that run failed; the others ran
    finally:
        stop_storlab(proc)
    assert len(failures(out)) >= 1
    assert storlab_processes() == [] and owned.Manifest.all() == []


def test_a_reused_pid_is_not_the_owner(lab_dir):
    me = os.getpid()
    live = owned.Manifest("poaaaaaaaa", "postgres", owner_pid=me, owner_start=owned.pid_start(me))
    reused = owned.Manifest("pobbbbbbbb", "postgres", owner_pid=me, owner_start=owned.pid_start(me) - 1)
    for manifest in (live, reused):
        manifest.save()
    assert [c.instance_id for c in cleanup.clean()] == ["pobbbbbbbb"]  # same pid, another start: gone
    assert [m.instance_id for m in owned.Manifest.all()] == ["poaaaaaaaa"]
    assert [(c.instance_id, c.live) for c in cleanup.clean(live=True)] == [("poaaaaaaaa", True)]
    assert owned.Manifest.all() == []


def test_a_manifest_that_cannot_be_read_is_reported_by_clean():
    me = os.getpid()
    good = owned.Manifest("poaaaaaaaa", "postgres", owner_pid=me, owner_start=owned.pid_start(me) - 1)
    good.save()
    broken = owned.state_dir() / "pobbbbbbbb.json"
    broken.write_text('{"instance_id": "pobbbbbbbb", "engine": "postg')  # cut short, as by a full disk
    alien = owned.state_dir() / "mayyyyyyyy.json"
    alien.write_text('{"instance_id": "mayyyyyyyy", "engine": "mariadb", "owner_pid": 1, "dirs": "/"}')
    cleaned = storlab("clean")
    assert cleaned.returncode == 0, cleaned.stderr
    lines = cleaned.stdout.splitlines()
    assert [line for line in lines if "cannot read its manifest" in line] == [
        f"mayyyyyyyy: cannot read its manifest {alien}: its fields are not a manifest's; nothing of it was cleaned",
        f"pobbbbbbbb: cannot read its manifest {broken}: Unterminated string starting at: line 1 column 41 (char 40); "
        "nothing of it was cleaned",
    ]
    assert "poaaaaaaaa: removed nothing" in lines
    assert broken.exists() and alien.exists()  # left for someone to look at
    assert owned.Manifest.all() == []


def _mapped_segments(pid: int) -> set[str]:
    """The /dev/shm files a process has mapped, read from the kernel (not from storlab's bookkeeping)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {line.split()[-1] for line in maps.splitlines() if "/dev/shm/PostgreSQL." in line}


@pytest.mark.engine
def test_a_killed_runs_shared_memory_is_removed_by_clean(tiny, tmp_path):
    proc = start("run", tiny("killed", reps=3, rows=20_000), "--out", tmp_path / "r")
    # Another dead server's segment, owned by the same OS user: not this instance's, so it stays.
    decoy = Path(f"/dev/shm/PostgreSQL.{4_000_000_000 + os.getpid()}")
    try:
        (manifest,) = ready_instances(1, [proc])
        ours = _mapped_segments(manifest.server_pid)
        assert ours
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 20
        while storlab_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert storlab_processes() == []
        assert all(Path(f).exists() for f in ours)  # a dead PostgreSQL leaves them
        created = [s.shmid for s in shared_memory.segments() if s.creator_pid == manifest.server_pid]
        assert created  # its System V header, left too
        decoy.write_bytes(b"\0" * 64)
        user = os_users.server_user()
        os.chown(decoy, user.uid, user.gid)

        cleaned = storlab("clean")
        assert cleaned.returncode == 0, cleaned.stderr
        assert cleaned.stdout.startswith(f"{manifest.instance_id}: removed ")
        assert not any(Path(f).exists() for f in ours)
        assert not [s for s in shared_memory.segments() if s.shmid in created]
        assert decoy.exists()
        assert owned.Manifest.all() == []
    finally:
        decoy.unlink(missing_ok=True)
        stop_storlab(proc)


def test_one_marker_names_the_owner_and_never_goes_through_a_link(tmp_path):
    """Instances, devices and templates mark what storlab made the same way: one line naming the owner."""
    made = tmp_path / "made"
    made.mkdir()
    owned.mark(made, "template pg-15-abc")
    assert (made / owned.MARKER).read_text() == "template pg-15-abc\n"
    assert owned.marked_by(made) == "template pg-15-abc"
    with pytest.raises(FileExistsError):  # never written twice, nor over what is there
        owned.mark(made, "another")
    planted = tmp_path / "planted"
    planted.mkdir()
    target = tmp_path / "target"
    target.write_text("someone else's\n")
    (planted / owned.MARKER).symlink_to(target)
    assert owned.marked_by(planted) is None
    with pytest.raises(FileExistsError):
        owned.mark(planted, "x")
    assert target.read_text() == "someone else's\n"
