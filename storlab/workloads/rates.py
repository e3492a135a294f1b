"""What the kinds driven by a load generator of the field (pgbench, sysbench) share: runs by duration,
the rate (open loop, transactions a second on a Poisson schedule, or "max": closed loop) as a factor
like any key, a latency goal for the answer, the figures they report and which one ranks the cells,
and when a run counts as having sustained its rate.

A rate the layout cannot sustain is an answer, not a failure: the run is recorded with what it
achieved and `sustained_percent` 0."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from pydantic import field_validator, model_validator

from storlab import factors, timeline
from storlab import steady_state
from storlab.workloads.kind import FOUND, Figure, UnitOfWork, Warmup, Workload, WorkloadParams

MAX = "max"  # the rate level that means closed loop: each session sends its next transaction at once
MAX_RATE = 1_000_000  # transactions a second; more is a typing mistake on any machine storlab runs on
MAX_DURATION_S = 3600  # a run's measured part; pgbench logs every transaction, kept until the run ends
MAX_CYCLES = 12
DEFAULT_DURATION_S = 10.0
MAX_GOAL_MS = 3_600_000
# A Poisson schedule of `rate` for `duration` seconds draws rate x duration transactions give or take
# its square root: a shortfall beyond three of those (and beyond 2 %) is the server falling behind.
SHORTFALL_SIGMAS = 3.0
MIN_SHORTFALL = 0.02

TPS = Figure("transactions_per_s", "txn/s", "txn/s", "higher")
P99 = Figure("latency_p99_ms", "ms", "p99 ms", "lower")
P50 = Figure("latency_p50_ms", "ms", "p50 ms", "lower")
P95 = Figure("latency_p95_ms", "ms", "p95 ms", "lower", shown=False)
AVERAGE = Figure("latency_avg_ms", "ms", "average ms", "lower", shown=False)
TARGET = Figure("target_rate", "txn/s", "target txn/s", shown=False)
ACHIEVED = Figure("achieved_percent", "%", "% of target", "higher", shown=False)
SUSTAINED = Figure("sustained_percent", "%", "sustained %", "higher", shown=False)
ERRORS = Figure("errors", "txn", "errors", shown=False)
ELAPSED = Figure("elapsed_s", "s", "measured s", shown=False)
TRANSACTIONS = Figure("transactions", "txn", "transactions", shown=False)
CLIENT_CPU = Figure("client_cpu_s", "s", "client CPU s", shown=False)
SERVER_CPU = Figure("server_cpu_s", "s", "server CPU s", shown=False)
CLIENT_SHARE = Figure("client_cpu_percent", "%", "client CPU % of the machine", shown=False)
SERVER_SHARE = Figure("server_cpu_percent", "%", "server CPU % of the machine", shown=False)
CLIENT_THREADS_BUSY = Figure("client_threads_busy_percent", "%", "client threads busy %", shown=False)

# The figures every such kind reports, the closed-loop headline first; a kind adds its own after them.
# A load generator's work is its transactions; its latency goal only says how the answer reads the runs.
PER_TRANSACTION = UnitOfWork("transactions", "transaction", 1)
ANSWER_KEYS = frozenset({"latency_goal"})
COMMON = (TPS, P99, P50, P95, AVERAGE, TARGET, ACHIEVED, SUSTAINED, ERRORS, ELAPSED, TRANSACTIONS,
          CLIENT_CPU, SERVER_CPU, CLIENT_SHARE, SERVER_SHARE, CLIENT_THREADS_BUSY)
# Shown under a rate (the percentiles against the target are the question there).
SHOWN_UNDER_RATE = (SUSTAINED.name, ACHIEVED.name)
# The percentile a latency goal names, and the figure that holds it.
GOALS = {"p50_ms": P50.name, "p95_ms": P95.name, "p99_ms": P99.name}


def _rate(v: Any, what: str) -> float | str:
    if v == MAX:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"expected {what} or a list of them, got {factors.show(v)}")
    if v > MAX_RATE:
        raise ValueError(f"{v:,} transactions a second is more than the limit of {MAX_RATE:,}")
    return v


def target(rate: Any) -> float | None:
    """The transactions a second a rate level asks for; None for closed loop ("max", or no rate)."""
    return None if rate is None or rate == MAX else float(rate)


def under_rate(declared_rate: Any) -> bool:
    """Some cell runs on a schedule (the declared `rate`, one level or a list)."""
    return any(target(level) is not None for level in factors.values(declared_rate))


STEADY = "steady"
UNTIL_KEYS = ("max", "until", "least")
DEFAULT_LEAST_S = 30  # 6 s in each of SNIA's 5 intervals: a 5-20 % noise a second averages to 2-8 %


@dataclass(frozen=True)
class Until:
    """`duration_s = { max = …, until = "steady" }`: the run ends once its measured part (after the warm-up
    declared, or found so far), at least `least` seconds long, holds SNIA's range and excursion on its
    per-second throughput (steady_state.snia_holds), checked each second, or at `max` (fio's `ss=` and
    runtime for a database's throughput, its window the part the figures will keep)."""

    max: int
    least: int

    @property
    def level(self) -> dict[str, Any]:
        return {"max": self.max, "until": STEADY, "least": self.least}


def _whole(table: Mapping[str, Any], key: str, least: int, most: int, default: int | None = None) -> int:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= most:
        raise ValueError(f"{key}: expected a whole number of seconds from {least} to {most}, got {factors.show(v)}")
    return v


def _duration_level(v: Any, what: str) -> int | dict[str, Any]:
    """Whole seconds (both tools take their run time so), or a run until steady (Until) as a table."""
    if not isinstance(v, dict):
        return factors.at_most(MAX_DURATION_S)(v, what)
    unknown = sorted(set(v) - set(UNTIL_KEYS))
    if unknown:
        raise ValueError(f"{factors.show(unknown[0])} is not a key of a run until steady (one of {', '.join(UNTIL_KEYS)})")
    if v.get("until") != STEADY:
        raise ValueError(f'until: expected "{STEADY}", got {factors.show(v.get("until"))}')
    if "max" not in v:
        raise ValueError("max: a run until steady needs its cap, the most seconds it may last")
    longest = _whole(v, "max", steady_state.MIN_POINTS, MAX_DURATION_S)
    return Until(longest, _whole(v, "least", steady_state.MIN_POINTS, longest, min(DEFAULT_LEAST_S, longest))).level


def until(level: Any) -> Until | None:
    """A duration_s level's run until steady; None for whole seconds."""
    return Until(level["max"], level["least"]) if isinstance(level, dict) else None


class RateParams(Warmup, WorkloadParams):
    """The keys of a kind driven by a load generator of the field (its own keys come beside them)."""

    # The kind's figures (its Workload's), of which `headline` must name one that ranks.
    figures: ClassVar[tuple[Figure, ...]] = COMMON
    duration_s: int | dict[str, Any] | list[int | dict[str, Any]] | None = None
    rate: float | int | str | list[float | int | str] | None = None
    # How the answer reads the runs (not what is measured): the highest rate each layout sustains
    # with this percentile at most this many ms.
    latency_goal: dict[str, float] | None = None
    headline: str | None = None  # the figure that ranks the cells; by default txn/s, or p99 under a rate
    # Whole checkpoint cycles on PostgreSQL: each run lasts this many times the cell's checkpoint_timeout,
    # from the checkpoint storlab forces right before every run (experiment/matrix.py sets duration_s).
    checkpoint_cycles: int | None = None

    @field_validator("duration_s", mode="before")
    @classmethod
    def _duration(cls, v):
        return factors.optional(v, _duration_level, f"a whole number of seconds from 1 to {MAX_DURATION_S}, or "
                                f'{{ max = …, until = "{STEADY}" }}')

    @field_validator("checkpoint_cycles", mode="before")
    @classmethod
    def _cycles(cls, v):
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_CYCLES:
            raise ValueError(f"expected a whole number of checkpoint cycles from 1 to {MAX_CYCLES}, got {factors.show(v)}")
        return v

    @field_validator("headline", mode="before")
    @classmethod
    def _headline(cls, v):
        return check_headline(v, cls.figures)

    @model_validator(mode="after")
    def _cycles_alone(self):
        if self.checkpoint_cycles is not None:
            for key in ("duration_s", "warmup_s", "transactions"):
                if getattr(self, key, None) is not None:
                    raise factors.KeyProblem(("workload", "checkpoint_cycles"), f"the runs' length is its cycles of "
                                             f"checkpoint_timeout from the checkpoint before each run; give "
                                             f"checkpoint_cycles or {key}, not both")
        return self

    def goal_ms(self) -> dict[str, float] | None:
        return self.latency_goal

    def cycles_per_run(self) -> int | None:
        return self.checkpoint_cycles

    def check_engine(self, engine: Any) -> None:
        if self.checkpoint_cycles is not None and engine.checkpoint_cycle_s({}) is None:
            raise factors.KeyProblem(("workload", "checkpoint_cycles"), f"{engine.title} has no checkpoint cycle in "
                                     "time (InnoDB checkpoints as its redo log fills); give duration_s")

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v):
        return factors.optional(
            v, _rate, f'a rate in transactions a second (above 0, at most {MAX_RATE:,}) or "max" (closed loop)')

    @field_validator("latency_goal", mode="before")
    @classmethod
    def _goal(cls, v):
        if v is None:
            return v
        if not isinstance(v, dict) or not v:
            raise ValueError(f"expected a table such as {{ p99_ms = 20 }}, got {factors.show(v)}")
        for key, limit in v.items():
            if key not in GOALS:
                raise ValueError(f"{factors.show(key)} is not a percentile storlab records (one of {', '.join(GOALS)})")
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit <= MAX_GOAL_MS:
                raise ValueError(f"{key}: expected milliseconds above 0 and at most {MAX_GOAL_MS:,}, got {factors.show(limit)}")
        return {key: float(limit) for key, limit in v.items()}

    @model_validator(mode="after")
    def _whole_seconds(self):
        if any(w not in (None, FOUND) and w != int(w) for w in factors.values(self.warmup_s)):
            raise factors.KeyProblem(("workload", "warmup_s"), "whole seconds for a load generator's run (it counts "
                                     "its run time so)")
        return self

    @model_validator(mode="after")
    def _a_transaction_at_least(self):
        shortest = min(_least_s(level) for level in factors.values(self.duration_s)) if self.duration_s is not None \
            else DEFAULT_DURATION_S
        for rate in factors.values(self.rate):
            if target(rate) is not None and target(rate) * shortest < 1:
                raise factors.KeyProblem(("workload", "rate"), f"{rate:g} transactions a second over a {shortest:g} s "
                                         "run expects less than one transaction, so no latency or throughput could "
                                         f"be measured; give at least {1 / shortest:g}")
        return self

    @model_validator(mode="after")
    def _goal_needs_rates(self):
        if self.latency_goal is not None and sum(1 for r in factors.values(self.rate) if target(r) is not None) < 2:
            raise factors.KeyProblem(("workload", "latency_goal"), "the highest rate inside a goal needs a rate sweep: "
                                     "give rate a list of two or more rates, such as [500, 1000, 2000, \"max\"]")
        return self

    @property
    def until(self) -> Until | None:
        """One cell's run until steady, if its duration_s is one."""
        return until(self.duration_s)

    @property
    def duration(self) -> float:
        """The measured seconds of a run by duration (warmup_s comes before them); under until steady,
        the most it may last."""
        if self.until is not None:
            return float(self.until.max)
        return float(self.duration_s) if self.duration_s is not None else DEFAULT_DURATION_S

    @property
    def target(self) -> float | None:
        return target(self.rate)


