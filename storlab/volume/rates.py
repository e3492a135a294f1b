"""What a cap's and a bucket's rates share: IOs or MiB a second, bounded so a typo is caught (no device
reaches the bounds) and so the kernel can hold the least of them."""

from __future__ import annotations

import math
from typing import Any

MAX_IOPS = 10_000_000
MAX_MB_S = 1_000_000
MIN_MB_S = 4096 / 2**20  # a page a second: a page-sized IO waits a second for its share


def number(v: Any) -> bool:
    """A number that is one: not a boolean (TOML's true is no rate), nor inf or nan (TOML and a flag's
    float() read both)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def least_problem(rate: float, unit: str) -> str | None:
    """Why a rate (IOs, or MiB, a second) holds nothing: under a whole IO, or a 4 KiB page, a second it
    reaches the kernel as 0, which cgroup v1 reads as no cap at all."""
    least, said, counted = (1, "1 IO a second", "IOs") if unit == "iops" else \
        (MIN_MB_S, f"a 4 KiB page a second ({MIN_MB_S:g})", "bytes")
    if rate < least:
        return (f"is less than {said}, the least a cap can hold (the kernel counts whole {counted}, and reads 0 "
                "as no cap at all)")
    return None
