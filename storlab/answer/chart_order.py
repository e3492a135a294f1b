"""The order every per-cell chart draws the cells in: grouped by the other factors, the swept factor
(the x axis of the headline chart) rising within each group, so "as files are added" reads from top
to bottom. Computed once here for the answer; the report only follows it."""

from __future__ import annotations

from storlab.answer.analysis import CellResult, Results
from storlab.experiment.swept import nested_in


def swept_factor(results: Results) -> str | None:
    """The x axis: data_files when it is a factor (the seeds' graph), else the first numeric factor."""
    factors = results.factors
    if "layout.data_files" in factors and len(factors["layout.data_files"]) > 1:
        return "layout.data_files"
    for name, values in factors.items():
        if len(values) > 1 and nested_in(name) is None and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return name
    return None


def in_factor_order(results: Results) -> list[CellResult]:
    """The measured cells grouped by the other factors (in the file's order of their values), the swept
    factor rising within each group: "as files are added" reads from top to bottom."""
    factors = results.factors
    swept = swept_factor(results)

    def position(name: str, value) -> int:
        values = factors.get(name, [])
        return values.index(value) if value in values else len(values)

    def key(c: CellResult):
        others = tuple(position(n, v) for n, v in c.cell.factors.items() if n != swept)
        return others, position(swept, c.cell.factors.get(swept)) if swept else 0

    return sorted(results.measured, key=key)

