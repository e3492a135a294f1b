"""The size of every IO a placement's device served, per direction (seed 002's IO-size histogram).

The block layer's `block:block_rq_issue` tracepoint, through bpftrace: the kernel keeps power-of-two
histograms per device and direction in BPF maps and nothing is printed per event, so tracing costs
the workload little; bpftrace prints the maps when it is interrupted. Where tracing is impossible
(not root, no bpftrace, no tracefs, or bpftrace fails), /proc/diskstats gives the average size over
the same interval, labelled as an average: it cannot show a mix of small and large IOs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from storlab import processes
from storlab.lab import mounts

TRACED = "bpftrace"
AVERAGE = "diskstats average"
DIRECTIONS = ("read", "write")
TRACEFS = Path("/sys/kernel/tracing")
_TRACEPOINT = TRACEFS / "events/block/block_rq_issue"
# bpftrace prints this once every probe is attached (the switch its own test suite uses): IO issued
# before it would be missed.
_ATTACHED = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"
_ATTACH_TIMEOUT_S = 60.0  # compiling the program takes seconds on a busy 2-core machine
_STOP_TIMEOUT_S = 30.0
_SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own sector size

# One histogram map per direction keyed by the device; the filter keeps other devices' IO out in
# the kernel. rwbs starts with R or W, or with F (a preflush) before a write; requests without data
# (flushes) carry no bytes.
_PROGRAM = """tracepoint:block:block_rq_issue /({devices}) && args->bytes > 0/ {{
  if (strncmp(args->rwbs, "R", 1) == 0) {{ @read[args->dev] = hist(args->bytes); }}
  else if (strncmp(args->rwbs, "W", 1) == 0 || strncmp(args->rwbs, "FW", 2) == 0) {{ @write[args->dev] = hist(args->bytes); }}
}}
"""


@dataclass
class IoSizes:
    """sizes[placement][direction] maps a size in bytes to a number of requests. With source
    "bpftrace" a size is the lower bound of a power-of-two bucket ([4096, 8192) is 4096); with
    "diskstats average" each direction has one entry, the average size over the interval."""

    source: str
    sizes: dict[str, dict[str, dict[int, int]]]
    devices: dict[str, str]  # placement -> "major:minor"; placements sharing a device share its counts
    note: str = ""  # why the sizes are averages


def device_numbers(placements: dict[str, Path]) -> dict[str, str]:
    """placement -> "major:minor" of the whole disk behind it (requests are issued to the disk, not
    a partition); placements without a block device (tmpfs) are left out."""
    found = {}
    for name, path in placements.items():
        disk = mounts.block_device_of(path)
        if disk is None:
            continue
        try:
            found[name] = (Path("/sys/block") / disk / "dev").read_text().strip()
        except OSError:
            continue
    return found


def _kernel_dev(number: str) -> int:
    """The kernel's internal dev_t, as the tracepoint reports it: major in the high 12 bits, minor in the low 20."""
    major, minor = (int(part) for part in number.split(":"))
    return (major << 20) | minor


def program(numbers: list[str]) -> str:
    return _PROGRAM.format(devices=" || ".join(f"args->dev == {dev}" for dev in sorted({_kernel_dev(n) for n in numbers})))


def why_not_traced(bpftrace: str | None) -> str | None:
    """None when tracing can work; otherwise the reason, for the note beside the averages. Mounts
    tracefs where it is missing (and leaves it: it is the kernel's, shared by every tracer)."""
    if bpftrace is None:
        return "tracing turned off"
    if os.geteuid() != 0:
        return "tracing the block layer needs root"
    if shutil.which(bpftrace) is None:
        return f"{bpftrace} not found (Debian's bpftrace)"
    if not _TRACEPOINT.exists():
        done = subprocess.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], capture_output=True, text=True)
        if not _TRACEPOINT.exists():
            return f"no tracefs at {TRACEFS} ({(done.stderr.strip() or 'no block tracepoints').splitlines()[-1]})"
    return None


def _read_diskstats() -> dict[str, tuple[int, int, int, int]]:
    """"major:minor" -> (reads, sectors read, writes, sectors written)."""
    stats = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) >= 10:
            stats[f"{f[0]}:{f[1]}"] = (int(f[3]), int(f[5]), int(f[7]), int(f[9]))
    return stats


