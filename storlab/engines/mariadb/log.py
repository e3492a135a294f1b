"""MariaDB's server log, read for a failed run: a line's message without its timestamp and thread id,
which lines say something went wrong, and which a healthy server writes too."""

from __future__ import annotations

import re
from typing import Any, Callable

_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d\s+[\d:]+\s+\d+\s+")
_ROUTINE = re.compile(r"^\[ERROR\] Aborting")  # said after the error that stopped it


def message(line: str) -> str:
    """A log line without its timestamp and thread id."""
    return _PREFIX.sub("", line).strip()


class MariadbLog:
    stop_levels = (("[ERROR]",),)

    def __init__(self, blamed: Callable[[str, dict[str, Any]], str | None]):
        self.blamed = blamed

    def message(self, line: str) -> str:
        return message(line)

    def severe(self, line: str) -> bool:
        return line.startswith("[ERROR]")

    def routine(self, line: str) -> bool:
        return bool(_ROUTINE.search(line))
