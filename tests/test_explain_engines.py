"""Who waits on what and the waits over time, recorded by `storlab run` on real servers: the seed-000
twin (PostgreSQL's relation extension lock, named per partition) and MariaDB's files."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.commands import storlab
from tests.conftest import storlab_processes

pytestmark = pytest.mark.engine

# The multiple-data-files example at a small scale: 16 sessions inserting random keys, where PostgreSQL
# spends much of its waits in Lock:extend (DOMAIN.md), into 1 or 4 data files (partitions).
MULTIPLE_DATA_FILES = """
name = "multiple-data-files-small"
engine = "{engine}"
repetitions = {repetitions}

[placements]
disk = "{disk}"

[layout]
data_files = [1, 4]
data_on = "disk"

[workload]
kind = "random-insert"
connections = 16
rows_per_connection = {rows}
batch = 1000
{settings}
"""



@pytest.fixture(scope="module")
def postgres_run(tmp_path_factory):
    """One recorded experiment for the tests of this module (its servers gone when it returns). Two
    runs of about 5 s per cell: Lock:extend waits come in bursts, and the waiting-task sampler, every
    0.5 s, missed them all in one run of the 4-file cell out of about ten."""
    return _record(tmp_path_factory, "postgres", 60_000, "", repetitions=2)


def _record(tmp_path_factory, engine: str, rows: int, settings: str, repetitions: int = 1) -> Path:
    root = tmp_path_factory.mktemp(f"explain-{engine}")
    lab = Path("/var/tmp") / f"storlab-test-explain-{os.getpid()}-{engine}"
    lab.mkdir(mode=0o755, exist_ok=True)
    lab.chmod(0o755)  # the servers' OS user must reach it
    experiment = root / "exp.toml"
    experiment.write_text(MULTIPLE_DATA_FILES.format(engine=engine, disk=lab, rows=rows, settings=settings,
                                                          repetitions=repetitions))
    out = root / "results"
    env = {**os.environ, "STORLAB_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
    try:
        done = storlab("run", experiment, "--out", out, env=env)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(lab)], check=False)
    assert done.returncode == 0, done.stderr + "".join(l + "\n" for l in done.stdout.splitlines() if "failed" in l)
    return out


def cell_ids(folder: Path) -> dict[int, str]:
    with sqlite3.connect(folder / "storlab.sqlite") as db:
        return {int(re.search(r"\d+", label).group()): cid for cid, label in db.execute("SELECT id, label FROM cells")}


def resources_block(text: str, wait: str) -> list[tuple[str, float]]:
    """(resource, share) rows under `wait` in a --resources table, up to the next wait."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) != 4:
            inside = False
            continue
        if cells[0] == wait:
            inside = True
        elif cells[0]:
            inside = False
        if inside and cells[3]:  # an empty share: no session was caught in this wait
            rows.append((cells[1], float(cells[3].removesuffix(" %"))))
    return rows


def test_waits_resources_name_the_partitions_being_extended(postgres_run):
    ids = cell_ids(postgres_run)
    four = storlab("waits", postgres_run, "--cell", ids[4], "--resources")
    assert four.returncode == 0, four.stderr
    assert "who waits on what, waiting tasks sampled through each run, seconds per run" in four.stdout
    extend = resources_block(four.stdout, "Lock:extend")
    partitions = {name: share for name, share in extend if re.fullmatch(r"lab_insert_[0-3](_c1_idx)?", name)}
    # Each named: the partition whose extension lock the session waits on, never the parent table.
    # How many partitions a run catches depends on the sampler's luck (waiters queue on one partition
    # at a time, and every 0.5 s catches a few such moments in a 5 s run), so at least one.
    assert partitions and set(partitions) == {name for name, _ in extend if name != "— (not named)"}, four.stdout
    assert sum(share for _, share in extend) == pytest.approx(100.0, abs=0.3)
    assert all(0 < share <= 100 for share in partitions.values())
    # One data file: the table or its index, whichever extensions the sampler happened to catch (a run
    # once caught only the index's), never a partition.
    one = storlab("waits", postgres_run, "--cell", ids[1], "--resources")
    named = {name for name, _ in resources_block(one.stdout, "Lock:extend")} - {"— (not named)"}
    assert named and named <= {"lab_insert", "lab_insert_c1_idx"}, one.stdout
    assert storlab_processes() == []


def test_waits_are_recorded_on_the_time_axis_beside_throughput(postgres_run):
    with sqlite3.connect(postgres_run / "storlab.sqlite") as db:
        for (run_id,) in db.execute("SELECT id FROM runs"):
            metrics = {m for (m,) in db.execute("SELECT DISTINCT metric FROM timeline WHERE run_id = ?", (run_id,))}
            assert {"rows_per_s", "latency_p99_ms", "cpu_percent", "wait:CPU", "wait:Lock:extend"} <= metrics, metrics
            waited = db.execute("SELECT sum(wait_s) FROM waits WHERE run_id = ? AND wait_type = 'Lock:extend'",
                                (run_id,)).fetchone()[0]
            points = db.execute("SELECT t_s, value FROM timeline WHERE run_id = ? AND metric = 'wait:Lock:extend' "
                                "ORDER BY t_s", (run_id,)).fetchall()
            assert points and all(value > 0 for _, value in points)
            assert waited > 0


def test_the_last_second_of_a_recorded_run_is_divided_by_the_time_it_covers(postgres_run):
    """Each throughput bucket times its width gives back every row of the run: a last, partial second
    divided by a whole one (the old false tail-off) would lose rows here."""
    with sqlite3.connect(postgres_run / "storlab.sqlite") as db:
        for (run_id,) in db.execute("SELECT id FROM runs"):
            figures = dict(db.execute("SELECT name, value FROM figures WHERE run_id = ?", (run_id,)))
            buckets = db.execute("SELECT t_s, value FROM timeline WHERE run_id = ? AND metric = 'rows_per_s' "
                                 "ORDER BY t_s", (run_id,)).fetchall()
            edges = [t for t, _ in buckets] + [figures["elapsed_s"]]
            widths = [b - a for a, b in zip(edges, edges[1:])]
            assert min(widths) >= 0.5 and max(widths) < 1.5
            assert sum(rate * width for (_, rate), width in zip(buckets, widths)) == pytest.approx(figures["rows"], rel=1e-9)


def test_mariadb_waiting_tasks_name_the_partition_files(tmp_path_factory):
    settings = '[engine_settings]\ninnodb_buffer_pool_size = "16M"\n'
    out = _record(tmp_path_factory, "mariadb", 6000, settings)  # a few seconds a run: enough samples
    ids = cell_ids(out)
    four = storlab("waits", out, "--cell", ids[4], "--resources")
    assert four.returncode == 0, four.stderr
    files = {name for name, _ in resources_block(four.stdout, "wait/io/file/innodb/innodb_data_file")}
    # The partitions' own files, named; how many a 0.5 s sampler catches in a short run is luck.
    partitions = {name for name in files if re.fullmatch(r"lab_insert#P#p[0-3]\.ibd", name)}
    assert partitions and files - partitions <= {"ibdata1", "— (not named)"}, four.stdout
    assert storlab_processes() == []
