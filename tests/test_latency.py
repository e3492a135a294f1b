"""A device placement's latency per IO: the file's keys (each a factor, refused in one line where it
cannot be held), the verdict `storlab io` gives, and on real devices, fio and servers: fio through the
delay layer at queue depth 1 and 8 sees the declared latency on top of the device's own, a session
committing one row at a time obeys one commit per declared flush at most on both engines, two
experiments at once each hold their own, and a run killed with -9 leaves nothing `storlab clean` does
not remove."""

from __future__ import annotations

import json
import math
import signal
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from storlab.engines.postgres import shared_memory
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab import devices, latency, owned
from storlab.lab.latency import DeviceLatency, Latency
from storlab.volume import held_latency
from tests.commands import invoke, start, storlab, together
from tests.conftest import instances_up, stop_storlab, storlab_processes
from tests.devicetools import attached, mounted, needs_root, wait_gone

can_delay = pytest.mark.skipif(latency.unavailable() is not None, reason=f"no delay layer here: {latency.unavailable()}")

FILE = """
name = "lat"
engine = "{engine}"
repetitions = 1

[placements]
{placements}

[layout]
data_on = "vol"
log_on = "{log_on}"

[workload]
{workload}
"""

INSERTS = 'kind = "random-insert"\nconnections = 1\nrows_per_connection = {rows}\nbatch = 1'


def write(lab_root: Path, placements: str, engine: str = "postgres", log_on: str = "vol",
          workload: str = INSERTS.format(rows=100)) -> Path:
    path = lab_root / "lat.toml"
    path.write_text(FILE.format(engine=engine, placements=placements, log_on=log_on, workload=workload))
    return path


# -- the file's keys ---------------------------------------------------------------------------


def test_latency_keys_are_factors_and_reach_each_cell(lab_root):
    text = FILE.format(engine="postgres", log_on="vol", workload=INSERTS.format(rows=10),
                       placements='vol = { loop = "1GB", flush_latency_ms = [1, { p50 = 1, p99 = 4 }], '
                                  'write_latency_ms = 0.5 }')
    exp = experiment.parse(lab_root / "x.toml", text, check_placements=False)
    assert list(exp.factors) == ["placements.vol.flush_latency_ms"]
    cells = {c.label: c for c in matrix.cells(exp)}
    assert set(cells) == {"vol.flush_latency_ms=1.0", "vol.flush_latency_ms=p50:1.0+p99:4.0"}
    fixed = cells["vol.flush_latency_ms=1.0"].devices["vol"]
    assert fixed.latency == DeviceLatency(write=Latency(0.5, 0.5), flush=Latency(1.0, 1.0))
    assert cells["vol.flush_latency_ms=p50:1.0+p99:4.0"].devices["vol"].latency.flush == Latency(1.0, 4.0)
    assert fixed.format == cells["vol.flush_latency_ms=p50:1.0+p99:4.0"].devices["vol"].format  # one device
    plain = experiment.parse(lab_root / "x.toml", text.replace(
        ', flush_latency_ms = [1, { p50 = 1, p99 = 4 }], write_latency_ms = 0.5', ''), check_placements=False)
    assert matrix.cells(plain)[0].devices["vol"].latency is None  # no layer at all without a latency key


BAD = [
    ('vol = { loop = "1GB", flush_latency_ms = -1 }',
     ("lat.toml:7: placements.vol.flush_latency_ms: expected milliseconds from 0 (fixed) or { p50 = …, p99 = … } or "
     "a list of them, got -1")),
    ('vol = { loop = "1GB", read_latency_ms = { p50 = 4, p99 = 1 } }',
     "lat.toml:7: placements.vol.read_latency_ms: p99 (1) must be above p50 (4); a fixed latency is one number"),
    ('vol = { loop = "1GB", read_latency_ms = { p50 = 1, p95 = 4 } }',
     ('lat.toml:7: placements.vol.read_latency_ms: expected milliseconds from 0 (fixed) or { p50 = …, p99 = … } or '
     'a list of them, got {"p50": 1, "p95": 4}')),
    ('vol = { path = "/var/tmp", flush_latency_ms = 2 }',
     ("lat.toml:7: placements.vol.flush_latency_ms: a latency is held by a layer over a device storlab makes, which a "
     'directory is not: declare it on a device placement, { loop = "4GB", … }')),
]


