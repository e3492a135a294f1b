"""A load generator of the field (pgbench, sysbench) runs on the machine it tests: its CPU is recorded
beside the server's, and `show` says where the client, not the storage, may bound the figure: where
its threads were busy most of the run (it could not send faster), or where the machine's CPU was
nearly all used and the client took a good part of it (the server waited for a core the client held)."""

from __future__ import annotations

from storlab.answer.analysis import Results
from storlab.workloads import rates

BUSY_THREADS_PERCENT = 80.0
BUSY_MACHINE_PERCENT = 85.0
CLIENT_PART_PERCENT = 20.0


def lines(results: Results) -> list[str]:
    """One line of the client's and the server's CPU, and one for each cell the client may bound."""
    measured = [c for c in results.measured if rates.CLIENT_SHARE.name in c.figures and rates.SERVER_SHARE.name in c.figures]
    if not measured:
        return []
    client = max(c.figures[rates.CLIENT_SHARE.name].mean for c in measured)
    server = max(c.figures[rates.SERVER_SHARE.name].mean for c in measured)
    out = [f"client CPU: the load generator used up to {client:.0f} % of the machine's CPU, the server up to {server:.0f} % "
           "(per cell, the mean of its runs)"]
    for c in measured:
        mine = c.figures[rates.CLIENT_SHARE.name].mean
        theirs = c.figures[rates.SERVER_SHARE.name].mean
        busy = c.figures[rates.CLIENT_THREADS_BUSY.name].mean if rates.CLIENT_THREADS_BUSY.name in c.figures else 0.0
        if busy >= BUSY_THREADS_PERCENT:
            why = f"its threads were busy {busy:.0f} % of the run"
        elif mine + theirs >= BUSY_MACHINE_PERCENT and mine >= CLIENT_PART_PERCENT:
            why = f"client {mine:.0f} % and server {theirs:.0f} % of the machine's CPU"
        else:
            continue
        out.append(f"  {c.cell.label} ({c.cell.id}): the client's CPU, not the storage, may bound this figure: {why}")
    return out
