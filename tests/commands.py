"""The two ways a test runs storlab's command line (pyperf's check_command): `storlab` as a user runs it,
a child process with its own exit code, signals and output; `invoke` in this process, through click."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner, Result

from storlab.cli import main

COMMAND = [sys.executable, "-m", "storlab"]


def storlab(*args, timeout: float = 900, **popen) -> subprocess.CompletedProcess:
    """`storlab ARGS…` to its end, its output as text."""
    return subprocess.run([*COMMAND, *map(str, args)], capture_output=True, text=True, timeout=timeout, **popen)


def start(*args, **popen) -> subprocess.Popen:
    """`storlab ARGS…` left running (a test signals or kills it), its errors readable."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([*COMMAND, *map(str, args)], text=True, **popen)


def invoke(*args) -> Result:
    """`storlab ARGS…` in this process: quicker, for commands that start no server."""
    return CliRunner().invoke(main, [str(a) for a in args])