@pytest.mark.parametrize("placements, expected", BAD, ids=range(len(BAD)))
def test_a_latency_that_cannot_be_held_is_one_line(lab_root, placements, expected):
    path = write(lab_root, placements)
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 2, (result.stdout, result.exception)
    assert result.stderr == f"storlab: {expected}\n"


def test_storlab_io_checks_its_latency_as_the_file_does(tmp_path):
    result = invoke("io", tmp_path, "--write-latency", "4/1")
    assert result.exit_code == 2
    assert result.stderr == "storlab: --write-latency '4/1': p99 (1.0) must be above p50 (4.0); a fixed latency is one number\n"
    result = invoke("io", tmp_path, "--flush-latency", "1/")
    assert result.exit_code == 2
    assert result.stderr == """storlab: --flush-latency '1/': expected milliseconds ("2") or a p50/p99 pair ("1/4")\n"""


def test_a_job_is_held_only_within_the_tolerances():
    declared = Latency(2.0, 2.0)
    own = (0.1, 0.3, 40_000.0)
    assert held_latency.judge("read", declared, 1, own, (2.2, 2.5, 450.0)).held
    assert not held_latency.judge("read", declared, 1, own, (2.4, 2.5, 450.0)).held  # p50 +14 %
    assert not held_latency.judge("read", declared, 1, own, (2.1, 2.9, 450.0)).held  # p99 +26 %
    want = 8 / (0.002 + 8 / 40_000)  # Little's law: 3,636 IOPS
    assert held_latency.judge("read", declared, 8, own, (2.1, 2.3, want * 0.9)).held
    assert not held_latency.judge("read", declared, 8, own, (2.1, 2.3, want * 0.8)).held
    pair = Latency(1.0, 4.0)  # the mean of the lognormal through both
    assert pair.arg() == "1/4" and declared.arg() == "2"
    assert held_latency.mean_ms(pair) == pytest.approx(1.0 * 2.718281828 ** ((1.3862944 / 2.3263479) ** 2 / 2), rel=1e-6)


def _drawn(rng, declared: Latency, count: int, scale: float = 1.0):
    """`count` latencies of a layer that adds `declared` (times `scale`) to each IO, in ms."""
    if declared.fixed:
        return np.full(count, declared.p50_ms * scale)
    return rng.lognormal(math.log(declared.p50_ms), declared.sigma, count) * scale


@pytest.mark.parametrize("declared", [Latency(1, 1), Latency(5, 5), Latency(0.5, 2), Latency(1, 4), Latency(5, 15)],
                         ids=lambda d: d.arg())
def test_the_held_verdict_rarely_fails_a_layer_that_holds_and_always_fails_one_25_percent_slow(declared):
    """The verdict's error rates, simulated: 300 jobs of `storlab io`'s default 10 s at depth 1, each IO the
    declared draw plus one of the device's own (p50 0.1 ms, p99 0.5 ms, a read here), the device-alone job
    as long. Percentiles of some 1,700 to 14,000 IOs: a layer that adds exactly what is declared is said
    held in at least 98 % of jobs (none failed here), one whose every IO is 25 % slower never. Jobs of
    2 s have 5 times fewer IOs: a 0.5/2 ms pair was then failed in 4.4 % of 500 (by hand)."""
    rng = np.random.default_rng(2002)
    own_latency = Latency(0.1, 0.5)
    own = _drawn(rng, own_latency, int(10_000 / held_latency.mean_ms(own_latency)))
    own_seen = (np.percentile(own, 50), np.percentile(own, 99), 1000 / own.mean())
    said = {}
    for scale in (1.0, 1.25):
        count = int(10_000 / (held_latency.mean_ms(declared) * scale + own.mean()))
        held = 0
        for _ in range(300):
            job = _drawn(rng, declared, count, scale) + rng.choice(own, count)
            seen = (np.percentile(job, 50), np.percentile(job, 99), 1000 / job.mean())
            held += held_latency.judge("read", declared, 1, own_seen, seen).held
        said[scale] = held / 300
    assert said[1.0] >= 0.98 and said[1.25] <= 0.02, said


