"""One self-contained HTML file (inline SVG, no other file or address needed; readable on a phone)
with the seeds' graphs and what explains them, plus a PNG of each chart."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from storlab import timeline
from storlab.answer import model
from storlab.labels import format_value
from storlab.probes.part import Section
from storlab.report import capability, io_report, rate_chart, timelines, wait_report
from storlab.report.charts import RawSeries, plt
from storlab.report.charts import svg as _svg
from storlab.show.terminal import VOLUME_HEADERS, explanation_rows, volume_rows
from storlab.results import outputs

STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; padding: 0 12px 2em; max-width: 1100px; color: #222;
       overflow-wrap: anywhere; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; font-size: 1.25em; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; overflow-wrap: normal; }
th:first-child, td:first-child, td.l, th.l { text-align: left; }
.warn { color: #a60; } .fail { color: #b00; } figure { margin: 1em 0; }
figure svg { width: 100%; height: auto; display: block; }
figcaption, .note { color: #555; font-size: 13px; }
"""
FILES = ["report.html", "factor_effects.png", "half_normal.png", "elapsed.png", "wait_composition.png",
         "waits_over_time.png", "rows_per_s.png", "transactions_per_s.png", "latency.png", "mb_s.png",
         f"{timeline.IOPS.name}.png", f"{timeline.CAP_USE.name}.png", "credits.png", f"{timeline.SERVER_MEMORY.name}.png",
         "cpu_percent.png", "io.png",
         "io_sizes.png", io_report.BESIDE_FILE, rate_chart.FILE]


def _interval(rows: list[model.Ranked]) -> list[list[float]] | None:
    """Error bars of geometric means: below and above each, from its interval on the logs (none for a
    cell of one run), so a bar never reaches below zero."""
    if not any(r.geometric_low is not None for r in rows):
        return None
    return [[0 if r.geometric_low is None else r.geometric_mean - r.geometric_low for r in rows],
            [0 if r.geometric_high is None else r.geometric_high - r.geometric_mean for r in rows]]


