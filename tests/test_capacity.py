"""A placement too small for the experiment: refused (or warned about) with the figures before the first
run, and a placement that fills up during a run is named, with the file and "no space left", and stops
the experiment. On an 85 MB file system of its own, unmounted on every way out."""

from __future__ import annotations

import errno
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from storlab.lab import owned
from storlab.lab.layout import CellLayout
from storlab.running import capacity
from storlab.sizes import format_bytes
from storlab.workloads.random_insert import RandomInsertParams
from tests.commands import start, storlab
from tests.conftest import instances_up, stop_storlab, storlab_processes

pytestmark = pytest.mark.engine

EXPERIMENT = """
name = "small"
engine = "postgres"
repetitions = {reps}

[placements]
small = "{small}"
ram = "tmpfs"

[layout]
data_on = "small"
log_on = "{log_on}"

[workload]
kind = "random-insert"
connections = 4
rows_per_connection = {rows}
batch = 500
"""



@pytest.fixture
def small_fs(lab_root):
    mount = lab_root / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=85m,mode=0755", "storlab-test-small", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)]).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.fixture
def small_experiment(write_experiment, small_fs):
    def make(rows: int, log_on: str = "ram", reps: int = 1) -> Path:
        return write_experiment(EXPERIMENT.format(small=small_fs, rows=rows, log_on=log_on, reps=reps), "small.toml")

    return make


def test_an_experiment_that_cannot_fit_is_refused_with_the_figures(small_experiment, small_fs, tmp_path):
    path = small_experiment(rows=200_000, log_on="small")  # the case: 4 connections x 200,000 rows
    need = capacity.run_footprint("postgres", CellLayout(data_on="small"),
                                  RandomInsertParams(kind="random-insert", connections=4, rows_per_connection=200_000), {})
    expected = (f"storlab: small.toml:7: placements.small: too small: one run writes about "
                f"{format_bytes(need.data + need.log)} (placements.small {format_bytes(need.data + need.log)}; "
                f"cell (single cell)) and 85 MiB is free on {small_fs}; free space, choose another placement or "
                "shrink the workload\n")
    for dry in (["--dry-run"], []):
        result = storlab("run", str(path), *dry, "--out", str(tmp_path / "r"))
        assert result.returncode == 2
        assert result.stderr == expected
    assert list(small_fs.iterdir()) == [] and not (tmp_path / "r").exists()


def test_an_experiment_that_takes_most_of_a_placement_is_a_warning(small_experiment):
    result = storlab("run", str(small_experiment(rows=31_000)), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "warning: placements.small: one run writes about 43 MiB (placements.small 43 MiB; cell (single cell)) " \
           "and 85 MiB is free on" in result.stdout


def _fill(folder: Path) -> Path:
    """Take every free byte of a file system (another program filling the disk under a run)."""
    filler = folder / "filler"
    chunk = b"\0" * (1024 * 1024)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_placement_that_fills_up_is_named_and_stops_the_experiment(small_experiment, small_fs, tmp_path):
    out = tmp_path / "r"
    proc = start("run", small_experiment(rows=30_000, reps=3), "--no-trace", "--out", out)
    try:
        deadline = time.monotonic() + 120
        while not instances_up() or shutil.disk_usage(small_fs).used < 20 * 1024**2:  # rows going in
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.02)
        _fill(small_fs)
        assert proc.wait(timeout=300) == 1
        line = proc.stderr.read().strip()
    finally:
        stop_storlab(proc)
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"storlab: placement small ({small_fs}) is full: no space left on device writing "), line
    assert line.endswith("; stopped: free space there or shrink the workload, then run the same command to resume")
    with sqlite3.connect(out / "storlab.sqlite") as db:
        (message,) = db.execute("SELECT message FROM failures").fetchone()  # one failure, not one per run
    # PostgreSQL says a full disk two ways: ENOSPC, or a write the disk took only part of (mdextend's
    # "wrote only 4096 of 8192 bytes", once in a suite of three workers)
    assert re.search(r"No space left on device|wrote only \d+ of \d+ bytes", message), message
    assert storlab_processes() == [] and [p.name for p in small_fs.iterdir()] == ["filler"]
    assert owned.Manifest.all() == []
