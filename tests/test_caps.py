"""IO caps on a placement and the server's memory, as factors: the file's keys (each a factor, refused
in one line when wrong), the kernel's files that set them and say what they did (v1 here, v2's
formats and its group's layout on a tree of plain files), and on real servers and devices: fio
through each cap reaches it and no more, a write-IOPS cap slows pgbench, a memory limit makes a
select-only load read its device, a killed run's groups go with `storlab clean`, and the fleet runs a
capped experiment as `storlab run` does."""

from __future__ import annotations

import json
import re
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from storlab import timeline
from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab import caps, cgroups, devices, owned
from storlab.lab.caps import IoCaps, IoCount
from storlab.probes import limits
from tests.commands import invoke, start, storlab
from tests.experiments import CAPPED, write_capped as write
from tests.conftest import instances_up, recorded, start_worker, stop_storlab, storlab_processes
from tests.devicetools import attached, mounted, needs_root, wait_gone
from tests.page_tables import tables

can_cap = pytest.mark.skipif(cgroups.limits_unavailable(True, True) is not None,
                             reason=f"IO caps and memory limits cannot be set here: {cgroups.limits_unavailable(True, True)}")

# -- the file's keys ---------------------------------------------------------------------------


def test_caps_on_a_device_and_a_directory_are_factors_and_reach_each_cell(lab_root):
    text = CAPPED.format(placements='vol = { loop = "1GB", write_iops = [300, "max"], mb_s = 125 }\n'
                                  f'disk = {{ path = "{lab_root}/d", read_iops = 500, iops_unused = 1 }}',
                       layout='log_on = "disk"\nserver_memory = ["256MB", "1GB"]', workload="scale = 1", settings="")
    with pytest.raises(Exception) as refused:  # a directory's table takes its path and caps only
        experiment.parse(lab_root / "x.toml", text, check_placements=False)
    assert "placements.disk.iops_unused: unknown key; a directory placement takes path, read_iops" in str(refused.value)
    exp = experiment.parse(lab_root / "x.toml", text.replace(", iops_unused = 1", ""), check_placements=False)
    assert list(exp.factors) == ["placements.vol.write_iops", "layout.server_memory"]
    cells = {c.label: c for c in matrix.cells(exp)}
    capped = cells["vol.write_iops=300 server_memory=256MB"]
    assert capped.caps == {"vol": IoCaps(None, 300, 125, 125), "disk": IoCaps(500, None, None, None)}
    assert capped.layout.server_memory_bytes == 256 * 2**20
    assert cells["vol.write_iops=max server_memory=1GB"].caps["vol"] == IoCaps(None, None, 125, 125)
    assert capped.devices["vol"] == cells["vol.write_iops=max server_memory=1GB"].devices["vol"]  # one device format
    assert exp.placement_path("disk") == lab_root / "d" and exp.directories == ["disk"]


def test_an_experiment_without_the_new_keys_keeps_its_identity(lab_root):
    text = CAPPED.format(placements=f'vol = {{ loop = "1GB", sector = [512, 4096] }}\ndisk = "{lab_root}/d"',
                       layout="", workload="scale = 1", settings="")
    identity = experiment.parse(lab_root / "x.toml", text, check_placements=False).identity()
    assert identity["placements"] == {"vol": {"loop": "1GB", "sector": [512, 4096]}, "disk": f"{lab_root}/d"}
    assert identity["layout"] == {"data_files": 1, "data_on": "vol"}


