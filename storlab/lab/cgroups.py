"""A control group per instance: the kernel's own list of every process the instance's server
started, whatever it did since (a backend that forked, a program an experiment's SQL ran and put in a
session of its own with setsid). The server is started inside the group, so each process it makes is
in it from birth, and the servers' OS user cannot move one out (a move needs write access to the
destination's cgroup.procs, which is root's). The instance's end kills what is left in the group and
removes it; the manifest names it, so `storlab clean` does the same after a crash.

Made under the group storlab itself runs in, in one hierarchy: the unified one where the host mounts
cgroup v2 at /sys/fs/cgroup, else v1's `pids` (or another v1 hierarchy the host mounts). Where none
can be made (not root, a read-only cgroupfs) an instance runs without one and its end kills its
process tree only: `storlab check` says which.

A cell with IO caps or a server memory limit (storlab.lab.caps) has the same group hold them back.
On v1 the group is also made, under the same name, in the `blkio` and `memory` hierarchies (each
below storlab's own group there), and the server joins all of them at birth. On v2 the io and memory
controllers must be on in the group's parent, and v2 lets no group with processes of its own hand a
controller to its children (storlab's own group holds storlab, and often the shell that started
it): such a group goes in a group named `storlab` beside storlab's own (in its parent; in the root
itself when storlab runs in the root), which holds no process, with the controllers turned on from
the mount down to it; it is removed with the last instance in it."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from storlab.errors import RunFailed
from storlab.lab import caps

ROOT = Path("/sys/fs/cgroup")
# v1 hierarchies that can hold a group for tracking alone, best first: `pids` has no cost.
_V1_TRACKERS = ("pids", "freezer", "cpuacct", "systemd")
PREFIX = "storlab-"
# v2: the group without processes of its own that holds the groups with controllers.
SHARED = "storlab"
# A killed process leaves its group when it has exited; a child that forks meanwhile is killed on the
# next pass. The whole group is gone within milliseconds unless a process is stuck in the kernel.
_KILL_PASSES = 200
_KILL_PAUSE_S = 0.025
# A concurrent instance's end may remove the shared v2 group between its making and ours' in it.
_MAKE_TRIES = 3


@dataclass(frozen=True)
class Hierarchy:
    """Where a group of storlab's goes: a mounted hierarchy and the group storlab runs in there."""

    mount: Path
    version: int  # 1 or 2
    own: Path  # storlab's own group in it: new groups go below

    def group(self, name: str) -> Path:
        return self.own / name

    @property
    def shared(self) -> Path:
        """v2: the group beside storlab's own that holds the groups with controllers."""
        return (self.own if self.own == self.mount else self.own.parent) / SHARED


