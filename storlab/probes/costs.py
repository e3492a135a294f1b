"""What a run's probes cost the load they watch, as the benchmarks measured them on the 2-core VM
storlab is developed on (docs/explaining.md, "What the probes cost"). Each engine says which of its
probes a run had, from what the run recorded (storlab.engines.base.Engine.probe_costs); the answer
prints their costs beside the runs that paid them, so the lab's share of a figure is in sight of it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """One probe's (or one set's) cost, as a benchmark measured it."""

    what: str  # the probes: "pg_wait_sampling's collector"
    figure: str  # how much, with its 95 % interval, in the benchmark's own terms
    measured: str  # the command that measured it (docs/explaining.md gives its figures)

    def __str__(self) -> str:
        return f"{self.what}: {self.figure}"


def line(paid: list[tuple[Cost, ...]]) -> str | None:
    """One line: the costs each run paid, and how many runs paid each set where runs differ (a cell
    run with --no-trace, a version without pg_wait_sampling)."""
    counted = Counter(costs for costs in paid if costs)
    if not counted:
        return None
    parts = ["; ".join(map(str, costs)) + ("" if len(counted) == 1 else f" ({n} run{'s' if n > 1 else ''})")
             for costs, n in counted.items()]
    return "what the probes cost (95 % CI, measured on a 2-core VM: docs/explaining.md): " + " | ".join(parts)