BAD = [
    ('vol = { loop = "1GB", iops = 300, read_iops = 100 }', "", "",
     "caps.toml:6: placements.vol.iops: iops caps reads and writes alike, and read_iops is given too; give iops, "
     "or read_iops and write_iops"),
    ('vol = { loop = "1GB", write_iops = 0 }', "", "",
     'caps.toml:6: placements.vol.write_iops: expected a whole number of IOs a second from 1 to 10,000,000 (or "max": '
     "uncapped) or a list of them, got 0"),
    ('vol = { loop = "1GB", read_mb_s = [125, "fast"] }', "", "",
     'caps.toml:6: placements.vol.read_mb_s: expected MiB a second, a number above 0 (or "max": uncapped) or a list of '
     'them, got "fast"'),
    ('vol = { loop = "1GB", max_sectors_kb = 2 }', "", "",
     "caps.toml:6: placements.vol.max_sectors_kb: expected a whole number of KiB from 4 or a list of them, got 2"),
    ('vol = { path = "tmpfs", write_iops = 100 }', "", "", "caps.toml:6: placements.vol.write_iops: tmpfs is memory: "
     "it has no device to cap"),
    ('vol = { path = 7 }', "", "", "caps.toml:6: placements.vol.path: expected a directory path, got 7"),
    ('vol = { loop = "1GB" }', 'server_memory = "16MB"', "",
     'caps.toml:10: layout.server_memory: "16MB" is less than 32MB, which no engine starts in'),
    ('vol = { loop = "1GB" }', 'server_memory = ["1GB", "128MB"]', 'shared_buffers = "64MB"',
     'caps.toml:10: layout.server_memory: "128MB" cannot hold shared_buffers = "64MB", maintenance_work_mem 64MB (its '
     "default) and 48MB for the server's processes: give the server at least 176MB, or less to those settings"),
    ('vol = { loop = "1GB", mb_s = 0.0000001 }', "", "",
     "caps.toml:6: placements.vol.mb_s: 1e-07 MiB a second is less than a 4 KiB page a second (0.00390625), the least "
     "a cap can hold (the kernel counts whole bytes, and reads 0 as no cap at all)"),
    ('vol = { loop = "1GB" }', 'server_memory = ["1GB", "1024MB"]', "",
     'caps.toml:10: layout.server_memory: "1024MB" and "1GB" are one value to storlab (1GB); each value of a factor '
     "makes one cell"),
    ('vol = { loop = "1GB" }\nram = "tmpfs"', 'log_on = "ram"\nserver_memory = "1GB"', "",
     "caps.toml:12: layout.server_memory: placements.ram is a RAM disk (tmpfs): its files are memory that a server "
     "memory limit would charge to whichever process first wrote them, so the limit would hold back an unknown share "
     "of them; put that placement on a device (a loop device of its own), or set no server_memory"),
    ('vol = { loop = "1GB" }', 'server_memory = "256MB"', 'shared_buffers = ["64MB", "256MB"]',
     'caps.toml:10: layout.server_memory: "256MB" cannot hold shared_buffers = "256MB", maintenance_work_mem 64MB (its '
     "default) and 48MB for the server's processes: give the server at least 368MB, or less to those settings"),
]


@pytest.mark.parametrize("placements, layout, settings, expected", BAD, ids=range(len(BAD)))
def test_a_bad_cap_or_memory_is_one_line(lab_root, placements, layout, settings, expected):
    path = write(lab_root, placements, layout, settings=settings)
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 2, (result.stdout, result.exception)
    assert result.stderr == f"storlab: {expected}\n"
    assert not (lab_root / "results").exists()


def test_a_memory_limit_a_rule_excludes_is_not_refused(lab_root):
    path = write(lab_root, 'vol = { loop = "1GB" }', 'server_memory = ["128MB", "1GB"]',
                 settings='shared_buffers = ["16MB", "512MB"]\nmaintenance_work_mem = "16MB"')
    path.write_text(path.read_text().replace('engine = "postgres"', 'engine = "postgres"\n'
                                             'exclude = [{ server_memory = "128MB", shared_buffers = "512MB" }]'))
    exp = experiment.load(path, check_placements=False)
    assert len(matrix.cells(exp)) == 3


@pytest.mark.skipif(cgroups.limits_unavailable(True, False) is not None, reason="IO caps cannot be set here")
def test_a_capped_directory_needs_a_device_of_its_own_among_the_placements(lab_root):
    (lab_root / "a").mkdir()
    path = write(lab_root, f'vol = {{ path = "{lab_root}/a", write_iops = 300 }}\nother = "{lab_root}/b"')
    result = invoke("run", str(path), "--dry-run")
    device = caps.device_of(lab_root)[0]
    assert result.exit_code == 2
    assert result.stderr == (f"storlab: caps.toml:7: placements.other: on {device}, as placements.vol is; a cap holds the "
                             "whole device, so a capped placement needs a device of its own among the placements\n")


