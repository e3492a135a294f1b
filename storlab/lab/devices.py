"""Device placements: a loop device storlab makes, uses and removes, so the sector size, the
filesystem, its mount options and the read-ahead are factors of an experiment like any other.

A device is an image file (sparse: it takes disk space only as the filesystem writes), a loop device
over it with the declared logical sector size and direct IO (so the host's page cache does not hide
the device), a filesystem and a mount whose top is root's, as any placement's folder must be. Everything is written down in a
manifest before it is made, and each device lives in a directory carrying storlab's marker, so a
later `storlab clean` can finish the job after a crash and never touches a mount or a loop device
whose backing file is not storlab's marked image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import psutil

from storlab import interrupts, processes
from storlab.errors import RunFailed, UserError
from storlab.lab import instances, latency, mounts, os_users, owned, safe_files

SECTORS = (512, 1024, 2048, 4096)
FILESYSTEMS = ("ext4", "xfs")
# The keys whose value may be a list in the experiment file (storlab.experiment.places): each is then a
# factor of the matrix.
FACTOR_KEYS = ("sector", "fs", "mount_options", "read_ahead_kb", "max_sectors_kb")
DEFAULT_IMAGE_DIR = Path("/var/tmp/storlab/img")
DEFAULT_READ_AHEAD_KB = 128  # the kernel's own default, set explicitly so every run says what it had
# mkfs.xfs (xfsprogs >= 5.19) refuses anything not larger than 300 MB; ext4 needs room for its journal.
MIN_BYTES = {"ext4": 16 * 2**20, "xfs": 300 * 2**20}
# Every device's mount ends with these, which the kernel reads last: no set-user-id files, device files
# or programs on a filesystem the servers' user writes.
SAFE = "nosuid,nodev,noexec"
# A server killed a moment ago may still hold the filesystem: umount says "busy" until it is gone.
_BUSY_RETRIES = 50
_BUSY_PAUSE_S = 0.1


@dataclass(frozen=True)
class DeviceFormat:
    """What a device is made with. A change in any of it means a new device, which starts empty."""

    size_bytes: int
    sector: int
    fs: str
    mount_options: str
    image_dir: Path


@dataclass(frozen=True)
class DeviceSpec:
    """One cell's device: its format, and what changes in place: the read-ahead, and the largest
    request the block layer issues (`max_sectors_kb`: larger IOs are split, and an IOPS cap counts
    each part; None leaves the kernel's)."""

    format: DeviceFormat
    read_ahead_kb: int
    allow_tmpfs: bool = False
    max_sectors_kb: int | None = None
    latency: latency.DeviceLatency | None = None  # None: no delay layer in front of the device


@dataclass
class Device:
    """A device storlab made: `mount_point` is the placement's directory for the instance's files."""

    placement: str
    spec: DeviceSpec
    loop: str  # "/dev/loop3"
    image: Path
    mount_point: Path
    made_max_sectors_kb: int | None = None  # the kernel's own, read when the device was made
    layer: latency.Layer | None = None  # the delay layer serving the mount, with the cell's latency

    @property
    def path(self) -> Path:
        """The placement's directory: the delay layer's mount when a latency is declared, else the device's."""
        return self.layer.point if self.layer is not None else self.mount_point

    @property
    def name(self) -> str:
        return Path(self.loop).name

    @property
    def dev(self) -> str:
        """"major:minor", the number the block layer's tracepoints name the device by."""
        return (Path("/sys/block") / self.name / "dev").read_text().strip()


def _key(placement: str, key: str) -> str:
    return f"placements.{placement}.{key}"


def _existing_ancestor(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


_IMAGE_DIR_REMEDY = ("storlab makes no device image under it; give {key} a real folder (no link on the way) "
                     "that only root can change")


class DeviceRefused(UserError):
    """This machine cannot make a device placement's device: the experiment file's key to blame, and why."""

    def __init__(self, placement: str, key: str, reason: str):
        super().__init__(f"{_key(placement, key)}: {reason}")
        self.placement, self.key, self.reason = placement, key, reason


def check_host(placement: str, spec: DeviceSpec) -> None:
    """What this machine must offer to make the device (DeviceRefused otherwise): root, the tools, an
    image directory that exists or can be made, that no other user could change, not on a RAM disk
    unless asked for, with room for the whole image (it is sparse, but the filesystem may fill it)."""
    if os.geteuid() != 0:
        raise DeviceRefused(placement, "loop", "a device placement needs root (losetup, mkfs and mount); "
                            "run storlab as root or use a directory placement")
    fmt = spec.format
    for tool in ("losetup", f"mkfs.{fmt.fs}", "mount", "umount"):
        if shutil.which(tool) is None:
            package = {"mkfs.xfs": "xfsprogs", "mkfs.ext4": "e2fsprogs"}.get(tool, "util-linux")
            raise DeviceRefused(placement, "fs" if tool.startswith("mkfs") else "loop",
                                f"{tool} not found; install Debian's {package}")
    where = _existing_ancestor(fmt.image_dir)
    if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
        raise DeviceRefused(placement, "image_dir", f"{fmt.image_dir} cannot be made ({where} is not a writable directory)")
    try:
        safe_files.own_folder(fmt.image_dir, _IMAGE_DIR_REMEDY.format(key=_key(placement, "image_dir")), make=False)
    except RunFailed as refused:
        raise DeviceRefused(placement, "image_dir", str(refused)) from None
    mount = mounts.mount_of(where) or {}
    if mount.get("filesystem") == "tmpfs" and not spec.allow_tmpfs:
        raise DeviceRefused(placement, "image_dir", f"{fmt.image_dir} is on tmpfs (memory, not a device); "
                            "choose a directory on a disk, or set allow_tmpfs = true")
    free = psutil.disk_usage(str(where)).free
    if free < fmt.size_bytes:
        raise DeviceRefused(placement, "loop", f"the image needs {fmt.size_bytes / 2**30:.1f} GiB and "
                            f"{where} has {free / 2**30:.1f} GiB free")


# -- what a path sits on -----------------------------------------------------------------------


@dataclass
class SeenFormat:
    """What the kernel says a path sits on, read back from sysfs and the mount table."""

    device: str | None
    logical_sector: int | None
    filesystem: str | None
    mount_options: str | None
    read_ahead_kb: int | None
    direct_io: bool | None  # loop devices only
    max_sectors_kb: int | None = None  # the largest request the block layer issues to it
    delay_layer: bool = False  # the path is served through storlab's delay layer in front of the device


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def format_of(path: Path) -> SeenFormat:
    mount = mounts.mount_of(path) or {}
    layered = mount.get("filesystem") == latency.FILESYSTEM
    if layered:
        mount = mounts.beneath(mount)
    name = mounts.block_device_of(path)
    if name is None:
        return SeenFormat(None, None, mount.get("filesystem"), mount.get("options"), None, None, delay_layer=layered)
    block = Path("/sys/block") / name
    dio = _read_int(block / "loop/dio")
    return SeenFormat(name, _read_int(block / "queue/logical_block_size"), mount.get("filesystem"),
                      mount.get("options"), _read_int(block / "queue/read_ahead_kb"), None if dio is None else dio == 1,
                      _read_int(block / "queue/max_sectors_kb"), layered)


# -- making and removing -----------------------------------------------------------------------


def _run(argv: list[str], what: str, timeout: float = 300) -> str:
    try:
        code, out = processes.run(argv, timeout)
    except FileNotFoundError:
        raise RunFailed(f"{what}: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{what}: {argv[0]} took longer than {timeout:.0f} s") from None
    if code != 0:
        raise RunFailed(f"{what}: {' '.join(argv)} failed (exit {code}): {_tail(out)}")
    return out


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-2:])


