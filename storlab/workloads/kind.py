"""What every workload kind declares: its parameters (the `[workload]` keys it accepts, each a factor
when given a list), what it prepares in a fresh instance, the load it runs, and the figures it
reports. The runner and the answer know workloads only through this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Mapping, Protocol

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator, model_validator

from storlab import factors
from storlab import steady_state
from storlab.engines.base import Engine, Instance
from storlab.probes.kept import KeptCell
from storlab.probes.part import Part
from storlab.timeline import METRICS, Metric


@dataclass(frozen=True)
class Figure:
    """A number a run reports: stored as (name, value, unit); `better` says which way is good."""

    name: str
    unit: str
    label: str  # its column title
    better: str | None = None  # "lower", "higher", or None for a count
    shown: bool = True  # a column of `storlab show`


ELAPSED = Figure("elapsed_s", "s", "elapsed s", "lower")


@dataclass(frozen=True)
class UnitOfWork:
    """What a kind's work is counted in: the figure every run reports, and how many of it make one unit.
    What explains a difference divides each cell's waits by it (waits per 1,000 rows, per transaction)."""

    figure: str
    name: str  # "1,000 rows"
    per_unit: float

    def units(self, value: float) -> float:
        return value / self.per_unit
# What the server sent to temporary files during a run (sorts and hashes beyond their memory), as the
# engine counts it (Instance.temporary_files): a kind that runs the user's SQL declares them. A column
# of `storlab show` only where some run has it (PostgreSQL's MB, MariaDB's disk tables).
TEMPORARY = (
    Figure("temp_mb", "MB", "temp MB"),
    Figure("temp_files", "files", "temp files", shown=False),
    Figure("tmp_disk_tables", "tables", "disk tmp tables"),
    Figure("tmp_files", "files", "tmp files", shown=False),
    Figure("sort_merge_passes", "passes", "sort merge passes", shown=False),
)


@dataclass
class Measurement:
    """One run of a load, every figure on the run's own time axis (0 = the load's first start)."""

    elapsed_s: float
    figures: dict[str, float]
    timeline: list[tuple[float, str, float]] = field(default_factory=list)
    start_epoch: float = 0.0  # the load's first start, epoch seconds, to place the probes' samples
    # Under `warmup_s = "found"`: the seconds found and cut from the figures (0: none found).
    warmup_cut_s: float | None = None
    # Under `until = "steady"`: why the load ended (tool.SteadyWatch.stopped), kept with the run's conditions.
    stopped: dict[str, Any] | None = None
    # What the kind keeps of the run beyond its figures (a replay's errors by kind), as JSON, kept with the
    # run's conditions under `workload`; its part of the answer reads it (Workload.part).
    kept: dict[str, Any] | None = None


Progress = Callable[[int, int], None]


@dataclass
class Footprint:
    """What one run of a load writes: tables and indexes (over the data files), and log."""

    data: int = 0
    log: int = 0


class Load(Protocol):
    """The sessions of one run: opened first, so the probes can be pointed at them, then run at once."""

    def open(self) -> list[int]:
        """Connect every session; the engine's session ids."""

    def run(self, on_progress: Progress | None = None) -> Measurement: ...

    def close(self) -> None: ...


MAX_WARMUP_S = 3600
MIN_STALL_S, MAX_STALL_S = 2, 86400
# A run's wall-clock limit: below 10 s it would fail runs for the machine's hiccups (a checkpoint, a
# sync) rather than for a statement that never ends; a week is seven times the default
# (DEFAULT_RUN_LIMIT_S), more than an honest run could want.
MIN_RUN_LIMIT_S, MAX_RUN_LIMIT_S = 10, 7 * 86400
# The default, a day: the seeds' runs took up to an hour each on their devices and a 1 TB table population six
# hours (seeds 000, 001), so no honest run comes near it on a machine fit to benchmark; a statement
# that never ends holds an instance, or a fleet worker, a day at most. Declare less with run_limit_s.
DEFAULT_RUN_LIMIT_S = 86400.0
MAX_CONNECTIONS = 1024

