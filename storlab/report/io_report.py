"""The report's charts of a scan's evidence (seed 002): a histogram of the size of the IOs each
placement's device served, per direction, the cells side by side, and the headline with the figures
counted in its unit (a scan's CPU time) against the swept factor (a scan's degree of parallelism)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from storlab.answer import model
from storlab.labels import format_value
from storlab.report.charts import PALETTE, plt, svg
from storlab.sizes import format_bytes

BESIDE_FILE = "beside_headline.png"


@dataclass
class _Drawn:
    """A cell's IO sizes keyed by (placement, direction), as the chart's panels are."""

    label: str
    traced: dict[tuple[str, str], dict[int, float]]
    averages: dict[tuple[str, str], tuple[float, float]]  # (bytes per request, requests per run)

    @classmethod
    def of(cls, c: model.CellIoSizes) -> _Drawn:
        return cls(c.label, {(s.placement, s.direction): s.traced for s in c.sizes if s.traced},
                   {(s.placement, s.direction): (s.average_bytes, s.average_requests)
                    for s in c.sizes if s.average_bytes is not None and s.average_requests is not None})


def _per_run(counts: dict[tuple[str, str], float], placements: int) -> str:
    return ", ".join(f"{n:,.0f} {placement + ' ' if placements > 1 else ''}{direction}{'' if round(n) == 1 else 's'}"
                     for (placement, direction), n in sorted(counts.items()))


def sizes_chart(answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """A histogram per placement and direction (one panel each): the share of each cell's requests
    in each power-of-two size bucket, the cells' bars side by side in every bucket. A cell whose
    runs kept only diskstats' average size is a dashed line at that size, never drawn as a bar.
    Returns (caption, svg)."""
    found = [_Drawn.of(c) for c in answer.io_sizes]
    if not found:
        return None
    panels = sorted({key for c in found for key in (*c.traced, *c.averages)})
    placements = len({placement for placement, _ in panels})
    colour = {c.label: PALETTE[i % len(PALETTE)] for i, c in enumerate(found)}
    bars = [c for c in found if c.traced]
    sizes = [s for c in bars for by_size in c.traced.values() for s in by_size]
    sizes += [size for c in found for size, _ in c.averages.values()]
    low, high = int(math.log2(max(min(sizes), 1))), int(math.log2(max(max(sizes), 1)))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.4 + 1.9 * len(panels)), squeeze=False, sharex=True,
                             layout="constrained")
    width = 0.8 / max(len(bars), 1)
    for ax, key in zip(axes[:, 0], panels):
        for j, c in enumerate(bars):
            by_size = c.traced.get(key)
            if not by_size:
                continue
            total = sum(by_size.values())
            ax.bar([math.log2(s) + 0.1 + j * width for s in sorted(by_size)],
                   [100 * by_size[s] / total for s in sorted(by_size)], width=width, align="edge", color=colour[c.label])
        for c in found:
            if key in c.averages:
                ax.axvline(math.log2(max(c.averages[key][0], 1)), color=colour[c.label], linestyle="--", linewidth=1.5)
        ax.set_title(f"{key[0]}, {key[1]}s", fontsize=9, loc="left")
        ax.set_ylim(0, 100)
        if any(key in c.traced for c in bars):
            ax.set_ylabel("% of requests", fontsize=8)
        else:  # no share to read on a y axis: only where each average lies
            ax.set_yticks([])
            ax.text(0.5, 0.6, "no histogram: only the average size per request (/proc/diskstats),\n"
                    "the block layer was not traced", transform=ax.transAxes, ha="center", va="center", fontsize=8,
                    color="#555555", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9})
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    bottom = axes[-1, 0]
    bottom.set_xlim(low, high + 1)
    bottom.set_xticks(range(low, high + 2), [format_bytes(2**k, 0) for k in range(low, high + 2)])
    bottom.set_xlabel("request size (each bucket from one tick up to the next, twice as large)", fontsize=8)
    handles, labels = [], []
    for c in found:
        if c.traced:
            handles.append(Patch(color=colour[c.label]))
            labels.append(f"{c.label}: {_per_run({k: sum(v.values()) for k, v in c.traced.items()}, placements)} per run")
        if c.averages:
            handles.append(Line2D([], [], color=colour[c.label], linestyle="--", linewidth=1.5))
            sizes_text = ", ".join(f"{format_bytes(size)} per {direction}" for (_, direction), (size, _) in sorted(c.averages.items()))
            labels.append(f"{c.label}: average only, {sizes_text} "
                          f"({_per_run({k: n for k, (_, n) in c.averages.items()}, placements)} per run)")
    fig.legend(handles, labels, loc="outside lower center", ncol=1, fontsize=7, frameon=False)
    caption = ("the share of each cell's requests (per placement and direction) in each power-of-two size bucket, "
               "the block layer's requests as traced (bpftrace); requests per run in the legend")
    if any(c.averages for c in found):
        caption += ("; a dashed line is a cell whose runs could keep only the average size per request from "
                    "/proc/diskstats (the block layer was not traced): an average, not a histogram")
    return caption, svg(fig, png)


def beside_chart(answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """The headline and each figure the answer counts in its unit (a scan's CPU s beside its elapsed s)
    against the swept factor, a panel each, one line per value of the other factors. Returns (title, svg)."""
    if answer.swept is None or not answer.beside_headline:
        return None
    swept = answer.swept
    figures = [(answer.headline.name, answer.headline.label)] + [(f.name, f.label) for f in answer.figures
                                                                 if f.name in answer.beside_headline]
    fig, axes = plt.subplots(1, len(figures), figsize=(5 * len(figures), 4), squeeze=False)
    lines: dict[str, list[model.Ranked]] = defaultdict(list)
    ranked = {r.cell: r for r in answer.ranking}
    for r in (ranked[cell] for cell in answer.chart_order if cell in ranked):
        rest = {k: v for k, v in r.factors.items() if k != swept}
        lines[", ".join(f"{k}={format_value(v)}" for k, v in rest.items()) or "all"].append(r)
    values = sorted({r.factors[swept] for r in ranked.values()})
    for ax, (name, label) in zip(axes[0], figures):
        for line, rows in lines.items():
            rows.sort(key=lambda r: r.factors[swept])
            ys = [r.mean if name == answer.headline.name else r.figures.get(name) for r in rows]
            ax.plot([r.factors[swept] for r in rows], [float("nan") if y is None else y for y in ys], marker="o", label=line)
        ax.set_xticks(values, [str(v) for v in values])
        ax.set_xlabel(swept)
        ax.set_ylabel(f"{label} (mean)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    title = f"{' and '.join(label for _, label in figures)} against {swept}"
    return title, svg(fig, png)
