"""The report's explanation of the numbers: where each cell's time went (one stacked bar per cell, in
the order of the swept factor), the waits of one run over time under its throughput, and who waited on
what in each cell."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

import numpy as np

from storlab import timeline
from storlab.answer import model
from storlab.report.charts import OTHER, RawSeries, colours, plt, svg


def composition_chart(answer: model.Answer, png: Path) -> str | None:
    """One stacked bar per cell: seconds per run in each top wait, the rest as "other waits"."""
    by_id = {c.cell: c for c in answer.cells}
    cells = [by_id[cell] for cell in answer.chart_order if cell in by_id]
    if not any(c.waits or c.rest for c in cells):
        return None
    palette = colours(answer.waits_ranked)
    shown = [name for name in answer.waits_ranked if name in palette]
    seconds = [{**c.rest, **{w.wait_type: w.wait_s for w in c.waits}} for c in cells]
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.42 * len(cells)))
    labels = [c.label or c.cell for c in cells]
    left = np.zeros(len(cells))
    for name in shown + [OTHER]:
        if name == OTHER:
            widths = np.array([sum(s for wait, s in waits.items() if wait not in shown) for waits in seconds])
        else:
            widths = np.array([waits.get(name, 0.0) for waits in seconds])
        if not widths.any():
            continue
        ax.barh(range(len(cells)), widths, left=left, color=palette[name], label=name, height=0.7)
        left += widths
    ax.set_yticks(range(len(cells)), labels, fontsize=8)
    ax.invert_yaxis()  # the first cell on top, as the tables list them
    ax.set_xlabel("seconds waited per run (all sessions), by wait type")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.5 / (1 + len(cells))), ncol=3, frameon=False)
    ax.set_title("where the time went: waits per cell")
    return svg(fig, png)


def _edges(starts: list[float], end: float) -> list[float]:
    """Interval edges: each interval runs to the next one's start, the last to the end of the run."""
    last = max(end, starts[-1] + (starts[-1] - starts[-2] if len(starts) > 1 else 1.0) * 0.5)
    return list(starts) + [last]


def waits_over_time_chart(raw: RawSeries, answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """The answer's chosen run's throughput over its own time axis, and under it its waits stacked, in
    sessions waiting on average (seconds waited per second). Returns (caption, svg)."""
    run = answer.waits_over_time
    if run is None:
        return None
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for t, metric, value in raw.timeline(run.run):
        series[metric].append((t, value))
    waits = {timeline.WAIT.member_of(m): pts for m, pts in series.items() if timeline.WAIT.holds(m)}
    if not waits:
        return None
    end = 0.0 if run.elapsed_s is None else run.elapsed_s
    throughput = next((m for m in timeline.METRICS if m.name == answer.experiment.throughput and series.get(m.name)), None)
    title = f"{run.label}, repetition {run.repetition}: "
    if throughput:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [1, 2]})
        points = sorted(series[throughput.name])
        top.stairs([v for _, v in points], _edges([t for t, _ in points], end), color="#333", linewidth=1.4, baseline=None)
        top.set_ylabel(throughput.label)
        top.set_ylim(bottom=0)
        top.grid(alpha=0.3)
        title += "throughput, and the waits under it"
    else:  # a scan counts no rows per second: the waits alone
        fig, bottom = plt.subplots(figsize=(8, 4.5))
        top, title = bottom, title + "the waits over time"
    # From the axes' left edge, clear of the y tick labels, however long the cell's label.
    top.set_title(title, loc="left", fontsize=10)
    ranked = answer.waits_ranked
    palette = colours(ranked)
    starts = sorted({t for pts in waits.values() for t, _ in pts})
    edges = _edges(starts, end)
    index = {t: i for i, t in enumerate(starts)}
    stacked = defaultdict(lambda: np.zeros(len(starts)))
    for name, pts in waits.items():
        key = name if name in palette else "other waits"
        for t, v in pts:
            stacked[key][index[t]] += v
    baseline = np.zeros(len(starts))
    order = [n for n in ranked if n in stacked] + [n for n in stacked if n not in ranked]
    for name in order:
        values = stacked[name]
        bottom.stairs(baseline + values, edges, baseline=baseline.copy(), fill=True, color=palette.get(name, palette[OTHER]),
                      label=name, linewidth=0)
        baseline = baseline + values
    bottom.set_ylabel(timeline.WAIT.label)
    bottom.set_xlabel("seconds since the first transaction")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, frameon=False)
    caption = (f"the run of {run.label} ({run.cell}) with the median {answer.headline.label}, "
               f"repetition {run.repetition}; waits per second of the run, each interval divided by the time it covers")
    return caption, svg(fig, png)


def factor_caption(answer: model.Answer) -> str:
    return "" if answer.swept is None else f"cells grouped by the other factors, {html.escape(answer.swept)} rising"
