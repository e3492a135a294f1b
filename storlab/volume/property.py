"""The contract every property of a volume meets (a volume: the device under a placement, whole: its
format, its caps, its credits, its latency), as fio has one option table and its engines the same
verbs. A property is one module of this package and one line of the registry; everything else
(the experiment's schema and refusals, `storlab check`, `storlab io`, the answer) reads it from there.

A property declares its keys (how each value is written and checked, its JSON Schema, whether a list is
a factor, its `storlab io` option), its conflicts with the other keys of a table, what the host must
offer, the fio jobs that calibrate it and their verdicts, and its part of the answer per cell."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from storlab.factors import Check, KeyProblem
from storlab.typed import Typed


@dataclass(frozen=True)
class Key:
    """One key of a placement's table. `check(value, what)` returns one value as storlab keeps it, or
    raises ValueError saying why (`what` says how a value is written: "expected WHAT or a list of them");
    a list of values is a factor of the matrix. `flag` is its `storlab io` option, whose text `from_flag`
    reads as the value it then checks."""

    name: str
    what: str
    check: Check
    schema: Mapping[str, Any]
    flag: str | None = None
    from_flag: Callable[[str], Any] | None = None  # raises ValueError saying how the option is written
    help: str = ""
    metavar: str = "VALUE"


@dataclass(frozen=True)
class Job:
    """One fio job, in fio's words: rw is randread, randwrite, read (sequential) or write (sequential)."""

    name: str
    rw: str
    block_size: int
    iodepth: int
    direct: bool = True
    synced: bool = False  # an fdatasync after each write: a commit; its latency is the flush's

    @property
    def direction(self) -> str:
        """What the job's latency measures: a read, a write, or (synced) the flush."""
        return "flush" if self.synced else "read" if self.rw in ("read", "randread") else "write"


@dataclass
class Measured:
    """What one fio job did (machine.iobench reads fio's JSON into it)."""

    iops: float
    mb_s: float
    lat_ms: dict[str, float]  # "50", "99", "99.9" -> milliseconds (the flush's for a synced job)
    depth_share: float  # share of time at or above the requested queue depth, from fio's iodepth distribution


@dataclass(frozen=True)
class Calibrated:
    """One job as `storlab io` ran it, for a property's verdict: `alone` is the same job on the device
    without the delay layer when `measured` went through it (None otherwise); `spent` what the credit
    buckets allowed during it, `alone_spent` during the job alone."""

    job: Job
    measured: Measured
    device: str
    alone: Measured | None = None
    spent: tuple[Any, ...] = ()  # lab.credits.RunBucket, one per bucket
    alone_spent: tuple[Any, ...] = ()


class Part(Typed):
    """A property's part of one cell's answer: what the file declared for the placement (its keys'
    values in that cell) and what the runs observed of it, in one line for the terminal and the report."""

    cell: str
    placement: str
    property: str
    declared: dict[str, Any]
    observed: dict[str, Any] = {}
    said: str


@dataclass(frozen=True)
class Observed:
    """What a cell's runs recorded of one placement's volume: each run's conditions (lab.quiesce and
    running.cell_runs: the device as the run found it, the layer's CPU and mode), and `limits`: what the
    limits probe recorded of its control group on the placement's device (its rows as plain values: its
    caps' time at the cap, its bucket's dry runs)."""

    placement: str
    cell: str
    conditions: list[Mapping[str, Any]] = field(default_factory=list)
    load_s: float = 0.0  # the runs' load time, summed: what the layer's CPU is a share of
    limits: Mapping[str, Any] = field(default_factory=dict)


class Property:
    """A property with nothing to add to a verb keeps the default, which does nothing."""

    name: str
    keys: tuple[Key, ...] = ()
    directory: bool = False  # a directory placement's table takes it too (the device under the directory)
    device_only = "storlab makes the device it sets, which a directory's is not"  # why a directory's table refuses it

    def conflicts(self, given: Mapping[str, Any]) -> KeyProblem | None:
        """The problem with the keys given together on one table (every property's, checked), or None."""
        return None

    def host_problem(self, given: Mapping[str, Any]) -> tuple[str, str] | None:
        """(key, why) when this host cannot hold the values a table gives (a factor's list, or one
        value), or None; only looks."""
        return None

    def io_jobs(self, declared: Mapping[str, Any], direct: bool) -> list[Job]:
        """The fio jobs that show whether the declared values hold, when `storlab io` is given no preset."""
        return []

    def io_flags(self, declared: Mapping[str, Any], calibrated: Calibrated) -> list[str]:
        """Whether the declared values held in this job, in words (none when the job does not bear on them)."""
        return []

    def part(self, declared: Mapping[str, Any], observed: Observed) -> Part | None:
        """Its part of a cell's answer, None when the cell declares none of its keys."""
        return None

    def made(self, observed: Observed, declared: Mapping[str, Any], said: str, seen: dict[str, Any] | None = None) -> Part:
        """Its part of the cell `observed` is of, with its keys' declared values."""
        return Part(cell=observed.cell, placement=observed.placement, property=self.name,
                    declared=self.given(declared), observed=seen or {}, said=said)

    def given(self, declared: Mapping[str, Any]) -> dict[str, Any]:
        """Its keys the cell declares (a value not None), in the table's order."""
        return {key.name: declared[key.name] for key in self.keys if declared.get(key.name) is not None}