def _least_s(level: Any) -> float:
    """The shortest measured part a duration_s level allows."""
    found = until(level)
    return float(level) if found is None else float(found.least)


class RateWorkload(Workload):
    """A kind run by a load generator of the field: its work is transactions, its throughput transactions
    a second, its latency goal read by the answer only; it ranks by what is declared (figures_of), and
    creates its own tables, each in one file. A kind adds its name, Params, figures, engines, prepare and load."""

    unit_of_work = PER_TRANSACTION
    throughput = timeline.TRANSACTIONS_PER_S
    answer_keys = ANSWER_KEYS

    def figures_of(self, declared: Mapping[str, Any]) -> tuple[Figure, ...]:
        return figures_of(self.figures, declared)

    def check_layout(self, layout: Any) -> None:
        if any(n != 1 for n in factors.values(layout.data_files)):
            raise factors.KeyProblem(("layout", "data_files"), f"{self.name} creates its own tables, each in one "
                                     "file: data_files = 1 (the default)")
        if any(isinstance(ref, dict) for ref in factors.values(layout.data_on)):
            raise factors.KeyProblem(("layout", "data_on"), f"{self.name} creates its own tables, each in one file: "
                                     "name one placement, not a ratio")


def check_headline(declared: str | None, figures: tuple[Figure, ...]) -> str | None:
    """The `headline` a file names: one of the kind's figures that is better one way."""
    if declared is None:
        return None
    ranked = [f.name for f in figures if f.better]
    if declared not in ranked:
        raise ValueError(f"{factors.show(declared)} is not a figure that ranks (one of {', '.join(ranked)})")
    return declared


