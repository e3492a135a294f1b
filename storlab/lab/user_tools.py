"""The set-up tools storlab runs as the servers' OS user (initdb, mariadb-install-db, a server asked
for one setting): their environment, their deadline, and their failure said in one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from storlab import processes
from storlab.errors import RunFailed
from storlab.lab import safe_files
from storlab.lab.os_users import OsUser


def server_env(user: OsUser) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "MYSQL", "MARIADB"))}
    if not user.is_self:
        env.update(HOME="/tmp", USER=user.name, LOGNAME=user.name)
    return env


def run_tool(user: OsUser, argv: list[str], what: str | None = None, cwd: Path | None = None,
             timeout: float = 300, input: str | None = None) -> tuple[int, str]:
    """Run a tool as the server user (`input` on its standard input): its exit code and its output
    (stdout and stderr together). One that has not finished after `timeout` is killed, and what it
    said until then goes with the failure."""
    what = what or Path(argv[0]).name
    try:
        return processes.run(argv, timeout, input, cwd=cwd, env=server_env(user), uid=user.uid, gid=user.gid,
                             errors="replace")
    except FileNotFoundError:
        raise RunFailed(f"{what}: {argv[0]} not found") from None
    except subprocess.TimeoutExpired as exc:
        out = (exc.output or b"").decode(errors="replace")
        raise ToolFailed(f"{what}: {argv[0]} did not finish within {timeout:g} s and was stopped; its output: "
                         f"{_said(out) or 'none'}", out) from None


def _said(out: str) -> str:
    """A tool's output in one line: its first error, else its last lines."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower() or "fatal" in line.lower()), None)
    return said or " | ".join(lines[-3:])


class ToolFailed(RunFailed):
    """A set-up tool failed; its whole output goes with it, for the diagnosis."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


def run_as(user: OsUser, argv: list[str], what: str, cwd: Path | None = None, timeout: float = 300,
           input: str | None = None) -> str:
    """Run a set-up tool as `user` (initdb, mariadb-install-db: the server user); its output on failure."""
    code, out = run_tool(user, argv, what, cwd, timeout, input)
    if code != 0:
        raise ToolFailed(f"{what} failed (exit {code}): {_said(out)}", out)
    return out


def give_to(folder: Path, user: OsUser) -> None:
    """Hand a throwaway folder storlab made (and everything in it) to the server user."""
    if not user.is_self:
        safe_files.give_to(folder, user.uid, user.gid)
