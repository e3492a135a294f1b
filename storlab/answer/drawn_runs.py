"""Which run each chart over a run's own time axis draws: the waits over time draw the run with the
median headline of the best cell (or of the cell asked for), the timelines each cell's first run.
Chosen once here for the answer; the report reads those runs' timelines as it draws them."""

from __future__ import annotations

from storlab.answer import model
from storlab.answer.analysis import CellResult, Results
from storlab.errors import UserError
from storlab.results.runs import RunRecord


def drawn(c: CellResult, run: RunRecord) -> model.DrawnRun:
    return model.DrawnRun(cell=c.cell.id, label=c.cell.label, run=run.id, repetition=run.repetition,
                          elapsed_s=run.figures.get("elapsed_s"))


def waits_over_time(results: Results, cell: str | None) -> model.DrawnRun | None:
    """The run with the median headline (of two, the lower) of the best cell, or of `cell` (an id or a
    unique prefix of one)."""
    if cell is not None:
        chosen = results.cell(cell)
        if chosen is None or chosen.headline is None:
            known = ", ".join(c.cell.id for c in results.measured)
            raise UserError(f"--cell {cell}: no such cell with finished runs (cells: {known})")
    else:
        ranking = results.ranking()
        chosen = ranking[0].result if ranking else None
    if chosen is None:
        return None
    runs = sorted(chosen.runs, key=lambda r: (r.figures.get(chosen.headline_name, 0.0), r.repetition))
    return drawn(chosen, runs[(len(runs) - 1) // 2])


def first_runs(ordered: list[CellResult]) -> list[model.DrawnRun]:
    """Each cell's first run, in the charts' order."""
    return [drawn(c, c.runs[0]) for c in ordered]
