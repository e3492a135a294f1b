"""Device placements on real loop devices: the declared sector size and filesystem are the ones a
file sits on, read-ahead changes in place, a format change remakes, and nothing is left attached,
mounted or on disk after a normal exit, an error in the middle, Ctrl-C, or kill -9 then clean."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from storlab.errors import RunFailed, UserError
from storlab.lab import devices, owned, quiesce
from storlab.experiment import places
from storlab.factors import KeyProblem
from storlab.lab.devices import DeviceFormat, DevicePool, DeviceSpec
from storlab.running import cleanup
from storlab.volume import device_format
from storlab.volume.property import Observed
from tests.commands import storlab
from tests.devicetools import (attached, child, device_spec, leftovers, manifests, mounted, needs_root, nothing_left,
                               read_line)

# -- the spec (no device needed) ---------------------------------------------------------------


@pytest.mark.parametrize("table, message", [
    ({"image_dir": "/var/tmp/x"}, 'placements.fast.loop: missing: the size of the image, like "4GB"'),
    ({"loop": "4 parsecs"}, 'placements.fast.loop: expected a size such as "256MB" or "1GB", got "4 parsecs"'),
    ({"loop": "1GB", "sector": 8192}, "placements.fast.sector: expected one of 512, 1024, 2048, 4096 or a list of them, got 8192"),
    ({"loop": "1GB", "sector": True}, "placements.fast.sector: expected one of 512, 1024, 2048, 4096 or a list of them, got true"),
    ({"loop": "1GB", "fs": "btrfs"}, 'placements.fast.fs: expected one of ext4, xfs or a list of them, got "btrfs"'),
    ({"loop": "128MB", "fs": "xfs"}, 'placements.fast.loop: xfs needs at least 300MB, got "128MB"'),
    ({"loop": "1GB", "read_ahead_kb": -1}, "placements.fast.read_ahead_kb: expected a whole number of KiB >= 0 or a list of them, got -1"),
    ({"loop": "1GB", "mount_options": "noatime, discard"},
     'placements.fast.mount_options: expected options like "noatime,nodiscard" or a list of them, got "noatime, discard"'),
    ({"loop": "1GB", "image_dir": "img"}, 'placements.fast.image_dir: expected an absolute directory, got "img"'),
    ({"loop": "1GB", "sectors": 512}, "placements.fast.sectors: unknown key; a device placement takes "
                                      "loop, image_dir, allow_tmpfs, sector, fs, mount_options, read_ahead_kb, max_sectors_kb, "
                                      "read_latency_ms, write_latency_ms, flush_latency_ms, read_iops, write_iops, iops, read_mb_s, write_mb_s, "
                                      "mb_s, iops_bucket, mb_s_bucket"),
    ({"loop": "16387KB", "sector": 4096}, 'placements.fast.loop: "16387KB" is not a whole number of 4096-byte sectors'),
])
def test_a_bad_spec_is_one_line_naming_the_key(table, message):
    with pytest.raises(KeyProblem) as caught:
        places.device("fast", table)
    assert f"{'.'.join(caught.value.loc)}: {caught.value}" == message


def test_a_spec_has_defaults_and_lists_are_factors():
    spec = device_spec("fast", {"loop": "4GB"})
    assert spec == DeviceSpec(DeviceFormat(4 * 2**30, 512, "ext4", "", Path("/var/tmp/storlab/img")), 128)
    specs = places.device("fast", {"loop": "1GB", "sector": [512, 4096], "fs": "ext4", "read_ahead_kb": [0, 128, 4096]}).specs()
    assert len(specs) == 6
    assert {s.format.sector for s in specs} == {512, 4096} and {s.read_ahead_kb for s in specs} == {0, 128, 4096}
    with pytest.raises(KeyProblem, match=r"^xfs needs at least 300MB") as caught:
        places.device("fast", {"loop": "128MB", "fs": ["ext4", "xfs"]})
    assert caught.value.loc == ("placements", "fast", "loop")
    with pytest.raises(KeyProblem, match=r"^expected one of 512, 1024, 2048, 4096 or a list of them, got an empty list"):
        places.device("fast", {"loop": "1GB", "sector": []})


def test_the_host_must_have_room_and_a_disk(tmp_path):
    with pytest.raises(UserError, match=r"^placements.ram.image_dir: /dev/shm/storlab-img is on tmpfs"):
        devices.check_host("ram", device_spec("ram", {"loop": "64MB", "image_dir": "/dev/shm/storlab-img"}))
    devices.check_host("ram", device_spec("ram", {"loop": "64MB", "image_dir": "/dev/shm/storlab-img", "allow_tmpfs": True}))
    with pytest.raises(UserError, match=r"^placements.big.loop: the image needs 97656.2 GiB and /var/tmp has"):
        devices.check_host("big", device_spec("big", {"loop": "100000000MB", "image_dir": "/var/tmp/storlab-nowhere/img"}))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match=r"^placements.x.image_dir: .*/file/img cannot be made \(.*/file is not a writable directory\)"):
        devices.check_host("x", device_spec("x", {"loop": "64MB", "image_dir": str(blocker / "img")}))


@needs_root
def test_without_root_a_device_placement_is_refused():
    os.seteuid(65534)  # the real uid stays root, so the test can come back
    try:
        with pytest.raises(UserError, match=r"^placements.fast.loop: a device placement needs root"):
            devices.check_host("fast", device_spec("fast", {"loop": "64MB"}))
    finally:
        os.seteuid(0)


# -- real loop devices -------------------------------------------------------------------------



def spec_in(image_dir: Path, **table) -> DeviceSpec:
    table.setdefault("loop", "320MB" if table.get("fs") == "xfs" else "64MB")
    return device_spec("fast", {"image_dir": str(image_dir), **table})


@pytest.mark.device
@needs_root
@pytest.mark.parametrize("sector, fs", [(512, "ext4"), (4096, "ext4"), (512, "xfs"), (4096, "xfs")])
def test_a_file_sits_on_the_declared_sector_size_and_filesystem(image_dir, sector, fs):
    with DevicePool() as pool:
        device = pool.device("fast", spec_in(image_dir, sector=sector, fs=fs, mount_options="noatime", read_ahead_kb=64))
        (device.mount_point / "base").mkdir()
        data = device.mount_point / "base" / "16384"
        data.write_bytes(b"x" * 8192)
        seen = devices.format_of(data)
        assert (seen.device, seen.logical_sector, seen.filesystem) == (device.name, sector, fs)
        assert "noatime" in seen.mount_options.split(",") and seen.read_ahead_kb == 64 and seen.direct_io is True
        # The kernel's own files, beside storlab's reading of them.
        assert (Path("/sys/block") / device.name / "queue/logical_block_size").read_text().strip() == str(sector)
        assert f"{device.loop} {device.mount_point} {fs} " in Path("/proc/mounts").read_text()
        # Root's, as any placement's folder: no one else can rename what storlab makes in it.
        assert (device.mount_point.stat().st_uid, device.mount_point.stat().st_gid) == (0, 0)
        assert {"nosuid", "nodev", "noexec"} <= set(seen.mount_options.split(","))
    assert nothing_left(image_dir)


@pytest.mark.device
@needs_root
def test_read_ahead_changes_in_place_and_a_format_change_remakes(image_dir):
    with DevicePool() as pool:
        first = pool.device("fast", spec_in(image_dir, read_ahead_kb=0))
        data = first.mount_point / "kept"
        data.write_text("still here")
        inode, image_inode = data.stat().st_ino, first.image.stat().st_ino
        assert devices.format_of(data).read_ahead_kb == 0

        again = pool.device("fast", spec_in(image_dir, read_ahead_kb=4096))
        assert again is first and again.loop == first.loop
        assert data.read_text() == "still here" and data.stat().st_ino == inode and again.image.stat().st_ino == image_inode
        assert devices.format_of(data).read_ahead_kb == 4096

        remade = pool.device("fast", spec_in(image_dir, sector=4096, read_ahead_kb=4096))
        assert not data.exists(), "a remade device starts empty"
        assert devices.format_of(remade.mount_point).logical_sector == 4096
        assert len(attached(image_dir)) == 1 and len(mounted(image_dir)) == 1
    assert nothing_left(image_dir)


@pytest.mark.device
@needs_root
def test_an_error_while_making_a_device_leaves_nothing(image_dir):
    with DevicePool() as pool:
        # Past validation on purpose (xfs refuses 128 MB): mkfs itself fails, after losetup.
        too_small = DeviceSpec(DeviceFormat(128 * 2**20, 512, "xfs", "", image_dir), 128)
        with pytest.raises(RunFailed, match=r"^placements.fast: making xfs: mkfs.xfs .* failed"):
            pool.device("fast", too_small)
        assert not attached(image_dir) and not leftovers(image_dir)
        with pytest.raises(UserError, match=r'^placements.fast.mount_options: ext4 refused "no_such_option"'):
            pool.device("fast", spec_in(image_dir, mount_options="no_such_option"))
        assert not attached(image_dir) and not mounted(image_dir) and not leftovers(image_dir)
        # The pool is still usable after a failure.
        assert devices.format_of(pool.device("fast", spec_in(image_dir)).mount_point).filesystem == "ext4"
    assert nothing_left(image_dir)


@pytest.mark.device
@needs_root
def test_an_exception_while_in_use_leaves_nothing(image_dir):
    with pytest.raises(ZeroDivisionError):
        with DevicePool() as pool:
            pool.device("fast", spec_in(image_dir))
            pool.device("slow", device_spec("slow", {"loop": "64MB", "image_dir": str(image_dir), "sector": 4096}))
            assert len(attached(image_dir)) == 2
            1 / 0
    assert nothing_left(image_dir)


# Ctrl-C as the CLI takes it: a KeyboardInterrupt that lands in a finalizer (a garbage-collected
# object's __del__ between the print and the sleep) is printed and dropped by Python, so the CLI's
# handler remembers it and the run's next interruption point raises it again (once, in a suite, a child
# with Python's default handler slept on through its Ctrl-C).
HOLD_A_DEVICE = """
    import signal, sys, time
    from storlab import interrupts
    from storlab.lab.devices import DevicePool
    from tests.devicetools import device_spec
    signal.signal(signal.SIGINT, interrupts.interrupt)
    with DevicePool() as pool:
        device = pool.device("fast", device_spec("fast", {{"loop": "64MB", "image_dir": "{image_dir}"}}))
        print(device.mount_point, flush=True)
        for _ in range(1200):
            time.sleep(0.1)
            interrupts.interruption_point()
