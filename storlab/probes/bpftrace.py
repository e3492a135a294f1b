"""One bpftrace program as a child of storlab, for the probes that count in the kernel: started and
attached before the load, interrupted after it (bpftrace then prints its maps once, as JSON), killed
on every other path. Nothing is printed per event: counts, sums and power-of-two histograms stay in
BPF maps while the workload runs. Where bpftrace cannot run, `note` says why in one line and the
caller keeps its sampled figures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import IO, Any

from storlab import processes

# bpftrace prints this once every probe is attached (the switch its own test suite uses).
_ATTACHED = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"
_ATTACH_TIMEOUT_S = 60.0  # compiling takes seconds on a busy 2-core machine
_STOP_TIMEOUT_S = 30.0

Key = tuple[str, ...]
# map name (no @) -> key -> a number, a histogram {lower bound: count}, or stats {count, average, total}
Maps = dict[str, dict[Key, Any]]


def why_not(bpftrace: str) -> str | None:
    """None when bpftrace can be started here; otherwise why not."""
    if os.geteuid() != 0:
        return "tracing needs root"
    if shutil.which(bpftrace) is None:
        return f"{bpftrace} not found (Debian's bpftrace)"
    return None


class Trace:
    """Use as start(), then stop() for the maps (None when the trace failed: `note` says why), or
    kill() on a way out that wants nothing."""

    def __init__(self, program: str, bpftrace: str = "bpftrace"):
        self.program = program
        self.bpftrace = bpftrace
        self.note = ""
        self._proc: subprocess.Popen | None = None
        self._output: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None

    def start(self) -> None:
        reason = why_not(self.bpftrace)
        if reason is not None:
            self.note = reason
            return
        # A file, not a pipe: nothing has to read while the workload runs, and it vanishes on close.
        self._output = tempfile.TemporaryFile()
        # Killed by the kernel if storlab dies: tied to the starting thread, so start it from one that lives.
        self._proc = processes.start(
            [self.bpftrace, "-f", "json", "-e", self.program],
            stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT,
            env={**os.environ, _ATTACHED: "1"},
        )
        try:
            self._wait_attached()
        except BaseException:
            self.kill()
            raise

    def _wait_attached(self) -> None:
        deadline = time.monotonic() + _ATTACH_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self._text()
            if _ATTACHED in text:
                return
            if self._proc.poll() is not None:
                self.note = f"bpftrace exited at start (exit {self._proc.returncode}): {_last_error(text)}"
                self.kill()
                return
            time.sleep(0.05)
        self.note = f"bpftrace did not attach within {_ATTACH_TIMEOUT_S:.0f} s"
        self.kill()

    def _text(self) -> str:
        self._output.seek(0)
        return self._output.read().decode(errors="replace")

    def stop(self) -> Maps | None:
        """SIGINT: bpftrace prints its maps and exits. None (and `note`) when it could not."""
        if self._proc is None:
            return None
        try:
            processes.stop(self._proc, signal.SIGINT, _STOP_TIMEOUT_S)
            if self._proc.returncode == -signal.SIGKILL:
                self.note = f"bpftrace did not stop within {_STOP_TIMEOUT_S:.0f} s"
                return None
            return parse(self._text())
        except ValueError as exc:
            self.note = f"bpftrace's output could not be read: {exc}"
            return None
        finally:
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
            if not isinstance(values, dict):  # a map without a key
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
