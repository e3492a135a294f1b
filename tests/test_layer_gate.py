"""The delay layer lets no one in but root and the servers' user, and acts for them only beneath the
device: every call on a node's own descriptor and a last name, links never followed, nothing but regular
files and folders opened. Each test mounts a layer of its own over a folder it made."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from storlab.lab import devices, latency, os_users
from tests.devicetools import device_spec, needs_root

THREADS = 64  # the layer's (native/storlab-delayfs.c)
can_delay = pytest.mark.skipif(latency.unavailable() is not None, reason=f"no delay layer here: {latency.unavailable()}")


@pytest.fixture
def served():
    """A layer at 0 ms serving a folder to root and the servers' user (in a folder every user can pass,
    as the gate is the layer's own), and a root-only folder beside it holding root's files."""
    server = os_users.server_user()
    top = Path(tempfile.mkdtemp(prefix="storlab-test-gate-", dir="/var/tmp"))
    top.chmod(0o755)
    source, point, outside = top / "source", top / "layer", top / "root-only"
    for folder, mode in ((source, 0o755), (point, 0o755), (outside, 0o700)):
        folder.mkdir(mode=mode)
    for i in range(5):
        (outside / f"root-{i}").write_text("root's\n")
    layer = None
    try:
        layer = latency.Layer(source, point, latency.DeviceLatency(), "/dev/none", (server.uid,))
        yield layer, server, outside
    finally:
        if layer is not None:
            layer.stop()
        shutil.rmtree(top)


def as_user(user: os_users.OsUser, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/bin/python3", "-c", code], user=user.uid, group=user.gid, extra_groups=[],
                          capture_output=True, text=True, timeout=30)


@needs_root
@can_delay
def test_a_folder_swapped_for_a_link_mid_removal_sends_root_nowhere_else(served):
    """Root holds a folder of the servers' (as a removal's walk does) while they rename it beneath the
    layer and put a link to a root-only folder in its place (as issue 44 found they could, through the
    device's own mount, now out of their reach): root's unlink through its descriptor removes the file in
    the renamed folder, on the device, and none of root's files. The old layer resolved the folder's
    path again by name, followed the link and deleted root's first file (the rest failed with EIO)."""
    layer, server, outside = served
    instance = layer.point / "instance"
    instance.mkdir(mode=0o755)
    os.chown(instance, server.uid, server.gid)
    made = as_user(server, f"import os; os.mkdir('{instance}/d'); [open(f'{instance}/d/root-{{i}}', 'w') for i in range(5)]")
    assert made.returncode == 0, made.stderr
    held = os.open(instance / "d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        beneath = layer.source / "instance"
        swapped = as_user(server, f"import os; os.rename('{beneath}/d', '{beneath}/d2'); os.symlink('{outside}', '{beneath}/d')")
        assert swapped.returncode == 0, swapped.stderr
        for i in range(5):
            os.unlink(f"root-{i}", dir_fd=held)  # the layer's node for the folder, whatever its name now
    finally:
        os.close(held)
    assert sorted(p.name for p in outside.iterdir()) == [f"root-{i}" for i in range(5)]
    assert list((layer.source / "instance" / "d2").iterdir()) == []
    assert (layer.source / "instance" / "d").is_symlink()


@needs_root
@can_delay
def test_no_one_but_root_and_the_servers_user_is_served(served):
    """`nobody` is refused every call at once, even with the mount's path open to all."""
    layer, server, _ = served
    (layer.point / "marker").write_text("the instance's\n")
    (layer.point / "marker").chmod(0o644)
    nobody = os_users.OsUser("nobody", 65534, 65534)
    for code in (f"open('{layer.point}/marker').read()", f"import os; os.listdir('{layer.point}')",
                 f"import os; os.stat('{layer.point}/other')"):
        refused = as_user(nobody, code)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, (code, refused.stderr)
    read = as_user(server, f"print(open('{layer.point}/marker').read(), end='')")
    assert read.returncode == 0 and read.stdout == "the instance's\n", read.stderr


@needs_root
@can_delay
def test_nothing_but_files_and_folders_is_made_and_a_file_swapped_for_a_fifo_holds_no_thread(served):
    """No FIFO, socket or device is made through the layer. A file the kernel knows swapped for a FIFO
    beneath it (the old layer's wedge: its open waited for a writer, in every thread) is opened as the
    file the layer holds, at once; the layer serves on."""
    layer, server, _ = served
    with pytest.raises(PermissionError):
        os.mkfifo(layer.point / "fifo")
    own = layer.point / "own"
    own.mkdir(mode=0o755)
    os.chown(own, server.uid, server.gid)
    planted = as_user(server, f"import os; os.mkfifo('{own}/fifo')")
    assert planted.returncode != 0 and "Operation not permitted" in planted.stderr
    with pytest.raises(OSError) as refused:
        os.mknod(layer.point / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    assert refused.value.errno in (errno.EPERM, errno.EACCES)
    for i in range(THREADS + 4):
        (layer.point / f"f{i}").write_text("a file\n")
        os.stat(layer.point / f"f{i}")  # the kernel knows it as a file now
        os.unlink(layer.source / f"f{i}")
        os.mkfifo(layer.source / f"f{i}")
    opened = as_user(server, "\n".join([
        "import os, threading",
        "def one(i):",
        "    try:",
        f"        os.close(os.open('{layer.point}/f%d' % i, os.O_RDONLY))",
        "    except OSError:",
        "        pass",
        f"ts = [threading.Thread(target=one, args=(i,)) for i in range({THREADS + 4})]",
        "[t.start() for t in ts]; [t.join() for t in ts]; print('all returned')"]))
    assert opened.returncode == 0 and opened.stdout == "all returned\n", opened.stderr
    (layer.point / "after").write_text("served\n")
    assert (layer.point / "after").read_text() == "served\n"


@needs_root
@can_delay
def test_the_callers_rights_are_its_own_and_a_link_is_never_followed_by_the_layer(served):
    """Files are made as the caller; root's files beneath the device stay root's; a hard link to root's
    file and a rename into root's folder are refused; chown of a link changes the link."""
    layer, server, outside = served
    secret = layer.point / "secret"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    mine = layer.point / "mine"
    mine.mkdir(mode=0o755)
    os.chown(mine, server.uid, server.gid)
    tried = as_user(server, "\n".join([
        "import os",
        f"open('{mine}/f', 'w').write('x')",
        f"print(os.stat('{mine}/f').st_uid)",
        f"for call in (lambda: open('{secret}').read(), lambda: os.link('{secret}', '{mine}/l'),",
        f"             lambda: os.rename('{mine}/f', '{layer.point}/f')):",
        "    try:",
        "        call(); print('done')",
        "    except OSError as e:",
        "        print(e.errno)",
        f"os.symlink('{secret}', '{mine}/s')",
        f"os.chown('{mine}/s', {server.uid}, {server.gid}, follow_symlinks=False)",
    ]))
    assert tried.returncode == 0, tried.stderr
    lines = tried.stdout.split()
    assert lines[0] == str(server.uid) and all(line != "done" for line in lines[1:]), lines
    assert os.stat(layer.source / "secret").st_uid == 0 and os.lstat(layer.source / "mine/s").st_uid == server.uid
    assert shutil.disk_usage(layer.point).total == shutil.disk_usage(layer.source).total


@pytest.mark.device
@needs_root
@can_delay
def test_a_served_device_is_reached_through_its_layer_by_the_servers_user_and_by_no_one_else(images):
    """The device's folder passes the servers' group alone; its own mount is in a folder only root
    enters; the layer's mount is the way in."""
    server = os_users.server_user()
    spec = device_spec("vol", {"loop": "64MB", "image_dir": str(images), "flush_latency_ms": 1})
    with devices.DevicePool() as pool:
        device = pool.device("vol", spec)
        folder = device.layer.point.parent
        assert (stat.S_IMODE(folder.stat().st_mode), folder.stat().st_gid) == (0o710, server.gid)
        assert stat.S_IMODE(device.mount_point.parent.stat().st_mode) == 0o700
        own = device.path / "own"
        own.mkdir(mode=0o755)
        os.chown(own, server.uid, server.gid)
        code = "\n".join(["import os", "for path in ({!r}, {!r}):".format(str(own), str(device.mount_point)),
                          "    try:", "        os.listdir(path); print('reached')",
                          "    except OSError as e:", "        print(e.errno)"])
        assert as_user(server, code).stdout.split() == ["reached", str(errno.EACCES)]
        nobody = os_users.OsUser("nobody", 65534, 65534)
        assert as_user(nobody, code).stdout.split() == [str(errno.EACCES), str(errno.EACCES)]
