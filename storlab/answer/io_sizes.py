"""IO sizes per cell (seed 002's histogram), from what the io_sizes probe kept of each run: the
traced runs' requests per power-of-two bucket, averaged over those runs, and apart from them the runs
that could keep only /proc/diskstats' average size, weighted by their requests. The two are never
mixed: an average cannot be drawn as a histogram."""

from __future__ import annotations

from collections import defaultdict

from storlab.answer import model
from storlab.answer.analysis import CellResult
from storlab.probes import iosizes


def cell_sizes(c: CellResult) -> model.CellIoSizes | None:
    """One cell's IO sizes per placement and direction, per run; None when its runs kept none."""
    recorded = [rows for rows in c.io_sizes if rows]
    traced = [rows for rows in recorded if rows[0][4] == iosizes.TRACED]
    averaged = [rows for rows in recorded if rows[0][4] != iosizes.TRACED]
    buckets: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for rows in traced:
        for placement, direction, size, requests, _ in rows:
            by_size = buckets[(placement, direction)]
            by_size[size] = by_size.get(size, 0.0) + requests / len(traced)
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for rows in averaged:
        for placement, direction, size, requests, _ in rows:
            sums[(placement, direction)][0] += size * requests
            sums[(placement, direction)][1] += requests
    averages = {key: (nbytes / n, n / len(averaged)) for key, (nbytes, n) in sums.items() if n}
    sizes = [model.IoSizes(placement=placement, direction=direction, traced=dict(sorted(buckets.get(key, {}).items())),
                           average_bytes=averages[key][0] if key in averages else None,
                           average_requests=averages[key][1] if key in averages else None)
             for key in sorted({*buckets, *averages}) for placement, direction in [key]]
    if not sizes:
        return None
    return model.CellIoSizes(cell=c.cell.id, label=c.cell.label, traced_runs=len(traced), averaged_runs=len(averaged),
                             sizes=sizes)