def _mounts() -> list[tuple[Path, str, set[str]]]:
    """Each cgroup mount: (mount point, filesystem type, its super options)."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, tail = left.split(), right.split()
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((Path(parts[4]), tail[0], set(tail[2].split(","))))
    return found


def _own_group(version: int, controller: str | None) -> str | None:
    """The group this process is in, in the hierarchy of `controller` (v2: the unified one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = set(controllers.split(",")) if controllers else set()
        if version == 2 and not controllers:
            return path
        if version == 1 and controller is not None and (controller in names or f"name={controller}" in names):
            return path
    return None


def _root_owned(mount: Path, own: Path) -> Path:
    """Where storlab's groups go: below its own group, unless another user owns that group or one above
    it (a user's delegated session: `sudo storlab` from a desktop's terminal), who could move the
    servers out of their group (out of its caps, out of the kill at the run's end); then below the
    deepest group only root can change."""
    chain = [own, *own.parents]
    if mount not in chain:
        return own
    deepest = mount
    for directory in reversed(chain[: chain.index(mount)]):  # from the mount down to `own`
        try:
            if os.lstat(directory).st_uid != 0:
                break
        except OSError:
            break
        deepest = directory
    return deepest


def _unified() -> Hierarchy | None:
    for point, kind, _ in _mounts():
        if kind == "cgroup2" and point == ROOT:
            own = _own_group(2, None)
            return None if own is None else Hierarchy(point, 2, _root_owned(point, point / own.lstrip("/")))
    return None


def _v1(controller: str) -> Hierarchy | None:
    """The v1 hierarchy that holds `controller`, with storlab's own group in it."""
    for point, kind, options in _mounts():
        if kind == "cgroup" and (controller in options or f"name={controller}" in options):
            own = _own_group(1, controller)
            if own is not None:
                return Hierarchy(point, 1, _root_owned(point, point / own.lstrip("/")))
    return None


def hierarchy() -> Hierarchy | None:
    """The hierarchy storlab's groups go in on this host, or None when there is none."""
    unified = _unified()
    if unified is not None:
        return unified
    for tracker in _V1_TRACKERS:
        found = _v1(tracker)
        if found is not None:
            return found
    return None


def unavailable() -> str | None:
    """Why an instance here would run without a group of its own; None when it gets one."""
    if os.geteuid() != 0:
        return "storlab runs as an ordinary user and cannot make control groups"
    found = hierarchy()
    if found is None:
        return "no cgroup hierarchy is mounted under /sys/fs/cgroup"
    if not os.access(found.own, os.W_OK):
        return f"{found.own} cannot be written"
    return None


# -- what limits need ----------------------------------------------------------------------------

# What each version's controllers are called, and the file that proves v1's can do the job.
_V1_CONTROLLERS = {"io": ("blkio", "blkio.throttle.write_iops_device"), "memory": ("memory", "memory.limit_in_bytes")}


def limits_unavailable(io: bool, memory: bool) -> str | None:
    """Why a group here cannot hold IO caps (`io`) or a memory limit (`memory`); None when it can."""
    why = unavailable()
    if why is not None:
        return why
    wanted = [name for name, asked in (("io", io), ("memory", memory)) if asked]
    unified = _unified()
    if unified is not None:
        try:
            offered = set((unified.mount / "cgroup.controllers").read_text().split())
        except OSError as exc:
            return f"{unified.mount}/cgroup.controllers cannot be read: {exc.strerror}"
        missing = [name for name in wanted if name not in offered]
        if missing:
            return (f"cgroup v2 at {unified.mount} does not offer the {' and '.join(missing)} "
                    f"controller{'s' if len(missing) > 1 else ''} (a v1 hierarchy may hold it)")
        return None
    for name in wanted:
        controller, proof = _V1_CONTROLLERS[name]
        found = _v1(controller)
        if found is None:
            return f"no cgroup v2 at {ROOT} and no v1 {controller} hierarchy is mounted"
        if not (found.own / proof).exists():
            return f"{found.own} has no {proof}: this kernel cannot {'throttle IO' if name == 'io' else 'limit memory'}"
        if not os.access(found.own, os.W_OK):
            return f"{found.own} cannot be written"
    return None


def where_limits_go(io: bool, memory: bool) -> str:
    """The group limits are set in here, in words (for `storlab check`)."""
    unified = _unified()
    if unified is not None:
        return f"v2, in {unified.shared}"
    return ", ".join(f"v1 {h.mount.name} under {h.own}" for h in
                     (_v1(_V1_CONTROLLERS[name][0]) for name, asked in (("io", io), ("memory", memory)) if asked) if h)


# -- the group -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """Where an instance's group goes: its directory (v2, or v1's tracking hierarchy's), and on v1 the
    same group in each hierarchy whose controller its limits need (controller -> directory)."""

    path: Path
    version: int
    more: dict[str, Path] = field(default_factory=dict)

    @property
    def paths(self) -> list[Path]:
        return [self.path, *self.more.values()]


def place(name: str, limits: caps.GroupLimits | None = None) -> Placed | None:
    """Where the group for instance `name` goes on this host; None where storlab can make none. With
    `limits`, RunFailed where they cannot be held here (the experiment's load refused it already)."""
    group = PREFIX + name
    if limits:
        why = limits_unavailable(bool(limits.devices), limits.memory_bytes is not None)
        if why is not None:
            raise RunFailed(f"IO caps and memory limits cannot be set here: {why}")
    elif unavailable() is not None:
        return None
    found = hierarchy()
    if found.version == 2:
        return Placed((found.shared if limits else found.own) / group, 2)
    asked = {"io": bool(limits and limits.devices), "memory": bool(limits and limits.memory_bytes is not None)}
    more = {_V1_CONTROLLERS[c][0]: _v1(_V1_CONTROLLERS[c][0]).group(group) for c, wanted in asked.items() if wanted}
    return Placed(found.group(group), 1, more)


def _write(path: Path, text: str, what: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise RunFailed(f"{what}: writing {text.strip()!r} to {path} failed: {exc.strerror}") from None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _enable(mount: Path, parent: Path) -> None:
    """v2: the io and memory controllers on in the subtree of every group from the mount down to
    `parent`, where they are not yet (a group's children get only what its own parent hands it)."""
    chain = [parent, *parent.parents]
    for directory in reversed(chain[: chain.index(mount) + 1]):
        control = directory / "cgroup.subtree_control"
        on = set((_read(control) or "").split())
        missing = [c for c in ("io", "memory") if c not in on]
        if missing:
            _write(control, " ".join(f"+{c}" for c in missing), "turning on the io and memory controllers")


@dataclass(frozen=True)
class Guest:
    """A process of the lab's that does IO on an instance's behalf (the delay layer serving its device):
    `own_io`, whether it submits that IO itself rather than the instance's processes (passthrough)."""

    pid: int
    own_io: bool


# Guests move between groups one at a time: an instance ending in the background gives its guest back
# only if the next instance has not taken it already.
_guests_moving = threading.Lock()


class ControlGroup:
    """One instance's group: `path` (v2, or v1's tracking hierarchy) and, on v1, the same group in the
    hierarchies its limits need (`more`, by controller). A process joins it by writing its pid to
    every directory's cgroup.procs (`joining`)."""

    def __init__(self, path: Path, more: dict[str, Path] | None = None, limits: caps.GroupLimits | None = None,
                 version: int = 1):
        self.path = path
        self.more = dict(more or {})
        self.limits = limits or caps.GroupLimits()
        self.version = version
        self.guests: list[int] = []

    def lend(self, guests: list[Guest]) -> None:
        """Charge the guests' IO to this group's caps (and its credits) while it lives. On v1 the blkio
        hierarchy is its own, so a guest joins it alone, its CPU and memory still the lab's; fsync's
        writeback is charged to whoever calls it there. On v2 a process has one group for everything,
        but the kernel charges writeback to the group whose pages it writes, so a passthrough layer
        (the callers' own reads and writes) needs no move; a layer doing reads and writes itself cannot
        be held there."""
        if not guests or not self.limits.devices:
            return
        if self.version == 2:
            doing = [g.pid for g in guests if g.own_io]
            if doing:
                raise RunFailed("a read or write latency beside IO caps needs cgroup v1 here: on v2 the delay "
                                f"layer (pid {doing[0]}) would do the server's reads and writes outside its group")
            return
        with _guests_moving:
            for guest in guests:
                _write(self._dir("io") / "cgroup.procs", f"{guest.pid}\n", "the delay layer's IO into the caps")
                self.guests.append(guest.pid)

    def _give_back(self) -> None:
        """The guests still here go back to storlab's own group (a group with a process in it cannot go)."""
        if not self.guests:
            return
        with _guests_moving:
            own = _v1("blkio")
            here = "/" + str(self._dir("io").relative_to(own.mount)) if own else None
            for pid in self.guests:
                if own is not None and _v1_group_of(pid, "blkio") == here:
                    try:
                        (own.own / "cgroup.procs").write_text(f"{pid}\n")
                    except OSError:
                        pass  # it ended: nothing to give back
            self.guests.clear()

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    @property
    def paths(self) -> list[Path]:
        return [self.path, *self.more.values()]

    @classmethod
    def make(cls, where: Path | Placed, limits: caps.GroupLimits | None = None,
             guests: list[Guest] | None = None) -> "ControlGroup | None":
        """A new, empty group (from `place`), its limits set, the `guests` lent to it; None if the kernel
        will not make a group without limits (one with limits is RunFailed: a cell must never run
        uncapped unsaid)."""
        placed = where if isinstance(where, Placed) else Placed(where, 1)
        limits = limits or caps.GroupLimits()
        made: list[Path] = []
        try:
            for path in placed.paths:
                _make_dir(path, placed.version == 2 and bool(limits))
                made.append(path)
        except BaseException as exc:  # what was made goes, on every way out (a Ctrl-C too)
            for one in reversed(made):
                _rmdir(one)
            if isinstance(exc, FileExistsError):
                raise RunFailed(f"{path} already exists; storlab will not reuse a control group it did not make") from None
            if isinstance(exc, OSError) and not limits:
                return None
            if isinstance(exc, OSError):
                raise RunFailed(f"cannot make the control group {path}: {exc.strerror}") from None
            raise
        group = cls(placed.path, placed.more, limits, placed.version)
        try:
            group.apply()
            group.lend(guests or [])
        except RunFailed:
            group.remove()
            raise
        return group

    def _dir(self, controller: str) -> Path:
        """The directory whose files hold `controller`'s settings (v1: its own hierarchy's)."""
        return self.path if self.version == 2 else self.more[{"io": "blkio"}.get(controller, controller)]

    def apply(self) -> None:
        """Set the limits: each device's IO caps, then the memory limit (the page cache included; the
        servers' own memory not swapped out in its place where the host has swap)."""
        for cap in self.limits.devices:
            self.hold(cap)
        memory = self.limits.memory_bytes
        if memory is not None:
            where = self._dir("memory")
            if self.version == 2:
                _write(where / "memory.max", f"{memory}\n", "the server memory limit")
                if (where / "memory.swap.max").exists():
                    _write(where / "memory.swap.max", "0\n", "the server memory limit (no swap)")
            else:
                _write(where / "memory.limit_in_bytes", f"{memory}\n", "the server memory limit")
                # Reclaim takes the page cache, not the servers' own memory (a memsw limit would do it
                # too, but then the kernel no longer counts the times the limit was reached).
                _write(where / "memory.swappiness", "0\n", "the server memory limit (no swapping)")

    def hold(self, cap: caps.DeviceCap) -> None:
        """Set one device's caps (at the start, and where a credit bucket changes them during a run)."""
        if self.version == 2:
            _write(self.path / "io.max", caps.io_max_line(cap) + "\n", f"the IO caps on {cap.device}")
        else:
            for file, line in caps.v1_lines(cap):
                _write(self._dir("io") / file, line + "\n", f"the IO caps on {cap.device}")

    def reading(self) -> caps.Reading:
        """The group's counters now (RunFailed if a file does not read as the kernel writes it)."""
        found = caps.Reading()
        try:
            if self.limits.devices:
                if self.version == 2:
                    found.io = caps.io_stat(_read(self.path / "io.stat") or "")
                    pressure = _read(self.path / "io.pressure")
                    found.io_pressure_us = None if pressure is None else caps.pressure_some_us(pressure)
                else:
                    found.io = self.charged_io()
            if self.limits.memory_bytes is not None:
                where = self._dir("memory")
                if self.version == 2:
                    events = caps.flat_keyed(_read(where / "memory.events") or "", "memory.events")
                    found.memory_hits, found.oom_kills = events.get("max"), events.get("oom_kill")
                    found.memory_bytes = caps.memory_value(_read(where / "memory.current") or "", "memory.current")
                    peak = _read(where / "memory.peak")
                    found.peak_bytes = None if peak is None else caps.memory_value(peak, "memory.peak")
                else:
                    found.memory_bytes = caps.memory_value(_read(where / "memory.usage_in_bytes") or "", "memory.usage_in_bytes")
                    found.memory_hits = caps.memory_value(_read(where / "memory.failcnt") or "", "memory.failcnt")
                    found.peak_bytes = caps.memory_value(_read(where / "memory.max_usage_in_bytes") or "",
                                                         "memory.max_usage_in_bytes")
                    oom = caps.flat_keyed(_read(where / "memory.oom_control") or "", "memory.oom_control")
                    found.oom_kills = oom.get("oom_kill")
        except caps.Malformed as exc:
            raise RunFailed(f"the control group {self.path}: {exc}") from None
        return found

    def charged_io(self) -> dict[str, caps.IoCount]:
        """What the group was charged on each device ("major:minor"), and nothing else: a credit bucket
        reads it ten times a second (RunFailed if a file does not read as the kernel writes it)."""
        try:
            if self.version == 2:
                return caps.io_stat(_read(self.path / "io.stat") or "")
            return caps.v1_io(_read(self._dir("io") / "blkio.throttle.io_serviced") or "",
                              _read(self._dir("io") / "blkio.throttle.io_service_bytes") or "")
        except caps.Malformed as exc:
            raise RunFailed(f"the control group {self.path}: {exc}") from None

    def reset_peak(self) -> bool:
        """Start the kernel's peak of the group's memory over (v1; v2 keeps one since the group was
        made); whether it was."""
        if self.version == 2 or self.limits.memory_bytes is None:
            return False
        try:
            (self._dir("memory") / "memory.max_usage_in_bytes").write_text("0\n")
        except OSError:
            return False
        return True

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in self.procs.read_text().split()]
        except FileNotFoundError:
            return []

    def kill(self) -> list[int]:
        """SIGKILL every process in the group until none is left (a stopped one dies without being
        continued); the pids killed."""
        killed: list[int] = []
        for _ in range(_KILL_PASSES):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                if pid not in killed:
                    killed.append(pid)
            time.sleep(_KILL_PAUSE_S)
        return killed

    def remove(self) -> bool:
        """Kill what is left and remove the group from every hierarchy; whether it is all gone."""
        self._give_back()
        self.kill()
        return all([_rmdir(path) for path in reversed(self.paths)])


def _v1_group_of(pid: int, controller: str) -> str | None:
    """The v1 group a process is in for `controller`, as /proc names it."""
    for line in (_read(Path(f"/proc/{pid}/cgroup")) or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _make_dir(path: Path, shared: bool) -> None:
    """One directory of a group; with `shared` (v2 with limits), in the shared group, made if missing,
    the controllers turned on down to it."""
    if not shared:
        path.mkdir()
        return
    mount = _unified().mount
    for _ in range(_MAKE_TRIES):
        path.parent.mkdir(exist_ok=True)
        if path.parent.stat().st_uid != 0:
            raise RunFailed(f"{path.parent} belongs to uid {path.parent.stat().st_uid}: storlab puts no server in a "
                            "control group another user made")
        _enable(mount, path.parent)
        try:
            path.mkdir()
            return
        except FileNotFoundError:  # the shared group was removed by another instance's end meanwhile
            continue
    path.mkdir()


def _rmdir(path: Path) -> bool:
    """Remove one directory of a group (the kernel refuses while a process is in it); then the shared
    v2 group it was in, if it was the last (the kernel refuses while another instance's is there)."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    if path.parent.name == SHARED:
        try:
            path.parent.rmdir()
        except OSError:
            pass
    return True


def joining(group: ControlGroup | None) -> list[str]:
    """The files a child writes its own pid to before it runs its program (processes.start's `cgroups`)."""
    return [] if group is None else [str(path / "cgroup.procs") for path in group.paths]


def recorded(path: str) -> ControlGroup | None:
    """A group named in a manifest, if it is one of storlab's under a cgroup mount: `storlab clean`
    never kills the processes of a group it did not make."""
    candidate = Path(path)
    if not candidate.name.startswith(PREFIX) or ".." in candidate.parts:
        return None
    if not any(point in candidate.parents for point, _, _ in _mounts()):
        return None
    return ControlGroup(candidate)


def recorded_with(path: str, more: list[str]) -> ControlGroup | None:
    """A manifest's group with its directories in the other v1 hierarchies (each one of storlab's too)."""
    group = recorded(path)
    if group is None:
        return None
    for other in more:
        found = recorded(other)
        if found is not None and found.path.name == group.path.name:
            # by its controller, as a group made here holds it: v1 mounts each at /sys/fs/cgroup/<controller>
            mount = next(point for point, _, _ in _mounts() if point in found.path.parents)
            group.more[mount.name] = found.path
    return group
