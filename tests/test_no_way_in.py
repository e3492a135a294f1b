"""No name another user can change is ever followed as root (issue 26's reproduction): a placement's
folder, or a device placement's mount point, where the servers' OS user renames the instance's folder
and puts a link in its place while runs start; and nothing the servers start outlives their instance
(a program run from SQL, in a session of its own). Run as root, the attacker being the `storlab` user."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from storlab.engines import provision
from storlab.lab import cgroups, os_users, owned
from storlab.lab.layout import CellLayout, spec_for
from storlab.running import cleanup
from tests.commands import invoke, storlab
from tests.devicetools import attached, mounted
from tests.disk_experiments import on_disk
from tests.other_users import open_to_all, servers_user_folder

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the servers' OS user exists only when storlab runs as root")

# Run as the servers' user until told to stop: every folder storlab makes in a placement (storlab-*),
# found in the watched folders and in any mount under the image folder, is renamed and a link to the
# victim's folder put in its place. Prints how many renames the kernel allowed.
ATTACKER = textwrap.dedent("""
    import os, sys, time
    victim, stop, image_dir, *watched = sys.argv[1:]
    swapped = 0
    while not os.path.exists(stop):
        folders = list(watched)
        for line in open("/proc/self/mountinfo"):
            point = line.split()[4]
            if point.startswith(image_dir):
                folders.append(point)
        for folder in folders:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if not name.startswith("storlab-"):
                    continue
                try:
                    os.rename(os.path.join(folder, name), os.path.join(folder, "moved-" + name))
                    os.symlink(victim, os.path.join(folder, name))
                    swapped += 1
                except OSError:
                    pass
        time.sleep(0.001)
    print(swapped)
