"""Checks for the values of an experiment file's keys. A list value is a factor (one cell per value),
so every check accepts a scalar or a non-empty list of scalars, and its message says both."""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable, Iterable

from storlab.sizes import digits_note, parse_size

Check = Callable[[Any, str], Any]


def factor(value: Any, check: Check, what: str) -> Any:
    """`check` applied to a scalar or to each value of a list, naming `what` in the error."""
    if isinstance(value, list):
        if not value:
            raise ValueError(f"expected {what} or a list of them, got an empty list")
        return [check(v, what) for v in value]
    return check(value, what)


def optional(value: Any, check: Check, what: str) -> Any:
    """`factor` for a key that may be left out: None (not given) stays None."""
    return None if value is None else factor(value, check, what)


def values(value: Any) -> list[Any]:
    """Every value a key takes: the list of a factor, or the one constant."""
    return value if isinstance(value, list) else [value]


def show(value: Any, limit: int = 80) -> str:
    """A TOML value as the user wrote it, whatever its type (dates and times included), kept short."""
    text = json.dumps(value, ensure_ascii=False, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v))
    if isinstance(value, (datetime.date, datetime.time)):
        text = text.strip('"')
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wrong(v: Any, what: str) -> ValueError:
    return ValueError(f"expected {what} or a list of them, got {show(v)}")


def positive_int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise _wrong(v, what)
    return v


def at_most(limit: int) -> Check:
    """A positive integer no larger than `limit` (limits keep a plan finite: docs/experiment-file.md, "Limits")."""

    def check(v: Any, what: str) -> int:
        v = positive_int(v, what)
        if v > limit:
            raise ValueError(f"{v:,} is more than the limit of {limit:,}")
        return v

    return check


def seconds(limit: float) -> Check:
    """A number of seconds from 0 to `limit`."""

    def check(v: Any, what: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= limit:
            raise _wrong(v, what)
        return float(v)

    return check


def non_negative_int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _wrong(v, what)
    return v


def choice(choices: Iterable[Any]) -> Check:
    allowed = tuple(choices)

    def check(v: Any, what: str) -> Any:
        if isinstance(v, (bool, dict, list)) or v not in allowed:
            raise _wrong(v, what)
        return v

    return check


def size_text(v: Any, what: str) -> str:
    """A size as written ("1GB"), kept as text so the experiment's identity reads as the file did."""
    try:
        parse_size(v)
    except ValueError:
        raise ValueError(f"expected {what} or a list of them, got {show(v)}{digits_note(v)}") from None
    return v


def text(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise _wrong(v, what)
    return v



class KeyProblem(ValueError):
    """A problem that knows which key of the experiment file it belongs to, for `FILE:LINE: KEY:`."""

    def __init__(self, loc: tuple[str, ...], message: str):
        super().__init__(message)
        self.loc = loc
