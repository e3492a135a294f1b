"""What `storlab waits` shows beside the sampled waits, from the answer (model.Traced): each cell's traced
lock waits by relation (--resources) and the IO of each file of its instances (--files), per run."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from storlab.answer import model
from storlab.show.terminal import chosen


def show(answer: model.Answer, console: Console, cell: str | None, locks: bool, files: bool) -> None:
    for c in chosen(answer, cell):
        parts = (_locks(c) if locks else []) + (_files(c) if files else [])
        for part in parts:
            console.print(part)
            console.print()


def _why_not(c: model.CellWaits, what: str) -> str:
    """The sources' reasons why nothing was traced, or that nothing was recorded."""
    if c.traced.unavailable:
        return f"{c.label} ({c.cell}): no {what}: counts unavailable ({'; '.join(c.traced.unavailable)})"
    return f"{c.label} ({c.cell}): no {what} recorded with these runs"


def lock_table(title: str, locks: list[model.TracedLock]) -> Table:
    """Every traced lock wait by the relation it was on: waits, total and average per run, share of its type."""
    out = Table(title=Text(title), show_edge=False, title_justify="left")
    for col in ("WaitType", "Resource", "WaitCount", "Wait_S", "AvgWait_S", "Share"):
        out.add_column(col, justify="left" if col in ("WaitType", "Resource") else "right")
    previous = None
    for t in locks:
        out.add_row(t.wait_type if t.wait_type != previous else "", t.resource or "—", f"{t.waits:,.1f}",
                    f"{t.seconds:.4f}", f"{t.seconds / t.waits:.6f}", f"{t.share:.1f} %")
        previous = t.wait_type
    return out


def _locks(c: model.CellWaits) -> list[Table | Text]:
    found = c.traced
    if found.locks:
        return [lock_table(f"{c.label} ({c.cell}): every lock wait traced, by relation, per run "
                           f"(bpftrace, {found.runs_with_locks} of {found.runs} runs)", found.locks)]
    if found.runs_with_locks:
        return [Text(f"{c.label} ({c.cell}): the trace counted no lock wait")]
    if found.unavailable:
        return [Text(_why_not(c, "traced lock waits"))]
    return []  # recorded where no engine trace runs (MariaDB), or before storlab traced


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.3f}"


def _bound(seconds: float | None) -> str:
    return "—" if seconds is None else f"≤{seconds * 1000:.3g}"


def _count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e6:,.2f}"


def file_table(title: str, rows: list[model.FileRow]) -> Table:
    """The seeds' per-file question: where the reads and writes went and what each file's IO cost.
    Files by their own name (the full path is in the export); times in ms, p99 the upper bound of
    the histogram's power-of-two bucket holding it; "—" for what the records did not measure."""
    out = Table(title=Text(title), show_edge=False, title_justify="left")
    for col in ("Object", "File", "Placement", "Reads", "Read_MB", "AvgRead", "p99Read", "Writes", "Write_MB",
                "AvgWrite", "p99Write", "Syncs", "AvgSync"):
        named = col in ("Object", "File", "Placement")
        out.add_column(col, justify="left" if named else "right", overflow="fold" if named else "ellipsis")
    for f in rows:
        named = [f"{f.others} others", "", ""] if f.others else [f.object, Path(f.file).name, f.placement or "—"]
        out.add_row(*named, _count(f.reads), _mb(f.read_bytes), _ms(f.read_avg_s), _bound(f.read_p99_bound_s),
                    _count(f.writes), _mb(f.write_bytes), _ms(f.write_avg_s), _bound(f.write_p99_bound_s),
                    _count(f.syncs), _ms(f.sync_avg_s))
    return out


def _files(c: model.CellWaits) -> list[Table | Text]:
    found = c.traced
    if not found.files:
        if not found.unavailable and found.io_traced_by_default:
            return [Text(f"{c.label} ({c.cell}): no per-file IO: its runs read no block from a file "
                         "and traced the default (each file's writes and syncs are traced with storlab run --trace-io)")]
        return [Text(_why_not(c, "per-file IO"))]
    return [file_table(f"{c.label} ({c.cell}): IO per file, per run ({found.files_source}, {found.runs_with_files} of "
                       f"{found.runs} runs); stall times in ms, p99 as the bound of its power-of-two bucket", found.files)]
