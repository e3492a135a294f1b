"""Why a run failed, in the server's own words, read from its log before its directory is removed.

Two causes stop the whole experiment, since every later run would fail the same way: a placement that
is full (which placement, which file), and a setting of the user's that the server refuses (which
setting, and the server's message). Otherwise the first line where the server says it stopped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_NO_SPACE = re.compile(r"no space left on device|error (number )?28\b|errno:? ?28\b|disk full", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]+)"|\'([^\']+)\'')
_ABSOLUTE = re.compile(r"(?<![\w.])(/[^\s:,;'\"()]+)")
LOG_TAIL_BYTES = 256 * 1024  # of a server's log, read by safe_files.read_tail: enough for its last start and stop


class ServerLog(Protocol):
    """An engine's log grammar (its package's log.py)."""

    stop_levels: tuple[tuple[str, ...], ...]  # the prefixes of lines saying it stopped, gravest first

    def message(self, line: str) -> str:
        """The line without its timestamp and process."""

    def severe(self, line: str) -> bool:
        """A message saying something went wrong."""

    def routine(self, line: str) -> bool:
        """A message a healthy server writes too (the shutdown storlab asked for)."""

    def blamed(self, line: str, settings: dict[str, Any]) -> str | None:
        """The user's setting the message names."""


@dataclass
class Cause:
    message: str
    setting: str | None = None  # the user's setting the server refused
    placement: str | None = None  # the placement that ran out of space


def messages(log: ServerLog, text: str) -> list[str]:
    return [log.message(line) for line in text.splitlines() if line.strip()]


def _path_in(line: str) -> str | None:
    for match in _QUOTED.finditer(line):
        text = match.group(1) or match.group(2)
        if "/" in text:
            return text
    found = _ABSOLUTE.search(line)
    return found.group(1) if found else None


def no_space(lines: list[str], cwd: Path | None, roots: dict[str, Path]) -> Cause | None:
    """The first line saying a write found no space, with the placement its file is on. Relative paths
    are the server's (relative to its data directory); symbolic links (pg_wal, pg_tblspc) are followed
    while the directories still exist."""
    for line in lines:
        if not _NO_SPACE.search(line):
            continue
        path = _path_in(line)
        name = None
        if path:
            file = Path(path) if Path(path).is_absolute() or cwd is None else cwd / path
            real = Path(os.path.realpath(file))
            inside = [(len(str(root)), n) for n, root in roots.items()
                      if real == Path(os.path.realpath(root)) or Path(os.path.realpath(root)) in real.parents]
            name = max(inside)[1] if inside else None
        where = f"placement {name} ({roots[name].parent}) is full" if name else "a placement is full"
        return Cause(f"{where}: no space left on device writing {path or 'a file'} ({line})", placement=name or "?")
    return None


def rejected_setting(log: ServerLog, lines: list[str], settings: dict[str, Any]) -> Cause | None:
    """The first severe line naming one of the user's settings (or quoting one of their values)."""
    for i, line in enumerate(lines):
        if not log.severe(line) or log.routine(line):
            continue
        name = log.blamed(line, settings)
        if name is None:
            name = next((k for k, v in settings.items() if isinstance(v, str) and len(v) > 1
                         and (f'"{v}"' in line or f"'{v}'" in line)), None)
        if name is not None:
            hint = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("HINT:") else ""
            return Cause(line + (f" ({hint})" if hint else ""), setting=name)
    return None


def first_stop(log: ServerLog, lines: list[str]) -> str | None:
    """The first line where the server says it could not go on."""
    for level in log.stop_levels:
        for line in lines:
            if line.startswith(level) and not log.routine(line):
                return line
    return None


def explain(log: ServerLog, text: str, cwd: Path | None, roots: dict[str, Path], settings: dict[str, Any]) -> Cause | None:
    lines = messages(log, text)
    return no_space(lines, cwd, roots) or rejected_setting(log, lines, settings)
