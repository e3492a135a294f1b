"""One self-contained HTML file (inline SVG) with the seeds' graphs, plus a PNG of each chart."""

from __future__ import annotations

import html
import io
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from storlab import analysis  # noqa: E402
from storlab.analysis import CellResult, Results, fmt_seconds  # noqa: E402
from storlab.experiment import short_name  # noqa: E402
from storlab.matrix import format_value  # noqa: E402
from storlab.store import Store  # noqa: E402

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child, td.l, th.l { text-align: left; }
.warn { color: #a60; } .fail { color: #b00; } figure { margin: 1em 0; } h2 { margin-top: 2em; }
"""


def _svg(fig, png_path: Path) -> str:
    fig.savefig(png_path, dpi=110, bbox_inches="tight")
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _swept_factor(results: Results) -> str | None:
    """The x axis: data_files when it is a factor (the seeds' graph), else the first numeric factor."""
    factors = results.experiment.get("factors", {})
    if "layout.data_files" in factors and len(factors["layout.data_files"]) > 1:
        return "layout.data_files"
    for name, values in factors.items():
        if len(values) > 1 and all(isinstance(v, (int, float)) for v in values):
            return name
    return None


def elapsed_chart(results: Results, png: Path) -> str:
    """Mean elapsed against the swept factor, one line per value of the other factors, 95 % CI bars."""
    x_name = _swept_factor(results)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    measured = results.measured
    if x_name is None:
        labels = [c.cell.label for c in measured]
        means = [c.elapsed.mean for c in measured]
        errs = [0 if c.elapsed.n < 2 else c.elapsed.half_width for c in measured]
        ax.barh(labels, means, xerr=errs, color="#4a7ab5")
        ax.set_xlabel("elapsed s (mean, 95 % CI)")
    else:
        lines: dict[str, list[CellResult]] = defaultdict(list)
        for c in measured:
            rest = {k: v for k, v in c.cell.factors.items() if k != x_name}
            lines[", ".join(f"{short_name(k)}={format_value(v)}" for k, v in rest.items()) or "all"].append(c)
        for label, cells in lines.items():
            cells.sort(key=lambda c: c.cell.factors[x_name])
            xs = [c.cell.factors[x_name] for c in cells]
            ys = [c.elapsed.mean for c in cells]
            errs = [0 if c.elapsed.n < 2 else c.elapsed.half_width for c in cells]
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=4, label=label)
        values = sorted({c.cell.factors[x_name] for c in measured})
        if x_name == "layout.data_files" and values and values[-1] / max(values[0], 1) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values])
        ax.set_xlabel(short_name(x_name))
        ax.set_ylabel("elapsed s (mean, 95 % CI)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(f"{results.experiment.get('name', '')}: elapsed time")
    return _svg(fig, png)


def timeline_chart(store: Store, results: Results, metric: str, ylabel: str, png: Path) -> str | None:
    """A metric over the run's time axis, from each cell's first run."""
    fig, ax = plt.subplots(figsize=(8, 4))
    drawn = False
    for c in results.measured:
        points = defaultdict(list)
        for t, name, value in store.timeline(c.runs[0].id):
            if name == metric or name.startswith(metric + ":"):
                points[name].append((t, value))
        for name, series in points.items():
            xs, ys = zip(*sorted(series))
            suffix = name[len(metric) + 1:] if ":" in name else ""
            ax.plot(xs, ys, label=f"{c.cell.label}" + (f" [{suffix}]" if suffix else ""), linewidth=1.2)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("seconds since the first transaction")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig, png)


def io_chart(jobs: list[dict], png: Path) -> str:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = [f"{j['job']}" for j in jobs]
    left.barh(names, [j["iops"] for j in jobs], color="#4a7ab5")
    left.set_xlabel("IOPS")
    right.barh(names, [j["mb_s"] for j in jobs], color="#b5874a")
    right.set_xlabel("MB/s")
    right.set_yticks([])
    fig.suptitle("device capability (fio)")
    return _svg(fig, png)


