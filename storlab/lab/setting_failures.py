"""Which of a cell's engine_settings made its run fail, when the server started with it but every run
fails because of it (a statement timeout of 1 ms, read-only transactions, huge pages the machine
does not have): the failure's words, in the error or the server's log, are matched against the
engine's table of symptoms (storlab/engines/<engine>/symptoms.py). A setting blamed so stops the
experiment at its first failure, named, as one the server refuses at start does."""

from __future__ import annotations

import re
from typing import Any


def caused_by(symptoms: tuple[tuple[str, str], ...], text: str, settings: dict[str, Any]) -> tuple[str, str] | None:
    """(the setting as the experiment spells it, the line that shows it) when `text` (the error and
    the server's log) shows one of `symptoms` (an engine's table: setting, pattern) of one of
    `settings`; None otherwise."""
    spelled = {name.lower().replace("-", "_"): name for name, value in (settings or {}).items()
               if not _turned_off(value)}
    if not spelled:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for setting, pattern in symptoms:
        if setting not in spelled:
            continue
        symptom = re.compile(pattern, re.IGNORECASE)
        line = next((line for line in lines if symptom.search(line)), None)
        if line is not None:
            return spelled[setting], line[:300]
    return None


def _turned_off(value: Any) -> bool:
    """A setting turned off (0, off, false, no) causes none of its symptoms: a 0 timeout is no timeout,
    huge_pages = "off" asks for none."""
    if isinstance(value, (int, float)):
        return value == 0
    return str(value).strip().lower() in ("0", "off", "false", "no")
