"""What the device and IO-size tests share: a private image directory, a small script that holds a
device pool in a child process, and the kernel's own word on what is attached and mounted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from storlab.experiment import places
from storlab.lab import owned

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices, mkfs, mount and bpftrace need root")
REPO = Path(__file__).resolve().parent.parent


def attached(image_dir: Path) -> list[str]:
    """Lines of `losetup -a` whose backing file is under image_dir."""
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if str(image_dir) in line]


def mounted(image_dir: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(image_dir) in line]


def leftovers(image_dir: Path) -> list[str]:
    return sorted(str(p) for p in image_dir.rglob("*"))


def manifests() -> list[Path]:
    return sorted(owned.state_dir().glob("*.json"))


def nothing_left(image_dir: Path) -> bool:
    return not attached(image_dir) and not mounted(image_dir) and not leftovers(image_dir) and not manifests()


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for a reaper that is not us."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return any(line.split()[1] == "Z" for line in status.splitlines() if line.startswith("State:"))


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


def child(body: str) -> subprocess.Popen:
    """A Python child running `body` (storlab importable, the test's state dir inherited), its
    output a pipe the test reads lines from."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"child exited early: {proc.wait()} {proc.stderr.read()}")
    return line.strip()


def device_spec(name: str, table: dict):
    """One device's spec from its table as an experiment file gives it (no lists): the file's validation."""
    return places.device(name, table).spec()