# `connections`, a factor like any workload key, for every kind whose load runs in several sessions.
Connections = Annotated[int | list[int], BeforeValidator(
    lambda v: factors.factor(v, factors.at_most(MAX_CONNECTIONS), "a positive integer"))]


class WorkloadParams(BaseModel):
    """The `[workload]` table; each kind adds its own keys and refuses the others."""

    model_config = ConfigDict(extra="forbid")

    # The run's deadlines (storlab.running.stall): seconds without an answer from the server, and seconds from
    # the workload's prepare to the end of its load, before the run fails and its instance is stopped.
    # One number each for the experiment, not factors.
    stall_after_s: float | None = None
    run_limit_s: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _ends_by_itself(cls, data):
        # A run until steady is a run by duration stopped early: a kind without duration_s has none to stop.
        if isinstance(data, dict) and "duration_s" not in cls.model_fields and any(
                isinstance(level, dict) and "until" in level for level in factors.values(data.get("duration_s"))):
            raise factors.KeyProblem(("workload", "duration_s"), f"{factors.show(data.get('kind'))} does not run by "
                                     'duration, so its runs cannot end once steady (until = "steady" ends a pgbench or '
                                     "sysbench run by duration)")
        return data

    @field_validator("stall_after_s", mode="before")
    @classmethod
    def _stall_after(cls, v):
        return _seconds(v, MIN_STALL_S, MAX_STALL_S)

    @field_validator("run_limit_s", mode="before")
    @classmethod
    def _run_limit(cls, v):
        return _seconds(v, MIN_RUN_LIMIT_S, MAX_RUN_LIMIT_S)

    @property
    def run_limit(self) -> float:
        """The declared wall-clock limit per run, or the default."""
        return self.run_limit_s or DEFAULT_RUN_LIMIT_S

    def check_engine(self, engine: Engine) -> None:
        """Raise factors.KeyProblem naming a key this engine cannot honour (the default: all can, for
        the engines the kind runs on: Workload.check_engine asks that first)."""

    def sql_files(self) -> list[tuple[str, str]]:
        """(key, file) for each SQL file these parameters name, as written (relative to the experiment file)."""
        return []

    @property
    def file_bytes(self) -> dict[str, int]:
        """key -> the largest file it may name, in bytes, where that is not an experiment file's limit."""
        return {}

    # What the cells and the answer ask of every kind's parameters, so that nothing outside a kind's
    # module names its keys: the kinds that take the key answer (rates.RateParams), the others None.
    def goal_ms(self) -> dict[str, float] | None:
        """The latency goal the answer reads the runs against, percentile -> ms ({"p99_ms": 20}): the
        highest rate each layout sustains inside it. None: the kind takes no goal."""
        return None

    def cycles_per_run(self) -> int | None:
        """How many whole checkpoint cycles each run lasts, from the checkpoint forced before it: the
        cells set each run's duration_s from the cell's checkpoint_timeout (experiment/matrix.py).
        None: the runs' length is declared otherwise."""
        return None


def _seconds(v, least: float, most: float) -> float | None:
    """One number of seconds from `least` to `most` (nan fails both comparisons), or None."""
    if v is None:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not least <= v <= most:
        raise ValueError(f"expected a number of seconds from {least:g} to {most:g} (one value, not a factor), "
                         f"got {factors.show(v)}")
    return float(v)


FOUND = "found"  # warmup_s: the warm-up MSER-5 finds in each run's per-second throughput, cut after the run


def _warmup_level(v: Any, what: str) -> float | str:
    return v if v == FOUND else factors.seconds(MAX_WARMUP_S)(v, what)


