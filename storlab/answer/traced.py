"""What a cell's traces counted, as the answer holds it: every lock wait by the relation it was on, and
the IO of each file of its instances, as means per run (`storlab waits --resources --files`)."""

from __future__ import annotations

from collections import defaultdict

from storlab.answer import model
from storlab.answer.analysis import CellResult
from storlab.probes import file_io, traced_waits
from storlab.probes.waits import FileIO, TracedWait

MAX_FILES = 24  # files listed per cell, the busiest first; the rest summed in one row


def _locks(traced: list[TracedWait]) -> list[model.TracedLock]:
    """The lock waits, the wait type with the most seconds first, each type's relations by their seconds."""
    locks = [t for t in traced if t.wait_type.startswith("Lock:") and t.waits]
    totals: dict[str, float] = defaultdict(float)
    for t in locks:
        totals[t.wait_type] += t.seconds
    return [model.TracedLock(wait_type=t.wait_type, resource=t.resource, waits=t.waits, seconds=t.seconds,
                             share=100.0 * t.seconds / totals[t.wait_type] if totals[t.wait_type] else 0.0)
            for t in sorted(locks, key=lambda t: (-totals[t.wait_type], t.wait_type, -t.seconds, t.resource))]


def _per_io(total: float | None, count: float | None) -> float | None:
    return total / count if total is not None and count else None


def _p99(histogram: dict[int, int]) -> float | None:
    return file_io.percentile_bound(histogram, 0.99)


def _row(f: FileIO, counted: tuple[bool, bool, bool], others: int = 0) -> model.FileRow:
    """`counted`: what its records measured (file_io.measured); None for the rest."""
    reads_counted, reads_timed, writes_counted = counted
    return model.FileRow(
        object=f.object, file=f.file, placement=f.placement, others=others,
        reads=f.reads if reads_counted else None, read_bytes=f.read_bytes if reads_counted else None,
        read_avg_s=_per_io(f.read_s, f.reads) if reads_timed else None,
        read_p99_bound_s=_p99(f.read_histogram) if reads_timed else None,
        writes=f.writes if writes_counted else None, write_bytes=f.write_bytes if writes_counted else None,
        write_avg_s=_per_io(f.write_s, f.writes) if writes_counted else None,
        write_p99_bound_s=_p99(f.write_histogram) if writes_counted else None,
        syncs=f.syncs if writes_counted else None, sync_avg_s=_per_io(f.sync_s, f.syncs) if writes_counted else None)


def file_rows(files: list[FileIO], limit: int = MAX_FILES) -> list[model.FileRow]:
    """The files that did any IO, the busiest first; past `limit` the rest summed in one row (its syncs
    left out: not every source counts them; no histogram)."""
    shown = [f for f in files if f.reads or f.writes or f.syncs]
    if len(shown) <= limit:
        return [_row(f, file_io.measured(f)) for f in shown]
    rest = shown[limit - 1:]
    every = [file_io.measured(f) for f in rest]
    summed = FileIO("", "", "", **{name: sum(getattr(f, name) for f in rest)
                                   for name in ("reads", "read_bytes", "read_s", "writes", "write_bytes", "write_s")})
    counted = tuple(any(m[i] for m in every) for i in range(3))
    return [_row(f, file_io.measured(f)) for f in shown[:limit - 1]] + [_row(summed, counted, others=len(rest))]


def traced(c: CellResult) -> model.Traced:
    with_locks = [w for w in c.traced if w]
    with_files = [f for f in c.files if f]
    files = file_io.mean_per_run(with_files)
    return model.Traced(
        runs=len(c.runs), runs_with_locks=len(with_locks), locks=_locks(traced_waits.mean_per_run(with_locks)),
        runs_with_files=len(with_files), files=file_rows(files), files_source=", ".join(sorted({f.source for f in files})),
        unavailable=traced_waits.unavailable_reasons([r.wait_source for r in c.runs]),
        io_traced_by_default=all(r.conditions.get("tracing") == "on" for r in c.runs))
