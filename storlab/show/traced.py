"""What `storlab waits` shows beside the sampled waits: each cell's traced lock waits by relation
(--resources) and the IO of each file of its instances (--files), as means per run."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from storlab.answer.analysis import CellResult, Results
from storlab.probes import file_io, traced_waits
from storlab.probes.waits import FileIO
from storlab.probes.waits import TracedWait
from storlab.results.store import Store


@dataclass
class Traced:
    """One cell's traced waits and file IO, per run; `runs` of its runs recorded any."""

    waits: list[TracedWait]
    files: list[FileIO]
    runs_with_waits: int
    runs_with_files: int


def per_cell(store: Store, results: Results) -> dict[str, Traced]:
    found = {}
    for c in results.measured:
        waits = [store.kept(traced_waits.PROBE, r.id) for r in c.runs]
        files = [store.kept(file_io.PROBE, r.id) for r in c.runs]
        traced = [w for w in waits if w]
        with_files = [f for f in files if f]
        found[c.cell.id] = Traced(traced_waits.mean_per_run(traced), file_io.mean_per_run(with_files),
                                  len(traced), len(with_files))
    return found


def _why_not(c: CellResult, what: str) -> str:
    """The sources' reasons (from the wait source) why nothing was traced, or that nothing was recorded."""
    reasons = traced_waits.unavailable_reasons([r.wait_source for r in c.runs])
    if reasons:
        return f"{c.cell.label} ({c.cell.id}): no {what}: counts unavailable ({'; '.join(reasons)})"
    return f"{c.cell.label} ({c.cell.id}): no {what} recorded with these runs"


def show(results: Results, traced: dict[str, Traced], console: Console, cell: str | None, locks: bool,
         files: bool) -> None:
    chosen = [results.cell(cell)] if cell is not None else results.measured
    for c in chosen:
        if c is None or c.cell.id not in traced:
            continue
        parts = (_locks(c, traced[c.cell.id]) if locks else []) + (_files(c, traced[c.cell.id]) if files else [])
        for part in parts:
            console.print(part)
            console.print()


def _locks(c: CellResult, found: Traced) -> list[Table | Text]:
    title = (f"{c.cell.label} ({c.cell.id}): every lock wait traced, by relation, per run "
             f"(bpftrace, {found.runs_with_waits} of {len(c.runs)} runs)")
    table = traced_waits.lock_table(title, found.waits)
    if table is not None:
        return [table]
    if found.runs_with_waits:
        return [Text(f"{c.cell.label} ({c.cell.id}): the trace counted no lock wait")]
    if traced_waits.unavailable_reasons([r.wait_source for r in c.runs]):
        return [Text(_why_not(c, "traced lock waits"))]
    return []  # recorded where no engine trace runs (MariaDB), or before storlab traced


def _files(c: CellResult, found: Traced) -> list[Table | Text]:
    if not found.files:
        if not traced_waits.unavailable_reasons([r.wait_source for r in c.runs]) and \
                all(r.conditions.get("tracing") == "on" for r in c.runs):
            return [Text(f"{c.cell.label} ({c.cell.id}): no per-file IO: its runs read no block from a file "
                         "and traced the default (each file's writes and syncs are traced with storlab run --trace-io)")]
        return [Text(_why_not(c, "per-file IO"))]
    sources = ", ".join(sorted({f.source for f in found.files}))
    return [file_io.table(f"{c.cell.label} ({c.cell.id}): IO per file, per run ({sources}, {found.runs_with_files} of "
                          f"{len(c.runs)} runs); stall times in ms, p99 as the bound of its power-of-two bucket",
                          found.files)]