"""


@pytest.mark.device
@needs_root
def test_ctrl_c_leaves_nothing_and_clean_spares_a_live_run(image_dir):
    proc = child(HOLD_A_DEVICE.format(image_dir=image_dir))
    try:
        mount_point = read_line(proc)
        assert len(mounted(image_dir)) == 1
        assert cleanup.clean(live=False, kept=False) == []  # its owner is alive: not an orphan
        assert len(mounted(image_dir)) == 1 and (Path(mount_point) / "lost+found").exists()
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=60) != 0
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"still running 60 s after its Ctrl-C; it said: {proc.communicate()[1][-2000:]}") from None
    finally:
        proc.kill()
        proc.wait()
    assert nothing_left(image_dir)


@pytest.mark.device
@needs_root
def test_kill_9_then_clean_leaves_nothing(image_dir):
    proc = child(HOLD_A_DEVICE.format(image_dir=image_dir))
    try:
        read_line(proc)
    finally:
        proc.kill()  # SIGKILL: no finally runs in the child
        proc.wait()
    assert len(attached(image_dir)) == 1 and len(mounted(image_dir)) == 1 and manifests()
    cleaned = storlab("clean", timeout=120)
    assert cleaned.returncode == 0, cleaned.stderr
    [line] = cleaned.stdout.splitlines()
    assert re.fullmatch(r"de\w+: removed unmounted \S+/mnt, detached /dev/loop\d+, deleted \S+", line), line
    assert nothing_left(image_dir)


@pytest.mark.device
@needs_root
def test_clean_never_touches_a_mount_or_loop_device_it_did_not_make(image_dir):
    """A manifest that names a directory with a foreign mount at its mount point (the image is not
    storlab's), and one naming a directory without storlab's marker: both are refused, untouched."""
    foreign = image_dir / "foreign"
    (foreign / "mnt").mkdir(parents=True)
    image = foreign / "image"
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    loop = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True).stdout.strip()
    try:
        subprocess.run(["mount", loop, str(foreign / "mnt")], check=True)
        try:
            owner = "de00000000"
            ours = image_dir / f"storlab-{owner}-fast"
            (ours / "mnt").mkdir(parents=True)
            (ours / owned.MARKER).write_text(owner + "\n")
            subprocess.run(["mount", "--bind", str(foreign / "mnt"), str(ours / "mnt")], check=True)
            manifest = owned.Manifest(owner, "devices", owner_pid=2**22 + 1, devices=[
                {"placement": "fast", "dir": str(ours), "image": str(ours / "image"), "mount_point": str(ours / "mnt"), "loop": loop},
                {"placement": "slow", "dir": str(foreign), "image": str(image), "mount_point": str(foreign / "mnt"), "loop": loop},
            ])
            manifest.save()
            cleaned = cleanup.clean(live=False, kept=False)
            assert len(cleaned) == 1 and cleaned[0].removed == []
            assert any("not storlab's image" in r for r in cleaned[0].refused)
            assert any("no storlab marker" in r for r in cleaned[0].refused)
            assert len(mounted(image_dir)) == 2 and loop in "\n".join(attached(image_dir)) and image.exists()
            assert manifest.path.exists(), "what was refused stays written down"
            subprocess.run(["umount", str(ours / "mnt")], check=True)
        finally:
            subprocess.run(["umount", str(foreign / "mnt")], check=True)
    finally:
        subprocess.run(["losetup", "--detach", loop], check=True)
    cleaned = cleanup.clean(live=False, kept=False)  # the marked directory, now with nothing mounted
    assert cleaned[0].removed == [f"deleted {ours}"] and not ours.exists() and foreign.exists()


def test_what_each_device_really_was_is_its_formats_part_of_the_answer():
    """The device as each run read it back (sysfs, the mount table) is the format's part of the cell's
    answer (storlab.volume), each distinct state once with its count of runs; the line of what the runs
    started from says nothing of devices."""
    seen = {"device": "loop3", "logical_sector": 4096, "filesystem": "ext4", "mount_options": "rw,noatime",
            "read_ahead_kb": 128, "direct_io": True}
    runs = [{"page_cache": "evicted", "devices": {"fast": seen}}] * 2 + \
        [{"page_cache": "evicted", "devices": {"fast": {**seen, "read_ahead_kb": 0}}}]
    part = device_format.PROPERTY.part({"sector": 4096}, Observed("fast", "c1", runs))
    assert part.said == ("loop3 4096-byte sectors, ext4 (rw,noatime), read-ahead 128 KiB, direct IO (2 runs); "
                         "loop3 4096-byte sectors, ext4 (rw,noatime), read-ahead 0 KiB, direct IO (1 run)")
    assert part.declared == {"sector": 4096} and part.observed == seen | {"runs": 2, "states": 2}
    assert quiesce.describe(runs) == "before each run: checkpoint, sync, page cache: evicted"