@needs_root
@pytest.mark.parametrize("placement, layout, said", [
    ('{ loop = "1GB", write_iops = 300 }', "", "placements.vol.write_iops: IO caps"),
    ('{ loop = "1GB" }', 'server_memory = "1GB"', "layout.server_memory: a server memory limit"),
])
def test_a_host_that_cannot_cap_refuses_before_anything_starts(lab_root, placement, layout, said):
    path = write(lab_root, f"vol = {placement}", layout)
    os.seteuid(65534)  # an ordinary user cannot make control groups (the real uid stays root, to come back)
    try:
        result = invoke("run", str(path), "--dry-run")
    finally:
        os.seteuid(0)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.endswith(f"{said} cannot be set here: storlab runs as an ordinary user and cannot make "
                                  "control groups\n")


def test_io_caps_on_the_command_line_are_checked_as_the_files_are(tmp_path):
    for args, said in ((["--write-iops", "0"], "--write-iops '0': expected a whole number of IOs a second from 1 to 10,000,000 "
                                              '(or "max": uncapped), got 0'),
                       (["--mb-s", "10", "--write-mb-s", "5"], "--mb-s: mb_s caps reads and writes alike, and write_mb_s "
                                                              "is given too; give mb_s, or read_mb_s and write_mb_s"),
                       (["--iops", "10"], "/dev/shm sits on no block device (tmpfs, or a filesystem without one): "
                                          "there is no device to cap")):
        result = invoke("io", "tmpfs", *args, "--out", str(tmp_path / "r"))
        assert result.exit_code == 2 and result.stderr == f"storlab: {said}\n"
    assert not (tmp_path / "r").exists()


# -- the kernel's files ------------------------------------------------------------------------


CAP = caps.DeviceCap(("wal",), "loop3", "7:3", IoCaps(write_iops=3000, write_mb_s=125))


def test_the_lines_that_set_a_cap_in_each_version():
    assert caps.io_max_line(CAP) == "7:3 rbps=max wbps=131072000 riops=max wiops=3000"
    assert caps.v1_lines(CAP) == [("blkio.throttle.write_iops_device", "7:3 3000"),
                                  ("blkio.throttle.write_bps_device", "7:3 131072000")]