class IoSizeTracer:
    """Start before the workload, stop after it; stopped on every path as a context manager:

        with IoSizeTracer(device_numbers(placements)) as tracer:
            run_workload()
        sizes = tracer.result

    `devices` maps placement -> "major:minor"; `bpftrace` is the program to run, None to use the
    diskstats averages only."""

    def __init__(self, devices: dict[str, str], bpftrace: str | None = "bpftrace") -> None:
        self.devices = dict(devices)
        self.bpftrace = bpftrace
        self.result: IoSizes | None = None
        self._proc: subprocess.Popen | None = None
        self._output: IO[bytes] | None = None
        self._before: dict[str, tuple[int, int, int, int]] = {}
        self._note = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        self._before = _read_diskstats()
        if not self.devices:
            return
        reason = why_not_traced(self.bpftrace)
        if reason is not None:
            self._note = reason
            return
        # A file, not a pipe: nothing has to read while the workload runs, and it vanishes on close.
        self._output = tempfile.TemporaryFile()
        # Killed by the kernel if storlab dies: tied to the starting thread, so start it from one that lives.
        self._proc = processes.start(
            [self.bpftrace, "-f", "json", "-e", program(list(self.devices.values()))],
            stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT,
            env={**os.environ, _ATTACHED: "1"},
        )
        try:
            self._wait_attached()
        except BaseException:
            self._kill()
            raise

    def _wait_attached(self) -> None:
        deadline = time.monotonic() + _ATTACH_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self._text()
            if _ATTACHED in text:
                return
            if self._proc.poll() is not None:
                self._note = f"bpftrace exited at start (exit {self._proc.returncode}): {_last_error(text)}"
                self._kill()
                return
            time.sleep(0.05)
        self._note = f"bpftrace did not attach within {_ATTACH_TIMEOUT_S:.0f} s"
        self._kill()

    def _text(self) -> str:
        self._output.seek(0)
        return self._output.read().decode(errors="replace")

    def stop(self) -> IoSizes:
        """The histograms, or the averages when tracing was impossible or failed."""
        if self.result is not None:
            return self.result
        sizes = None
        if self._proc is not None:
            try:
                processes.stop(self._proc, signal.SIGINT, _STOP_TIMEOUT_S)  # bpftrace prints its maps and exits
                if self._proc.returncode == -signal.SIGKILL:
                    self._note = f"bpftrace did not stop within {_STOP_TIMEOUT_S:.0f} s"
                else:
                    sizes = self._parse(self._text())
            except ValueError as exc:
                self._note = f"bpftrace's output could not be read: {exc}"
            finally:
                self._kill()
        self.result = (IoSizes(TRACED, sizes, dict(self.devices)) if sizes is not None
                       else IoSizes(AVERAGE, self._averages(), dict(self.devices), self._note))
        return self.result

    def _kill(self) -> None:
        if self._proc is not None:
            processes.stop(self._proc, signal.SIGKILL)
            self._proc = None
        if self._output is not None:
            self._output.close()
            self._output = None

    def _parse(self, text: str) -> dict[str, dict[str, dict[int, int]]]:
        by_dev: dict[int, dict[str, dict[int, int]]] = {}
        for line in text.splitlines():
            if not line.startswith("{"):
                continue
            message = json.loads(line)
            if message.get("type") != "hist":
                continue
            for map_name, per_dev in message["data"].items():
                direction = map_name.lstrip("@")
                for dev, buckets in per_dev.items():
                    counts = by_dev.setdefault(int(dev), {d: {} for d in DIRECTIONS}).setdefault(direction, {})
                    counts.update({b["min"]: b["count"] for b in buckets if b["count"]})
        empty = {d: {} for d in DIRECTIONS}
        return {p: {d: dict(by_dev.get(_kernel_dev(n), empty)[d]) for d in DIRECTIONS} for p, n in self.devices.items()}

    def _averages(self) -> dict[str, dict[str, dict[int, int]]]:
        after = _read_diskstats()
        sizes = {}
        for placement, number in self.devices.items():
            a, b = self._before.get(number), after.get(number)
            sizes[placement] = {d: {} for d in DIRECTIONS}
            if a is None or b is None:
                continue
            for direction, (ios, sectors) in zip(DIRECTIONS, ((b[0] - a[0], b[1] - a[1]), (b[2] - a[2], b[3] - a[3]))):
                if ios > 0:
                    sizes[placement][direction] = {round(sectors * _SECTOR / ios): ios}
        return sizes

    def __enter__(self) -> "IoSizeTracer":
        self.start()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.stop()
        else:
            self._kill()


def _last_error(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and "RLIMIT_MEMLOCK" not in ln]
    return lines[-1] if lines else "no output"
