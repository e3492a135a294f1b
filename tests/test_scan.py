"""The scan workload on devices storlab makes, end to end: read-ahead as a factor, the size of every
IO, the device the server's files really sat on, and nothing left attached or mounted."""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.probes import iosizes
from storlab.results.store import Store
from tests.commands import start, storlab
from tests.conftest import storlab_processes

pytestmark = [pytest.mark.engine, pytest.mark.skipif(os.geteuid() != 0, reason="device placements need root")]

SCAN = """
name = "scan"
engine = "{engine}"
repetitions = {reps}

[placements]
fast = {{ loop = "512MB", image_dir = "{images}", sector = 4096, fs = "ext4", read_ahead_kb = [0, 128] }}

[layout]
data_on = "fast"
data_files = {files}

[workload]
kind = "scan"
table_mb = {table_mb}
"""



def loops_of(images: Path) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(images) in line]


def mounts_of(images: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(images) in line]


def test_a_device_the_servers_cannot_reach_is_refused_at_load(write_experiment, image_dir):
    image_dir.chmod(0o700)
    with pytest.raises(UserError, match=r"placements.fast.image_dir: .* is not reachable by the servers' OS user"):
        experiment.load(write_experiment(SCAN.format(engine="postgres", reps=1, images=image_dir, files=1, table_mb=10)))


@pytest.mark.alone  # a cold scan's time: beside other workers' IO on 2 cores, 1.17 s against 0.77 (not 2x) once in CI
def test_read_ahead_makes_the_reads_large_and_the_scan_fast(write_experiment, images, tmp_path):
    image_dir = images
    path = write_experiment(SCAN.format(engine="postgres", reps=2, images=image_dir, files=2, table_mb=40))
    out = tmp_path / "r"
    done = storlab("run", str(path), "--out", str(out))
    assert done.returncode == 0, done.stderr
    detailed = storlab("show", str(out), "--details")  # the conditions: behind --details
    assert detailed.returncode == 0, detailed.stderr
    assert "every repetition scans it cold" in " ".join(detailed.stdout.split())
    with Store.open(out, create=False) as store:
        cells = {c.id: c.factors["placements.fast.read_ahead_kb"] for c in store.cells()}
        by_read_ahead: dict[int, list] = {0: [], 128: []}
        for run in store.runs():
            by_read_ahead[cells[run.cell_id]].append(run)
            seen = run.conditions["devices"]["fast"]
            assert (seen["logical_sector"], seen["filesystem"], seen["direct_io"]) == (4096, "ext4", True)
            assert seen["read_ahead_kb"] == cells[run.cell_id]
            assert 40 * 0.95 <= run.figures["table_mb"] <= 40 * 1.05 and run.figures["cpu_s"] > 0
            reads = {size: n for _, direction, size, n, _ in store.kept(iosizes.PROBE, run.id) if direction == "read"}
            total = sum(size * n for size, n in reads.items())
            assert total > 30 * 2**20  # the whole table came from the device: the scans were cold
            share_4k = sum(size * n for size, n in reads.items() if size <= 4096) / total
            if cells[run.cell_id] == 0:
                assert share_4k > 0.9  # no read-ahead: PostgreSQL's 8 kB reads reach the device as 4 kB requests
            else:
                assert share_4k < 0.2
    slow = min(r.figures["elapsed_s"] for r in by_read_ahead[0])
    fast = max(r.figures["elapsed_s"] for r in by_read_ahead[128])
    assert slow > 2 * fast
    assert not loops_of(image_dir) and not mounts_of(image_dir) and storlab_processes() == []


def test_interrupted_scan_leaves_nothing_attached(write_experiment, images, tmp_path):
    image_dir = images
    path = write_experiment(SCAN.format(engine="postgres", reps=3, images=image_dir, files=1, table_mb=60))
    proc = start("run", path, "--out", tmp_path / "r")
    deadline = time.monotonic() + 120
    while not mounts_of(image_dir):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    time.sleep(1.0)  # inside the table's build or a scan
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert not loops_of(image_dir) and not mounts_of(image_dir) and storlab_processes() == []


def test_mariadb_has_no_parallel_scan(write_experiment, image_dir):
    body = SCAN.format(engine="mariadb", reps=1, images=image_dir, files=1, table_mb=10) + "dop = 2\n"
    with pytest.raises(UserError, match=r"workload.dop: MariaDB runs a query on one thread"):
        experiment.load(write_experiment(body))


def test_the_report_draws_the_sizes_of_the_ios_and_the_scan_against_dop(write_experiment, images, tmp_path):
    body = SCAN.format(engine="postgres", reps=1, images=images, files=1, table_mb=20).replace(
        "read_ahead_kb = [0, 128]", "read_ahead_kb = 128") + "dop = [0, 2]\n"
    out = tmp_path / "r"
    assert storlab("run", str(write_experiment(body)), "--out", str(out)).returncode == 0
    done = storlab("report", str(out))
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text()
    # Beside the headline, the figures in its unit (the scan's CPU s), against the factor swept: the answer's.
    answer = json.loads(storlab("show", str(out), "--json").stdout)
    assert answer["swept"] == "dop" and answer["beside_headline"] == ["cpu_s"]
    labels = [answer["headline"]["label"]] + [f["label"] for f in answer["figures"] if f["name"] == "cpu_s"]
    title = f"{' and '.join(labels)} against dop"
    assert title == "elapsed s and CPU s against dop"
    assert "The size of the IOs" in page and f"<h2>{html.escape(title)}</h2>" in page
    assert (out / "io_sizes.png").stat().st_size > 0 and (out / "beside_headline.png").stat().st_size > 0


def test_a_scan_cannot_race(write_experiment, images):
    body = SCAN.format(engine="postgres", reps=3, images=images, files=1, table_mb=10).replace(
        "repetitions = 3", "repetitions = 3\nrace = true")
    with pytest.raises(UserError, match=r"race: a scan's repetitions share what its cell prepared"):
        experiment.load(write_experiment(body))