def test_the_counters_read_as_each_version_writes_them():
    v1 = caps.v1_io("7:3 Read 5\n7:3 Write 1202\n7:3 Sync 1207\n7:3 Async 0\n7:3 Discard 0\n7:3 Total 1207\nTotal 1207\n",
                    "7:3 Read 5120\n7:3 Write 9846784\n7:3 Sync 9851904\n7:3 Async 0\n7:3 Discard 0\n7:3 Total 9851904\n"
                    "Total 9851904\n")
    assert v1 == {"7:3": IoCount(5, 1202, 5120, 9846784)}
    v2 = caps.io_stat("7:3 rbytes=5120 wbytes=9846784 rios=5 wios=1202 dbytes=0 dios=0\n"
                      "254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0 cost.vrate=100.00\n")
    assert v2 == {"7:3": IoCount(5, 1202, 5120, 9846784), "254:0": IoCount(3, 4, 1, 2)}
    assert caps.flat_keyed("low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n", "memory.events")["max"] == 17
    assert caps.pressure_some_us("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
                                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=100\n") == 2_500_000
    assert caps.memory_value("max\n", "memory.max") is None and caps.memory_value("268435456\n", "memory.max") == 2**28
    for broken in (lambda: caps.io_stat("7:3 rbytes=x\n"), lambda: caps.v1_rwstat("7:3 Read\n", "io_serviced"),
                   lambda: caps.flat_keyed("max 1 2\n", "memory.events")):
        with pytest.raises(caps.Malformed):
            broken()


def test_a_v2_group_sets_its_caps_and_reads_its_counters_from_its_files(tmp_path):
    """On a tree of plain files (this host mounts v2 without controllers): what a v2 group writes to
    set its limits, and how it reads them back."""
    group_dir = tmp_path / "storlab" / "storlab-pg1"
    group_dir.mkdir(parents=True)
    (group_dir / "memory.swap.max").write_text("max\n")
    group = cgroups.ControlGroup(group_dir, limits=caps.GroupLimits((CAP,), 512 * 2**20), version=2)
    group.apply()
    assert (group_dir / "io.max").read_text() == "7:3 rbps=max wbps=131072000 riops=max wiops=3000\n"
    assert (group_dir / "memory.max").read_text() == f"{512 * 2**20}\n"
    assert (group_dir / "memory.swap.max").read_text() == "0\n"
    (group_dir / "io.stat").write_text("7:3 rbytes=0 wbytes=8192 rios=0 wios=1 dbytes=0 dios=0\n")
    (group_dir / "io.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1500\nfull total=0\n")
    (group_dir / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n")
    (group_dir / "memory.current").write_text("1048576\n")
    read = group.reading()
    assert (read.io, read.io_pressure_us, read.memory_hits, read.oom_kills, read.memory_bytes, read.peak_bytes) == \
        ({"7:3": IoCount(0, 1, 0, 8192)}, 1500, 3, 0, 2**20, None)
    assert cgroups.joining(group) == [str(group_dir / "cgroup.procs")]


def test_v2_turns_the_controllers_on_from_the_mount_down_to_the_shared_group(tmp_path):
    mount, own = tmp_path / "cg", tmp_path / "cg" / "user.slice" / "session-1.scope"
    own.mkdir(parents=True)
    (mount / "cgroup.subtree_control").write_text("cpu io memory pids\n")
    (mount / "user.slice" / "cgroup.subtree_control").write_text("memory pids\n")
    hierarchy = cgroups.Hierarchy(mount, 2, own)
    assert hierarchy.shared == mount / "user.slice" / "storlab"  # beside storlab's own group, which holds processes
    assert cgroups.Hierarchy(mount, 2, mount).shared == mount / "storlab"  # in the root, exempt from the rule
    hierarchy.shared.mkdir()
    cgroups._enable(mount, hierarchy.shared)
    # A plain file keeps what was written last: only the missing controllers are asked for, at each level.
    assert (mount / "cgroup.subtree_control").read_text() == "cpu io memory pids\n"
    assert (mount / "user.slice" / "cgroup.subtree_control").read_text() == "+io"
    assert (hierarchy.shared / "cgroup.subtree_control").read_text() == "+io +memory"
    assert not (own / "cgroup.subtree_control").exists()


def test_what_a_cap_did_is_said_per_cell():
    run = limits.RunLimits([limits.RunDevice("loop3", ["wal"], IoCaps(write_iops=300), 1, 1280,
                                             served=IoCount(10, 3000, 81920, 100 * 2**20),
                                             charged=IoCount(10, 2400, 81920, 40 * 2**20), at_cap_s=8.0, run_s=10.0)],
                           limits.RunMemory(256 * 2**20, 1, hits=1200, oom_kills=0, peak_bytes=256 * 2**20))
    (cell,), memory = limits.per_cell([run, run])
    assert limits.cap_line(cell) == (
        "wal on loop3 (write 300 IOPS, requests up to 1280 KiB): at its cap 80 % of the time; the device wrote 100 MiB "
        "a run, the group was charged 40 MiB (40 %): the rest went around the cap (writeback the kernel started); "
        "the device read 80 KiB a run, the group was charged 80 KiB (100 %)")
    assert limits.memory_line(memory) == ("256 MiB limit reached in 2 of 2 runs (1,200 times a run, memory.failcnt); "
                                          "peak 256 MiB; the placements' devices read 80 KiB a run")
    assert limits.cap_use(IoCaps(write_iops=300, write_mb_s=1), IoCount(0, 150, 0, 2**20), 1.0) == 1.0
    v2 = limits.RunDevice("nvme0n1", ["data"], IoCaps(3000, 3000, 125, 125), 2, 256, served=IoCount(0, 100, 0, 2**30),
                          charged=IoCount(0, 100, 0, 2**30), at_cap_s=1.0, run_s=10.0, io_pressure_s=2.5)
    (cell,), memory = limits.per_cell([limits.RunLimits([v2])])
    assert memory is None and limits.cap_line(cell) == (
        "data on nvme0n1 (3,000 IOPS, 125 MiB/s, requests up to 256 KiB): at its cap 10 % of the time; the device wrote "
        "1.0 GiB a run, the group was charged 1.0 GiB (100 %); some of its processes stalled on IO 2.5 s a run (its "
        "io.pressure)")


def test_check_says_whether_caps_and_memory_limits_can_be_set_and_what_a_cap_holds(tmp_path):
    result = invoke("check", str(tmp_path), "--json")
    items = {(i["group"], i["name"]): i for i in json.loads(result.output)["items"]}
    for name, io in (("IO caps", True), ("server memory limits", False)):
        item, why = items[("Lab", name)], cgroups.limits_unavailable(io, not io)
        assert (item["state"], item["reason"]) == ("unknown", why) if why else item["state"] == "ok"
    if why is None:
        assert "a cap holds IO the servers submit" in items[("Lab", "IO caps")]["value"]
    device = caps.device_of(tmp_path)
    if device is not None:
        assert items[(str(tmp_path), "an IO cap here holds")]["value"].startswith(
            f"the whole of {device[0]} ({device[1]}): every placement on it")


# -- real devices, servers and groups ------------------------------------------------------------


@pytest.mark.device
@pytest.mark.alone  # beside the other worker's loads a read job reached 84 % of its 8 MB/s cap
@needs_root
@can_cap
def test_fio_through_each_cap_reaches_it_and_no_more(image_dir, tmp_path):
    """`storlab io` with caps runs fio inside them on a real loop device: every job reaches its cap
    (within 10 %) and never passes it."""
    with devices.DevicePool() as pool:
        device = pool.device("fast", devices.DeviceSpec(devices.DeviceFormat(256 * 2**20, 512, "ext4", "", image_dir), 128))
        out = tmp_path / "io"
        done = storlab("io", device.mount_point, "--write-iops", "200", "--read-mb-s", "8", "--size", "32M",
                       "--duration", "2s", "--out", out)
        assert done.returncode == 0, done.stderr
        with sqlite3.connect(out / "storlab.sqlite") as db:
            jobs = db.execute("SELECT job, rw, iops, mb_s, flags FROM io_jobs").fetchall()
        assert len(jobs) == 8
        for job, rw, iops, mb_s, flags in jobs:
            reached = iops / 200 if "write" in rw else mb_s / 8
            assert 0.9 <= reached <= 1.02, (job, iops, mb_s)
            assert f"on {device.name}: reached" in flags and "held" in flags
        assert "capped: write 200 IOPS on " in done.stdout and "capped: read 8 MiB/s on " in done.stdout
        # the io run's group went with it (its manifest stays while one is left); the pool's is this test's own
        assert [m.instance_id for m in owned.Manifest.all()] == [pool.manifest.instance_id]
    assert not attached(image_dir)


@pytest.mark.device
@needs_root
def test_the_io_size_a_cap_counts_is_set_in_place_and_put_back(image_dir):
    def spec(kb: int | None) -> devices.DeviceSpec:
        return devices.DeviceSpec(devices.DeviceFormat(64 * 2**20, 512, "ext4", "", image_dir), 128, False, kb)

    with devices.DevicePool() as pool:
        device = pool.device("fast", spec(64))
        assert devices.format_of(device.mount_point).max_sectors_kb == 64
        assert (Path("/sys/block") / device.name / "queue/max_sectors_kb").read_text() == "64\n"
        assert pool.device("fast", spec(None)) is device
        assert devices.format_of(device.mount_point).max_sectors_kb == device.made_max_sectors_kb != 64
        with pytest.raises(UserError, match=r"^placements.fast.max_sectors_kb: the kernel refused 99999999 \(.*\); "
                                            rf"{device.loop} takes 4 to \d+ KiB$"):
            pool.device("fast", spec(99_999_999))
    assert not attached(image_dir)


def _integral(points: list[tuple[float, float]]) -> float:
    """A device sampler's values (each closing its interval, the first a sampler's period long) summed
    over the time they cover."""
    points = sorted(points)
    widths = [0.5] + [b - a for (a, _), (b, _) in zip(points, points[1:])]
    return sum(value * width for (_, value), width in zip(points, widths))


@pytest.mark.engine
@pytest.mark.alone  # the share of its run at its cap: beside the other worker's loads (and another session's) it was 49.5 %
@can_cap
def test_a_write_iops_cap_slows_pgbench_and_show_says_how_long_it_held(lab_root, images, tmp_path):
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", write_iops = [100, "max"] }}',
                 workload="scale = 1\nclients = 2\ntransactions = 150", settings="", repetitions=1)
    done = storlab("run", path, "--out", tmp_path / "r", "--no-trace")
    assert done.returncode == 0, done.stderr
    shown = storlab("show", tmp_path / "r", "--json")
    answer = json.loads(shown.stdout)
    tps = {row["factors"]["vol.write_iops"]: row["mean"] for row in answer["ranking"]}
    assert tps["max"] > 2 * tps[100]  # measured here: 1,100 against 200
    (row,) = answer["limits"]["caps"]
    assert row["caps"] == {"write_iops": 100} and row["device"].startswith("loop") and row["placements"] == ["vol"]
    assert row["at_cap_share"] > 0.5
    with sqlite3.connect(tmp_path / "r" / "storlab.sqlite") as db:
        (charged, run_s), = db.execute("SELECT charged_write_ios, run_s FROM io_caps").fetchall()
        held = db.execute("SELECT count(*), max(value) FROM timeline WHERE metric = ?", (timeline.CAP_USE.of("vol"),)).fetchone()
    assert charged / run_s <= 100 * 1.05  # the kernel's own count of what it let through
    assert held[0] > 0  # each half second's share of the cap: the throttle lets IO through in slices
    assert "vol.write_iops=100" in done.stdout  # the answer run prints: its ranking
    detailed = storlab("show", tmp_path / "r", "--details")  # the caps' sentences: behind --details
    assert detailed.returncode == 0, detailed.stderr
    assert "IO caps, per run (cgroup v1: a cap holds IO the servers submit themselves" in detailed.stdout or \
        "IO caps, per run (cgroup v2" in detailed.stdout
    said = " ".join(detailed.stdout.split())  # wherever the terminal wrapped its lines
    assert " ".join(f"vol.write_iops=100 ({row['cell']}): {row['said']}".split()) in said
    assert "vol on loop" in row["said"] and "at its cap" in row["said"]
    assert storlab("report", tmp_path / "r").returncode == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert "IO against its cap over time" in page
    found = tables(page)["IO caps, credit buckets and the server's memory"]
    assert found[0][:4] == ["cell", "placement", "caps", "at its cap"]
    (capped,) = [r for r in found[1:] if r[1] == f"vol on {row['device']}"]
    assert capped[0] == row["label"] == "vol.write_iops=100" and capped[2] == "write 100 IOPS"
    assert capped[3] == f"{100 * row['at_cap_share']:.0f} %"


@pytest.mark.engine
@can_cap
def test_a_memory_limit_makes_a_select_only_load_read_its_device(lab_root, images, tmp_path):
    """A data set larger than the limit: the limited server reads its device over and over, the
    unlimited one reads each page once (the same transactions in both)."""
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}" }}', 'server_memory = ["64MB", "max"]',
                 workload='script = "select-only"\nscale = 4\nclients = 2\ntransactions = 16000',
                 settings='shared_buffers = "8MB"\nmaintenance_work_mem = "8MB"', repetitions=1)
    done = storlab("run", path, "--out", tmp_path / "r", "--no-trace")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "r" / "storlab.sqlite") as db:
        cells = dict(db.execute("SELECT id, factors FROM cells").fetchall())
        read = {}
        for cell, factors in cells.items():
            points = db.execute("SELECT t.t_s, t.value FROM timeline t JOIN runs r ON r.id = t.run_id "
                                "WHERE r.cell_id = ? AND t.metric = ?", (cell, timeline.MIB_S.of("vol"))).fetchall()
            read[json.loads(factors)["layout.server_memory"]] = _integral(points)
        (limit, hits, peak), = db.execute("SELECT limit_bytes, hits, peak_bytes FROM memory_limit").fetchall()
    assert read["64MB"] > 2 * read["max"]  # measured here: 209 MiB against 58
    # The kernel charges past the limit what it must not refuse (a dying task's pages, an allocation
    # that may not fail: once one 4 KiB page in a full suite); a few such pages are the kernel's, a
    # limit that did not hold would be off by far more than 64.
    assert limit == 64 * 2**20 and hits > 0 and peak <= limit + 64 * 4096, (limit, hits, peak)
    assert "server_memory=64MB" in done.stdout  # the answer run prints: its ranking
    # The memory limit's sentence and the conditions' (what the group held before the run): --details.
    detailed = storlab("show", tmp_path / "r", "--details")
    assert detailed.returncode == 0, detailed.stderr
    said = " ".join(detailed.stdout.split())  # wherever the terminal wrapped its lines
    assert "server_memory=64MB" in said and "64 MiB limit reached in 1 of 1 run" in said
    assert "its control group then held" in said


