"""What PostgreSQL's probes cost a load, as benchmarks/ measured them on the 2-core VM storlab is
developed on (docs/explaining.md, "What the probes cost", gives every figure and its command): the
collector pg_wait_sampling runs from the server's start, the samplers storlab reads during a run, the
traces bpftrace attaches (the IO sizes' among them on a device placement)."""

from __future__ import annotations

from storlab.engines.postgres.instance import WaitSamplingProbe
from storlab.probes.costs import Cost
from storlab.probes.traced_waits import COUNTED

COLLECTOR = Cost("pg_wait_sampling's collector",
                 "its own CPU +0.254 % [+0.245, +0.263] of the instance's, throughput x0.986 [0.966, 1.006]",
                 "benchmarks/instrumentation_overhead.py --engine postgres --rounds 30")
SAMPLERS = Cost("the samplers", "+0.29 % of the machine's CPU [+0.07, +0.51]",
                "benchmarks/probe_overhead.py --probes waiting_tasks:x10,wait-timeline:x10, a tenth of each")
# PostgreSQL 18 from the wheel has no pg_wait_sampling: its samplers read pg_stat_activity every 50 ms.
ACTIVITY = Cost("the samplers (pg_stat_activity every 50 ms)", "throughput x0.999 [0.965, 1.033]",
                "benchmarks/probe_overhead.py --engines postgres --postgres-version 18 --probes untraced --rounds 30")
TRACES = Cost("the traces", "+0.20 % [+0.17, +0.23] of the instance's CPU",
              "benchmarks/probe_overhead.py --engines postgres --probes all")
TRACES_IO = Cost("the traces with --trace-io", "+2.89 % [+2.60, +3.22] of the instance's CPU",
                 "benchmarks/probe_overhead.py --engines postgres --probes trace-io")
READS = Cost("the reads' trace (--trace-reads)", "a cold scan 16 to 29 % slower",
             "a 300 MB cold scan with and without it")


def of_run(source: str, tracing: str | None) -> tuple[Cost, ...]:
    """The costs a run paid, from its wait source (pg_wait_sampling, or PostgreSQL 18's sampling of
    pg_stat_activity, which no collector runs for; whether bpftrace counted) and its tracing level."""
    paid = [COLLECTOR, SAMPLERS] if source.startswith(WaitSamplingProbe.source) else [ACTIVITY]
    if COUNTED in source:
        paid += {"reads": [TRACES_IO, READS], "io": [TRACES_IO]}.get(tracing or "", [TRACES])
    return tuple(paid)
