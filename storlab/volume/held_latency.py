"""Whether a declared latency held: a fio job through the delay layer against the same job on the
device alone. The layer adds its time after the device's own, so a job should see the declared
latency plus the device's: p50 within 10 %, p99 within 20 %, and at a queue depth above 1 the IOPS
Little's law gives (depth / mean latency) within 15 %."""

from __future__ import annotations

import math
from dataclasses import dataclass

from storlab.lab.latency import Latency

P50_WITHIN = 0.10
P99_WITHIN = 0.20
IOPS_WITHIN = 0.15


@dataclass(frozen=True)
class Held:
    """One job's verdict, and the flag that says it."""

    held: bool
    flag: str


def mean_ms(declared: Latency) -> float:
    """The declared distribution's mean: the lognormal's p50 * exp(sigma^2 / 2)."""
    if declared.fixed:
        return declared.p50_ms
    return declared.p50_ms * math.exp(declared.sigma**2 / 2)


def judge(direction: str, declared: Latency, depth: int, own: tuple[float, float, float],
          seen: tuple[float, float, float], cap_iops: float | None = None, own_tail: bool = True) -> Held:
    """`own` and `seen`: (p50 ms, p99 ms, IOPS) of the job on the device alone and through the layer;
    `cap_iops`, the IO cap on the job's direction where the placement has one (a volume class: its cap
    and its latency at once). Where the cap is tighter than what the latency allows at this depth,
    the job measures the cap: its IOPS are judged against it, its percentiles are the cap's queue.
    `own_tail` False: the job alone waited in a bucket's queue, so its p99 is not the device's and the
    p99 through the layer is not judged."""
    free_iops = depth / ((mean_ms(declared) + own[0]) / 1000)
    if cap_iops is not None and free_iops > cap_iops:
        off = seen[2] / cap_iops - 1
        held = abs(off) <= IOPS_WITHIN
        return Held(held, f"latency: {direction} {declared.text()} declared, at depth {depth} under the cap: "
                          f"{seen[2]:,.0f} IOPS against the cap's {cap_iops:,.0f} ({off:+.0%}), the latency alone would "
                          f"allow {free_iops:,.0f}: {'held' if held else 'not held'}")
    want50, want99 = declared.p50_ms + own[0], declared.p99_ms + own[1]
    off50, off99 = seen[0] / want50 - 1, seen[1] / want99 - 1
    parts = [f"p50 {seen[0]:.3f} ms against {want50:.3f} ({off50:+.0%})",
             f"p99 {seen[1]:.3f} ms against {want99:.3f} ({off99:+.0%})" if own_tail else
             f"p99 {seen[1]:.3f} ms not judged (the job alone ran its bucket dry: its tail was the bucket's queue)"]
    held = abs(off50) <= P50_WITHIN and (abs(off99) <= P99_WITHIN or not own_tail)
    if depth > 1:
        # Little's law: `depth` IOs always in flight, each taking the declared mean on top of the
        # device's own mean time at that depth (depth / its IOPS).
        want_iops = depth / (mean_ms(declared) / 1000 + depth / own[2])
        off_iops = seen[2] / want_iops - 1
        parts.append(f"{seen[2]:,.0f} IOPS against {want_iops:,.0f} ({off_iops:+.0%})")
        held = held and abs(off_iops) <= IOPS_WITHIN
    verdict = "held" if held else "not held"
    return Held(held, f"latency: {direction} {declared.text()} declared, plus the device's own: "
                      f"{', '.join(parts)}: {verdict}")