def headline_chart(answer: model.Answer, x_name: str | None, png: Path) -> str:
    """The headline figure (geometric mean of the runs, its 95 % interval on the logs, as the factor table
    reads them) against the swept factor `x_name` (short name), one line per value of the other factors:
    the seeds' graph. Cells of a figure at 0 or below have no geometric mean and are left out."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    measured = [r for r in answer.ranking if r.geometric_mean is not None]
    axis_label = f"{answer.headline.label} (geometric mean, 95 % CI)"
    if x_name is None:
        ax.barh([r.label for r in measured], [r.geometric_mean for r in measured], xerr=_interval(measured), color="#4a7ab5")
        ax.set_xlabel(axis_label)
    else:
        lines: dict[str, list[model.Ranked]] = defaultdict(list)
        for r in measured:
            rest = {k: v for k, v in r.factors.items() if k != x_name}
            lines[", ".join(f"{k}={format_value(v)}" for k, v in rest.items()) or "all"].append(r)
        for label, rows in lines.items():
            rows.sort(key=lambda r: r.factors[x_name])
            ax.errorbar([r.factors[x_name] for r in rows], [r.geometric_mean for r in rows], yerr=_interval(rows),
                        marker="o", capsize=4, label=label)
        values = sorted({r.factors[x_name] for r in measured})
        if answer.swept_log:
            ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values])
        ax.set_xlabel(x_name)
        ax.set_ylabel(axis_label)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(f"{answer.experiment.name}: {answer.headline.label}")
    return _svg(fig, png)


VERDICT_COLOURS = {"different": "#c0392b", "equivalent": "#2e7d32", "undecided": "#4e79a7"}
RATIO_TICKS = [0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4, 5, 10]


def forest_chart(answer: model.Answer, png: Path) -> str:
    """What each factor does: each level's ratio to its factor's reference level and its interval, on
    a log axis (a ratio and its inverse equally far from 1), 1.0 marked and the margin of equivalence
    shaded; conditional rows (a factor's effect at each level of another it interacts with) below."""
    factors = answer.factor_effects
    rows = [(e, f"{e.factor}={format_value(e.level)} vs {format_value(e.reference)}") for e in factors.effects]
    rows += [(e, f"{e.factor}={format_value(e.level)} vs {format_value(e.reference)}, given "
              + ", ".join(f"{k}={format_value(v)}" for k, v in (e.given or {}).items())) for e in factors.conditional]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(rows)))
    ax.axvspan(1 / (1 + factors.margin), 1 + factors.margin, color="#dddddd",
               label=f"equivalent within ±{100 * factors.margin:g} %")
    ax.axvline(1.0, color="#555555", linewidth=1)
    for y, (e, _) in enumerate(rows):
        colour = VERDICT_COLOURS[e.verdict]
        if e.ci_low is not None:
            ax.plot([e.ci_low, e.ci_high], [y, y], color=colour, linewidth=2)
        ax.plot([e.ratio], [y], "o", color=colour)
        ax.annotate(f"{e.ratio:.2f}x {e.verdict}", (e.ratio, y), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8, color=colour)
    ax.set_xscale("log")
    # Plain ratios as tick labels: a log axis labels its ticks in math text, which is off for user labels.
    low, high = ax.get_xlim()
    ax.xaxis.set_major_locator(FixedLocator([t for t in RATIO_TICKS if low <= t <= high] or [1.0]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(range(len(rows)), [label for _, label in rows])
    ax.set_ylim(len(rows) - 0.5, -0.7)
    ax.set_xlabel(f"{answer.headline.label}: level / reference (geometric means, {factors.confidence})")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8, loc="best")
    ax.set_title(f"{answer.experiment.name}: what each factor does")
    return _svg(fig, png)


def half_normal_chart(answer: model.Answer, png: Path) -> str:
    """A screening's main effects on a half-normal plot (Daniel 1959): each effect's size (|log ratio|)
    against the half-normal quantile of its rank. Effects of nothing lie near a line through the origin;
    the factors that matter stand off it to the right, coloured by their verdict and named."""
    points = answer.design.points
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p in points:
        ax.plot([p.size], [p.quantile], "o", color=VERDICT_COLOURS[p.verdict])
        ax.annotate(f"{p.factor}={format_value(p.level)} ({p.verdict})", (p.size, p.quantile), textcoords="offset points",
                    xytext=(6, -3), fontsize=8, color=VERDICT_COLOURS[p.verdict])
    quiet = [p for p in points if p.verdict != "different"]
    if quiet:  # the line the effects of nothing follow, through the origin and the largest of them
        top = max(quiet, key=lambda p: p.quantile)
        if top.size > 0:
            ax.plot([0, top.size * 1.5], [0, top.quantile * 1.5], color="#888888", linewidth=1, linestyle="--")
    ax.set_xlim(left=0, right=max((p.size for p in points), default=1) * 1.35 or 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"|log ratio| of the level against its reference ({answer.headline.label})")
    ax.set_ylabel("half-normal quantile")
    ax.grid(alpha=0.3)
    ax.set_title(f"{answer.experiment.name}: the screening's effects, half-normal")
    return _svg(fig, png)


def factors_html(answer: model.Answer) -> str:
    """The factor table as `show` prints it: each level against its reference, with its verdict."""
    factors = answer.factor_effects
    rows = [[e.factor, format_value(e.level), format_value(e.reference),
             ", ".join(f"{k}={format_value(v)}" for k, v in (e.given or {}).items()),
             f"{e.ratio:.2f}x", "—" if e.ci_low is None else f"[{e.ci_low:.2f}, {e.ci_high:.2f}]", e.said,
             *([e.aliases or ""] if answer.design and answer.design.aliases else [])]
            for e in factors.effects + factors.conditional]
    notes = (answer.design.lines if answer.design else []) + factors.interaction_lines
    notes += [f"not estimable: {line}" for line in factors.not_estimable]
    notes += [f"noise: {answer.noise.line}"] if answer.noise.line else []
    notes.append(answer.status)
    headers = ["factor", "level", "against", "given", "ratio", factors.confidence, "verdict"]
    headers += ["aliased with"] if answer.design and answer.design.aliases else []
    return _table(headers, rows, left=4) + "".join(f"<p class='note'>{html.escape(line)}</p>" for line in notes)


def _table(headers: list[str], rows: list[list[str]], left: int = 1, words: tuple[int, ...] = ()) -> str:
    """`left`: the first columns, aligned left as text; `words`: other columns of text, aligned left too."""
    def align(i: int) -> str:
        return "l" if i < left or i in words else ""

    head = "".join(f"<th class='{align(i)}'>{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td class='{align(i)}'>{html.escape(str(v))}</td>" for i, v in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<div class='scroll'><table><tr>{head}</tr>{body}</table></div>"


def _ranking_html(answer: model.Answer) -> str:
    columns = model.columns(answer)
    rows = [[column.text(row, answer) for column in columns] for row in answer.ranking]
    return _table([column.title(answer) for column in columns], rows, left=3)


def _waits_html(answer: model.Answer) -> str:
    parts = []
    for c in answer.cells:
        rows = [[w.wait_type, f"{w.wait_s:.3f}", "—" if w.signal_s is None else f"{w.signal_s:.3f}",
                 "—" if w.wait_count is None else f"{w.wait_count:.0f}", f"{w.percentage:.2f}",
                 "—" if w.avg_wait_s is None else f"{w.avg_wait_s:.6f}"] for w in c.waits]
        parts.append(f"<h3>{html.escape(c.label)} <small>({c.cell}, source {html.escape(c.source)}, per run)</small></h3>")
        parts.append(_table(["WaitType", "Wait_S", "Signal_S", "WaitCount", "Percentage", "AvgWait_S"], rows))
        if c.extras:
            parts.append("<p>" + html.escape(", ".join(f"{k}: {v:,.3f}" for k, v in c.extras.items())) + "</p>")
    return "".join(parts)


def _explain_html(answer: model.Answer) -> str:
    """What explains each difference (storlab.answer.explain), as the answer holds it."""
    parts = []
    for expl in answer.explanations:
        parts.append(f"<h3>{html.escape(expl.what)} <small>({html.escape(expl.per)})</small></h3>"
                     + _table(["WaitType", expl.baseline, expl.candidate, "difference", "share"], explanation_rows(expl)))
        parts += [f"<p class='note'>{html.escape(line)}</p>" for line in expl.notes]
    return "".join(parts)


def _resources_html(answer: model.Answer, order: list[str]) -> str:
    """Who waited on what in each cell (cells in `order`): each top wait's resources and their share, as
    `waits --resources`."""
    rows = []
    for c in sorted(answer.cells, key=lambda c: order.index(c.cell) if c.cell in order else len(order)):
        for wait in c.resources:
            if not any(r.named for r in wait.resources):
                continue  # nothing named (CPU, buffer latches): the wait table above says it all
            named = [f"{r.resource} {r.share:.0f} %" for r in wait.resources]
            rows.append([c.label, wait.wait_type, f"{sum(r.seconds for r in wait.resources):.3f}", "; ".join(named)])
    if not rows:
        return ""
    return ("<p>sessions seen waiting, sampled through each run; seconds per run, and each "
            "resource's share of its wait</p>" + _table(["cell", "wait", "sampled s", "resources (share)"], rows, left=4))


def _titled(title: str, headers: list[str], rows: list[list[str]], caption: str) -> str:
    return (f"<h2>{html.escape(title)}</h2>" + _table(headers, rows)
            + f"<p class='note'>{html.escape(caption)}</p>")


def _volumes_html(answer: model.Answer) -> str:
    """Each cell's volumes (storlab.volume), as `show --details` gives them: a part alike in every cell once."""
    return _titled("The volumes, per cell", VOLUME_HEADERS, volume_rows(answer),
                   "each placement's device as declared and as its runs found it: its format read back, the delay "
                   "layer's mode and CPU, the caps and buckets declared (what they held: the table above)")


def _part_html(section: Section) -> str:
    """A probe's part (storlab.probes.part): its heading, what it covers, each table with its caption."""
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    parts += [f"<p class='note'>{html.escape(section.intro)}</p>"] if section.intro else []
    for table in section.tables:
        parts.append(_table(table.headers, table.rows, table.left, table.words)
                     + (f"<p class='note'>{html.escape(table.note)}</p>" if table.note else ""))
    return "".join(parts)


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _changes(run: model.RunSteadiness) -> str:
    """Each series not steady: where it changed and by how much."""
    return "; ".join(f"{j.metric} {'' if j.change is None else f'{100 * j.change:+.0f} % '}at {_seconds(j.changed_at_s)} s"
                     for j in run.series if j.steady is False)


STEADY = {True: "steady", False: "not steady", None: "not judged"}


def _steadiness_html(steadiness: model.Steadiness, order: list[str]) -> str:
    """What each run held, a row a run (cells in `order`): steady or not and where it changed, the warm-up
    found beside the declared one, the checkpoints inside it and when."""
    rows = []
    for c in sorted(steadiness.cells, key=lambda c: order.index(c.cell) if c.cell in order else len(order)):
        for r in c.runs:
            checkpoints = "—" if r.checkpoints is None else str(r.checkpoints)
            if r.checkpoint_times_s:
                checkpoints += " at " + ", ".join(f"{t:g} s" for t in r.checkpoint_times_s)
            cycle = "—" if r.checkpoint_setting is None else f"{r.checkpoint_setting} {r.checkpoint_value}"
            ended = "—" if r.stopped_by is None else \
                f"{'steady' if r.stopped_by == 'steady' else 'at its max'} at {_seconds(r.stopped_at_s)} s"
            rows.append([c.label, str(r.repetition), _seconds(r.measured_s), STEADY[r.steady], _changes(r),
                         _seconds(r.found_warmup_s), _seconds(r.declared_warmup_s) + (" (found, cut)" if r.warmup_found else ""),
                         checkpoints, cycle, ended])
    return ("<h2>What each run held: steady state, warm-up, checkpoints</h2>"
            + _table(["cell", "round", "measured s", "steady", "changed", "warm-up found s", "declared s", "checkpoints",
                      "cycle", "ended"], rows, words=(3, 4, 6, 7, 8, 9))
            + f"<p class='note'>{html.escape(steadiness.rule)}</p>")


def _concerns_html(answer: model.Answer) -> str:
    """Each kind of warning, a row: the cells it concerns, its runs, what it does to the figures."""
    rows = [[c.kind, ", ".join(f"{answer.labels.get(cell, cell)} ({cell})" for cell in c.cells),
             "—" if c.runs is None else str(c.runs) if c.of_runs is None else f"{c.runs} of {c.of_runs}", c.meaning]
            for c in answer.concerns]
    return ("<h2>What to keep in mind</h2>" + _table(["warning", "cells", "runs", "what it means"], rows, left=2, words=(3,))
            if rows else "")


def _figure(svg: str, caption: str = "") -> str:
    return f"<figure>{svg}" + (f"<figcaption>{html.escape(caption)}</figcaption>" if caption else "") + "</figure>"


def facts_html(machine: model.Machine) -> str:
    """The machine the runs were measured on, judged as `storlab check` judges it (without its sample of
    the core's speed under load, which is not recorded with runs)."""
    if machine.fit is None:  # facts from before storlab collected them all
        rows = [[key, json.dumps(value)] for key, value in machine.facts.items()]
        return _table(["fact", "value"], rows, left=2)
    parts = []
    for item in machine.judged:
        if item.state == "warning":
            parts.append(f"<p class='warn'>warning: {html.escape(item.group)} {html.escape(item.name)}: "
                         f"{html.escape(item.value)}: {html.escape(item.reason)}"
                         f"{'' if item.distorts else ' (does not make the machine unfit)'}</p>")
    rows = [[item.group, item.name, item.value, item.state.upper(), item.reason if item.state != "ok" else ""]
            for item in machine.judged]
    verdict = "fit to benchmark" if machine.fit else "not fit to benchmark: a warning would distort results"
    return (f"<p>as storlab check judges these facts: {verdict}</p>" + "".join(parts)
            + _table(["group", "fact", "value", "state", "why"], rows, left=5))


def write(answer: model.Answer, raw: RawSeries, folder: Path) -> Path:
    """The report of `answer` into `folder`, the charts over time drawn from the raw timelines of the runs
    the answer names (`raw`: the store)."""
    outputs.claim(folder, FILES)
    name = answer.experiment.name if answer.experiment.declared else folder.name
    sections = [f"<h1>storlab: {html.escape(name)}</h1>"]
    if answer.experiment.declared:
        sections.append(f"<p>engine {html.escape(answer.experiment.engine)}, "
                        f"{len(answer.labels)} cells, {sum(r.runs for r in answer.ranking)} runs</p>")
    for note in answer.warnings:
        sections.append(f"<p class='warn'>warning: {html.escape(note)}</p>")
    for failed in answer.failures:
        sections.append(f"<p class='fail'>failed run: cell {html.escape(failed.cell)} repetition {failed.repetition}: "
                        f"{html.escape(failed.message)}</p>")
    factors = answer.factor_effects
    if factors is None and answer.status is not None:  # no factor table: the runs cannot be read as ratios
        sections.append(f"<p class='warn'>{html.escape(answer.status)}</p>")
    if factors is not None and (factors.effects or factors.conditional):
        sections.append("<h2>What each factor does</h2>"
                        + _figure(forest_chart(answer, folder / "factor_effects.png"),
                                  "each level's ratio to its factor's reference level, with its interval; "
                                  "the shaded band is the margin of equivalence")
                        + (_figure(half_normal_chart(answer, folder / "half_normal.png"),
                                   "the screening's main effects against the half-normal quantiles of their ranks: "
                                   "effects of nothing follow the dashed line, those that matter stand off to the right")
                           if answer.design and answer.design.kind == "screening" and answer.design.points else "")
                        + factors_html(answer))
    if answer.ranking:
        if any(r.geometric_mean is not None for r in answer.ranking):  # no chart of figures at 0 or below
            sections.append(f"<h2>{html.escape(answer.headline.label)}</h2>"
                            + _figure(headline_chart(answer, answer.swept, folder / "elapsed.png")))
        rate = rate_chart.section(answer, folder)
        if rate:
            sections.append(rate)
        sections.append("<h2>Ranking</h2>" + _ranking_html(answer)
                        + "".join(f"<p class='note'>{html.escape(line)}</p>" for line in
                                  answer.best + answer.race
                                  + ([f"noise split: {answer.noise.split.line}"] if answer.noise.split else [])
                                  + answer.notes))
        sections.append(_concerns_html(answer))
        if answer.steadiness:
            sections.append(_steadiness_html(answer.steadiness, answer.chart_order))
        composition = wait_report.composition_chart(answer, folder / "wait_composition.png")
        if composition:
            sections.append("<h2>Where the time went: waits per cell</h2>"
                            + _figure(composition, "seconds waited per run, summed over the sessions; "
                                      + wait_report.factor_caption(answer)))
        explained = _explain_html(answer)
        if explained:
            sections.append("<h2>What explains the difference</h2>" + explained)
        resources = _resources_html(answer, answer.chart_order)
        if resources:
            sections.append("<h2>Who waits on what</h2>" + resources)
        over_time = wait_report.waits_over_time_chart(raw, answer, folder / "waits_over_time.png")
        if over_time:
            caption, svg = over_time
            sections.append("<h2>Waits over time</h2>" + _figure(svg, caption))
        throughput = timelines.throughput_of(answer)
        svg = throughput and timelines.chart(raw, answer, throughput, folder / f"{throughput.name}.png")
        if svg:
            sections.append("<h2>Throughput over time</h2>" + _figure(svg, timelines.caption(throughput, answer)))
        latency = timelines.latency_chart(raw, answer, folder / "latency.png")
        if latency:
            sections.append("<h2>Transaction latency over time (p50, p95, p99)</h2>" + _figure(latency[1], latency[0]))
        device = timelines.device_chart(raw, answer, folder / f"{timeline.MIB_S.name}.png")
        if device:
            sections.append("<h2>Device MiB/s over time, per placement</h2>" + _figure(device[1], device[0]))
        device = timelines.device_iops_chart(raw, answer, folder / f"{timeline.IOPS.name}.png")
        if device:
            sections.append("<h2>Device IOPS over time against the IOPS caps, per placement</h2>" + _figure(device[1], device[0]))
        drawn = timelines.cap_chart(raw, answer, folder / f"{timeline.CAP_USE.name}.png")
        if drawn:
            sections.append("<h2>IO against its cap over time, per capped placement</h2>" + _figure(drawn[1], drawn[0]))
        drawn = timelines.credits_chart(raw, answer, folder / "credits.png")
        if drawn:
            sections.append("<h2>Credit buckets over time, per placement</h2>" + _figure(drawn[1], drawn[0]))
        svg = timelines.chart(raw, answer, timeline.SERVER_MEMORY, folder / f"{timeline.SERVER_MEMORY.name}.png")
        if svg:
            sections.append("<h2>The server's memory over time</h2>"
                            + _figure(svg, timelines.caption(timeline.SERVER_MEMORY) + "; what its control group "
                                      "held, the page cache included, against its limit"))
        svg = timelines.chart(raw, answer, timeline.CPU_PERCENT, folder / f"{timeline.CPU_PERCENT.name}.png")
        if svg:
            sections.append("<h2>CPU over time</h2>" + _figure(svg, timelines.caption(timeline.CPU_PERCENT)))
        sizes = io_report.sizes_chart(answer, folder / "io_sizes.png")
        if sizes:
            sections.append("<h2>The size of the IOs</h2>" + _figure(sizes[1], sizes[0]))
        beside = io_report.beside_chart(answer, folder / io_report.BESIDE_FILE)
        if beside:
            sections.append(f"<h2>{html.escape(beside[0])}</h2>" + _figure(beside[1]))
    if answer.capability:
        sections.append("<h2>Device capability beside the database</h2>"
                        + _figure(capability.chart(answer.capability, folder / "io.png")))
        sections.append(_table(["device", "kernel device", "job", "IOPS", "MiB/s", "p99 ms", "flags"],
                               capability.table_rows(answer.capability), left=3))
    if answer.ranking:
        sections += [_part_html(part.section()) for part in answer.parts().values()]
        sections += [_volumes_html(answer)] if answer.volumes else []
        sections.append("<h2>Wait statistics (top 95 %)</h2>" + _waits_html(answer))
    for machine in answer.machines:
        title = f"Machine facts: {machine.host}" if machine.host else "Machine facts"
        sections.append(f"<h2>{html.escape(title)}</h2>" + facts_html(machine))
    return outputs.write(folder, "report.html", f"{outputs.REPORT_MARK}{html.escape(name)}</title>"
                         "<meta name='viewport' content='width=device-width, initial-scale=1'>"
                         f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>")
