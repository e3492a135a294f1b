"""Each kind of warning the answer holds, over the cells it concerns, in one line: what `show` prints
under the ranking by default, where the sentences per cell and per run would bury the answer (they are
behind `show --details`, in the report's tables and in `show --json`)."""

from __future__ import annotations

import dataclasses

from storlab import steady_state
from storlab.answer import client_cpu, model
from storlab.answer.analysis import Results
from storlab.answer.stats import NOISY_CV, summarize

NAMED = 4  # cells named in a line; past them, how many more


def _cells(ids: list[str], every: int) -> str:
    if len(ids) == every > 1:
        return f"all {every} cells"
    named = ", ".join(ids[:NAMED]) + (f" and {len(ids) - NAMED} more" if len(ids) > NAMED else "")
    return f"{len(ids)} cell{'s' if len(ids) != 1 else ''} ({named})"


def _concern(kind: str, ids: list[str], order: list[str], runs: int | None, of_runs: int | None, meaning: str) -> model.Concern:
    """`order`: every measured cell, the ranking's order."""
    ids = sorted(ids, key=lambda c: order.index(c) if c in order else len(order))
    counted = "" if runs is None else f", {runs} run{'s' if runs != 1 else ''}" if of_runs is None else \
        f", {runs} of {of_runs} runs"
    return model.Concern(kind=kind, cells=ids, runs=runs, of_runs=of_runs, meaning=meaning,
                         line=f"{kind}: {_cells(ids, len(order))}{counted}: {meaning}")


def of_steadiness(steadiness: model.Steadiness, order: list[str]) -> list[model.Concern]:
    """Runs not steady, too short to judge, without a checkpoint, or holding unequal numbers of them."""
    runs = [(c.cell, r) for c in steadiness.cells for r in c.runs]
    found = []
    judged = [(cell, r) for cell, r in runs if r.steady is not None]
    moved = [cell for cell, r in judged if r.steady is False]
    if moved:
        found.append(_concern("not steady", list(dict.fromkeys(moved)), order, len(moved), len(judged),
                              "their means mix two states, their verdicts hold for runs of this length only"))
    unjudged = [cell for cell, r in runs if r.steady is None and r.series]
    if unjudged:
        found.append(_concern("not judged steady", list(dict.fromkeys(unjudged)), order, len(unjudged), len(runs),
                              f"under {steady_state.MIN_POINTS} measured seconds"))
    counted = {c.cell: [r.checkpoints for r in c.runs if r.checkpoints is not None] for c in steadiness.cells}
    none = [cell for cell, n in counted.items() if n and set(n) == {0}]
    if none:
        found.append(_concern("no checkpoint", none, order, sum(len(counted[c]) for c in none),
                              sum(len(n) for n in counted.values()), "each run shorter than a checkpoint cycle"))
    unequal = [cell for cell, n in counted.items() if len(set(n)) > 1]
    if unequal:
        found.append(_concern("unequal checkpoints", unequal, order, None, None,
                              "their runs hold different numbers of checkpoints"))
    return found


def concerns(results: Results, ranking: list[model.Ranked], steadiness: model.Steadiness | None) -> list[model.Concern]:
    """What the figures are worth: runs not steady or not judged, checkpoints missing or unequal, noisy
    cells, outliers kept, cells a load generator's CPU may bound; each naming its cells in the ranking's
    order. (A failed run is said on its own, with why: storlab.answer.model.Failure.)"""
    order = [r.cell for r in ranking]
    found = []
    if steadiness is not None:
        found += of_steadiness(steadiness, order)
    noisy = [r.cell for r in ranking if r.noisy]
    if noisy:
        found.append(_concern("noisy", noisy, order, None, None,
                              f"their runs vary more than {100 * NOISY_CV:.0f} %, the rounds' drift included"))
    outliers = {c.cell.id: len(summarize(c.values()).outliers) for c in results.measured}
    outliers = {cell: n for cell, n in outliers.items() if n}
    if outliers:
        found.append(_concern("outliers kept", list(outliers), order, sum(outliers.values()),
                              sum(len(c.runs) for c in results.measured), "kept in the figures, never dropped"))
    # client_cpu says one line for the whole experiment and one more for each cell it may bound.
    bound = [c.cell.id for c in results.measured if len(client_cpu.lines(dataclasses.replace(results, cells=[c]))) > 1]
    if bound:
        found.append(_concern("client-bound", bound, order, None, None,
                              "the load generator's CPU, not the storage, may bound their figures"))
    return found
