"""`storlab clean`: stop and remove what crashed runs left behind, from the manifests each instance
wrote before anything was created (storlab.lab.instances): its server, its engine's shared memory, the
devices it made and its directories, in that order. A manifest that cannot be read is named, never
skipped: nothing of it is cleaned, so someone must look. What it says removed, it removed: a folder
already gone is forgotten without a word."""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from storlab import engines, processes
from storlab.lab import cgroups, devices, latency
from storlab.lab.owned import Manifest, marked_by, remove_owned_dir, running

Recorded = tuple[int | None, int | None]  # a delay layer's process as a manifest names it: pid, start time


def _still_ours(pid: int, dirs: list[str]) -> bool:
    """A pid from a manifest may have been reused: it is ours only if its command line names our dirs."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(d in cmdline for d in dirs)


def _kill_orphans(group: int, dirs: list[str]) -> bool:
    """The server's children outlive it when it is killed (a PostgreSQL backend busy in a load notices
    its postmaster's death only at its next wait): kill those still in its process group and working
    in the instance's directories, and wait for them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if any(cwd == d or cwd.startswith(d.rstrip("/") + "/") for d in dirs):
            found.append(int(entry.name))
    for pid in found:
        processes.kill_tree(pid)
    for pid in found:
        for _ in range(100):
            if not _exists(pid):
                break
            time.sleep(0.05)
    return bool(found)


def _exists(pid: int) -> bool:
    try:
        stat_fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return stat_fields[0] != "Z"


@dataclass
class Cleaned:
    instance_id: str
    live: bool  # its storlab process was still running (only with clean(live=True))
    stopped: bool
    removed: list[str]
    refused: list[str]
    unreadable: str | None = None  # why its manifest cannot be read (then nothing of it was cleaned)


def _unreachable(path: Path) -> int | None:
    """Why `path` cannot be looked at (an errno: ENOENT once it is gone, ENOTCONN behind a dead delay
    layer's mount); None when it can."""
    try:
        os.lstat(path)
    except OSError as exc:
        return exc.errno
    return None


def _dead_layers(manifests: list[Manifest]) -> dict[Path, Recorded]:
    """The delay layers the manifests record (each mount in a folder of its manifest's own) whose process
    has ended: the kernel ends a layer with storlab, and its mount, until unmounted, answers every call
    on it with ENOTCONN, so the instance folders it served can be neither removed nor recognised."""
    found: dict[Path, Recorded] = {}
    for manifest in manifests:
        for entry in manifest.devices:
            point = Path(entry["layer"]) if entry.get("layer") else None
            if point is not None and point.parent == Path(entry["dir"]) \
                    and marked_by(point.parent) == manifest.instance_id:
                found[point] = (entry.get("layer_pid"), entry.get("layer_start"))
        for layer in manifest.layers:
            if str(Path(layer["point"]).parent) in manifest.dirs:
                found[Path(layer["point"])] = (layer.get("pid"), layer.get("start"))
    return {point: recorded for point, recorded in found.items() if not running(*recorded)}


def _end_group(group: cgroups.ControlGroup, removed: list[str], refused: list[str]) -> tuple[bool, bool]:
    """Kill what is in one of storlab's groups and remove it: whether anything was killed, whether it is gone."""
    killed = bool(group.kill())
    if group.remove():
        removed += [f"control group {path}" for path in group.paths]
        return killed, True
    refused.append(f"control group {group.path} (a process in it would not die; the next clean tries again)")
    return killed, False


