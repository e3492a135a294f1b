"""The report's charts of metrics over a run's time axis (storlab.timeline declares them), from each
cell's first run: throughput and CPU (one line per cell), and the latency percentiles and device
MiB/s and IOPS (one panel per cell, the run's traced checkpoints and WAL switches marked); on the throughput
and each panel, what the answer says of the run: the warm-up found, the checkpoints counted, the moment a
credit bucket ran dry, and on the device's MiB/s and IOPS the cap in force over the run. A value that covers
the interval its time opens (the driver's buckets) is drawn as a step over that interval, the last to
the run's end; the device sampler's values, each closing its interval, as a line through their points."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from storlab import timeline
from storlab.answer import model
from storlab.probes import limits_part
from storlab.report.charts import PALETTE, RawSeries, plt, svg
from storlab.timeline import Metric

X_LABEL = "seconds since the first transaction"
PERCENTILE_COLOURS = {timeline.LATENCY_P50_MS: "#9ecae1", timeline.LATENCY_P95_MS: "#4292c6",
                      timeline.LATENCY_P99_MS: "#08306b"}
CHECKPOINT_COLOUR, WAL_SWITCH_COLOUR = "#f28e2b", "#555555"
WARMUP_COLOUR, DRY_COLOUR = "#2e7d32", "#c0392b"
CAP_COLOUR = "#7b241c"


@dataclass(frozen=True)
class Marks:
    """What the answer says of one drawn run, marked on its time axis."""

    warmup_s: float | None  # where MSER-5 found its warm-up ended
    checkpoints_s: list[float]  # each checkpoint counted inside its measured part
    dry_s: list[float]  # each moment one of its credit buckets ran dry

    def __bool__(self) -> bool:
        return self.warmup_s is not None or bool(self.checkpoints_s) or bool(self.dry_s)


def marks(answer: model.Answer, run: model.DrawnRun) -> Marks:
    steadiness = next((r for c in (answer.steadiness.cells if answer.steadiness else []) if c.cell == run.cell
                       for r in c.runs if r.repetition == run.repetition), None)
    dry = [d.at_s for b in (answer.limits.buckets if answer.limits else []) if b.cell == run.cell
           for d in b.dry if d.round == run.repetition]
    # A warm-up found at the run's first second is none: nothing to mark.
    warmup = None if steadiness is None or not steadiness.found_warmup_s else steadiness.found_warmup_s
    return Marks(warmup, [] if steadiness is None else steadiness.checkpoint_times_s, sorted(dry))


def caps_in_force(answer: model.Answer, run: model.DrawnRun, unit: str) -> list[tuple[str, list[limits_part.CapStep]]]:
    """The caps of `unit` ("iops" or "mb_s") the answer holds in force over the run, a (label, steps) a
    line: a device's read and write caps one line where their steps are the same (a bucket holds both)."""
    found: dict[tuple[str, tuple], list[str]] = {}
    for cap in answer.limits.in_force if answer.limits else []:
        way, key_unit = cap.key.split("_", 1)
        if cap.cell == run.cell and cap.round == run.repetition and key_unit == unit:
            steps = tuple((s.at_s, s.cap) for s in cap.steps)
            found.setdefault((f"{', '.join(cap.placements)} on {cap.device}", steps), []).append(way)
    return [(f"{'cap' if len(ways) > 1 else ways[0] + ' cap'} in force ({where})",
             [limits_part.CapStep(at_s=t, cap=c) for t, c in steps]) for (where, steps), ways in found.items()]


def _draw_caps(ax, caps: list[tuple[str, list[limits_part.CapStep]]], end: float, gid: str) -> None:
    """Each cap in force as steps from its first to the run's end (`end`), dashed, its level written where
    it starts (named at the first); in the SVG its group's id is `gid` and the line's number, so that a
    reader or a test finds the line the answer put there."""
    for i, (label, steps) in enumerate(caps):
        edges = [s.at_s for s in steps] + [max(end, steps[-1].at_s + 1e-3)]
        patch = ax.stairs([s.cap for s in steps], edges, baseline=None, color=CAP_COLOUR, linewidth=1.3,
                          linestyle=(0, (5, 2)))
        patch.set_gid(f"{gid}-{i + 1}")
        for j, step in enumerate(steps):
            ax.annotate(f"{label}: {step.cap:g}" if j == 0 else f"{step.cap:g}", (step.at_s, step.cap),
                        textcoords="offset points", xytext=(2, 2), fontsize=7, color=CAP_COLOUR)