def figures_of(figures: tuple[Figure, ...], declared: Mapping[str, Any]) -> tuple[Figure, ...]:
    """The kind's figures for an experiment's declared `[workload]`: the one that ranks first (the file's
    `headline`, else p99 under a rate, else txn/s), and the rate's figures shown when there is one."""
    rated = under_rate(declared.get("rate"))
    first = declared.get("headline") or (P99.name if rated else TPS.name)
    shown = [Figure(f.name, f.unit, f.label, f.better, f.shown or (rated and f.name in SHOWN_UNDER_RATE)) for f in figures]
    return tuple(sorted(shown, key=lambda f: f.name != first))


def sustained(rate: float, achieved_tps: float, duration_s: float) -> bool:
    """The run kept up with its schedule: it completed what `rate` asks of `duration_s`, short by no
    more than a Poisson schedule's own variation."""
    expected = rate * duration_s
    shortfall = max(MIN_SHORTFALL, SHORTFALL_SIGMAS / math.sqrt(expected)) if expected > 0 else 1.0
    return achieved_tps >= rate * (1 - shortfall)


def rate_figures(rate: float | None, achieved_tps: float, duration_s: float, sustained_run: bool | None = None) -> dict[str, float]:
    """The target, the share of it achieved and whether it was sustained (none without a rate).
    `sustained_run`: the tool's own word that it fell behind (sysbench's full queue), else the count decides."""
    if rate is None:
        return {}
    on_schedule = sustained(rate, achieved_tps, duration_s) if sustained_run is None else sustained_run and sustained(
        rate, achieved_tps, duration_s)
    return {TARGET.name: rate, ACHIEVED.name: 100 * achieved_tps / rate, SUSTAINED.name: 100.0 if on_schedule else 0.0}


def cores() -> int:
    """The cores this process may run on, as the client and the server share them."""
    return len(os.sched_getaffinity(0))


def cpu_figures(client_cpu_s: float, server_cpu_s: float, wall_s: float, client_threads: int) -> dict[str, float]:
    """The client's CPU beside the server's, over the tool's whole life (connections included)."""
    n = cores()
    found = {CLIENT_CPU.name: client_cpu_s, SERVER_CPU.name: server_cpu_s}
    if wall_s > 0:
        found[CLIENT_SHARE.name] = 100 * client_cpu_s / (wall_s * n)
        found[SERVER_SHARE.name] = 100 * server_cpu_s / (wall_s * n)
        found[CLIENT_THREADS_BUSY.name] = 100 * client_cpu_s / (wall_s * min(client_threads, n))
    return found
