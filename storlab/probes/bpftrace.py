"""bpftrace programs as children of storlab, for the probes that count in the kernel: attached before
the load, their maps read right after it, killed on every other path. Nothing is printed per event:
counts, sums and power-of-two histograms stay in BPF maps while the workload runs.

storlab talks to a running program through a system call it makes itself: kill(id, n) with an id
above any process id (pid_max is at most 2^22), which finds no process and signals nothing, seen by
the program's own probes on that call. Each program gets a block of such ids: kill(base, 0) prints
every map, a line saying so, clears every map and prints a second line; kill(base + 1 + k, pid) adds
`pid` to the k-th filter map (@name[pid] = 1), which the program's own probes test, so who is counted
is set per run without compiling again.

The maps are printed on storlab's word, not at bpftrace's exit: bpftrace detaches every probe before
it prints at exit, and the kernel takes 0.1 to 0.2 s to remove each uprobe (2 to 3 s for
PostgreSQL's trace points; a SIGKILL waits as long). A trace of one run is interrupted and reaped by
a thread of its own once its maps are read; the next trace compiles and attaches meanwhile and
returns from start() only once every trace before it has ended (so no detach overlaps a measured
load). Inside attached_across_runs() (one storlab invocation) a trace made `across_runs` is not ended:
its process stays attached, each run sets its filter and reads and clears the maps, and the
process ends with the block, so it compiles and attaches once. storlab's exit waits for every
ending trace. Where bpftrace cannot run, `note` says why in one line and the caller keeps its
sampled figures."""

from __future__ import annotations

import enum
import fcntl
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
from typing import IO, Any, Iterable, Iterator

from storlab import interrupts, processes

# bpftrace prints this once every probe is attached (the switch its own test suite uses).
_ATTACHED = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"
_ATTACH_TIMEOUT_S = 60.0  # compiling takes seconds on a busy 2-core machine
_STOP_TIMEOUT_S = 30.0
_FLUSHED, _CLEARED = "storlab flushed", "storlab cleared"
_CHANNEL = 8  # ids per program: its flush, then one per filter map
# Each program's first id, above any pid: two programs running at once are told apart.
_CHANNELS = itertools.count(1 << 30, _CHANNEL)
_MAP = re.compile(r"@(\w+)")
TRACEFS = Path("/sys/kernel/tracing")
_mounting = threading.Lock()
OFF = "traces turned off (--no-trace)"

Key = tuple[str, ...]
# map name (no @) -> key -> a number, a histogram {lower bound: count}, or stats {count, average, total}
Maps = dict[str, dict[Key, Any]]


class Tracing(enum.Enum):
    """What a run traces with bpftrace, each level all of the one before and more: OFF, nothing
    (--no-trace: the sampled figures only); ON, the default (PostgreSQL's lock waits, checkpoints and
    WAL switches, the IO sizes: inside the lab's 1 % budget); IO, also every LWLock wait and each
    file's writes and syncs (--trace-io: about 3 % of the instance's CPU on a CPU-bound insert load);
    READS, also every read of a data file (--trace-reads: a trap on every 8 kB read, which made a cold
    scan 16 to 29 % slower). The costs: benchmarks/probe_overhead.py, docs/explaining.md."""

    OFF = "off"
    ON = "on"
    IO = "io"
    READS = "reads"


# Traces read and ending in the background (their probes detaching), until each is reaped.
_ending: list[threading.Thread] = []
_ending_lock = threading.Lock()
# While attached_across_runs() is open: the programs left attached for the next run, by (command, program, filters).
_attached: dict[tuple[str, str, tuple[str, ...]], "_Bpftrace"] | None = None


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


def _channelled(program: str, caller: int, base: int, filters: tuple[str, ...]) -> str:
    """`program` with the probes on `caller`'s kill(base..., n) calls: the flush (print, then clear,
    every map; the filters are cleared, not printed) and one per filter map."""
    names = sorted(set(_MAP.findall(program)) | set(filters))
    prints = " ".join(f"print(@{name});" for name in names if name not in filters)
    clears = " ".join(f"clear(@{name});" for name in names)
    call = f"tracepoint:syscalls:sys_enter_kill /pid == {caller} && args->pid == "
    sets = "".join(f"{call}{base + 1 + k}/ {{ @{name}[(uint64)args->sig] = 1; }}\n" for k, name in enumerate(filters))
    # print() and clear() are done by bpftrace itself, in the order asked: the second line says both are.
    return (f"{program}\n{sets}{call}{base} && args->sig == 0/ {{ {prints} printf(\"{_FLUSHED} {base}\\n\"); "
            f"{clears} printf(\"{_CLEARED} {base}\\n\"); }}\n")


