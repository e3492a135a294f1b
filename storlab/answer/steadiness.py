"""What each run showed: whether its per-second throughput (and p99 latency, where its kind has one)
reached a steady state (steady_state.py), where its warm-up really ended beside the declared one (or
the one found and cut, under `warmup_s = "found"`), why a run until steady ended, and
the checkpoints inside its measured part (probes/checkpoints.py); per cell, what that does to its
verdicts: runs not steady, or holding no checkpoint, or different numbers of them, measure another
system than a long run does. The rule that judges one series is storlab.steady_state's (a load
run `until = "steady"` is stopped by it too: workloads/tool.py); this module applies it to the stored
runs, for the answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storlab import timeline
from storlab import steady_state
from storlab.probes import checkpoints
from storlab.results.runs import RunRecord

THROUGHPUT = tuple(m.name for m in timeline.THROUGHPUT)  # the series judged first, in this order
RULE = (f"steady: SNIA's criteria over the measured part cut into {steady_state.WINDOW} equal intervals (range of their "
        f"means within {100 * steady_state.RANGE_LIMIT:.0f} % of their mean, the fitted line's excursion within "
        f"{100 * steady_state.EXCURSION_LIMIT:.0f} %); not steady only when they fail and a CUSUM change test finds a change "
        f"the noise does not explain (p < {steady_state.ALPHA:g}); the run's last second left out; from {steady_state.MIN_POINTS} "
        "measured seconds; warm-up found "
        "by MSER-5; drift: the fitted slope over the measured part with its 95 % interval")


@dataclass(frozen=True)
class RunSeries:
    """One run's per-second series and checkpoints, as the store keeps them."""

    repetition: int
    warmup_s: float  # declared
    measured_s: float | None  # the run's elapsed figure (its measured part)
    series: dict[str, tuple[np.ndarray, np.ndarray]]  # metric -> (t on the run's axis, values)
    seen: list[float]  # when the checkpoint counter moved, on the run's axis
    kept: checkpoints.Kept | None  # None: recorded before storlab counted checkpoints
    warmup_found: bool = False  # warmup_s = "found": `warmup_s` is the warm-up found and cut after the run
    stopped: dict | None = None  # under until = "steady": why its load ended (tool.SteadyWatch)


@dataclass(frozen=True)
class RunState:
    repetition: int
    measured_s: float | None
    declared_warmup_s: float
    found_warmup_s: float | None
    judged: list[steady_state.Judgement]
    steady: bool | None  # every series judged steady; None when none could be judged
    checkpoints: int | None  # inside the measured part; None: not counted for this run
    checkpoint_times_s: list[float]
    setting: str | None
    value: str | None
    cycle_s: float | None
    cycle_bytes: float | None
    log_bytes: float | None  # the WAL or redo the run wrote
    warmup_found: bool = False
    stopped: dict | None = None


def read(store, run: RunRecord) -> RunSeries:
    """A run's per-second throughput and p99 latency, and its checkpoints, from the store."""
    wanted = {m.name for m in (*timeline.THROUGHPUT, timeline.LATENCY_P99_MS)}
    points: dict[str, list[tuple[float, float]]] = {}
    seen = []
    for t, name, value in store.timeline(run.id):
        if name in wanted:
            points.setdefault(name, []).append((t, value))
        elif name == timeline.CHECKPOINT_SEEN.name:
            seen.append(t)
    series = {name: (np.array([t for t, _ in p]), np.array([v for _, v in p])) for name, p in points.items()}
    return RunSeries(run.repetition, float(run.conditions.get("warmup_s") or 0.0), run.figures.get("elapsed_s"), series, seen,
                     store.kept(checkpoints.PROBE, run.id), bool(run.conditions.get("warmup_found")),
                     run.conditions.get("stopped"))