def _table(headers: list[str], rows: list[list[str]], left: int = 1) -> str:
    head = "".join(f"<th class='{'l' if i < left else ''}'>{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td class='{'l' if i < left else ''}'>{html.escape(str(v))}</td>" for i, v in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _ranking_html(results: Results) -> str:
    rows = []
    for place, r in enumerate(results.ranking(), 1):
        c = r.result
        ci = "—" if c.elapsed.n < 2 else f"± {fmt_seconds(c.elapsed.half_width)}"
        versus = "best" if r.versus_best is None else f"+{r.slower_percent:.1f} % ({r.versus_best.describe()})"
        rows.append([f"{place}. {c.cell.label}", c.cell.id, fmt_seconds(c.elapsed.mean), ci,
                     f"{c.rows_per_s.mean:,.0f}", len(c.runs), versus, c.top_wait])
    return _table(["cell", "id", "elapsed s", "95 % CI", "rows/s", "runs", "vs best", "top wait"], rows)


def _waits_html(results: Results) -> str:
    parts = []
    for c in results.measured:
        rows = [[w.wait_type, f"{w.wait_s:.3f}", "—" if w.signal_s is None else f"{w.signal_s:.3f}",
                 "—" if w.wait_count is None else f"{w.wait_count:.0f}", f"{w.percentage:.2f}",
                 "—" if w.avg_wait_s is None else f"{w.avg_wait_s:.6f}"] for w in c.top]
        parts.append(f"<h3>{html.escape(c.cell.label)} <small>({c.cell.id}, source {html.escape(c.wait_source)}, per run)</small></h3>")
        parts.append(_table(["WaitType", "Wait_S", "Signal_S", "WaitCount", "Percentage", "AvgWait_S"], rows))
        if c.extras:
            parts.append("<p>" + html.escape(", ".join(f"{k}: {v:,.3f}" for k, v in c.extras.items())) + "</p>")
    return "".join(parts)


def write(store: Store) -> Path:
    results = analysis.load(store)
    folder = store.folder
    name = results.experiment.get("name", folder.name)
    sections = [f"<h1>storlab: {html.escape(name)}</h1>"]
    if results.experiment:
        sections.append(f"<p>engine {html.escape(results.experiment['engine'])}, "
                        f"{len(results.cells)} cells, {sum(len(c.runs) for c in results.cells)} runs</p>")
    for note in results.facts_notes:
        sections.append(f"<p class='warn'>warning: {html.escape(note)}</p>")
    for cell_id, rep, message in results.failures:
        sections.append(f"<p class='fail'>failed run: cell {cell_id} repetition {rep}: {html.escape(message)}</p>")
    if results.measured:
        sections.append("<h2>Elapsed time</h2><figure>" + elapsed_chart(results, folder / "elapsed.png") + "</figure>")
        sections.append("<h2>Ranking</h2>" + _ranking_html(results))
        for metric, label, title in [("rows_per_s", "rows/s", "Throughput over time"),
                                     ("mb_s", "MB/s", "Device MB/s over time, per placement"),
                                     ("cpu_percent", "CPU %", "CPU over time")]:
            svg = timeline_chart(store, results, metric, label, folder / f"{metric}.png")
            if svg:
                sections.append(f"<h2>{title}</h2><p>first run of each cell</p><figure>{svg}</figure>")
        sections.append("<h2>Wait statistics (top 95 %)</h2>" + _waits_html(results))
    jobs = store.io_jobs()
    if jobs:
        sections.append("<h2>Device capability</h2><figure>" + io_chart(jobs, folder / "io.png") + "</figure>")
        sections.append(_table(
            ["job", "target", "IOPS", "MB/s", "p50 ms", "p99 ms", "p99.9 ms", "flags"],
            [[j["job"], j["target"], f"{j['iops']:,.0f}", f"{j['mb_s']:,.1f}", _ms(j["lat_p50_ms"]),
              _ms(j["lat_p99_ms"]), _ms(j["lat_p999_ms"]), "; ".join(j["flags"])] for j in jobs],
        ))
    if results.facts:
        sections.append("<h2>Machine facts</h2><pre>" + html.escape(json.dumps(results.facts, indent=1)) + "</pre>")
    path = folder / "report.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>storlab: {html.escape(name)}</title>"
                    f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>")
    return path


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