def _mark(ax, found: Marks, colour: str | None = None) -> None:
    """The warm-up found dashed, a bucket's running dry dash-dotted, the checkpoints counted as triangles
    along the top; in the run's line colour where several runs share the axes."""
    if found.warmup_s is not None:
        ax.axvline(found.warmup_s, color=colour or WARMUP_COLOUR, linewidth=1, linestyle="--")
    for t in found.dry_s:
        ax.axvline(t, color=colour or DRY_COLOUR, linewidth=1.2, linestyle="-.")
    if found.checkpoints_s:
        ax.plot(found.checkpoints_s, [1.0] * len(found.checkpoints_s), "v", color=colour or CHECKPOINT_COLOUR,
                markersize=7, transform=ax.get_xaxis_transform(), clip_on=False)


def _mark_handles(drawn: list[Marks], colour: str | None = None) -> list[tuple[object, str]]:
    """The legend's entries for the kinds of mark drawn."""
    handles = []
    if any(m.warmup_s is not None for m in drawn):
        handles.append((Line2D([], [], color=colour or WARMUP_COLOUR, linewidth=1, linestyle="--"), "warm-up found (MSER-5)"))
    if any(m.checkpoints_s for m in drawn):
        handles.append((Line2D([], [], color=colour or CHECKPOINT_COLOUR, marker="v", linestyle=""), "checkpoint counted"))
    if any(m.dry_s for m in drawn):
        handles.append((Line2D([], [], color=colour or DRY_COLOUR, linewidth=1.2, linestyle="-."), "credit bucket ran dry"))
    return handles


def marks_note(answer: model.Answer) -> str:
    """The caption's words for the marks, where the drawn runs have any."""
    drawn = [marks(answer, run) for run in answer.first_runs]
    said = [text for kinds, text in ((any(m.warmup_s is not None for m in drawn), "the warm-up MSER-5 found dashed"),
                                     (any(m.checkpoints_s for m in drawn), "the checkpoints counted as triangles along the top"),
                                     (any(m.dry_s for m in drawn), "the moment a credit bucket ran dry dash-dotted")) if kinds]
    return f"; marked from the answer: {', '.join(said)}" if said else ""


def _end(run: model.DrawnRun, xs: list[float]) -> float:
    """The end of a run's last bucket: the end of the run, or just past its last point."""
    return max(xs[-1] if run.elapsed_s is None else run.elapsed_s, xs[-1] + 1e-3)


def chart(raw: RawSeries, answer: model.Answer, metric: Metric, png: Path) -> str | None:
    """A metric (or each member of a family) over the run's time axis, one line per cell."""
    fig, ax = plt.subplots(figsize=(8, 4))
    drawn, marked = False, []
    for run in answer.first_runs:
        points = defaultdict(list)
        for t, name, value in raw.timeline(run.run):
            if metric.holds(name):
                points[name].append((t, value))
        for name, series in points.items():
            xs, ys = zip(*sorted(series))
            label = run.label + (f" [{metric.member_of(name)}]" if metric.member else "")
            if metric.steps:
                line = ax.stairs(ys, [*xs, _end(run, xs)], label=label, linewidth=1.2, baseline=None)
                colour = line.get_edgecolor()
            else:
                (line,) = ax.plot(xs, ys, label=label, linewidth=1.2)
                colour = line.get_color()
            drawn = True
        if points and metric is throughput_of(answer):
            found = marks(answer, run)
            _mark(ax, found, colour)
            marked.append(found)
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel(metric.label)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    extra = _mark_handles(marked, "#555555")
    ax.legend(handles + [h for h, _ in extra], labels + [text for _, text in extra], fontsize=7)
    return svg(fig, png)


def throughput_of(answer: model.Answer) -> Metric | None:
    """The series the answer names its kind's throughput."""
    return next((m for m in timeline.METRICS if m.name == answer.experiment.throughput), None)


