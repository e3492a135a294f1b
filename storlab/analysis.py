"""From the store to the answer: per-cell statistics, the ranking, wait tables, and the runs that were
recorded on different machine facts (kept apart, never averaged in silently)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from storlab import system
from storlab.engines.base import Wait
from storlab.stats import Comparison, Summary, compare, summarize
from storlab.store import CellRecord, RunRecord, Store
from storlab.waits import WaitRow, mean_per_run, top_share


@dataclass
class CellResult:
    cell: CellRecord
    runs: list[RunRecord]
    elapsed: Summary | None
    rows_per_s: Summary | None
    waits: list[Wait]
    wait_source: str
    extras: dict[str, float]

    @property
    def top(self) -> list[WaitRow]:
        return top_share(self.waits)

    @property
    def top_wait(self) -> str:
        rows = self.top
        return f"{rows[0].wait_type} {rows[0].percentage:.0f} %" if rows else "—"


@dataclass
class Ranked:
    result: CellResult
    slower_percent: float  # mean elapsed relative to the best cell
    versus_best: Comparison | None


@dataclass
class Results:
    experiment: dict[str, Any]
    cells: list[CellResult]
    set_aside: list[RunRecord] = field(default_factory=list)
    facts_notes: list[str] = field(default_factory=list)
    failures: list[tuple[str, int, str]] = field(default_factory=list)
    facts: dict | None = None

    @property
    def measured(self) -> list[CellResult]:
        return [c for c in self.cells if c.elapsed is not None]

    def cell(self, ident: str) -> CellResult | None:
        """By id, or by a unique prefix of the id."""
        matches = [c for c in self.cells if c.cell.id.startswith(ident)]
        return matches[0] if len(matches) == 1 else None

    def ranking(self) -> list[Ranked]:
        cells = sorted(self.measured, key=lambda c: c.elapsed.mean)
        if not cells:
            return []
        best = cells[0]
        best_values = [r.elapsed_s for r in best.runs]
        return [
            Ranked(
                c,
                100.0 * (c.elapsed.mean - best.elapsed.mean) / best.elapsed.mean,
                None if c is best else compare(best_values, [r.elapsed_s for r in c.runs]),
            )
            for c in cells
        ]


def _mean_extras(runs: list[RunRecord]) -> dict[str, float]:
    keys = set().union(*(r.wait_extras for r in runs)) if runs else set()
    return {k: sum(r.wait_extras.get(k, 0.0) for r in runs) / len(runs) for k in sorted(keys)}


def load(store: Store) -> Results:
    experiment = store.experiment() or {}
    all_runs = store.runs()
    facts = store.facts()
    # Runs are comparable only on the same machine facts: keep the largest group, set the others aside.
    groups = Counter(r.facts_id for r in all_runs)
    kept_facts = groups.most_common(1)[0][0] if groups else None
    notes = []
    for fid in groups:
        if fid != kept_facts:
            diffs = system.differences(facts[kept_facts]["comparable"], facts[fid]["comparable"])
            notes.append(f"{groups[fid]} runs recorded on other machine facts are set aside: " + "; ".join(diffs))
    kept = [r for r in all_runs if r.facts_id == kept_facts]
    set_aside = [r for r in all_runs if r.facts_id != kept_facts]
    cells = []
    for cell in store.cells():
        runs = [r for r in kept if r.cell_id == cell.id]
        cells.append(
            CellResult(
                cell=cell,
                runs=runs,
                elapsed=summarize([r.elapsed_s for r in runs]) if runs else None,
                rows_per_s=summarize([r.rows_per_s for r in runs]) if runs else None,
                waits=mean_per_run([store.waits(r.id) for r in runs]),
                wait_source=", ".join(sorted({r.wait_source for r in runs})) or "—",
                extras=_mean_extras(runs),
            )
        )
    return Results(
        experiment=experiment, cells=cells, set_aside=set_aside, facts_notes=notes,
        failures=store.failures(), facts=facts.get(kept_facts, {}).get("body") if kept_facts else None,
    )


def fmt_seconds(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"