def test_a_depth_the_cap_binds_is_held_at_the_cap_and_not_when_the_layers_io_escapes_it():
    """The capped branch's error rates, simulated: 300 jobs of 4 s at depth 8 through 1 ms declared and a
    2,000 IOPS cap (the latency alone would allow some 7,500). The kernel passes the cap's IOs in 0.1 s
    slices, and a job starts and ends anywhere in one: its IOPS fall within a slice's worth under the cap,
    said held every time. A layer whose IO escaped the group (25 % over the cap) is never said held, nor
    one held 25 % under it."""
    rng = np.random.default_rng(45)
    declared, own, cap, seconds = Latency(1, 1), (0.06, 0.2, 14_000.0), 2000.0, 4
    said = {"at the cap": 0, "escaped": 0, "under": 0}
    for _ in range(300):
        at_cap = (cap * 0.1 * (seconds / 0.1 - 1 + rng.uniform()) + rng.integers(0, 8)) / seconds
        for name, iops in (("at the cap", at_cap), ("escaped", at_cap * 1.25), ("under", at_cap * 0.75)):
            said[name] += held_latency.judge("read", declared, 8, own, (1.07, 70.0, iops), cap).held
    assert said == {"at the cap": 300, "escaped": 0, "under": 0}, said


@needs_root
@can_delay
def test_check_says_how_latency_is_held_and_a_latency_under_the_fixed_floor_is_refused(lab_root, images):
    # What the floor is on this machine is a benchmark's question (it moves with the machine's load:
    # 2.8 ms once beside a full suite): here, that it is measured, and said by `check`.
    found = latency.floor()
    assert math.isfinite(found.added_ms) and found.added_ms >= 0 and found.cpu_us > 0
    checked = invoke("check", "--json", lab_root)
    (item,) = [i for i in json.loads(checked.stdout)["items"] if i["name"] == "device latency"]
    assert item["value"].startswith("held by storlab's FUSE delay layer") and "its floor: +" in item["value"]
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", read_latency_ms = [0, 0.001] }}')
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 2
    assert result.stderr.startswith("storlab: lat.toml:7: placements.vol.read_latency_ms: 0.001 ms is below 0.1 ms: ")
    path.write_text(path.read_text().replace("0.001", "1"))
    planned = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert planned.exit_code == 0, planned.stderr


# -- on real devices ---------------------------------------------------------------------------


@pytest.mark.device
@pytest.mark.fio
@pytest.mark.alone  # percentiles of a sleeping thread: another worker's load on 2 cores moves them
@needs_root
@can_delay
def test_fio_through_the_layer_sees_the_declared_latency_at_depth_1_and_8(image_dir, tmp_path):
    """Each job through the layer: p50 within 10 % of the declared p50 plus the device's own, and at
    depth 8 the IOPS Little's law gives within 15 % (the depth kept: not depth times slower). The reads
    drawn (p50 5 ms, p99 15), the writes fixed (8 ms): one run holds both kinds of delay. Declared
    5 ms and more: on this 2-core VM a request through the layer wakes two sleepers (the layer's thread
    and fio's), some 0.1 to 0.4 ms late together, more than 10 % of 1 or 2 ms at depth 1 (docs/devices.md)."""
    # A drawn latency's p50 needs its samples: 3 s at depth 1 is some 550 IOs, the median's error about 2 %.
    read, write, seconds = "5/15", "8", 3
    with devices.DevicePool() as pool:
        device = pool.device("fast", devices.DeviceSpec(devices.DeviceFormat(256 * 2**20, 512, "ext4", "", image_dir), 128))
        out = tmp_path / "io"
        done = storlab("io", device.mount_point, "--read-latency", read, "--write-latency", write, "--size", "32M",
                       "--duration", f"{seconds}s", "--out", out)
        assert done.returncode == 0, done.stderr
        with sqlite3.connect(out / "storlab.sqlite") as db:
            jobs = {job: (iodepth, iops, p50, p99, json.loads(flags)) for job, iodepth, iops, p50, p99, flags in db.execute(
                "SELECT job, iodepth, iops, lat_p50_ms, lat_p99_ms, flags FROM io_jobs")}
        assert len(jobs) == 8
        declared = {"randread": latency.parse(_value(read)), "randwrite": latency.parse(_value(write))}
        for job, (depth, iops, p50, p99, flags) in jobs.items():
            if not job.endswith("+latency"):
                continue
            _, own_iops, own50, _, _ = jobs[job.removesuffix("+latency")]
            lat = declared[job.split("-")[1]]
            assert abs(p50 / (lat.p50_ms + own50) - 1) <= 0.10, (job, p50, lat, own50)
            if depth == 8:
                want = 8 / (held_latency.mean_ms(lat) / 1000 + 8 / own_iops)
                assert abs(iops / want - 1) <= 0.15, (job, iops, want)
                assert iops > 4 / (lat.p50_ms / 1000)  # requests wait side by side, not one after another
            (flag,) = flags
            assert flag.startswith("latency: ") and flag.endswith("held")
        assert [m for m in owned.Manifest.all() if m.engine == "io"] == []  # the io run's scratch went with it
        assert not [line for line in Path("/proc/mounts").read_text().splitlines()
                    if latency.FILESYSTEM in line and str(device.mount_point) in line]  # the io run's layer went with it
    assert not attached(image_dir)


