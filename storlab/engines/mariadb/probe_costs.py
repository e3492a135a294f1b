"""What MariaDB's probes cost a load, as benchmarks/ measured them on the 2-core VM storlab is
developed on (docs/explaining.md, "What the probes cost", gives every figure and its command):
performance_schema, which every instance storlab makes runs from its start, and the samplers storlab
reads during a run; the IO sizes' trace where a run has one (a device placement, a cold scan)."""

from __future__ import annotations

from storlab.probes.costs import Cost

PERFORMANCE_SCHEMA = Cost("performance_schema", "throughput x0.94 [0.91, 0.97]",
                          "benchmarks/instrumentation_overhead.py --engine mariadb --rounds 40, two runs pooled")
SAMPLERS = Cost("the samplers", "+0.30 % of the machine's CPU [+0.05, +0.54]",
                "benchmarks/probe_overhead.py --probes waiting_tasks:x10,wait-timeline:x10, a tenth of each")
IO_SIZES = Cost("the IO sizes' trace", "+0.06 % [+0.05, +0.06] of the instance's CPU",
                "benchmarks/probe_overhead.py --engines mariadb --probes all")


def of_run(tracing: str | None) -> tuple[Cost, ...]:
    """The costs a run paid: its traces only where it traced (not --no-trace)."""
    return (PERFORMANCE_SCHEMA, SAMPLERS) + ((IO_SIZES,) if tracing in ("on", "io", "reads") else ())
