"""PostgreSQL's server log, read for a failed run: a line's message without its timestamp and pid,
which lines say something went wrong, and which a healthy server writes too."""

from __future__ import annotations

import re
from typing import Any, Callable

_PREFIX = re.compile(r"^.*?\[\d+\]\s+")
_SETTING = re.compile(r'parameter "|configuration file')
# A client knocking while it starts, the shutdown storlab asked for, a client gone.
_ROUTINE = re.compile(r"database system is (starting up|shutting down|in recovery mode)|administrator command|"
                      r"contains errors|could not send data to client")


def message(line: str) -> str:
    """A log line without its timestamp and pid ("FATAL:  x" as "FATAL: x")."""
    return re.sub(r"^([A-Z]+):\s+", r"\1: ", _PREFIX.sub("", line).strip())


class PostgresLog:
    stop_levels = (("PANIC:",), ("FATAL:",))

    def __init__(self, blamed: Callable[[str, dict[str, Any]], str | None]):
        self.blamed = blamed

    def message(self, line: str) -> str:
        return message(line)

    def severe(self, line: str) -> bool:
        return line.startswith(("PANIC:", "FATAL:", "ERROR:")) or (line.startswith("LOG:") and bool(_SETTING.search(line)))

    def routine(self, line: str) -> bool:
        return bool(_ROUTINE.search(line))
