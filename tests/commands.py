"""The two ways a test runs storlab's command line (pyperf's check_command): `storlab` as a user runs it,
a child process with its own exit code, signals and output; `invoke` in this process, through click."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from storlab.cli import main

COMMAND = [sys.executable, "-m", "storlab"]
CHECKOUT = Path(__file__).resolve().parents[1]


def _this_checkout(popen: dict) -> dict:
    """The storlab of this checkout, whatever folder the command runs in (`cwd`): the virtual
    environment's own may be another checkout's."""
    env = popen.get("env") or os.environ
    return {**popen, "env": {**env, "PYTHONPATH": str(CHECKOUT)}}


def storlab(*args, timeout: float = 900, **popen) -> subprocess.CompletedProcess:
    """`storlab ARGS…` to its end, its output as text."""
    return subprocess.run([*COMMAND, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          **_this_checkout(popen))


def start(*args, **popen) -> subprocess.Popen:
    """`storlab ARGS…` left running (a test signals or kills it), its errors readable."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([*COMMAND, *map(str, args)], text=True, **_this_checkout(popen))


def invoke(*args) -> Result:
    """`storlab ARGS…` in this process: quicker, for commands that start no server."""
    return CliRunner().invoke(main, [str(a) for a in args])