@pytest.mark.engine
@can_cap
def test_a_server_the_memory_limit_s_oom_killer_ends_is_named_in_the_failure_and_in_show(lab_root, images, tmp_path):
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}" }}', 'server_memory = "96MB"',
                 workload='transaction = "hog.sql"\nconnections = 1\ntransactions_per_connection = 1',
                 settings='shared_buffers = "16MB"\nmaintenance_work_mem = "16MB"', repetitions=1)
    path.write_text(path.read_text().replace('kind = "pgbench"', 'kind = "custom"'))
    # Some 400 MB of one session's own memory, far past the limit: the kernel must kill a process.
    (path.parent / "hog.sql").write_text("SELECT length(array_to_string(array_agg(repeat(md5(i::text), 64)), ',')) "
                                         "FROM generate_series(1, 200000) i;\n")
    done = storlab("run", path, "--out", tmp_path / "r", "--no-trace")
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stdout.split())
    assert re.search(r"failed run: cell \w+ repetition 1: [^;]*; the kernel's OOM killer ended (server process "
                     r"\(PID \d+\)|the server itself \(postgres, pid \d+\)): the server's memory limit of 96MB "
                     r"\(layout.server_memory\) was reached \(\d+ killed, peak \d+MB\)", said), said
    shown = " ".join(storlab("show", tmp_path / "r").stdout.split())
    assert "the kernel's OOM killer ended" in shown and "memory limit of 96MB" in shown