def caption(metric: Metric, answer: model.Answer | None = None) -> str:
    """`answer`: the chart marks what it says of each run (the throughput's chart)."""
    found = "first run of each cell"
    if metric.steps and metric.how == timeline.RATE:
        found += "; each bucket divided by the time it covers"
    elif metric.stamp == timeline.END:
        found += "; each point over the time since the point before"
    return found + (marks_note(answer) + " (in each run's colour)" if answer is not None and marks_note(answer) else "")


def _per_cell(raw: RawSeries, answer: model.Answer, metrics: tuple[Metric, ...], ylabel: str, png: Path,
              colours: dict[str, str] | None = None, cap_unit: str | None = None) -> tuple[set[Metric], str] | None:
    """Small multiples: one panel per cell (its first run), one line per metric (or member of a
    family), on one scale for every cell, with the run's traced checkpoints (shaded from their start
    over their duration) and WAL switches (dotted). `colours`: a colour per line's label, in the
    legend's order (default: the palette, by label); `cap_unit`: the caps of that unit the answer holds
    in force over each run drawn as steps. Returns (the events drawn, svg)."""
    panels = []
    for run in answer.first_runs:
        lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
        events: dict[Metric, list[tuple[float, float]]] = defaultdict(list)
        for t, name, value in raw.timeline(run.run):
            metric = timeline.find(name)
            if metric in timeline.EVENTS:
                events[metric].append((t, value))
            elif metric in metrics:
                lines[name].append((t, value))
        if lines:
            panels.append((run, lines, events))
    if not panels:
        return None
    label = {name: metric.member_of(name) if metric.member else metric.label
             for _, lines, _ in panels for name in lines for metric in [timeline.find(name)]}
    colours = colours or {text: PALETTE[i % len(PALETTE)] for i, text in enumerate(sorted(set(label.values())))}
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.3 + 1.6 * len(panels)), squeeze=False, sharex=True,
                             sharey=True, layout="constrained")
    marked, capped, top = [], False, 0.0
    for ax, (run, lines, events) in zip(axes[:, 0], panels):
        found = marks(answer, run)
        _mark(ax, found)
        marked.append(found)
        caps = caps_in_force(answer, run, cap_unit) if cap_unit else []
        if caps:
            end = max((t for points in lines.values() for t, _ in points), default=0.0)
            _draw_caps(ax, caps, end if run.elapsed_s is None else max(end, run.elapsed_s),
                       f"cap-in-force-{cap_unit}-run{run.run}")
            capped = True
            top = max(top, *(s.cap for _, steps in caps for s in steps))
        for name, points in sorted(lines.items()):
            xs, ys = zip(*sorted(points))
            if timeline.find(name).steps:
                ax.stairs(ys, [*xs, _end(run, xs)], color=colours[label[name]], linewidth=1.3, baseline=None)
            else:
                ax.plot(xs, ys, color=colours[label[name]], linewidth=1.3)
        for t, duration in events.get(timeline.CHECKPOINT, []):
            ax.axvspan(t, t + duration, color=CHECKPOINT_COLOUR, alpha=0.25, linewidth=0)
        for t, _ in events.get(timeline.WAL_SWITCH, []):
            ax.axvline(t, color=WAL_SWITCH_COLOUR, linewidth=0.8, linestyle=":")
        ax.set_title(run.label, fontsize=9, loc="left")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    # One scale for every cell, set once: each panel's own autoscaling would keep only its data.
    top = max(top, *(v for _, lines, _ in panels for points in lines.values() for _, v in points))
    axes[-1, 0].set_ylim(0, 1.05 * top if top > 0 else 1.0)
    axes[-1, 0].set_xlabel(X_LABEL, fontsize=8)
    drawn = {metric for _, _, events in panels for metric in events}
    shown = set(label.values())
    handles = [(Line2D([], [], color=colour, linewidth=1.3), text) for text, colour in colours.items() if text in shown]
    if timeline.CHECKPOINT in drawn:
        handles.append((Patch(color=CHECKPOINT_COLOUR, alpha=0.25, linewidth=0), timeline.CHECKPOINT.label))
    if timeline.WAL_SWITCH in drawn:
        handles.append((Line2D([], [], color=WAL_SWITCH_COLOUR, linewidth=0.8, linestyle=":"), timeline.WAL_SWITCH.label))
    handles += _mark_handles(marked)
    if capped:
        handles.append((Line2D([], [], color=CAP_COLOUR, linewidth=1.3, linestyle=(0, (5, 2))), "cap in force"))
    fig.legend([h for h, _ in handles], [text for _, text in handles], loc="outside lower center",
               ncol=min(len(handles), 5), fontsize=8, frameon=False)
    return drawn, svg(fig, png)


