"""The device's capability (`storlab io`) beside what the database drove on it, as the answer holds it
(storlab.answer.capability): per device, each fio job's IOPS and MiB/s, and the busiest cell's mean
and peak there."""

from __future__ import annotations

from pathlib import Path

from storlab.answer import model
from storlab.report.charts import plt, svg


def _name(c: model.Capability) -> str:
    return f"{c.placement} ({c.target})" if c.placement else f"{c.target} (not a placement of this experiment)"


def chart(capabilities: list[model.Capability], png: Path) -> str:
    """Per device, IOPS and MiB/s of each fio job, and beside them what the busiest cell drove there."""
    heights = [0.8 + 0.28 * (len(c.jobs) + (2 if c.database else 0)) for c in capabilities]
    fig, axes = plt.subplots(len(capabilities), 2, figsize=(9, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for c, (left, right) in zip(capabilities, axes):
        names = [j.job for j in c.jobs]
        iops = [j.iops for j in c.jobs]
        mb_s = [j.mb_s for j in c.jobs]
        colour = ["#4e79a7"] * len(c.jobs)
        if c.database:
            names += [f"database mean ({c.database.label})", f"database peak ({c.database.label})"]
            iops += [c.database.iops_mean, c.database.iops_peak]
            mb_s += [c.database.mb_s_mean, c.database.mb_s_peak]
            colour += ["#f28e2b", "#e15759"]
        y = range(len(names))
        left.barh(y, iops, color=colour)
        left.set_yticks(y, names, fontsize=7)
        left.invert_yaxis()
        left.set_xlabel("IOPS", fontsize=8)
        left.set_title(_name(c), fontsize=9, loc="left")
        right.barh(y, mb_s, color=colour)
        right.set_yticks(y, [])
        right.invert_yaxis()
        right.set_xlabel("MiB/s", fontsize=8)
        for ax in (left, right):
            ax.grid(axis="x", alpha=0.3)
            ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("device capability (storlab io, fio) beside what the database drove", fontsize=10)
    fig.tight_layout()
    return svg(fig, png)


def table_rows(capabilities: list[model.Capability]) -> list[list[str]]:
    out = []
    for c in capabilities:
        for j in c.jobs:
            out.append([_name(c), c.device or "?", j.job, f"{j.iops:,.0f}", f"{j.mb_s:,.1f}", _ms(j.lat_p99_ms),
                        "; ".join(j.flags)])
        if c.database:
            d = c.database
            out.append([_name(c), c.device or "?", f"database, busiest cell ({d.label})",
                        f"{d.iops_mean:,.0f} mean, {d.iops_peak:,.0f} peak",
                        f"{d.mb_s_mean:,.1f} mean, {d.mb_s_peak:,.1f} peak", "", f"whole device, every {d.period_s:g} s"])
    return out


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