@pytest.mark.engine
@can_cap
def test_kill_9_mid_run_then_clean_leaves_no_group_device_mount_or_server(lab_root, images, tmp_path):
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", write_iops = 500 }}',
                 'server_memory = "256MB"', workload="scale = 1\nclients = 2\nduration_s = 600", settings="")
    proc = start("run", path, "--out", tmp_path / "r", "--no-trace")
    try:
        deadline = time.monotonic() + 120
        while not instances_up() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        (manifest,) = instances_up()
        groups = [Path(manifest.cgroup), *map(Path, manifest.cgroup_more)]
        assert all(p.is_dir() for p in groups) and len(groups) == 3  # v1: pids, blkio and memory
        assert {"blkio", "memory"} <= {part for p in groups for part in p.parts}
        assert attached(images) and mounted(images)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_gone(manifest.server_pid, 20)
        cleaned = storlab("clean")
        assert cleaned.returncode == 0, cleaned.stderr
        assert not any(p.exists() for p in groups)
        assert not attached(images) and not mounted(images) and storlab_processes() == []
        assert owned.Manifest.all() == []
    finally:
        stop_storlab(proc)


@pytest.mark.engine
@can_cap
def test_the_fleet_runs_a_capped_experiment_as_run_does(store_server, lab_root, images):
    source = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", write_iops = 200 }}',
                   'server_memory = "256MB"', workload="scale = 1\nclients = 2\ntransactions = 100", settings="",
                   name="capfleet.toml")
    source.write_text(source.read_text().replace('name = "caps"', 'name = "capfleet"\nrepetitions = 1'))
    submitted = storlab("submit", source, "--store", store_server.dsn, env=store_server.env())
    assert submitted.returncode == 0, submitted.stderr
    worker = start_worker(store_server, "db1", lab_root / "db1")
    out, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err
    assert len(recorded(store_server)) == 1
    with store_server.admin() as conn:
        (write_iops, charged, run_s), = conn.execute(
            "SELECT write_iops, charged_write_ios, run_s FROM storlab_experiment_1.io_caps").fetchall()
        (limit,), = conn.execute("SELECT limit_bytes FROM storlab_experiment_1.memory_limit").fetchall()
    assert write_iops == 200 and charged / run_s <= 200 * 1.05 and limit == 256 * 2**20
    shown = storlab("show", "--store", store_server.dsn, "--details", env=store_server.env())
    assert shown.returncode == 0, shown.stderr
    assert "IO caps, per run" in shown.stdout and "256 MiB limit reached in" in shown.stdout
    assert not attached(images) and not mounted(images)