def clean(live: bool = False, kept: bool = True, unreadable: bool = False) -> list[Cleaned]:
    """Stop and remove what crashed runs left behind: instances whose storlab process is gone (pid and
    start time, so a reused pid is not mistaken for it). `live` also stops instances of storlab runs
    still going; without `kept`, instances kept on purpose (--keep) stay. `unreadable`: the report
    also names each manifest that cannot be read (`storlab clean` says them; nothing of them is cleaned)."""
    manifests, broken = Manifest.read()
    report = [Cleaned(file.stem, False, False, [], [], f"{file}: {why}")
              for file, why in sorted(broken.items()) if unreadable]
    dead_layers = _dead_layers(manifests)
    # Devices last: an instance's files may sit on one, and its server must be gone before the unmount.
    for manifest in sorted(manifests, key=lambda m: bool(m.devices)):
        if manifest.kept and not kept:
            continue
        owner_running = not manifest.kept and manifest.owner_running
        if owner_running and not live:
            continue
        stopped = False
        pid = manifest.server_pid
        if pid and running(pid, manifest.server_start) and (manifest.server_start or _still_ours(pid, manifest.dirs)):
            processes.kill_tree(pid)
            for _ in range(100):
                if not running(pid, manifest.server_start):
                    break
                time.sleep(0.05)
            stopped = True
        if pid:
            stopped = _kill_orphans(pid, manifest.dirs) or stopped
        refused: list[str] = []
        removed: list[str] = []
        clients = cgroups.recorded(manifest.client_cgroup) if manifest.client_cgroup else None
        if clients is not None:  # its load generators, and whatever they started
            killed, gone = _end_group(clients, removed, refused)
            stopped = killed or stopped
            if gone:
                manifest.client_cgroup = None
        elif manifest.client_cgroup:
            manifest.client_cgroup = None  # not a group of storlab's: never touched
        group = cgroups.recorded_with(manifest.cgroup, manifest.cgroup_more) if manifest.cgroup else None
        if group is not None:
            killed, gone = _end_group(group, removed, refused)
            stopped = killed or stopped
            if gone:
                manifest.cgroup, manifest.cgroup_more = None, []
        elif manifest.cgroup:
            manifest.cgroup, manifest.cgroup_more = None, []  # not a group of storlab's: never touched
        # While its directories still exist. A manifest of devices alone names no engine.
        removed += (engines.engine(manifest.engine).release_shared_memory([Path(d) for d in manifest.dirs],
                                                                          manifest.data_dirs)
                    if manifest.engine in engines.names() else [])
        if manifest.devices:
            found, left = devices.remove_recorded(manifest)
            removed += found
            refused += left
        for layer in list(manifest.layers):
            # Only a mount inside a folder of its own: a manifest names nothing else to unmount.
            if not any(Path(layer["point"]).parent == Path(d) for d in manifest.dirs):
                manifest.layers.remove(layer)
                continue
            found, left = latency.remove_recorded(Path(layer["point"]), layer.get("pid"), layer.get("start"))
            removed += found
            refused += left
            if not left:
                manifest.layers.remove(layer)
        for d in list(manifest.dirs):
            # A dead layer's mount first: what it hid is then judged (gone, mostly: its files are on the
            # device beneath, which goes with its own manifest).
            for point in [point for point in dead_layers if point in Path(d).parents]:
                found, left = latency.remove_recorded(point, *dead_layers[point])
                removed += found
                refused += left
            why = _unreachable(Path(d))
            if why in (errno.ENOENT, errno.ENOTDIR):
                manifest.dirs.remove(d)  # removed already (by its instance's end, or with its device): not said
            elif why is None and remove_owned_dir(Path(d), manifest.instance_id):
                removed.append(d)
                manifest.dirs.remove(d)
            elif why is None and marked_by(Path(d)) != manifest.instance_id:
                # Not storlab's folder any more (a link or someone else's in its place): said once, and
                # no later clean looks there again.
                refused.append(f"{d} (not storlab's folder now; nothing there was touched)")
                manifest.dirs.remove(d)
            else:
                cause = os.strerror(why) if why is not None else "something still uses it"
                refused.append(f"{d} (could not be removed: {cause}; the next clean tries again)")
        if manifest.devices or manifest.dirs or manifest.cgroup or manifest.client_cgroup or manifest.layers:
            manifest.save()
        else:
            manifest.forget()
        report.append(Cleaned(manifest.instance_id, owner_running, stopped, removed, refused))
    return report


