"""The rate as a factor, answered as a curve (vdbench's curve runs, BenchBase's rate phases): for each
layout (each combination of the other factors) the latency percentiles against the throughput
achieved at each rate, the knee where the curve bends, and, with a latency goal, the highest rate each
layout sustains inside it, with its interval over the rounds, and which layout sustains the most.

The knee: of the open-loop points a layout sustained, the one farthest below the straight line from
the first to the last once both axes are scaled to [0, 1] (Kneedle, Satopää et al. 2011), from three
points on, and at least MIN_BEND below it. "max" (closed loop) is drawn beside the curve, not part of it: its latency has no queue in it.

The highest rate inside the goal, in each round: walking up the rates, the last one sustained with
every goal percentile within its limit before the first that is not; between the two, where the
percentile reaches the limit, read along the straight line between their (achieved throughput,
percentile) points (the last one's throughput when the next was not sustained or achieved less). A
round in which every rate stays inside gives its highest rate's throughput as a floor ("at least");
one in which none does, nothing. Over the rounds: the geometric mean and its 95 % t interval on the
logs (a throughput's interval stays above 0); the layouts compared by their ratio round by round (a
paired t interval on the logs, as the ranking reads cells)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from storlab.answer import model
from storlab.answer.analysis import CellResult, Results
from storlab.answer.stats import Spread, Summary, spread
from storlab.labels import short_name
from storlab.labels import format_value
from storlab.rounds import ALPHA
from storlab.workloads import rates

RATE = "workload.rate"
MIN_KNEE_POINTS = 3
# How far below the straight line (on the [0, 1] scales) a point must lie to be a bend, not a wobble.
MIN_BEND = 0.1


@dataclass
class Point:
    """One rate level of a layout: its cell and what its runs achieved."""

    level: Any  # the declared rate, or "max"
    cell: CellResult
    achieved: Summary
    latency: dict[str, Summary]  # percentile figure -> its summary over the runs
    sustained: float | None  # the share of its runs that kept up with the schedule; None for "max"

    @property
    def target(self) -> float | None:
        return rates.target(self.level)


@dataclass
class Goal:
    """The highest rate a layout sustains inside the latency goal."""

    highest_level: Any | None  # the highest declared rate inside the goal in every round
    crossing: Spread | None  # where the goal is reached, throughput over the rounds
    floor: bool  # in some round every rate stayed inside: its figure is a floor
    rounds: dict[int, float]  # round -> its throughput inside the goal
    below: int  # rounds in which not even the lowest rate stayed inside


@dataclass
class Curve:
    label: str  # the other factors' values
    points: list[Point]  # the open-loop rates, rising
    closed: Point | None  # "max"
    knee: Point | None = None
    goal: Goal | None = None


@dataclass
class RateAnswer:
    curves: list[Curve]
    goal: dict[str, float] | None  # percentile key (p99_ms) -> ms
    most: tuple[Curve, Curve, float, float, float] | None = None  # best, next, ratio and its interval
    notes: list[str] = field(default_factory=list)


def on_curve(p: Point) -> bool:
    """A point of its layout's curve: sustained in most of its runs. The knee reads only these, and the
    report draws only these on the curve (the rest apart, where they ended up)."""
    return (p.sustained or 0) > 0.5


def knee(points: list[Point], figure: str = rates.P99.name) -> Point | None:
    """Kneedle on the sustained open-loop points (module docstring)."""
    sustained = [p for p in points if on_curve(p) and figure in p.latency]
    if len(sustained) < MIN_KNEE_POINTS:
        return None
    xs = np.array([p.achieved.mean for p in sustained])
    ys = np.array([p.latency[figure].mean for p in sustained])
    if np.ptp(xs) <= 0 or np.ptp(ys) <= 0:
        return None
    gap = (xs - xs.min()) / np.ptp(xs) - (ys - ys.min()) / np.ptp(ys)
    best = int(np.argmax(gap))
    return sustained[best] if 0 < best < len(sustained) - 1 and gap[best] >= MIN_BEND else None


def _inside(run: dict[str, float], goal: dict[str, float]) -> bool:
    return run.get(rates.SUSTAINED.name, 0.0) > 0 and all(
        rates.GOALS[key] in run and run[rates.GOALS[key]] <= limit for key, limit in goal.items())


def _crossing(below: dict[str, float], above: dict[str, float], goal: dict[str, float]) -> float:
    """Where the first goal percentile to reach its limit does, between a run inside and the next outside."""
    x0, x1 = below[rates.TPS.name], above.get(rates.TPS.name, 0.0)
    if above.get(rates.SUSTAINED.name, 0.0) <= 0 or x1 <= x0:
        return x0
    found = x1
    for key, limit in goal.items():
        y0, y1 = below[rates.GOALS[key]], above.get(rates.GOALS[key], math.inf)
        if y1 > limit and math.isfinite(y1) and y1 > y0:
            found = min(found, x0 + (limit - y0) * (x1 - x0) / (y1 - y0))
    return found


def goal_answer(points: list[Point], goal: dict[str, float]) -> Goal:
    rounds = sorted({r.repetition for p in points for r in p.cell.runs})
    found: dict[int, float] = {}
    floor, below, inside_every = False, 0, []
    for rnd in rounds:
        runs = [(p, next((r.figures for r in p.cell.runs if r.repetition == rnd), None)) for p in points]
        runs = [(p, r) for p, r in runs if r is not None]
        last = None
        for i, (p, run) in enumerate(runs):
            if not _inside(run, goal):
                if last is not None:
                    found[rnd] = _crossing(last, run, goal)
                break
            last = run
        else:
            if last is not None:
                found[rnd], floor = last[rates.TPS.name], True
        if last is None:
            below += 1
    for p in points:
        if p.cell.runs and all(_inside(r.figures, goal) for r in p.cell.runs):
            inside_every.append(p.level)
        else:
            break
    return Goal(inside_every[-1] if inside_every else None, spread(list(found.values())), floor, found, below)


def _paired(a: Goal, b: Goal) -> tuple[float, float, float] | None:
    """a's throughput inside the goal over b's, round by round: the ratio and its 95 % interval."""
    shared = sorted(set(a.rounds) & set(b.rounds))
    logs = [math.log(a.rounds[r] / b.rounds[r]) for r in shared if a.rounds[r] > 0 and b.rounds[r] > 0]
    if not logs:
        return None
    mean = float(np.mean(logs))
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = float(sps.t.ppf(1 - ALPHA / 2, len(logs) - 1) * np.std(logs, ddof=1) / math.sqrt(len(logs)))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def answer(results: Results) -> RateAnswer | None:
    """The curves, when the rate is a factor of two levels or more; None otherwise."""
    levels = results.factors.get(RATE)
    if not levels or len(levels) < 2:
        return None
    goal = results.experiment.answer.latency_goal if results.experiment is not None else None
    layouts: dict[str, list[CellResult]] = {}
    for c in results.measured:
        other = {k: v for k, v in c.cell.factors.items() if k != RATE}
        label = " ".join(f"{short_name(k)}={format_value(v)}" for k, v in other.items()) or "(one layout)"
        layouts.setdefault(label, []).append(c)
    curves = []
    for label, cells in layouts.items():
        points = []
        for c in cells:
            latency = {f: c.figures[f] for f in rates.GOALS.values() if f in c.figures}
            sustained = c.figures.get(rates.SUSTAINED.name)
            if rates.TPS.name not in c.figures:
                continue
            points.append(Point(c.cell.factors[RATE], c, c.figures[rates.TPS.name], latency,
                                None if sustained is None else sustained.mean / 100))
        open_loop = sorted((p for p in points if p.target is not None), key=lambda p: p.target)
        closed = next((p for p in points if p.target is None), None)
        curve = Curve(label, open_loop, closed, knee(open_loop))
        if goal:
            curve.goal = goal_answer(open_loop, goal)
        curves.append(curve)
    found = RateAnswer(curves, goal)
    ranked = sorted((c for c in curves if c.goal and c.goal.crossing), key=lambda c: -c.goal.crossing.mean)
    if len(ranked) >= 2:
        paired = _paired(ranked[0].goal, ranked[1].goal)
        if paired is not None:
            found.most = (ranked[0], ranked[1], *paired)
    return found


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _typed_point(p: Point) -> model.RatePoint:
    return model.RatePoint(level=p.level, cell=p.cell.cell.id, target=p.target, achieved=p.achieved.mean,
                           latency_ms={name.split("_")[1]: s.mean for name, s in p.latency.items()}, sustained=p.sustained,
                           kept_up=None if p.target is None else on_curve(p))


def _typed_goal(g: Goal) -> model.RateGoal:
    c = g.crossing
    return model.RateGoal(highest_level=g.highest_level, reached=c.mean if c else None,
                          reached_low=_number(c.low) if c else None, reached_high=_number(c.high) if c else None,
                          rounds_counted=c.n if c else 0, floor=g.floor, per_round=dict(g.rounds), below=g.below)


def typed(found: RateAnswer) -> model.RateCurves:
    """The curves as the answer holds them: every figure the terminal, the JSON and the report show."""
    most = None
    if found.most:
        best, other, ratio, low, high = found.most
        most = model.RateMost(best=best.label, other=other.label, ratio=ratio, low=_number(low), high=_number(high))
    return model.RateCurves(
        layouts=[model.RateLayout(label=c.label, points=[_typed_point(p) for p in c.points],
                                  closed=_typed_point(c.closed) if c.closed else None,
                                  knee=c.knee.level if c.knee else None, goal=_typed_goal(c.goal) if c.goal else None)
                 for c in found.curves],
        goal_ms=found.goal, most=most)


def goal_text(goal: dict[str, float]) -> str:
    return " and ".join(f"{key.removesuffix('_ms')} <= {limit:g} ms" for key, limit in goal.items())


def _txn(value: float) -> str:
    return f"{value:,.0f} txn/s"


def sustained_words(p: model.RatePoint) -> str:
    """'not sustained', 'sustained in 50 % of runs'; '' for a rate sustained in every run, or "max"."""
    if p.sustained is None or p.sustained >= 1:
        return ""
    return "not sustained" if p.sustained == 0 else f"sustained in {100 * p.sustained:.0f} % of runs"


def _point(p: model.RatePoint) -> str:
    said = f"{format_value(p.level)}: {_txn(p.achieved)}"
    latency = ", ".join(f"{name} {p.latency_ms[name]:.1f}" for name in ("p50", "p99") if name in p.latency_ms)
    said += f" ({latency} ms)" if latency else ""
    words = sustained_words(p)
    return said + (f" {words}" if words else "")


def lines(found: model.RateCurves) -> list[str]:
    """The curve and the goal's answer in words, for `storlab show` and under the report's chart."""
    out = ["rate curve: throughput achieved and latency (p50, p99) at each rate, per layout; "
           "latency from each transaction's scheduled start, \"max\" closed loop"]
    for c in found.layouts:
        parts = [_point(p) for p in c.points] + ([_point(c.closed)] if c.closed else [])
        knee_said = f"; knee at {format_value(c.knee)}" if c.knee is not None else ""
        out.append(f"  {c.label}: " + "; ".join(parts) + knee_said)
    if found.goal_ms:
        out.append(f"latency goal {goal_text(found.goal_ms)}: the highest rate each layout sustains inside it")
        for c in sorted(found.layouts, key=lambda c: -(c.goal.reached if c.goal and c.goal.reached is not None else -1)):
            g = c.goal
            if g is None or g.reached is None:
                out.append(f"  {c.label}: none of its rates (not even {format_value(c.points[0].level) if c.points else '—'})")
                continue
            level = (f"{format_value(g.highest_level)} txn/s in every round" if g.highest_level is not None
                     else "no declared rate in every round")
            interval = (f" [{g.reached_low:,.0f}, {g.reached_high:,.0f}] (geometric mean, 95 % CI, {g.rounds_counted} rounds)"
                        if g.reached_low is not None else " (1 round)")
            floor = "at least " if g.floor else ""
            said = f"  {c.label}: {level}; where the goal is reached: {floor}{_txn(g.reached)}{interval}"
            if g.below:
                said += f"; in {g.below} round(s) not even the lowest rate stayed inside"
            out.append(said)
        if found.most:
            m = found.most
            if m.low is not None:
                verdict = "more, significantly" if m.low > 1 else "not significantly more"
                out.append(f"  most: {m.best}, {m.ratio:.2f}x {m.other} [{m.low:.2f}, {m.high:.2f}] "
                           f"(paired by round): {verdict}")
            else:
                out.append(f"  most: {m.best}, {m.ratio:.2f}x {m.other} (one round: no interval)")
    return out
