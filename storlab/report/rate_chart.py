"""The report's answer to a rate sweep (storlab.answer.rate_curve): p50 and p99 against the throughput
achieved, one colour per layout (p99 solid, p50 dashed), each point a rate; a rate the answer does not
call sustained (`kept_up`) an x where it ended up, off the curve, in the terminal's words; the knee ringed; the closed loop ("max") a hollow square beside it; a latency goal drawn as a line, with the throughput
where each layout reaches it and that figure's interval over the rounds. The same lines as `show`
below it; everything drawn is a field of the answer (model.RateCurves)."""

from __future__ import annotations

import html
from pathlib import Path

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from storlab.answer import model, rate_curve
from storlab.labels import format_value
from storlab.report.charts import PALETTE, plt, svg

FILE = "rate_curve.png"
CAPTION = ("each point a rate (labelled on p99, once where several layouts kept up with it): the throughput achieved against its latency percentiles (open loop: "
           "latency from each transaction's scheduled start); x: a rate the answer does not call sustained (in more than "
           "half its runs), labelled with how often it was; ringed: the knee; hollow square: \"max\", closed loop")


def _plain(value: float, _=None) -> str:
    return f"{value:g}"


def chart(found: model.RateCurves, title: str, png: Path) -> str:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    # A rate kept up with is achieved at the rate itself, so its points of every layout stand one above
    # another: labelled once, on the first; a rate not sustained is where each layout ended up.
    labelled: set = set()
    for i, curve in enumerate(found.layouts):
        colour = PALETTE[i % len(PALETTE)]
        on_curve = [p for p in curve.points if p.kept_up]
        behind = [p for p in curve.points if not p.kept_up]
        for figure, style in (("p99", "-"), ("p50", "--")):
            drawn = [p for p in on_curve if figure in p.latency_ms]
            if drawn:
                ax.plot([p.achieved for p in drawn], [p.latency_ms[figure] for p in drawn], style, marker="o",
                        color=colour, label=f"{curve.label} {figure}", linewidth=1.4, markersize=4)
            # A rate the layout fell behind is no point of its curve: marked apart, where it ended up.
            late = [p for p in behind if figure in p.latency_ms]
            if late:
                ax.plot([p.achieved for p in late], [p.latency_ms[figure] for p in late], "x", color=colour,
                        markersize=6)
            if curve.closed is not None and figure in curve.closed.latency_ms:
                ax.plot([curve.closed.achieved], [curve.closed.latency_ms[figure]], "s", markerfacecolor="none",
                        color=colour, markersize=7)
        for p in curve.points:
            if "p99" not in p.latency_ms or (p.kept_up and p.level in labelled):
                continue
            if p.kept_up:
                labelled.add(p.level)
            said = f"{format_value(p.level)} {'' if p.kept_up else rate_curve.sustained_words(p)}".rstrip()
            ax.annotate(said, (p.achieved, p.latency_ms["p99"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8, color=colour)
        knee = next((p for p in curve.points if curve.knee is not None and p.level == curve.knee), None)
        if knee is not None and "p99" in knee.latency_ms:
            x, y = knee.achieved, knee.latency_ms["p99"]
            ax.plot([x], [y], "o", markersize=13, markerfacecolor="none", color=colour)
            ax.annotate(f"knee ({format_value(knee.level)})", (x, y), textcoords="offset points", xytext=(8, -12),
                        fontsize=8, color=colour)
        goal = curve.goal
        if goal is not None and goal.reached is not None and found.goal_ms:
            limit = min(found.goal_ms.values())
            err = ([[goal.reached - goal.reached_low], [goal.reached_high - goal.reached]]
                   if goal.reached_low is not None else None)
            ax.errorbar([goal.reached], [limit], xerr=err, fmt="D", color=colour, capsize=4, markersize=5)
    if found.goal_ms:
        for key, limit in found.goal_ms.items():
            ax.axhline(limit, color="#c0392b", linewidth=1, linestyle=":",
                       label=f"goal {key.removesuffix('_ms')} <= {limit:g} ms (diamond: where each layout reaches it)")
    ax.set_yscale("log")
    # Plain numbers as tick labels: a log axis writes its own in math text, off for the user's labels.
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(left=0)
    ax.set_xlabel("transactions a second achieved (mean of the runs)")
    ax.set_ylabel("latency ms (mean of the runs' percentiles)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax.set_title(f"{title}: latency against throughput, per layout")
    return svg(fig, png)


def section(answer: model.Answer, folder: Path) -> str | None:
    """The chart and the answer's lines, when the rate is a factor; None otherwise."""
    found = answer.rate_curves
    if found is None or not any(c.points for c in found.layouts):
        return None
    image = chart(found, answer.experiment.name, folder / FILE)
    notes = "".join(f"<p class='note'>{html.escape(line)}</p>" for line in answer.rate)
    return (f"<h2>Latency against throughput</h2><figure>{image}<figcaption>{html.escape(CAPTION)}</figcaption>"
            f"</figure>{notes}")
