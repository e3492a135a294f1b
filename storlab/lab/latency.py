"""A device's latency per IO: what a placement declares (reads, writes and the flush that fsync and
fdatasync send, each fixed or a p50/p99 pair), and the layer that holds it on a host without
device-mapper's delay target: `storlab-delayfs`, a FUSE filesystem built with storlab (native/),
which serves the device's mount (out of everyone else's reach) at another mount point, does each
operation on the real files, then sleeps the declared time, one thread per request so the device's
concurrency is kept. Where reads and writes add nothing, they go from the caller straight to the
device's files (FUSE passthrough) and only the flushes reach the layer.

The layer is the lab, not the storage: storlab starts it (its CPU counted apart), it serves root and
the users it is told (the servers'), it dies with storlab (the kernel kills it), and the device's
manifest entry names it before it starts, so `storlab clean` unmounts what a kill -9 left."""

from __future__ import annotations

import math
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Iterable

from storlab import interrupts, processes
from storlab.errors import RunFailed
from storlab.lab import cgroups, mounts, os_users, owned

BINARY = "storlab-delayfs"
FILESYSTEM = "fuse.delayfs"  # as the mount table names the layer's mounts
DIRECTIONS = ("read", "write", "flush")
# The file's keys, one per direction: milliseconds, fixed or { p50 = …, p99 = … }.
KEYS = tuple(f"{d}_latency_ms" for d in DIRECTIONS)
MAX_MS = 10_000.0
_MOUNT_WAIT_S = 10.0
_BUSY_RETRIES = 50
_BUSY_PAUSE_S = 0.1


@dataclass(frozen=True)
class Latency:
    """Milliseconds added to each IO: fixed when p99 == p50, else drawn per IO from the lognormal
    through both percentiles."""

    p50_ms: float
    p99_ms: float

    @property
    def fixed(self) -> bool:
        return self.p99_ms == self.p50_ms

    def arg(self) -> str:
        return f"{self.p50_ms:g}" if self.fixed else f"{self.p50_ms:g}/{self.p99_ms:g}"

    def text(self) -> str:
        return f"{self.p50_ms:g} ms" if self.fixed else f"p50 {self.p50_ms:g} ms, p99 {self.p99_ms:g} ms"

    @property
    def sigma(self) -> float:
        """The standard deviation of the log of its draws: the lognormal through p50 and p99 (0 when fixed)."""
        return math.log(self.p99_ms / self.p50_ms) / Z99


Z99 = NormalDist().inv_cdf(0.99)  # the standard normal's 99th percentile
NONE = Latency(0.0, 0.0)


@dataclass(frozen=True)
class DeviceLatency:
    """What a device adds to each read, write and flush; NONE where not declared."""

    read: Latency = NONE
    write: Latency = NONE
    flush: Latency = NONE


def parse(value: float | dict) -> Latency:
    """A validated value of a latency key: a number, or {p50, p99}."""
    if isinstance(value, dict):
        return Latency(float(value["p50"]), float(value["p99"]))
    return Latency(float(value), float(value))


def binary() -> Path:
    """The layer's program, built by `make venv` beside the Python that runs storlab."""
    return Path(sys.executable).parent / BINARY


def device_mapper_delay() -> bool:
    """Whether this host has device-mapper's delay target (its control device, and the module loaded
    or loadable). storlab does not use it yet: its own layer holds a latency on every host with FUSE."""
    release = os.uname().release
    return Path("/dev/mapper/control").exists() and (
        Path("/sys/module/dm_delay").exists() or
        any(Path(f"/lib/modules/{release}/kernel/drivers/md").glob("dm-delay.ko*")))


def unavailable() -> str | None:
    """Why latency cannot be held on this host, in words; None when it can."""
    if os.geteuid() != 0:
        return "the delay layer mounts a FUSE filesystem for other users (allow_other): run storlab as root"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse (load the fuse module)"
    if not os.access(binary(), os.X_OK):
        return f"{binary()} is missing; `make venv` builds it (it needs gcc)"
    return None


