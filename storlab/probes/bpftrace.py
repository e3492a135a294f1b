"""One bpftrace program as a child of storlab, for the probes that count in the kernel: started and
attached before the load, flushed right after it, killed on every other path. Nothing is printed per
event: counts, sums and power-of-two histograms stay in BPF maps while the workload runs.

The maps are printed on storlab's word, not at bpftrace's exit: bpftrace detaches every probe before
it prints at exit, and the kernel takes 0.1 to 0.2 s to remove each uprobe (2 to 3 s for
PostgreSQL's trace points; a SIGKILL waits as long). So each program gets one more probe, on a system
call storlab makes (kill(id, 0) with an id no process has), that prints every map and then a line
saying so; storlab reads the maps as soon as that line is there, and the process is interrupted and
reaped by a thread of its own while storlab goes on. The next trace compiles and attaches meanwhile,
and returns from start() only once every trace before it has ended (so no detach overlaps a measured
load); storlab's exit waits for them too. Where bpftrace cannot run, `note` says why in one line and
the caller keeps its sampled figures."""

from __future__ import annotations

import enum
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from storlab import processes

# bpftrace prints this once every probe is attached (the switch its own test suite uses).
_ATTACHED = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"
_ATTACH_TIMEOUT_S = 60.0  # compiling takes seconds on a busy 2-core machine
_STOP_TIMEOUT_S = 30.0
_FLUSHED = "storlab flushed"
# The ids storlab's flush calls name: above any pid (pid_max is at most 2^22), so kill(id, 0) finds
# no process, signals nothing and fails with ESRCH. One per trace: two running at once flush apart.
_FLUSH_IDS = itertools.count(1 << 30)
_MAP = re.compile(r"@(\w+)")
TRACEFS = Path("/sys/kernel/tracing")
_mounting = threading.Lock()
OFF = "traces turned off (--no-trace)"

Key = tuple[str, ...]
# map name (no @) -> key -> a number, a histogram {lower bound: count}, or stats {count, average, total}
Maps = dict[str, dict[Key, Any]]


class Tracing(enum.Enum):
    """What a run traces with bpftrace: OFF, nothing (--no-trace: the sampled figures only); ON, the
    default (waits, writes, syncs, IO sizes: about 4 % of PostgreSQL's CPU-bound insert load, over its
    1 % budget, benchmarks/probe_overhead.py); READS, that and every read of a data file
    (--trace-reads: PostgreSQL's smgr trace points trap on every 8 kB read, which made a cold scan 16
    to 29 % slower on this project's 2-core VM)."""

    OFF = "off"
    ON = "on"
    READS = "reads"


# Traces flushed and ending in the background (their probes detaching), until each is reaped.
_ending: list[threading.Thread] = []
_ending_lock = threading.Lock()


def why_not(bpftrace: str | None) -> str | None:
    """None when bpftrace can be started here; otherwise why not (bpftrace None: traces turned off).
    Mounts tracefs where it is missing: every program here has a tracepoint."""
    if bpftrace is None:
        return OFF
    if os.geteuid() != 0:
        return "tracing needs root"
    if shutil.which(bpftrace) is None:
        return f"{bpftrace} not found (Debian's bpftrace)"
    return tracefs_problem()


def tracefs_problem() -> str | None:
    """None once the kernel's tracing filesystem is at /sys/kernel/tracing, where bpftrace finds the
    tracepoints; a fresh host may not have mounted it, so storlab (root) does, and leaves it: it is the
    kernel's, shared by every tracer. Otherwise why it is not there."""
    if (TRACEFS / "events").is_dir():
        return None
    with _mounting:  # two threads of one storlab mount it once
        if (TRACEFS / "events").is_dir():
            return None
        try:
            code, out = processes.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            code, out = -1, str(exc)
    if (TRACEFS / "events").is_dir():
        return None
    return f"no tracefs at {TRACEFS} (mount said: {_last_error(out) if code else 'nothing, yet no events there'})"


def _flushing(program: str, caller: int, flush_id: int) -> str:
    """`program` with the probe that prints every map it names, then the flush line, when `caller`
    (a process id) calls kill(flush_id, 0)."""
    prints = " ".join(f"print(@{name});" for name in sorted(set(_MAP.findall(program))))
    return (f"{program}\ntracepoint:syscalls:sys_enter_kill /pid == {caller} && args->pid == {flush_id} && "
            f'args->sig == 0/ {{ {prints} printf("{_FLUSHED} {flush_id}\\n"); }}\n')