def appended_output() -> IO[bytes]:
    """A file for a child's output, read while the child writes it. The child writes where the file's
    offset is, and a read here moves that same offset (the two share one open file): opened for
    appending, every write goes to the end, never over what a read here has just moved back to (a
    run's flush then found the run before's maps where its own should have been)."""
    output = tempfile.TemporaryFile()
    fd = output.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    return output


def read_since(output: IO[bytes], offset: int) -> bytes:
    """What the child has written to `output` from `offset` on, read without moving the file's offset."""
    fd = output.fileno()
    return os.pread(fd, max(0, os.fstat(fd).st_size - offset), offset)


def _call(id_: int, n: int) -> None:
    try:
        os.kill(id_, n)  # no such process: only the programs' own probes see the call
    except ProcessLookupError:
        pass


def wait_ended() -> None:
    """Every trace read so far has exited and been reaped."""
    while True:
        with _ending_lock:
            if not _ending:
                return
            thread = _ending[0]
        thread.join()
        with _ending_lock:
            if thread in _ending:
                _ending.remove(thread)


@interrupts.owning
def attached_across_runs() -> Iterator[None]:
    """One invocation's runs: the traces made `across_runs` inside compile and attach once and end
    (in the background) on the way out, on every way out."""
    global _attached
    if _attached is not None:  # inside one already: that one ends them
        yield
        return
    _attached = {}
    try:
        yield
    finally:
        attached, _attached = _attached, None
        for running in attached.values():
            running.end()


class _Bpftrace:
    """One bpftrace process running a program with its channel."""

    def __init__(self, program: str, command: str, filters: tuple[str, ...]):
        if len(filters) >= _CHANNEL:
            raise ValueError(f"at most {_CHANNEL - 1} filter maps, not {len(filters)}")
        self.base = next(_CHANNELS)
        self.filters = filters
        self.argv = [command, "-f", "json", "-e", _channelled(program, os.getpid(), self.base, filters)]
        self.note = ""
        self.busy = False  # a run's filter is set and its maps not yet read
        self.proc: subprocess.Popen | None = None
        self._output: IO[bytes] | None = None
        self._read_from = 0  # where the next run's output starts
        # The output from _read_from on, as far as it has been read: each poll reads only what was
        # written since the one before, so a long run's maps, printed over many polls, are read once.
        self._unread = bytearray()

    def start(self) -> bool:
        """Attached (True), or not (`note` says why, nothing left running)."""
        # A file, not a pipe: nothing has to read while the workload runs, and it vanishes on close.
        self._output = appended_output()
        # Killed by the kernel if storlab dies: tied to the starting thread, so start it from one that lives.
        self.proc = processes.start(self.argv, stdin=subprocess.DEVNULL, stdout=self._output,
                                    stderr=subprocess.STDOUT, env={**os.environ, _ATTACHED: "1"})
        try:
            attached = self._wait_for(_ATTACHED.encode(), _ATTACH_TIMEOUT_S, "at start", "attach") is not None
            wait_ended()  # the traces before it end while it compiles and attaches, never during the load
        except BaseException:
            self.kill()
            raise
        return attached

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def set(self, filters: dict[str, list[int]]) -> None:
        """The run's filter, in the kernel once this returns (a probe on a system call runs in it)."""
        for k, name in enumerate(self.filters):
            for pid in filters.get(name, ()):
                _call(self.base + 1 + k, int(pid))
        self.busy = True

    def flush(self) -> Maps | None:
        """The maps as they are now, then cleared with the filter; None (`note` says why, the process
        killed) when bpftrace could not print them."""
        _call(self.base, 0)
        marker = f"{_FLUSHED} {self.base}".encode()
        flushed = self._wait_for(marker, _STOP_TIMEOUT_S, "before it printed its maps", "print its maps")
        cleared = self._wait_for(f"{_CLEARED} {self.base}".encode(), _STOP_TIMEOUT_S, "before it cleared its maps",
                                 "clear its maps", after=len(flushed)) if flushed is not None else None
        if cleared is None:
            return None
        self._read_from += len(cleared)
        del self._unread[:len(cleared)]
        self.busy = False
        try:
            return parse(flushed[:flushed.rfind(b"\n", 0, -1) + 1].decode(errors="replace"))  # the lines before the flush line
        except ValueError as exc:
            self.note = f"bpftrace's output could not be read: {exc}"
            return None

    def _wait_for(self, line: bytes, timeout_s: float, when: str, what: str, after: int = 0) -> bytes | None:
        """The output since the last run's, up to and with the whole line holding `line` (found from
        `after` on); None (`note` says why, the process killed) when bpftrace exited first or did not
        print it in time. Each byte is read and searched once, however many polls the printing takes."""
        deadline = time.monotonic() + timeout_s
        at, searched = -1, after
        while time.monotonic() < deadline:
            self._unread += read_since(self._output, self._read_from + len(self._unread))
            if at < 0:
                at = self._unread.find(line, searched)
                # Not found: the line may still start in the last len(line) - 1 bytes, cut by the read.
                searched = max(searched, len(self._unread) - len(line) + 1) if at < 0 else at + len(line)
            if at >= 0:
                end = self._unread.find(b"\n", searched)
                if end >= 0:
                    return bytes(self._unread[:end + 1])
                searched = len(self._unread)
            if self.proc.poll() is not None:
                said = _last_error(self._unread.decode(errors="replace"))
                self.note = f"bpftrace exited {when} (exit {self.proc.returncode}): {said}"
                self.kill()
                return None
            time.sleep(0.005)
        self.note = f"bpftrace did not {what} within {timeout_s:.0f} s"
        self.kill()
        return None

    def end(self) -> None:
        """Interrupt the process and reap it from a thread of its own (not a daemon: storlab's exit
        waits for it); SIGKILL if it has not exited within the stop timeout."""
        if self.proc is not None:
            thread = threading.Thread(target=processes.stop, args=(self.proc, signal.SIGINT, _STOP_TIMEOUT_S),
                                      name=f"bpftrace {self.proc.pid} ending")
            with _ending_lock:
                _ending.append(thread)
                thread.start()
            self.proc = None
        self.kill()

    def kill(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc, signal.SIGKILL)
            self.proc = None
        if self._output is not None:
            self._output.close()
            self._output = None