def state(run: RunSeries) -> RunState:
    throughput = next((name for name in THROUGHPUT if name in run.series), None)
    judged, found = [], None
    for name in [throughput, timeline.LATENCY_P99_MS.name]:
        if name is None or name not in run.series:
            continue
        t, x = run.series[name]
        # The last second is cut short where the load ended, and in a run of fixed work holds its sessions
        # finishing one after another: the end of a run, not a change of its steady state.
        t, x = t[:-1], x[:-1]
        judged.append(steady_state.judge(name, t, x, run.warmup_s))
        if name == throughput:
            found = steady_state.found_warmup(t, x)
    verdicts = [j.steady for j in judged if j.steady is not None]
    inside = [t for t in run.seen if t >= run.warmup_s]
    kept = run.kept
    return RunState(run.repetition, run.measured_s, run.warmup_s, found, judged,
                    None if not verdicts else all(verdicts), None if kept is None else len(inside), inside,
                    None if kept is None else kept.setting, None if kept is None else kept.value,
                    None if kept is None else kept.cycle_s, None if kept is None else kept.cycle_bytes,
                    None if kept is None else kept.log_bytes, run.warmup_found, run.stopped)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def stopped_words(stopped: dict) -> str:
    """Why a run until steady ended: steady at a second of its run, or its cap reached."""
    if stopped["by"] == "steady":
        return f"stopped steady at {_seconds(stopped['at_s'])} (its measured part within SNIA's range and excursion)"
    return f"reached its max of {stopped['max_s']} s without a steady state"


def checkpoint_line(runs: list[RunState]) -> str | None:
    """A cell's runs shorter than a checkpoint cycle, without a checkpoint, or with different numbers of
    them, in words; None when every run held as many and as long as a cycle (or none was counted)."""
    counted = [r for r in runs if r.checkpoints is not None]
    if not counted:
        return None
    numbers = sorted({r.checkpoints for r in counted})
    first = counted[0]
    longest = max((r.measured_s or 0.0) for r in counted)
    if first.cycle_bytes is not None:  # InnoDB: a cycle is its redo log filled
        wrote = max(r.log_bytes or 0.0 for r in counted)
        if wrote < first.cycle_bytes:
            moved = "no checkpoint in it" if numbers == [0] else \
                f"its checkpoint moved {', '.join(str(r.checkpoints) for r in counted)} times"
            return (f"shorter than a checkpoint cycle: a {_seconds(longest)} run wrote {wrote / 2**20:.1f} MB of redo, "
                    f"under {first.setting} {first.value} (InnoDB checkpoints as its redo log fills); {moved}")
    if numbers == [0]:
        shorter = "shorter than" if first.cycle_s and longest < first.cycle_s else "no longer than a cycle of"
        return f"measured without a checkpoint: a {_seconds(longest)} run is {shorter} {first.setting} {first.value}"
    if len(numbers) > 1:
        return (f"its runs hold different numbers of checkpoints ({', '.join(str(r.checkpoints) for r in counted)}): "
                "their figures mix runs with more of a checkpoint's writes and runs with less")
    return None


def not_steady_line(runs: list[RunState]) -> str | None:
    """A cell's runs that were not steady, where they changed, and what that does to its verdicts."""
    moved = [r for r in runs if r.steady is False]
    if not moved:
        return None
    said = []
    for r in moved:
        j = next(j for j in r.judged if j.steady is False)
        change = "" if j.change is None else f" by {100 * j.change:+.0f} %"
        said.append(f"run {r.repetition}: {j.metric} changed{change} at {j.changed_at_s:.0f} s")
    return (f"{len(moved)} of {len(runs)} runs not steady ({'; '.join(said)}): its mean mixes two states, and its "
            "verdicts hold for runs of this length only")


def runs_line(runs: list[RunState]) -> str:
    """Each run of a cell in a few words: steady or not, its warm-up found, its checkpoints and when."""
    said = []
    for r in runs:
        words = {True: "steady", False: "not steady", None: "not judged"}[r.steady]
        if r.warmup_found:
            words += f", warm-up found and cut {_seconds(r.declared_warmup_s)}"
        elif r.found_warmup_s is not None:
            words += f", warm-up found {_seconds(r.found_warmup_s)} (declared {_seconds(r.declared_warmup_s)})"
        if r.stopped is not None:
            words += ", " + stopped_words(r.stopped)
        if r.checkpoints is not None:
            times = "" if not r.checkpoint_times_s else " at " + ", ".join(_seconds(t) for t in r.checkpoint_times_s)
            words += f", {r.checkpoints} checkpoint{'s' if r.checkpoints != 1 else ''}{times}"
        said.append(f"run {r.repetition} {words}")
    return "; ".join(said)
