"""A volume class whole: caps, a credit bucket and a latency on one placement, on both engines. The
delay layer's work for the servers (here a flush's writeback) is charged to their group, so the caps
and the bucket hold it, while each commit still waits for its declared flush."""

from __future__ import annotations

import sqlite3

import pytest

from storlab.lab import cgroups, latency
from tests.commands import invoke
from tests.devicetools import needs_root

can_delay = pytest.mark.skipif(latency.unavailable() is not None, reason=f"no delay layer here: {latency.unavailable()}")
can_cap = pytest.mark.skipif(cgroups.limits_unavailable(io=True, memory=False) is not None,
                             reason=f"no IO caps here: {cgroups.limits_unavailable(io=True, memory=False)}")

FLUSH_MS = 2
CLASSES = {
    "capped": "write_iops = 2000",
    "credited": "iops_bucket = { baseline = 200, burst = 2000, size = 400 }",
    "both": "mb_s = 50, iops_bucket = { baseline = 200, burst = 2000, size = 400 }",
}

FILE = """
name = "volume"
engine = "{engine}"
repetitions = 1

[placements]
disk = "{disk}"
{classes}

[layout]
data_on = "disk"
log_on = ["capped", "credited", "both"]

[workload]
kind = "random-insert"
connections = 1
rows_per_connection = 150
batch = 1
"""


@pytest.mark.engine
@pytest.mark.device
@needs_root
@can_delay
@can_cap
@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_caps_a_bucket_and_a_latency_compose_on_one_placement(lab_root, images, tmp_path, engine):
    (lab_root / "disk").mkdir(mode=0o755)
    classes = "\n".join(f'{name} = {{ loop = "256MB", image_dir = "{images}", flush_latency_ms = {FLUSH_MS}, {keys} }}'
                        for name, keys in CLASSES.items())
    path = lab_root / "volume.toml"
    path.write_text(FILE.format(engine=engine, disk=lab_root / "disk", classes=classes))
    result = invoke("run", str(path), "--out", str(tmp_path / "r"), "--no-trace")
    assert result.exit_code == 0, result.stderr
    with sqlite3.connect(tmp_path / "r" / "storlab.sqlite") as db:
        rows = db.execute("SELECT c.factors, f.value, r.id FROM figures f JOIN runs r ON r.id = f.run_id "
                          "JOIN cells c ON c.id = r.cell_id WHERE f.name = 'transactions_per_s'").fetchall()
        assert len(rows) == len(CLASSES)
        for factors, rate, run in rows:
            name = next(n for n in CLASSES if f'"{n}"' in factors)
            assert rate <= 1000 / FLUSH_MS * 1.02, (name, rate)  # each commit waited for its flush
            ((served, charged),) = db.execute("SELECT served_write_ios, charged_write_ios FROM io_caps "
                                              "WHERE run_id = ? AND placements LIKE ?", (run, f"%{name}%")).fetchall()
            # The flushes' writeback is the layer's, charged to the servers' group (without it, next to
            # nothing); the rest is the filesystem's journal, written by the kernel's own thread, no group's.
            assert served > 0 and charged >= 0.5 * served, (name, served, charged)
            spent = db.execute("SELECT spent FROM io_buckets WHERE run_id = ? AND placements LIKE ?",
                               (run, f"%{name}%")).fetchall()
            assert (spent[0][0] > 0 if "bucket" in CLASSES[name] else spent == []), (name, spent)