class Layer:
    """One running layer: `source` (a device's mount) served at `point` with `latency` added, to root
    and the users `serves` names (their uids); `passthrough` once it runs: the callers' reads and
    writes go straight to the device's files."""

    live: dict[str, Layer] = {}  # noqa: RUF012 - this process's layers by mount point, for serving()

    def __init__(self, source: Path, point: Path, latency: DeviceLatency, device: str, serves: tuple[int, ...] = ()):
        self.source, self.point, self.latency = source, point, latency
        self.passthrough = False
        # Named as the device it stands in front of: what asks which disk a path sits on (IO sizes,
        # the device's state, `storlab check`) finds the loop device behind the layer.
        allowed = ",".join(str(uid) for uid in dict.fromkeys((0, *serves)))
        argv = [str(binary())] + [a for d in DIRECTIONS for a in (f"--{d}", getattr(latency, d).arg())] + \
            ["--device", device, "--allow", allowed, str(source), str(point)]
        self.child: subprocess.Popen = processes.start(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                       stderr=subprocess.STDOUT, text=True)
        self.started = owned.pid_start(self.child.pid)
        self._wait_ready()
        Layer.live[str(point)] = self

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def alive(self) -> bool:
        return self.child.poll() is None

    def _wait_ready(self) -> None:
        """Its first line says it mounted and agreed with the kernel (`ready passthrough|cached`)."""
        ready, _, _ = select.select([self.child.stdout], [], [], _MOUNT_WAIT_S)
        said = self.child.stdout.readline().split() if ready else []
        if said[:1] != ["ready"] or not is_layer_mount(self.point):
            out = " ".join(said) or ("" if self.child.poll() is None else self.child.stdout.read())
            self.stop()
            raise RunFailed(f"{BINARY} did not mount {self.point}: "
                            f"{' | '.join(out.strip().splitlines()[-2:]) or f'no word in {_MOUNT_WAIT_S:.0f} s'}")
        self.passthrough = said[1:2] == ["passthrough"]

    def cpu_s(self) -> float:
        """The layer's CPU seconds so far, all its threads (which live as long as it does): from the
        scheduler's nanoseconds, as a passthrough layer's few flushes a run are far below a clock tick."""
        total = 0
        for task in Path(f"/proc/{self.pid}/task").glob("*/schedstat"):
            try:
                total += int(task.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # ended: nothing more to count
        return total / 1e9

    def stop(self) -> list[str]:
        """Unmount and end it; what could not be done, in words."""
        Layer.live.pop(str(self.point), None)
        refused = [] if unmount(self.point) else [f"{self.point} (busy: umount refused)"]
        processes.stop(self.child, signal.SIGTERM)
        return refused


def serving(path: Path) -> Layer | None:
    """The layer of this process that serves `path`, if any."""
    mount = mounts.mount_of(path)
    return Layer.live.get(mount["mount_point"]) if mount and mount["filesystem"] == FILESYSTEM else None


def guests(paths: Iterable[Path]) -> list[cgroups.Guest]:
    """The layers of this process serving any of `paths`: what they do for an instance is its IO."""
    found = {layer.pid: layer for path in paths if (layer := serving(path)) is not None}
    return [cgroups.Guest(pid, not layer.passthrough) for pid, layer in found.items()]


def on_device(path: Path) -> Path | None:
    """Where `path`, served by a layer of this process, is on the device's own mount; None if no layer
    serves it. A passthrough layer's files keep their pages in the device's files' page cache."""
    layer = serving(path)
    return None if layer is None else layer.source / Path(path).relative_to(layer.point)


def is_layer_mount(point: Path) -> bool:
    mount = mounts.mount_of(point)
    return bool(mount) and mount["mount_point"] == str(point) and mount["filesystem"] == FILESYSTEM


def unmount(point: Path) -> bool:
    """Unmount a layer's mount at `point` (only one of the layer's); True when none is left there. A
    layer that died (kill -9) leaves a mount whose calls fail, which umount still removes."""
    for _ in range(_BUSY_RETRIES):
        if not is_layer_mount(point):
            return True
        processes.run(["umount", str(point)], timeout=60)
        if not is_layer_mount(point):
            return True
        time.sleep(_BUSY_PAUSE_S)
    return False


def remove_recorded(point: Path, pid: int | None, started: int | None) -> tuple[list[str], list[str]]:
    """After a crash: the recorded layer's mount unmounted and its process ended (only the process
    recorded with that start time): (removed, refused)."""
    removed, refused = [], []
    if is_layer_mount(point):
        if unmount(point):
            removed.append(f"unmounted {point}")
        else:
            refused.append(f"{point} (busy: umount refused)")
    if pid and owned.running(pid, started):
        processes.kill_tree(pid)
        removed.append(f"ended {BINARY} (pid {pid})")
    return removed, refused


@dataclass(frozen=True)
class Floor:
    """What the layer itself adds at 0 ms declared: to each commit (a 4 KiB write and its fdatasync,
    p50, ms: a passthrough layer's reads and writes add nothing, its flushes a round trip), and its CPU
    per commit (µs)."""

    added_ms: float
    cpu_us: float


_FLOOR_COMMITS = 200
_FLOOR_ROUNDS = 5
_floor: Floor | None = None


def floor(where: Path = Path("/var/tmp")) -> Floor:
    """The layer's floor on this host, measured once per process: commits to one file, alone and
    through a layer adding nothing, in a folder under `where` written down in a manifest
    (so `storlab clean` removes it if storlab dies meanwhile)."""
    global _floor
    if _floor is None:
        _floor = _measure_floor(where)
    return _floor


def _measure_floor(where: Path) -> Floor:
    manifest = owned.Manifest(owned.new_instance_id("floor"), "floor", owner_pid=os.getpid(),
                              owner_start=owned.pid_start(os.getpid()))
    manifest.save()
    scratch = owned.make_owned_dir(where / f"storlab-{manifest.instance_id}", manifest, os_users.current_user())
    files, point = scratch / "files", scratch / "layer"
    layer = None
    try:
        files.mkdir(mode=0o700)
        point.mkdir(mode=0o700)
        (files / "block").write_bytes(os.urandom(2**20))
        manifest.layers.append({"point": str(point)})
        manifest.save()
        device = mounts.block_device_of(files)
        layer = Layer(files, point, DeviceLatency(), f"/dev/{device or 'none'}")
        manifest.layers[-1].update(pid=layer.pid, start=layer.started)
        manifest.save()
        alone, through, cpu = [], [], 0.0
        for _ in range(_FLOOR_ROUNDS):  # side by side: the file and the machine warm alike for both
            alone += _commits_ms(files / "block")
            before = layer.cpu_s()
            through += _commits_ms(point / "block")
            cpu += layer.cpu_s() - before
        cpu_us = cpu / len(through) * 1e6
    finally:
        with interrupts.uninterrupted:
            if layer is None or not layer.stop():
                manifest.layers = []
            if not manifest.layers and owned.remove_owned_dir(scratch, manifest.instance_id):
                manifest.forget()
            else:
                manifest.save()
    return Floor(max(0.0, statistics.median(through) - statistics.median(alone)) * 1000, cpu_us)


def _commits_ms(file: Path) -> list[float]:
    """The times (s) of 4 KiB writes at random places in `file`, each followed by its fdatasync."""
    block = os.urandom(4096)
    fd = os.open(file, os.O_WRONLY)
    try:
        took = []
        for i in range(_FLOOR_COMMITS):
            start = time.perf_counter()
            os.pwrite(fd, block, (i * 37 % 256) * 4096)
            os.fdatasync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return took
