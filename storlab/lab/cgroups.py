"""A control group per instance: the kernel's own list of every process the instance's server
started, whatever it did since (a backend that forked, a program an experiment's SQL ran and put in a
session of its own with setsid). The server is started inside the group, so each process it makes is
in it from birth, and the servers' OS user cannot move one out (a move needs write access to the
destination's cgroup.procs, which is root's). The instance's end kills what is left in the group and
removes it; the manifest names it, so `storlab clean` does the same after a crash.

Made under the group storlab itself runs in, in one hierarchy: the unified one where the host mounts
cgroup v2 at /sys/fs/cgroup, else v1's `pids` (or another v1 hierarchy the host mounts). Where none
can be made (not root, a read-only cgroupfs) an instance runs without one and its end kills its
process tree only: `storlab check` says which."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from storlab.errors import RunFailed

ROOT = Path("/sys/fs/cgroup")
# v1 hierarchies that can hold a group for tracking alone, best first: `pids` has no cost.
_V1_TRACKERS = ("pids", "freezer", "cpuacct", "systemd")
PREFIX = "storlab-"
# A killed process leaves its group when it has exited; a child that forks meanwhile is killed on the
# next pass. The whole group is gone within milliseconds unless a process is stuck in the kernel.
_KILL_PASSES = 200
_KILL_PAUSE_S = 0.025


@dataclass(frozen=True)
class Hierarchy:
    """Where a group of storlab's goes: a mounted hierarchy and the group storlab runs in there."""

    mount: Path
    version: int  # 1 or 2
    own: Path  # storlab's own group in it: new groups go below

    def group(self, name: str) -> Path:
        return self.own / name


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


def hierarchy() -> Hierarchy | None:
    """The hierarchy storlab's groups go in on this host, or None when there is none."""
    mounts = _mounts()
    for point, kind, _ in mounts:
        if kind == "cgroup2" and point == ROOT:
            own = _own_group(2, None)
            return None if own is None else Hierarchy(point, 2, point / own.lstrip("/"))
    for tracker in _V1_TRACKERS:
        for point, kind, options in mounts:
            if kind == "cgroup" and (tracker in options or f"name={tracker}" in options):
                own = _own_group(1, tracker)
                if own is not None:
                    return Hierarchy(point, 1, point / own.lstrip("/"))
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


class ControlGroup:
    """One instance's group. `procs` is the file a process writes its pid to, to join."""

    def __init__(self, path: Path):
        self.path = path

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    @classmethod
    def make(cls, path: Path) -> "ControlGroup | None":
        """A new, empty group at `path` (from `place`); None if the kernel will not make it."""
        try:
            path.mkdir()
        except FileExistsError:
            raise RunFailed(f"{path} already exists; storlab will not reuse a control group it did not make") from None
        except OSError:
            return None
        return cls(path)

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
        """Kill what is left and remove the group; whether it is gone."""
        self.kill()
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def place(name: str) -> Path | None:
    """Where the group for instance `name` goes on this host; None where storlab can make none."""
    return None if unavailable() is not None else hierarchy().group(PREFIX + name)


def joining(group: ControlGroup | None) -> list[str]:
    """The files a child writes its own pid to before it runs its program (processes.start's `cgroups`)."""
    return [] if group is None else [str(group.procs)]


def recorded(path: str) -> ControlGroup | None:
    """A group named in a manifest, if it is one of storlab's under a cgroup mount: `storlab clean`
    never kills the processes of a group it did not make."""
    candidate = Path(path)
    if not candidate.name.startswith(PREFIX) or ".." in candidate.parts:
        return None
    if not any(point in candidate.parents for point, _, _ in _mounts()):
        return None
    return ControlGroup(candidate)
