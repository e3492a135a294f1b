"""The one way storlab starts and stops a child process. Each child runs in its own process group
(so a terminal's Ctrl-C reaches storlab, which then stops it in order), optionally as another OS
user, and is killed by the kernel if storlab itself dies, even by SIGKILL. Stopping it sends its
polite signal, gives it a moment to finish, then SIGKILL to the whole group, so nothing it forked
outlives it."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
from typing import Any

import psutil

from storlab.interrupts import uninterrupted

_PR_SET_PDEATHSIG = 1
# A process dies within milliseconds of SIGKILL, unless it is stuck in the kernel.
KILLED_S = 10.0


def _die_with_parent(uid: int | None, gid: int | None, cgroups: list[str], open_files: int | None):
    """In the child, before exec: join the control groups (while still root: the servers' user cannot
    write their cgroup.procs), limit its descriptors, drop to the user, then ask the kernel to kill
    the child when its parent thread dies (set after setuid, which clears it). Tied to the thread
    that starts the child: start long-lived children from a thread that lives as long as they should."""
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def prepare() -> None:
        for procs in cgroups:
            with open(procs, "w") as joined:
                joined.write(str(os.getpid()))
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
        if uid is not None and uid != os.getuid():
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # storlab died before the request was made
            os._exit(1)

    return prepare


def start(argv: list[str], *, uid: int | None = None, gid: int | None = None, cgroups: tuple[str, ...] = (),
          open_files: int | None = None, **popen: Any) -> subprocess.Popen:
    """Start `argv` in its own process group (as `uid`/`gid` when given, inside the control groups
    whose cgroup.procs files `cgroups` names, with at most `open_files` descriptors when given), tied
    to storlab's life.

    A Ctrl-C is held while the child is forked: with a preexec_fn, Python runs its at-fork hooks
    (logging's lock release) in storlab, and a KeyboardInterrupt raised inside one is printed and
    dropped, the run going on as if never interrupted."""
    child = None
    try:
        with uninterrupted:
            child = subprocess.Popen(argv, preexec_fn=_die_with_parent(uid, gid, list(cgroups), open_files),
                                     start_new_session=True, **popen)
    except BaseException:
        if child is not None:
            stop(child)
        raise
    return child


def run(argv: list[str], timeout: float, input: str | None = None, **popen: Any) -> tuple[int, str]:
    """Run `argv` to its end (`input` on its standard input) and return its exit code and output
    (stdout and stderr together); stopped on every way out: TimeoutExpired after `timeout`, Ctrl-C,
    any error."""
    stdin = subprocess.DEVNULL if input is None else subprocess.PIPE
    child = start(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    try:
        out, _ = child.communicate(input, timeout=timeout)
    finally:
        stop(child)
    return child.returncode, out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by a process, its live descendants, and the children it has reaped
    (a parallel query's workers, once they have exited): a server's CPU time, to be differenced."""
    root = psutil.Process(pid)
    total = sum(root.cpu_times()[:4])  # user, system, children's user, children's system
    for child in root.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue  # it exited between the listing and the reading: counted with its parent's reaped children
    return total


def _tree(pid: int) -> list[psutil.Process]:
    """`pid` and its descendants, found through their parents: a PostgreSQL backend leads a session of
    its own, outside its server's process group, so a signal to the group misses it."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _continue(pid: int) -> None:
    """A stopped process acts on no signal until it is continued: continue `pid` and its descendants."""
    for process in _tree(pid):
        try:
            process.resume()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def kill_tree(pid: int) -> None:
    """SIGKILL a process that is not storlab's child (a server left by a crashed run, or a stalled one),
    its process group and its descendants (a PostgreSQL backend leads a session of its own); a stopped
    process dies of SIGKILL without being continued."""
    found = _tree(pid)
    if not found:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for process in found:
        try:
            process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def stop(child: subprocess.Popen, polite: signal.Signals = signal.SIGTERM, timeout: float = 5) -> bool:
    """Stop `child` and everything in its group: `polite`, then past `timeout` SIGKILL; whether it had
    stopped by then. It is waited for KILLED_S at most after SIGKILL: a process stuck in the kernel
    (IO to a hung device) dies of nothing, and would hold storlab for ever."""
    if child.poll() is None:
        try:
            child.send_signal(polite)
            _continue(child.pid)
            child.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, ProcessLookupError, PermissionError):
            pass
    stopped = child.poll() is not None
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(KILLED_S)
    except subprocess.TimeoutExpired:
        pass
    return stopped
