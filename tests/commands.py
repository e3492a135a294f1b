"""The two ways a test runs storlab's command line (pyperf's check_command): `storlab` as a user runs it,
a child process with its own exit code, signals and output (`start` left running, `together` several
side by side); `invoke` in this process, through click; and `run_here`, `storlab run` in this process
for a test that registers a toy a child would not have. Every test that runs the command line goes
through here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result
from rich.console import Console

from storlab.cli import main
from storlab.experiment import file as experiment
from storlab.lab import instances
from storlab.probes import bpftrace
from storlab.running import runner

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


def together(*commands: tuple, timeout: float = 900, **popen) -> list[subprocess.CompletedProcess]:
    """Each of `commands` (a tuple of ARGS) as `storlab` would run it to its end, all started before any
    is waited for: commands that need not wait for each other overlap their start-up (each child
    imports storlab anew). In the order given; whatever is still running when one fails is killed."""
    children = [start(*args, stdout=subprocess.PIPE, **popen) for args in commands]
    try:
        done = []
        for child in children:
            out, err = child.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(child.args, child.returncode, out, err))
        return done
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def invoke(*args) -> Result:
    """`storlab ARGS…` in this process: quicker, for commands that start no server."""
    return CliRunner().invoke(main, [str(a) for a in args])


def run_here(path: Path, folder: Path, tracing: bpftrace.Tracing = bpftrace.Tracing.OFF) -> runner.RunOutcome:
    """`storlab run PATH --out FOLDER` in this process, untraced unless asked. Its servers and traces end
    in the background, as they do when storlab exits; they are waited for here, so the next test in this
    process finds none of them among its children."""
    try:
        return runner.run(experiment.load(path), folder, keep=False, console=Console(quiet=True), tracing=tracing)
    finally:
        instances.wait_ended()
        bpftrace.wait_ended()