class Warmup(BaseModel):
    """`warmup_s`, for kinds that run many transactions: the first seconds of each run are left out of
    its figures (caches and the WAL fill up, sessions ramp up), though they stay on its timeline.
    `"found"`: the warm-up MSER-5 finds in each run's per-second throughput once it has ended
    (steady_state.py), for a kind that can recompute its figures from any second on."""

    warmup_s: float | str | list[float | str] | None = None
    # Why the kind cannot cut a warm-up found after the run, said when a file asks for one; None: it can.
    cannot_cut_found: ClassVar[str | None] = (
        "its figures time a fixed amount of work, and a warm-up found in each run would leave each run a "
        "different amount of it to time")

    @field_validator("warmup_s", mode="before")
    @classmethod
    def _warmup(cls, v):
        return factors.optional(
            v, _warmup_level, f'a number of seconds from 0 to {MAX_WARMUP_S}, or "{FOUND}"')

    @model_validator(mode="after")
    def _found_cut(self):
        if FOUND in factors.values(self.warmup_s) and self.cannot_cut_found is not None:
            raise factors.KeyProblem(("workload", "warmup_s"), f'"{FOUND}" cannot be cut from this kind\'s runs: '
                                     f"{self.cannot_cut_found}; give the warm-up in seconds")
        return self

    @property
    def declared_warmup(self) -> float:
        """The seconds declared to be cut before a run starts (0 when none, or when found after it)."""
        return 0.0 if self.warmup_s in (None, FOUND) else float(self.warmup_s)

    @property
    def finds_warmup(self) -> bool:
        return self.warmup_s == FOUND


def found_cut(timeline: list[tuple[float, str, float]], metric: Metric) -> float:
    """The warm-up to cut from a run by `warmup_s = "found"`: MSER-5's over its per-second `metric`, as
    the answer finds it (steady_state.warmup_to_cut)."""
    points = sorted((t, v) for t, name, v in timeline if name == metric.name)
    return steady_state.warmup_to_cut(np.array([t for t, _ in points]), np.array([v for _, v in points]))


@dataclass(frozen=True)
class ClientProgram:
    """A line of a user's file that runs a program on the client's machine."""

    key: str  # the workload key naming the file
    file: str
    line: int
    what: str  # the command, as written: \shell, \setshell