@pytest.mark.device
@pytest.mark.fio
@needs_root
@can_delay
def test_a_flush_latency_is_held_against_commits_each_waiting_for_its_flush(image_dir, tmp_path):
    """`storlab io --flush-latency 4` runs the commit preset (a write, then fdatasync, one at a time) on
    the device alone and through the layer: each flush there takes the declared 4 ms at least, so at
    most 250 commits a second, and the flag judges the flush. Load beside it only adds time: the
    verdict's tolerances are held alone, by hand (the note's command)."""
    with devices.DevicePool() as pool:
        device = pool.device("fast", devices.DeviceSpec(devices.DeviceFormat(256 * 2**20, 512, "ext4", "", image_dir), 128))
        out = tmp_path / "io"
        done = storlab("io", device.mount_point, "--flush-latency", "4", "--size", "16M", "--duration", "2s", "--out", out)
        assert done.returncode == 0, done.stderr
        with sqlite3.connect(out / "storlab.sqlite") as db:
            jobs = {job: (iops, p50, json.loads(flags)) for job, iops, p50, flags in db.execute(
                "SELECT job, iops, lat_p50_ms, flags FROM io_jobs")}
    assert sorted(jobs) == ["4k-commit", "4k-commit+latency", "8k-commit", "8k-commit+latency"]
    for job in ("4k-commit", "8k-commit"):
        own_iops, own50, _ = jobs[job]
        iops, p50, (flag,) = jobs[job + "+latency"]
        assert own50 < p50 and p50 >= 4 and iops < 1000 / 4, (job, jobs[job], jobs[job + "+latency"])
        assert flag.startswith("latency: flush 4 ms declared, plus the device's own: p50 "), flag
    assert not attached(image_dir)


def _value(text: str):
    p50, _, p99 = text.partition("/")
    return {"p50": float(p50), "p99": float(p99)} if p99 else float(p50)


@pytest.mark.engine
@pytest.mark.device
@pytest.mark.alone  # a 1 ms sleep beside another worker's load on 2 cores wakes ~2 ms late (299 commits/s, not 536)
@can_delay
@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_one_session_commits_at_most_once_per_declared_flush(lab_root, images, tmp_path, engine):
    """One session, one row a commit, the log's device flushing in 1 then 4 ms: each commit waits for
    its flush, so no cell commits faster than one per flush latency, and the slower flush is slower."""
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}" }}\n'
                           f'wal = {{ loop = "256MB", image_dir = "{images}", flush_latency_ms = [1, 4] }}',
                 engine=engine, log_on="wal", workload=INSERTS.format(rows=150))
    done = storlab("run", path, "--out", tmp_path / "r", "--no-trace")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "r" / "storlab.sqlite") as db:
        rows = db.execute("SELECT c.factors, f.value, r.conditions FROM figures f JOIN runs r ON r.id = f.run_id "
                          "JOIN cells c ON c.id = r.cell_id WHERE f.name = 'transactions_per_s'").fetchall()
    rate = {json.loads(factors)["placements.wal.flush_latency_ms"]: value for factors, value, _ in rows}
    assert rate[1.0] <= 1000 / 1 and rate[4.0] <= 1000 / 4, rate
    assert rate[4.0] < rate[1.0] / 2, rate  # the flush is what each commit waits for
    for _, _, conditions in rows:
        seen = json.loads(conditions)
        assert seen["devices"]["wal"]["delay_layer"] and not seen["devices"]["vol"]["delay_layer"]
        assert seen["devices"]["wal"]["filesystem"] == "ext4" and seen["devices"]["wal"]["device"].startswith("loop")
        assert set(seen["delay_layer_cpu_s"]) == {"wal"} and seen["delay_layer_cpu_s"]["wal"] > 0
    parts = json.loads(storlab("show", tmp_path / "r", "--json").stdout)["volumes"]
    layered = [p for p in parts if p["property"] == "latency"]
    assert {p["placement"] for p in layered} == {"wal"} and len(layered) == 2  # one a cell
    for part in layered:
        assert part["declared"]["flush_latency_ms"] in (1.0, 4.0) and part["observed"]["mode"] == "passthrough"
        assert part["observed"]["layer_cpu_s"] > 0 and 0 < part["observed"]["layer_core_share"] < 1
        assert part["said"].startswith(f"flush {part['declared']['flush_latency_ms']:g} ms, through storlab's "
                                       "delay layer (passthrough); its CPU ")
    assert {p["placement"] for p in parts if p["property"] == "format"} == {"vol", "wal"}
    assert not attached(images) and not mounted(images)


