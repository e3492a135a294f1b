"""The answer in the terminal: the ranking with confidence intervals, the wait tables, comparisons."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from storlab.analysis import CellResult, Results, fmt_seconds
from storlab.errors import UserError
from storlab.stats import compare


def _ci(result: CellResult) -> str:
    s = result.elapsed
    if s is None:
        return "—"
    if s.n < 2:
        return f"{fmt_seconds(s.mean)} (1 run)"
    return f"{fmt_seconds(s.mean)} ± {fmt_seconds(s.half_width)}"


def show(results: Results, console: Console) -> None:
    exp = results.experiment
    console.print(f"[bold]{exp.get('name', '?')}[/] on {exp.get('engine', '?')}: elapsed seconds, mean ± 95 % CI")
    ranking = results.ranking()
    table = Table(show_edge=False)
    for col, justify in [("#", "right"), ("cell", "left"), ("factors", "left"), ("elapsed s", "right"),
                         ("CV", "right"), ("rows/s", "right"), ("p99 txn ms", "right"), ("runs", "right"),
                         ("vs best", "right"), ("top wait", "left")]:
        table.add_column(col, justify=justify)
    for place, ranked in enumerate(ranking, 1):
        c = ranked.result
        versus = "best" if ranked.versus_best is None else (
            f"+{ranked.slower_percent:.1f} % ({ranked.versus_best.describe()})"
        )
        p99 = sum(r.latency_p99_ms for r in c.runs) / len(c.runs)
        table.add_row(
            str(place), c.cell.id, c.cell.label, _ci(c), f"{100 * c.elapsed.cv:.1f} %" if c.elapsed.n > 1 else "—",
            f"{c.rows_per_s.mean:,.0f}", f"{p99:.1f}", str(len(c.runs)), versus, c.top_wait,
        )
    for c in results.cells:
        if c.elapsed is None:
            table.add_row("", c.cell.id, c.cell.label, "—", "—", "—", "—", "0", "not run", "—")
    console.print(table)
    if ranking:
        best = ranking[0].result
        console.print(f"best: [bold]{best.cell.label}[/] ({best.cell.id}), {_ci(best)} s")
        others = [r for r in ranking[1:] if r.versus_best is not None]
        if others:
            worst = others[-1]
            factor = worst.result.elapsed.mean / best.elapsed.mean
            console.print(
                f"  {factor:.2f}x faster than the slowest cell ({worst.result.cell.label}); "
                + _significance_line(others)
            )
    if results.facts:
        console.print(facts_line(results.facts))
    for note in results.facts_notes:
        console.print(f"[yellow]warning:[/] {note}")
    for cell_id, rep, message in results.failures:
        console.print(f"[red]failed run:[/] cell {cell_id} repetition {rep}: {message}")


def facts_line(facts: dict) -> str:
    """The machine the runs were measured on, in one line."""
    cpu = facts.get("cpu", {})
    governor = cpu.get("governor") or ("unknown (virtualized)" if cpu.get("virtualized") else "unknown")
    places = "; ".join(
        f"{path}: {d.get('device') or '?'} {d.get('filesystem') or ''}".rstrip()
        for path, d in facts.get("paths", {}).items()
    )
    return f"machine: {cpu.get('model') or '?'}, {cpu.get('cores')} cores, governor {governor}; {places}"


def _significance_line(others) -> str:
    unsure = [r for r in others if not r.versus_best.significant]
    if not unsure:
        return "every difference from the best cell is significant at 95 %"
    names = ", ".join(r.result.cell.label for r in unsure[:4]) + (" …" if len(unsure) > 4 else "")
    return f"not significantly different from the best: {names}"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def wait_table(result: CellResult) -> Table:
    """The seeds' columns; a column the source cannot fill honestly shows '—'."""
    table = Table(title=f"{result.cell.label} ({result.cell.id}): waits per run, top 95 %, source {result.wait_source}",
                  show_edge=False, title_justify="left")
    for col in ("WaitType", "Wait_S", "Signal_S", "WaitCount", "Percentage", "AvgWait_S"):
        table.add_column(col, justify="left" if col == "WaitType" else "right")
    for row in result.top:
        table.add_row(
            row.wait_type, _fmt(row.wait_s), _fmt(row.signal_s), _fmt(row.wait_count, 0),
            f"{row.percentage:.2f}", _fmt(row.avg_wait_s, 6),
        )
    return table


def extras_line(result: CellResult) -> str | None:
    if not result.extras:
        return None
    parts = []
    for key, value in result.extras.items():
        name = key.removeprefix("log.")
        parts.append(f"{name} {value:,.3f}" if key.endswith("_s") else f"{name} {value:,.0f}")
    return "  beside the table (per run): " + ", ".join(parts)


def waits(results: Results, console: Console, cell: str | None = None) -> None:
    chosen = results.measured
    if cell is not None:
        found = results.cell(cell)
        if found is None:
            known = ", ".join(c.cell.id for c in results.cells)
            raise UserError(f"--cell {cell}: no such cell (cells: {known})")
        chosen = [found]
    for result in chosen:
        console.print(wait_table(result))
        line = extras_line(result)
        if line:
            console.print(line)
        console.print()


def compare_cells(results: Results, console: Console, baseline: str | None = None) -> None:
    measured = results.measured
    if not measured:
        raise UserError("no finished runs to compare yet")
    if baseline is None:
        base = measured[0]
    else:
        base = results.cell(baseline)
        if base is None or base.elapsed is None:
            raise UserError(f"--baseline {baseline}: no such cell with finished runs")
    table = Table(title=f"elapsed time against {base.cell.label} ({base.cell.id})", show_edge=False, title_justify="left")
    for col in ("cell", "factors", "elapsed s", "change", "p", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "factors", "verdict") else "right")
    for c in measured:
        if c is base:
            table.add_row(c.cell.id, c.cell.label, _ci(c), "baseline", "", "")
            continue
        cmp = compare([r.elapsed_s for r in base.runs], [r.elapsed_s for r in c.runs])
        table.add_row(c.cell.id, c.cell.label, _ci(c), f"{cmp.change_percent:+.1f} %", _fmt(cmp.p_value, 3), cmp.describe())
    console.print(table)