class Workload:
    """One kind of load. Subclasses set the class attributes and implement prepare and load."""

    name: ClassVar[str]
    Params: ClassVar[type[WorkloadParams]]
    figures: ClassVar[tuple[Figure, ...]]  # the first is the headline the ranking uses
    # Everything the kind runs that differs by engine (its statements, its sizes, how it splits a
    # script), one typed object for each engine it runs on: an engine missing here is refused when
    # the experiment file loads, never met mid-run.
    engines: ClassVar[Mapping[str, object]]
    unit_of_work: ClassVar[UnitOfWork]
    # Its per-second series drawn as the throughput over time (storlab.timeline); None: it records none.
    throughput: ClassVar[Metric | None]
    # Its keys that say how the answer reads the runs, not what they measure (a latency goal): left out of
    # the experiment's identity, so changing one reads the same runs anew.
    answer_keys: ClassVar[frozenset[str]]
    # Said under `storlab show`: how the kind runs, where a user could assume otherwise.
    note: ClassVar[str | None] = None
    # Reads what it prepared: each measured run starts from a restarted server (its buffers empty).
    cold: ClassVar[bool] = False
    # Its repetitions share what it prepared (a scan's table): a cell's runs happen on one instance,
    # one after another, instead of interleaved with the other cells'.
    prepared_once: ClassVar[bool] = False

    def check_engine(self, engine: Engine, params: WorkloadParams) -> None:
        """Raise factors.KeyProblem when the kind does not run on `engine`, or `params` ask what the
        engine cannot honour."""
        if engine.name not in self.engines:
            raise factors.KeyProblem(("workload", "kind"), f"{self.name} does not run on {engine.title} (it runs on "
                                     f"{', '.join(self.engines)})")
        params.check_engine(engine)

    def figures_of(self, declared: Mapping[str, Any]) -> tuple[Figure, ...]:
        """Its figures for an experiment's declared `[workload]` keys (as the experiment's identity keeps
        them), the one that ranks the cells first: the kind's own order unless it ranks by what is declared
        (a rate kind by p99 under a rate)."""
        return self.figures

    def check_layout(self, layout: Any) -> None:
        """Raise factors.KeyProblem naming a `[layout]` key the kind cannot honour (the default: it spreads
        its tables over whatever data files the layout declares)."""

    def sessions(self, params: WorkloadParams, files: Mapping[str, str] | None = None) -> int:
        """How many sessions the load opens at most (the server's max_connections must allow them);
        `files`: the text of the files the experiment names, for a kind whose files tell."""
        return 1

    def check_files(self, params: WorkloadParams, files: Mapping[str, str]) -> None:
        """Raise factors.KeyProblem naming the key of a file the kind cannot use, when the experiment
        loads (the default: every file is the engine's to judge, when it runs)."""

    def client_programs(self, params: WorkloadParams, files: Mapping[str, str]) -> list[ClientProgram]:
        """What the user's files would have the kind's client run as a program of the machine (pgbench's
        \\shell): refused when the experiment loads unless it is run here with --allow-client-programs."""
        return []

    def footprint(self, engine: str, params: WorkloadParams) -> Footprint | None:
        """What one run writes, measured for the kind's own SQL; None when it cannot be told (the
        user's own SQL), and the capacity check then says nothing."""
        return None

    def prepare(self, instance: Instance, params: WorkloadParams, files: dict[str, str]) -> None:
        """Create what the load needs in a fresh instance, before any probe starts. `params` is one
        cell's (one value of each key, as its `Params` validated it); `files` holds the text of
        every SQL file the experiment names, read once when it was loaded."""
        raise NotImplementedError

    def load(self, instance: Instance, params: WorkloadParams, files: dict[str, str]) -> Load:
        raise NotImplementedError

    def part(self, cells: list[KeptCell]) -> Part | None:
        """The kind's own part of the answer, held beside the probes' under the kind's name (show
        --details and the report show it as theirs), from what each measured cell's runs kept
        (Measurement.kept, each run's, None where it kept nothing); None: nothing to say."""
        return None


# Each kind's declarations and what they are: a kind missing one is refused when storlab loads.
CONTRACT = {
    "name": "name (the `kind` of the experiment file)",
    "Params": "Params (its `[workload]` keys)",
    "figures": "figures (what a run reports, the headline first)",
    "engines": "engines (what it runs on each engine)",
    "unit_of_work": "unit_of_work (what its waits are counted per, to explain a difference)",
    "throughput": "throughput (its per-second series, or None)",
    "answer_keys": "answer_keys (its keys that only say how the answer reads runs)",
}


def registry(*kinds: type[Workload]) -> dict[str, Workload]:
    """The kinds by name, each held to CONTRACT: a TypeError of one line names the first declaration
    a kind lacks or gets wrong."""
    found: dict[str, Workload] = {}
    for cls in kinds:
        missing = [what for attr, what in CONTRACT.items() if not hasattr(cls, attr)]
        where = f"workload kind {cls.__name__} ({cls.__module__})"
        if missing:
            raise TypeError(f"{where} declares no {missing[0]}")
        if cls.unit_of_work.figure not in {f.name for f in cls.figures}:
            raise TypeError(f"{where}: its unit of work counts {cls.unit_of_work.figure!r}, none of its figures")
        if cls.throughput is not None and cls.throughput not in METRICS:
            raise TypeError(f"{where}: its throughput {cls.throughput!r} is not a timeline metric")
        unknown = sorted(cls.answer_keys - set(cls.Params.model_fields))
        if unknown:
            raise TypeError(f"{where}: its answer key {unknown[0]!r} is none of its Params' keys")
        if cls.name in found:
            raise TypeError(f"{where}: kind {cls.name!r} is registered twice")
        found[cls.name] = cls()
    return found
