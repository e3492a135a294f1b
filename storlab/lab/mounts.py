"""Where a path lives: the mount that holds it (/proc/self/mountinfo) and the whole-disk kernel device
behind it (/sys), as placements, devices, probes and the machine's facts all need to know."""

from __future__ import annotations

import os
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _unescape(field_text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field_text = field_text.replace(code, char)
    return field_text


def _options(per_mount: str, per_superblock: str) -> str:
    # Both lists matter (noatime is per mount, discard per superblock); "rw" appears in both.
    return ",".join(dict.fromkeys(o for o in f"{per_mount},{per_superblock}".split(",") if o))


def mount_of(path: Path, root: Path = Path("/")) -> dict | None:
    """The mount that holds `path`: the longest mount point containing it; of equal ones the last
    mounted, which hides the others (here /dev/shm is mounted twice)."""
    best = None
    target = str(Path(path).resolve())
    for line in (_read(root / "proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 2:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best["mount_point"])):
            best = {"mount_point": point, "filesystem": tail[0], "source": _unescape(tail[1]),
                    "options": _options(fields[5], tail[2] if len(tail) > 2 else ""), "dev": fields[2]}
    return best


def beneath(mount: dict, root: Path = Path("/")) -> dict:
    """The mount a stacked FUSE layer serves (storlab's delay layer names its source device as its own):
    the device's own mount, with its filesystem and options; `mount` itself when none is found."""
    for line in (_read(root / "proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 6 and len(tail) >= 2 and _unescape(tail[1]) == mount["source"] and tail[0] != mount["filesystem"]:
            return {"mount_point": _unescape(fields[4]), "filesystem": tail[0], "source": _unescape(tail[1]),
                    "options": _options(fields[5], tail[2] if len(tail) > 2 else ""), "dev": fields[2]}
    return mount


def _whole_disk(sys_block_entry: Path) -> str:
    """A partition's parent disk, or the disk itself."""
    real = sys_block_entry.resolve()
    return real.parent.name if (real / "partition").exists() else real.name


def block_device_of(path: Path, root: Path = Path("/")) -> str | None:
    """The whole-disk kernel name behind a path ("vda", "nvme0n1", "loop3"). A loop device is named
    itself, not its backing file's disk: it is the one whose counters psutil reports."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    entry = root / f"sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if entry.exists():
        return _whole_disk(entry)
    # btrfs and overlay report an anonymous device number: the mount's source names the real one.
    mount = mount_of(path, root) or {}
    source = mount.get("source", "")
    if source.startswith("/dev/"):
        entry = root / "sys/class/block" / Path(source).resolve().name
        if entry.exists():
            return _whole_disk(entry)
    return None