def set_read_ahead(device: Device, read_ahead_kb: int) -> None:
    """In place, no remake. Files opened before keep the read-ahead they had (the kernel copies it
    when a file is opened): a server started after this call sees the new value."""
    (Path("/sys/block") / device.name / "queue/read_ahead_kb").write_text(f"{read_ahead_kb}\n")


def set_max_sectors(device: Device, max_sectors_kb: int | None) -> None:
    """In place; None puts back what the device had when it was made. A value above what the device
    takes (max_hw_sectors_kb) is the file's mistake, said in one line."""
    value = device.made_max_sectors_kb if max_sectors_kb is None else max_sectors_kb
    queue = Path("/sys/block") / device.name / "queue"
    try:
        (queue / "max_sectors_kb").write_text(f"{value}\n")
        refused = None if _read_int(queue / "max_sectors_kb") == value else "it kept another value"
    except OSError as exc:
        refused = exc.strerror
    if refused is not None:
        most = _read_int(queue / "max_hw_sectors_kb")
        raise DeviceRefused(device.placement, "max_sectors_kb", f"the kernel refused {value} ({refused}); "
                            f"{device.loop} takes 4 to {most} KiB")


def _loops_backed_by(image: Path) -> list[str]:
    """Loop devices whose backing file is `image`: the only ones storlab may detach."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            text = backing.read_text().strip()
        except OSError:
            continue
        if text.removesuffix(" (deleted)") == str(image):
            found.append("/dev/" + backing.parent.parent.name)
    return sorted(found)


def _mounted_at(mount_point: Path) -> dict | None:
    mount = mounts.mount_of(mount_point)
    return mount if mount and mount["mount_point"] == str(mount_point) else None


def _mounts_under(directory: Path) -> list[str]:
    """Any mount inside a directory: removing the directory then would delete the mounted files."""
    prefix = str(directory).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])  # octal escapes
        if point == str(directory) or point.startswith(prefix):
            points.append(point)
    return points


def _owned(directory: Path, owner: str) -> bool:
    return owned.marked_by(directory) == owner


def remove_device(entry: Mapping[str, str], owner: str) -> tuple[list[str], list[str]]:
    """Unmount, detach and delete one recorded device: (what was removed, what was refused).
    Only what the manifest entry names, inside a directory whose marker names `owner`, and only a
    mount or loop device backed by that directory's image."""
    directory, image, mount_point = Path(entry["dir"]), Path(entry["image"]), Path(entry["mount_point"])
    if not directory.exists():
        return [], []
    if not _owned(directory, owner):
        return [], [f"{directory} (no storlab marker for {owner})"]
    removed, refused = [], []
    layer = Path(entry["layer"]) if entry.get("layer") else None
    if layer is not None and layer.parent == directory:
        removed, refused = latency.remove_recorded(layer, entry.get("layer_pid"), entry.get("layer_start"))
        if refused:
            return removed, refused
    ours = set(_loops_backed_by(image))
    while (mount := _mounted_at(mount_point)) is not None:
        if mount["source"] not in ours:
            refused.append(f"{mount_point} (mounted from {mount['source']}, not storlab's image)")
            break
        if _umount(mount_point):
            removed.append(f"unmounted {mount_point}")
        else:
            refused.append(f"{mount_point} (busy: umount refused)")
            break
    for loop in _loops_backed_by(image):
        code, out = processes.run(["losetup", "--detach", loop], timeout=60)
        if code == 0:
            removed.append(f"detached {loop}")
        else:
            refused.append(f"{loop} ({_tail(out)})")
    if not refused and not _detached(image):
        refused.append(f"{image} (a loop device still holds it: the kernel detaches it when its last user closes it)")
    if not refused and _mounts_under(directory):
        refused.append(f"{directory} (a mount is still inside)")
    if refused:
        return removed, refused
    if owned.remove_owned_dir(directory, owner):
        removed.append(f"deleted {directory}")
    else:
        refused.append(str(directory))
    return removed, refused


