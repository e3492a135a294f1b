"""The report's charts of a scan's evidence (seed 002): the size of the IOs each placement's device
served, per cell, and the scan's elapsed and CPU time against its degree of parallelism."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from storlab.answer.analysis import Results
from storlab.experiment.file import short_name
from storlab.experiment.matrix import format_value
from storlab.report import wait_report
from storlab.report.charts import plt, svg
from storlab.results.store import Store
from storlab.sizes import format_bytes

DOP = "workload.dop"


def sizes_by_cell(store: Store, results: Results) -> list[tuple[str, str, dict[str, dict[int, float]]]]:
    """(cell label, source, placement:direction -> size -> requests per run), summed over each cell's runs."""
    found = []
    for c in wait_report.in_factor_order(results):
        counts: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        sources = set()
        for run in c.runs:
            for placement, direction, size, requests, source in store.io_sizes(run.id):
                counts[f"{placement} {direction}"][size] += requests / len(c.runs)
                sources.add(source)
        if counts:
            found.append((c.cell.label, ", ".join(sorted(sources)), counts))
    return found


def sizes_chart(store: Store, results: Results, png: Path) -> tuple[str, str] | None:
    """One panel per cell: requests per run by size, one bar colour per placement and direction."""
    found = sizes_by_cell(store, results)
    if not found:
        return None
    fig, axes = plt.subplots(len(found), 1, figsize=(8, 1.8 * len(found) + 0.6), squeeze=False, sharex=True)
    every = sorted({size for _, _, counts in found for by_size in counts.values() for size in by_size})
    series = sorted({name for _, _, counts in found for name in counts})
    width = 0.8 / max(len(series), 1)
    for ax, (label, _, counts) in zip(axes[:, 0], found):
        for i, name in enumerate(series):
            xs = [every.index(size) + i * width for size in sorted(counts.get(name, {}))]
            ax.bar(xs, [counts[name][s] for s in sorted(counts.get(name, {}))], width=width, label=name)
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_ylabel("requests")
        ax.grid(alpha=0.3, axis="y")
    axes[-1, 0].set_xticks([i + (len(series) - 1) * width / 2 for i in range(len(every))], [format_bytes(s, 0) for s in every],
                           fontsize=8)
    axes[0, 0].legend(fontsize=7)
    sources = sorted({source for _, source, _ in found})
    caption = ("requests per run by size (the lower bound of each power-of-two bucket), from the block layer's "
               "tracepoint" if sources == ["bpftrace"] else f"requests per run by size; source: {', '.join(sources)} "
               "(an average size per direction where the block layer could not be traced)")
    return caption, svg(fig, png)


def dop_chart(results: Results, png: Path) -> str | None:
    """Elapsed and CPU time against the degree of parallelism, one line per value of the other factors."""
    if DOP not in results.experiment.get("factors", {}):
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    lines: dict[str, list] = defaultdict(list)
    for c in results.measured:
        rest = {k: v for k, v in c.cell.factors.items() if k != DOP}
        lines[", ".join(f"{short_name(k)}={format_value(v)}" for k, v in rest.items()) or "all"].append(c)
    for label, cells in lines.items():
        cells.sort(key=lambda c: c.cell.factors[DOP])
        xs = [c.cell.factors[DOP] for c in cells]
        left.plot(xs, [c.headline.mean for c in cells], marker="o", label=label)
        right.plot(xs, [c.figures["cpu_s"].mean if "cpu_s" in c.figures else float("nan") for c in cells],
                   marker="o", label=label)
    values = sorted({c.cell.factors[DOP] for c in results.measured})
    for ax, what in ((left, "elapsed s"), (right, "server CPU s")):
        ax.set_xticks(values, [str(v) for v in values])
        ax.set_xlabel("parallel workers (dop)")
        ax.set_ylabel(f"{what} (mean)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    left.legend(fontsize=7)
    return svg(fig, png)
