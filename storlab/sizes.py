"""Sizes and durations as users write them, one grammar each for the experiment file and the command
line. A size: a whole number with an optional binary unit K, M, G or T, optionally followed by B or
iB ("256MB", "1GiB", "64k", "4096"); every unit is a power of 1024, as PostgreSQL, MariaDB and fio
read them. A duration: a number with its unit s, m or h ("90s", "10m", "1.5h"); a bare number is
refused, seconds and minutes being both plausible. Digits are ASCII: Python reads "５" (a full-width
digit) as 5, which no engine and no user means."""

from __future__ import annotations

import json
import re

_SIZE = re.compile(r"\s*([0-9]+)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE | re.ASCII)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
NUMBER = r"\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)"  # a decimal number as written in a duration or a percentage
_DURATION = re.compile(NUMBER + r"\s*(s|m|h)\s*", re.ASCII)


def parse_size(text: object) -> int:
    """Bytes; ValueError naming the accepted forms."""
    match = _SIZE.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f'expected a size such as "256MB" or "1GB", got '
                         f'{json.dumps(text, default=str, ensure_ascii=False)}{digits_note(text)}')
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_duration(text: object) -> float:
    """Seconds, above 0; ValueError naming the accepted forms."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match and float(match[1]) > 0:
        return float(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]
    raise ValueError(f'expected a duration such as "90s", "10m" or "2h", got '
                     f'{json.dumps(text, default=str, ensure_ascii=False)}{digits_note(text)}')


def digits_note(text: object) -> str:
    """What to add to a refusal of a number written with other digits than 0 to 9 (full-width, Arabic-Indic)."""
    return " (digits are 0 to 9)" if isinstance(text, str) and any(c.isdigit() and not c.isascii() for c in text) else ""


def format_size(n: int) -> str:
    """The largest unit that keeps a whole number: 1048576 -> '1MB', 1536 -> '1536B'... '1.5KB' never."""
    for unit in ("T", "G", "M", "K"):
        if n and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}B"
    return f"{n}B"


def format_bytes(n: float, decimals: int | None = None) -> str:
    """A measured size for people, in binary units as every size storlab reads: 85 MiB, 4 KiB,
    1.5 GiB (one decimal below 10 unless `decimals` says otherwise)."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= factor:
            value = n / factor
            break
    else:
        unit, value = "B", float(n)
    places = decimals if decimals is not None else (1 if abs(value) < 10 and unit != "B" else 0)
    return f"{value:,.{places}f} {unit}"