def wait_ended() -> None:
    """Every trace flushed so far has exited and been reaped."""
    while True:
        with _ending_lock:
            if not _ending:
                return
            thread = _ending[0]
        thread.join()
        with _ending_lock:
            if thread in _ending:
                _ending.remove(thread)


def _end_in_background(proc: subprocess.Popen) -> None:
    """Interrupt `proc` and reap it from a thread of its own (not a daemon: storlab's exit waits for it);
    SIGKILL if it has not exited within the stop timeout."""
    thread = threading.Thread(target=processes.stop, args=(proc, signal.SIGINT, _STOP_TIMEOUT_S),
                              name=f"bpftrace {proc.pid} ending")
    with _ending_lock:
        _ending.append(thread)
        thread.start()


class Trace:
    """Use as start(), then stop() for the maps (None when the trace failed: `note` says why), or
    kill() on a way out that wants nothing. `bpftrace` None: traces turned off."""

    def __init__(self, program: str, bpftrace: str | None = "bpftrace"):
        self.program = program
        self.bpftrace = bpftrace
        self.note = ""
        self._proc: subprocess.Popen | None = None
        self._output: IO[bytes] | None = None
        self._flush_id = next(_FLUSH_IDS)

    @property
    def running(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        reason = why_not(self.bpftrace)
        if reason is not None:
            self.note = reason
            return
        # A file, not a pipe: nothing has to read while the workload runs, and it vanishes on close.
        self._output = tempfile.TemporaryFile()
        # Killed by the kernel if storlab dies: tied to the starting thread, so start it from one that lives.
        self._proc = processes.start(
            [self.bpftrace, "-f", "json", "-e", _flushing(self.program, os.getpid(), self._flush_id)],
            stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT,
            env={**os.environ, _ATTACHED: "1"},
        )
        try:
            self._wait_for(_ATTACHED, _ATTACH_TIMEOUT_S, "at start", "attach")
            wait_ended()  # the traces before it end while it compiles and attaches, never during the load
        except BaseException:
            self.kill()
            raise

    def _wait_for(self, line: str, timeout_s: float, when: str, what: str) -> str | None:
        """The output once `line` is in it; None (`note` says why, the process killed) when bpftrace
        exited first or did not print it in time."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self._text()
            if line in text:
                return text
            if self._proc.poll() is not None:
                self.note = f"bpftrace exited {when} (exit {self._proc.returncode}): {_last_error(text)}"
                self.kill()
                return None
            time.sleep(0.005)
        self.note = f"bpftrace did not {what} within {timeout_s:.0f} s"
        self.kill()
        return None

    def _text(self) -> str:
        self._output.seek(0)
        return self._output.read().decode(errors="replace")

    def stop(self) -> Maps | None:
        """The maps as they are now (None, and `note`, when bpftrace could not print them); the
        process ends in the background."""
        if self._proc is None:
            return None
        try:
            try:
                os.kill(self._flush_id, 0)  # no such process: only the trace's own probe sees the call
            except ProcessLookupError:
                pass
            marker = f"{_FLUSHED} {self._flush_id}"
            text = self._wait_for(marker, _STOP_TIMEOUT_S, "before it printed its maps", "print its maps")
            if text is None:
                return None
            return parse(text[:text.rfind("\n", 0, text.index(marker)) + 1])  # the lines before the flush line
        except ValueError as exc:
            self.note = f"bpftrace's output could not be read: {exc}"
            return None
        finally:
            if self._proc is not None:
                _end_in_background(self._proc)
                self._proc = None
            self.kill()

    def kill(self) -> None:
        if self._proc is not None:
            processes.stop(self._proc, signal.SIGKILL)
            self._proc = None
        if self._output is not None:
            self._output.close()
            self._output = None


def parse(text: str) -> Maps:
    """bpftrace's JSON lines: maps of numbers, of histograms and of stats; a key of several fields is
    printed as "a,b,c" (the programs here never key by a text holding a comma)."""
    maps: Maps = {}
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("type") not in ("map", "hist", "stats"):
            continue
        for name, values in message["data"].items():
            found = maps.setdefault(name.lstrip("@"), {})
            if not isinstance(values, dict) or (message["type"] == "stats" and "count" in values
                                                and not isinstance(values["count"], dict)):  # a map without a key
                values = {"": values}
            for key, value in values.items():
                if message["type"] == "hist":
                    value = {int(b.get("min", 0)): int(b["count"]) for b in value if b["count"]}
                found[tuple(key.split(","))] = value
    return maps


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip() and "RLIMIT_MEMLOCK" not in ln]
    errors = [ln for ln in lines if "ERROR" in ln]
    return (errors or lines or ["no output"])[-1]
