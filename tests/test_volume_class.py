"""A volume class whole: caps, a credit bucket and a latency on one placement, on both engines. The
delay layer's work for the servers (here a flush's writeback) is charged to their group, so the caps
and the bucket hold it, while each commit still waits for its declared flush."""

from __future__ import annotations

import json
import sqlite3

import pytest

from storlab.lab import cgroups, devices, latency
from tests.commands import invoke, storlab
from tests.devicetools import attached, needs_root

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
    # The answer holds each class whole: its latency, its caps and its bucket, declared and observed.
    parts = {(p["placement"], p["property"]): p for p in json.loads(invoke("show", str(tmp_path / "r"), "--json").stdout)["volumes"]
             if p["placement"] in CLASSES}
    for name, keys in CLASSES.items():
        layer = parts[(name, "latency")]
        assert layer["declared"] == {"flush_latency_ms": FLUSH_MS} and layer["observed"]["mode"] == "passthrough"
        assert layer["observed"]["layer_cpu_s"] > 0
        assert ((name, "credits") in parts) == ("bucket" in keys) and ((name, "caps") in parts) == ("_iops =" in keys or "mb_s =" in keys)
    assert parts[("credited", "credits")]["observed"]["runs"] == 1
    assert parts[("credited", "credits")]["declared"]["iops_bucket"]["size"] == 400
    capped = parts[("capped", "caps")]
    assert capped["declared"] == {"write_iops": 2000} and capped["said"].startswith("write 2,000 IOPS")
    assert 0 <= capped["observed"].get("at_cap_share", 0) <= 1


@pytest.mark.device
@needs_root
@can_delay
@can_cap
def test_storlab_io_through_a_bucket_and_a_latency_runs_dry_on_time_and_holds_the_latency_under_its_burst(image_dir, tmp_path):
    """fio through one placement's bucket and read latency: the bucket runs dry when its credits are
    spent (both passes), the latency at depth 1 (under the burst) is judged and held, and at depth 8
    (the latency alone would pass the baseline the dry bucket held) it is said not judged, never held."""
    with devices.DevicePool() as pool:
        device = pool.device("fast", devices.DeviceSpec(devices.DeviceFormat(256 * 2**20, 512, "ext4", "", image_dir), 128))
        out = tmp_path / "io"
        # 1,500 credits at 1,000 - 100 a second: dry near 1.7 s into each 3 s job at depth 8.
        done = storlab("io", device.mount_point, "--iops-bucket", "100/1000/1500", "--read-latency", "2",
                       "--preset", "latency", "--size", "32M", "--duration", "3s", "--out", out)
        assert done.returncode == 0, done.stderr
    with sqlite3.connect(out / "storlab.sqlite") as db:
        flags = {job: json.loads(f) for job, f in db.execute("SELECT job, flags FROM io_jobs")}
    for job in ("4k-randread-qd8", "4k-randread-qd8+latency"):
        (bucket,) = [f for f in flags[job] if f.startswith("bucket on ")]
        dry_at = float(bucket.split("ran dry at ")[1].split(" s")[0])
        assert 1.2 < dry_at < 2.6 and bucket.endswith(", held"), (job, bucket)
    (judged,) = [f for f in flags["4k-randread-qd1+latency"] if f.startswith("latency: ")]
    assert judged.endswith(": held") and "2 ms declared, plus the device's own" in judged, judged
    assert "p99" in judged and "not judged (the job alone ran its bucket dry" in judged, judged
    (skipped,) = [f for f in flags["4k-randread-qd8+latency"] if f.startswith("latency: ")]
    assert "at depth 8 not judged: the latency alone allows" in skipped and "the bucket held" in skipped, skipped
    assert not attached(image_dir)