def _detached(image: Path) -> bool:
    """A loop device still open elsewhere is only marked to detach on its last close: the image must
    stay (and stay recognisable) until then."""
    for _ in range(_BUSY_RETRIES):
        if not _loops_backed_by(image):
            return True
        time.sleep(_BUSY_PAUSE_S)
    return False


def _umount(mount_point: Path) -> bool:
    for _ in range(_BUSY_RETRIES):
        if processes.run(["umount", str(mount_point)], timeout=60)[0] == 0:
            return True
        if _mounted_at(mount_point) is None:
            return True
        time.sleep(_BUSY_PAUSE_S)
    return False


def remove_recorded(manifest: owned.Manifest, placement: str | None = None) -> tuple[list[str], list[str]]:
    """Every device a manifest names, or those of one placement: (removed, refused). `storlab clean`
    calls it after a crash; what is refused stays in the manifest for the next try."""
    removed, refused = [], []
    for entry in [e for e in manifest.devices if placement is None or e["placement"] == placement]:
        gone, left = remove_device(entry, manifest.instance_id)
        removed += gone
        refused += left
        if not left:
            manifest.devices.remove(entry)
            manifest.save()
    return removed, refused


def _safe_name(placement: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", placement)


class DevicePool:
    """The devices of one `storlab run`. Asked for a placement's device, it reuses the current one
    when the format is unchanged (setting the read-ahead in place), and otherwise removes it and
    makes a new one, which starts empty. Leaving the `with` block removes every device, on every
    path; after a kill -9, `storlab clean` removes them from the manifest.

        with DevicePool() as pool:
            device = pool.device("fast", spec)   # device.mount_point is the placement's directory
    """

    def __init__(self) -> None:
        self.manifest = owned.Manifest(owned.new_instance_id("devices"), "devices", owner_pid=os.getpid(),
                                           owner_start=owned.pid_start(os.getpid()))
        self.devices: dict[str, Device] = {}

    def __enter__(self) -> "DevicePool":
        self.manifest.save()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        refused = self.close()
        if refused and kind is None:
            raise RunFailed(f"could not remove {'; '.join(refused)}; run `storlab clean` when it is free")

    def device(self, placement: str, spec: DeviceSpec) -> Device:
        current = self.devices.get(placement)
        if current is not None and current.spec.format == spec.format:
            if current.spec.read_ahead_kb != spec.read_ahead_kb:
                set_read_ahead(current, spec.read_ahead_kb)
            if current.spec.max_sectors_kb != spec.max_sectors_kb:
                set_max_sectors(current, spec.max_sectors_kb)
            if current.spec.latency != spec.latency or (current.layer is not None and not current.layer.alive):
                self._serve(current, spec.latency)  # a layer that died fails its run; the next gets a new one
            current.spec = spec
            return current
        if current is not None:
            refused = self._remove(placement)
            if refused:
                raise RunFailed(f"placements.{placement}: could not remove the previous device: {'; '.join(refused)}")
        check_host(placement, spec)
        device = self._make(placement, spec)
        if spec.latency is not None:
            try:
                self._serve(device, spec.latency)
            except BaseException:
                self._remove(placement)
                raise
        return device

    def close(self) -> list[str]:
        """Remove every device; what could not be removed stays in the manifest for `storlab clean`."""
        with interrupts.uninterrupted:
            instances.wait_ended()  # an instance's files on the device, its server in them
            for device in self.devices.values():
                _stop_layer(device)
            self.devices.clear()
            refused = remove_recorded(self.manifest)[1]
        if not refused:
            self.manifest.forget()
        return refused

    def _remove(self, placement: str) -> list[str]:
        with interrupts.uninterrupted:
            instances.wait_ended()
            if placement in self.devices:
                _stop_layer(self.devices.pop(placement))
            return remove_recorded(self.manifest, placement)[1]

    def _serve(self, device: Device, declared: latency.DeviceLatency | None) -> None:
        """Put the delay layer with this latency in front of the device (ending the one there first),
        or none. Its mount point is in the manifest before it starts, its process once it runs: a crash
        in between leaves a mount `storlab clean` removes (the kernel ends the process with storlab)."""
        entry = next(e for e in self.manifest.devices if e["placement"] == device.placement)
        with interrupts.uninterrupted:
            instances.wait_ended()  # the instance's files are open through the layer until its server ends
            refused = _stop_layer(device)
        if refused:
            raise RunFailed(f"placements.{device.placement}: could not end its delay layer: {'; '.join(refused)}")
        if declared is None:
            return
        point = Path(entry["dir"]) / "layer"
        point.mkdir(mode=0o755, exist_ok=True)
        entry["layer"] = str(point)
        self.manifest.save()
        device.layer = latency.Layer(device.mount_point, point, declared, device.loop, (os_users.server_user().uid,))
        entry.update(layer_pid=device.layer.pid, layer_start=device.layer.started)
        self.manifest.save()

    def _make(self, placement: str, spec: DeviceSpec) -> Device:
        fmt = spec.format
        # Made (and kept) like any placement directory, never through a link another user could plant;
        # resolved, because the kernel names a loop device's backing file by its real path, and that
        # is how `storlab clean` recognises it.
        safe_files.own_folder(fmt.image_dir, _IMAGE_DIR_REMEDY.format(key=_key(placement, "image_dir")))
        directory = fmt.image_dir.resolve() / f"storlab-{self.manifest.instance_id}-{_safe_name(placement)}"
        # A device the delay layer serves is mounted where only root goes: the layer is the only way
        # in for the servers' user, so every name they see is one it resolves beneath the device.
        hidden = directory / "device" if spec.latency is not None else directory
        image, mount_point = directory / "image", hidden / "mnt"
        entry = {"placement": placement, "dir": str(directory), "image": str(image),
                 "mount_point": str(mount_point), "loop": ""}
        if directory.exists():
            raise RunFailed(f"{directory} already exists; storlab will not reuse a directory it did not make")
        # Written down before anything exists, so a crash at any later step leaves a trail.
        self.manifest.devices.append(entry)
        self.manifest.save()
        try:
            with interrupts.uninterrupted:  # a directory without its marker could never be removed
                # Root's, and passable by the servers' group alone: their user reaches the mount and sees
                # nothing else; no other user reaches the device at all.
                directory.mkdir(mode=0o700)
                os.chown(directory, 0, max(os_users.server_user().gid, 0))
                directory.chmod(0o710)
                owned.mark(directory, self.manifest.instance_id)
                if hidden != directory:
                    hidden.mkdir(mode=0o700)
            with open(image, "xb") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.truncate(fmt.size_bytes)  # sparse: disk space is taken as the filesystem writes
            loop = _run(["losetup", "--find", "--show", f"--sector-size={fmt.sector}", "--direct-io=on", str(image)],
                        f"placements.{placement}: losetup").strip()
            entry["loop"] = loop
            self.manifest.save()
            device = Device(placement, spec, loop, image, mount_point)
            _check_loop(device, fmt)
            _mkfs(device, fmt)
            mount_point.mkdir(mode=0o755)
            _mount(device, fmt)
            # The filesystem's top stays root's: an instance's folder made there (by root) can then be
            # renamed by no one else, as on any placement (storlab.lab.placements.check_guarded).
            os.chown(mount_point, 0, 0)
            mount_point.chmod(0o755)
            set_read_ahead(device, spec.read_ahead_kb)
            device.made_max_sectors_kb = _read_int(Path("/sys/block") / device.name / "queue/max_sectors_kb")
            if spec.max_sectors_kb is not None:
                set_max_sectors(device, spec.max_sectors_kb)
        except BaseException:
            self._remove(placement)
            raise
        self.devices[placement] = device
        return device


def _stop_layer(device: Device) -> list[str]:
    layer, device.layer = device.layer, None
    return layer.stop() if layer is not None else []


def _check_loop(device: Device, fmt: DeviceFormat) -> None:
    """The kernel falls back to buffered IO without a word when the image's filesystem cannot do
    direct IO at this sector size: a device that silently goes through the page cache is not the
    device the user declared."""
    sysfs = Path("/sys/block") / device.name
    if _read_int(sysfs / "loop/dio") != 1:
        behind = mounts.block_device_of(device.image) or "its disk"
        raise UserError(f"{_key(device.placement, 'image_dir')}: {device.loop} would not take direct IO with "
                        f"{fmt.sector}-byte sectors over {fmt.image_dir} (on {behind}); "
                        "choose a larger sector or an image_dir on another filesystem")
    seen = _read_int(sysfs / "queue/logical_block_size")
    if seen != fmt.sector:
        raise RunFailed(f"placements.{device.placement}: {device.loop} has {seen}-byte sectors, asked for {fmt.sector}")


def _mkfs(device: Device, fmt: DeviceFormat) -> None:
    if fmt.fs == "ext4":
        # Inode tables and journal written now: ext4's lazy init would otherwise write them in the
        # background for minutes, inside the measurements.
        argv = ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", device.loop]
    else:
        argv = ["mkfs.xfs", "-q", "-f", device.loop]
    _run(argv, f"placements.{device.placement}: making {fmt.fs}")


def _mount(device: Device, fmt: DeviceFormat) -> None:
    options = f"{fmt.mount_options},{SAFE}" if fmt.mount_options else SAFE
    argv = ["mount", "-t", fmt.fs, "-o", options, device.loop, str(device.mount_point)]
    code, out = processes.run(argv, timeout=120)
    if code == 0:
        return
    if fmt.mount_options:
        raise UserError(f"{_key(device.placement, 'mount_options')}: {fmt.fs} refused \"{fmt.mount_options}\": "
                        f"{_tail(out)}")
    raise RunFailed(f"placements.{device.placement}: {' '.join(argv)} failed: {_tail(out)}")