def _events_note(drawn: set[Metric], answer: model.Answer) -> str:
    traced = [text for metric, text in ((timeline.CHECKPOINT, "checkpoints shaded from their start over their duration"),
                                        (timeline.WAL_SWITCH, "WAL switches dotted")) if metric in drawn]
    said = f"as traced: {', '.join(traced)}" if traced else "checkpoints and WAL switches are marked where traced (none here)"
    return said + marks_note(answer)


def latency_chart(raw: RawSeries, answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """One panel per cell: the p50, p95 and p99 latency of the transactions committed in each bucket,
    with the run's traced events. Returns (caption, svg)."""
    colours = {metric.label: colour for metric, colour in PERCENTILE_COLOURS.items()}
    found = _per_cell(raw, answer, tuple(PERCENTILE_COLOURS), "ms", png, colours)
    if found is None:
        return None
    drawn, drawing = found
    return ("first run of each cell: the latency percentiles of the transactions committed in each one-second bucket, "
            f"each drawn over the time its bucket covers; {_events_note(drawn, answer)}"), drawing


CAPS_NOTE = ("; dashed steps: the cap in force as the answer holds it (a credit bucket's changes as it ran dry and "
             "filled again), which holds the instance's control group while the device counts everyone's IO")


def device_chart(raw: RawSeries, answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """One panel per cell: each placement's device MiB/s, with the run's traced events and MiB/s caps in
    force. Returns (caption, svg)."""
    found = _per_cell(raw, answer, (timeline.MIB_S,), timeline.MIB_S.label, png, cap_unit="mb_s")
    if found is None:
        return None
    drawn, drawing = found
    capped = any(caps_in_force(answer, run, "mb_s") for run in answer.first_runs)
    return ("first run of each cell: each point what the placement's device (the whole device, /proc/diskstats) moved "
            f"since the point before, divided by the time between the two readings; {_events_note(drawn, answer)}. A steady "
            "load can still reach its device in bursts (a new log file written whole when it is made, a checkpoint): "
            f"each is one high interval{CAPS_NOTE if capped else ''}"), drawing


def device_iops_chart(raw: RawSeries, answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """One panel per cell: each placement's device IOPS under the IOPS caps in force, where the answer holds
    any (uncapped, the MiB/s above says what the device did). Returns (caption, svg)."""
    if not any(caps_in_force(answer, run, "iops") for run in answer.first_runs):
        return None
    found = _per_cell(raw, answer, (timeline.IOPS,), timeline.IOPS.label, png, cap_unit="iops")
    if found is None:
        return None
    drawn, drawing = found
    return ("first run of each cell: each point the IOs the placement's device (the whole device, /proc/diskstats) "
            f"completed since the point before, divided by the time between the two readings; {_events_note(drawn, answer)}"
            f"{CAPS_NOTE}"), drawing


def cap_chart(raw: RawSeries, answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """One panel per cell: each capped placement's IO as a share of its tightest cap. Returns
    (caption, svg)."""
    found = _per_cell(raw, answer, (timeline.CAP_USE,), timeline.CAP_USE.label, png)
    if found is None:
        return None
    drawn, drawing = found
    return ("first run of each cell: each point the IO the instance's control group was charged on the placement's "
            "device since the point before, as a share of its tightest cap (100 %: held at the cap); "
            f"{_events_note(drawn, answer)}"), drawing


def credits_chart(raw: RawSeries, answer: model.Answer, png: Path) -> tuple[str, str] | None:
    """One panel per cell: each credit bucket's credits left over the run. Returns (caption, svg)."""
    found = _per_cell(raw, answer, tuple(timeline.CREDITS_LEFT.values()), "% of the bucket left", png)
    if found is None:
        return None
    drawn, drawing = found
    return ("first run of each cell: the credits left in each placement's bucket as storlab settled it (every 0.1 s, "
            "drawn every 0.5 s and at each change): while it holds credits the cap is its burst rate, once it is "
            "empty its baseline, until it holds a second of bursting again; the throughput over time is above; "
            f"{_events_note(drawn, answer)}"), drawing