""")


def start_attacker(victim_dir: Path, stop: Path, image_dir: Path, *watched: Path) -> subprocess.Popen:
    return subprocess.Popen(["runuser", "-u", os_users.SERVER_USER, "--", "/usr/bin/python3", "-c", ATTACKER,
                             str(victim_dir), str(stop), str(image_dir), *map(str, watched)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def small_insert_in(write_experiment, folder: Path, name: str) -> Path:
    """A small experiment with its data in `folder`."""
    return write_experiment(on_disk('kind = "random-insert"\nconnections = 1\nrows_per_connection = 10', name=name,
                                    repetitions=None, disk=folder))


def test_a_placement_another_user_could_change_is_refused_before_anything_starts(write_experiment, lab_root):
    theirs = servers_user_folder(lab_root / "theirs")
    open_folder = open_to_all(lab_root / "open")
    (open_folder / "disk").mkdir()
    for placement, where in ((theirs, theirs), (open_folder / "disk", open_folder)):
        path = small_insert_in(write_experiment, placement, "guarded")
        done = invoke("run", path, "--dry-run", "--out", lab_root / "results")
        assert done.exit_code == 2, done.output
        line, = done.output.strip().splitlines()
        assert line.startswith(f"storlab: exp.toml:5: placements.disk: {where}: a folder another user could change")
        assert "root would work in it by names that user can swap for links" in line
        assert list(placement.iterdir()) == []


def test_a_sticky_folder_everyone_writes_in_is_a_placement(write_experiment, lab_root):
    shared = lab_root / "shm"
    shared.mkdir()
    shared.chmod(0o1777)
    done = invoke("run", small_insert_in(write_experiment, shared, "sticky"), "--dry-run", "--out", lab_root / "results")
    assert done.exit_code == 0, done.output


@pytest.mark.engine
@pytest.mark.device
def test_an_instances_folder_swapped_for_a_link_never_leads_root(write_experiment, lab_root, image_dir, victim):
    """The reproduction: the servers' user renames every storlab-* folder it can find in a shared
    (sticky) placement and in a device's mount point, and plants a link to root's folder in its place,
    in a loop, while three runs start. The kernel lets it rename none; root's file keeps its owner and
    content; no device is left mounted."""
    image_dir.chmod(0o755)  # the servers' user reaches the mount inside
    shared = lab_root / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    path = write_experiment(f"""
        name = "swapped"
        engine = "postgres"
        repetitions = 3
        [placements]
        shared = "{shared}"
        fast = {{ loop = "64MB", image_dir = "{image_dir}" }}
        [layout]
        data_on = "fast"
        log_on = "shared"
        [workload]
        kind = "random-insert"
        connections = 1
        rows_per_connection = 200
        batch = 10
    """)
    listing = sorted(p.name for p in victim.path.parent.iterdir())
    stop = lab_root / "stop"
    attacker = start_attacker(victim.path.parent, stop, image_dir, shared)
    try:
        done = storlab("run", path, "--no-trace", "--out", lab_root / "results", timeout=600)
    finally:
        stop.touch()
        out, err = attacker.communicate(timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.strip() == "0", err
    assert victim.untouched() and sorted(p.name for p in victim.path.parent.iterdir()) == listing
    assert os.stat(victim.path.parent).st_uid == 0
    assert not mounted(image_dir) and not attached(image_dir)
    assert [p for p in shared.iterdir()] == []


def test_a_folder_of_an_instance_that_is_no_longer_storlabs_is_said_once(lab_root, victim):
    """A crashed run's folder renamed and a link put in its place: `storlab clean` touches nothing
    there, says so, and does not say it again at the next clean."""
    me = os.getpid()
    manifest = owned.Manifest("pocccccccc", "postgres", owner_pid=me, owner_start=owned.pid_start(me) - 1)
    manifest.dirs.append(str(lab_root / "storlab-pocccccccc"))
    manifest.save()
    (lab_root / "storlab-pocccccccc").symlink_to(victim.path.parent)
    first = cleanup.clean()
    assert [c.instance_id for c in first] == ["pocccccccc"]
    assert first[0].refused == [f"{lab_root / 'storlab-pocccccccc'} (not storlab's folder now; nothing there was touched)"]
    assert cleanup.clean() == []
    assert victim.untouched() and (lab_root / "storlab-pocccccccc").is_symlink()


@pytest.mark.engine
@pytest.mark.skipif(cgroups.unavailable() is not None, reason="this host cannot make control groups")
def test_a_program_the_server_started_ends_with_its_instance(lab_dir):
    """A program run from SQL (COPY ... TO PROGRAM, as only storlab's own superuser session can: a
    workload's role cannot), put in a session of its own so that no process group holds it: killed when
    the instance ends, and its control group removed."""
    marker = f"sleep {900 + os.getpid() % 97}"
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("postgres", spec, keep=False, connections=2) as inst:
        group = inst.workspace.group
        assert group is not None and inst.workspace.server.pid in group.pids()
        with inst.admin() as conn:
            # The shell reads the row first: a shell gone before the server wrote it broke the pipe (EPIPE).
            conn.execute(f"COPY (SELECT 1) TO PROGRAM 'cat >/dev/null; setsid {marker} >/dev/null 2>&1 </dev/null &'")
        deadline = time.monotonic() + 10
        while not running(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running(marker) and set(running(marker)) <= set(group.pids())
    assert running(marker) == []
    assert not group.path.exists()


def running(command: str) -> list[int]:
    done = subprocess.run(["pgrep", "-f", f"^{command}$"], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


@pytest.mark.parametrize("key, value, said", [
    ("mount_options", "noatime,suid", '"suid" is not a filesystem\'s tuning'),
    ("mount_options", "loop=/dev/sda", '"loop=/dev/sda" is not a filesystem\'s tuning'),
    ("mount_options", "exec", '"exec" is not a filesystem\'s tuning'),
    ("image_dir", "/etc/x", "a system folder"),
    ("image_dir", "/usr/lib/storlab", "a system folder"),
    ("image_dir", "/proc/x", "a system folder"),
])
def test_a_device_tables_powers_and_system_folders_are_refused(write_experiment, lab_root, key, value, said):
    """Mount options that are mount(8)'s powers, not the filesystem's tuning, and an image folder in a
    system folder: one line naming the key, before anything starts."""
    path = write_experiment(f"""
        name = "powers"
        engine = "postgres"
        [placements]
        fast = {{ loop = "64MB", {key} = "{value}" }}
        [layout]
        data_on = "fast"
        [workload]
        kind = "random-insert"
    """)
    done = invoke("run", path, "--dry-run", "--out", lab_root / "results")
    assert done.exit_code == 2, done.output
    assert said in done.output and f"placements.fast.{key}" in done.output and len(done.output.splitlines()) == 1


def test_a_templates_folder_another_user_owns_is_refused_before_anything_starts(write_experiment, lab_root,
                                                                                 lab_dir, monkeypatch):
    folder = servers_user_folder(lab_root / "templates")
    monkeypatch.setenv("STORLAB_TEMPLATE_DIR", str(folder))
    path = write_experiment(on_disk('kind = "random-insert"', name="templates", repetitions=None, disk="./disk"))
    done = invoke("run", path, "--dry-run", "--out", lab_root / "results")
    assert done.exit_code == 2, done.output
    assert done.output.startswith(f"storlab: the folder of templates: {folder}: a folder another user could change")
    assert list(folder.iterdir()) == [] and list(lab_dir.iterdir()) == []
