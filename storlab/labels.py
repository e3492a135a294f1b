"""How a factor and its value read wherever storlab writes them (a cell's label, the factor table, a
chart, an export's columns): short names and values no two of which print alike. Here, at the ground,
so a renderer or the store names a factor without importing the experiment file's machinery."""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r"[A-Za-z0-9_./-]+")


def short_name(dotted: str) -> str:
    """A factor's name without its section: "layout.data_files" -> "data_files"."""
    return dotted.split(".", 1)[1]


def format_value(value: Any) -> str:
    """A factor value as a user reads it: a ratio {disk=7, ram=1} as 'disk:7+ram:1'. A string that could
    be read as another value (a number, True, a ratio, text with spaces or '=') is quoted, so two
    different values never print alike, and neither do two cells' labels."""
    if isinstance(value, dict):
        return "+".join(f"{k}:{format_value(v)}" for k, v in value.items())
    if isinstance(value, str) and (not _PLAIN.fullmatch(value) or value in ("True", "False") or _number(value)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