@pytest.mark.engine
@pytest.mark.device
@can_delay
def test_two_delayed_experiments_at_once_each_hold_their_own_flush(lab_root, tmp_path):
    """Two `storlab run`s side by side (a fleet, a second experiment), each its WAL on a device of its
    own flushing in 4 and 8 ms: each layer serves its own instance, each run commits no faster than one
    per its own flush, the slower flush is the slower run, and both leave nothing."""
    rates, outs = {}, {}
    for flush in (4, 8):
        folder = lab_root / f"exp{flush}"
        folder.mkdir(mode=0o755)
        (folder / "images").mkdir(mode=0o755)
        path = write(folder, f'vol = {{ loop = "256MB", image_dir = "{folder / "images"}" }}\n'
                             f'wal = {{ loop = "256MB", image_dir = "{folder / "images"}", flush_latency_ms = {flush} }}',
                     log_on="wal", workload=INSERTS.format(rows=120))
        outs[flush] = (path, tmp_path / f"r{flush}")
    done = together(*(("run", path, "--out", out, "--no-trace") for path, out in outs.values()))
    for (flush, (_, out)), finished in zip(outs.items(), done):
        assert finished.returncode == 0, finished.stderr
        with sqlite3.connect(out / "storlab.sqlite") as db:
            ((rate, conditions),) = db.execute("SELECT f.value, r.conditions FROM figures f JOIN runs r ON r.id = f.run_id "
                                               "WHERE f.name = 'transactions_per_s'").fetchall()
        seen = json.loads(conditions)
        assert seen["devices"]["wal"]["delay_layer"] and seen["delay_layer_cpu_s"]["wal"] > 0
        rates[flush] = rate
    assert rates[4] <= 1000 / 4 and rates[8] <= 1000 / 8 and rates[8] < rates[4], rates
    for flush in outs:
        images_of = lab_root / f"exp{flush}" / "images"
        assert not attached(images_of) and not mounted(images_of)
    assert storlab_processes() == []


@pytest.mark.engine
@pytest.mark.device
@can_delay
def test_kill_9_mid_run_then_clean_leaves_no_layer_mount_device_or_server(lab_root, images, tmp_path):
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", flush_latency_ms = 2 }}',
                 workload=INSERTS.format(rows=100_000))
    proc = start("run", path, "--out", tmp_path / "r", "--no-trace")
    try:
        deadline = time.monotonic() + 120
        while not instances_up() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        assert instances_up()
        (pool,) = [m for m in owned.Manifest.all() if m.devices]
        (entry,) = pool.devices
        assert latency.is_layer_mount(Path(entry["layer"])) and owned.running(entry["layer_pid"], entry["layer_start"])
        (instance,) = [m for m in owned.Manifest.all() if m.engine == "postgres"]
        segments, files = shared_memory.in_use([Path(d) for d in instance.dirs])  # read through the live layer
        assert segments and files
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_gone(entry["layer_pid"], 20)  # the kernel ends the layer with storlab; its mount stays
        cleaned = storlab("clean")
        assert cleaned.returncode == 0, cleaned.stderr
        assert not latency.is_layer_mount(Path(entry["layer"]))
        assert not owned.running(entry["layer_pid"], entry["layer_start"])
        assert not attached(images) and not mounted(images) and storlab_processes() == []
        assert owned.Manifest.all() == []
        # Its shared memory too, though the dead layer's mount no longer showed its data directory.
        assert {s.shmid for s in segments}.isdisjoint(s.shmid for s in shared_memory.segments())
        assert not [f for f in files if f.exists()]
    finally:
        stop_storlab(proc)