class Trace:
    """One run's trace: start(), then stop() for the maps (None when the trace failed: `note` says
    why), or kill() on a way out that wants nothing. `filters`: the pids to put in each filter map
    the program tests (@name[pid]). `across_runs`: inside attached_across_runs(), the process stays attached for
    the next run of the same program (while it runs another's, this one starts its own). `bpftrace`
    None: traces turned off."""

    def __init__(self, program: str, bpftrace: str | None = "bpftrace", filters: dict[str, Iterable[int]] | None = None,
                 across_runs: bool = False):
        self.program = program
        self.bpftrace = bpftrace
        self.filters = {name: sorted(set(pids)) for name, pids in (filters or {}).items()}
        self.across_runs = across_runs
        self.note = ""
        self._running: _Bpftrace | None = None

    @property
    def running(self) -> bool:
        return self._running is not None

    @property
    def pid(self) -> int | None:
        return self._running.proc.pid if self._running is not None and self._running.proc is not None else None

    def start(self) -> None:
        reason = why_not(self.bpftrace)
        if reason is not None:
            self.note = reason
            return
        key = (self.bpftrace, self.program, tuple(self.filters))
        attached = _attached if self.across_runs else None
        running = attached.get(key) if attached is not None else None
        if running is not None and not running.alive:  # it exited since the last run: replaced
            running.kill()
            del attached[key]
            running = None
        if running is None or running.busy:
            running = _Bpftrace(self.program, self.bpftrace, key[2])
            if not running.start():
                self.note = running.note
                return
            if attached is not None and key not in attached:
                attached[key] = running
        self._running = running
        try:
            running.set(self.filters)
        except BaseException:
            self.kill()
            raise

    def _attached_here(self) -> bool:
        return _attached is not None and self._running is not None and self._running in _attached.values()

    def stop(self) -> Maps | None:
        """The run's maps (None, and `note`, when bpftrace could not print them); a process not left
        attached for the next run ends in the background."""
        if self._running is None:
            return None
        try:
            maps = self._running.flush()
            self.note = self._running.note
            return maps
        finally:
            if not self._attached_here():
                self._running.end()
            self._running = None

    def kill(self) -> None:
        """Nothing read: the process is killed, one left attached too (its maps hold this run's counts)."""
        if self._running is not None:
            if self._attached_here():
                for key, running in list(_attached.items()):
                    if running is self._running:
                        del _attached[key]
            self._running.kill()
            self._running = None


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
    """bpftrace's last error line, else its last line of text; its maps (JSON) are data, never said."""
    lines = [ln.strip() for ln in text.strip().splitlines()
             if ln.strip() and "RLIMIT_MEMLOCK" not in ln and not ln.lstrip().startswith("{")]
    errors = [ln for ln in lines if "ERROR" in ln]
    return (errors or lines or ["no output"])[-1][:300]
