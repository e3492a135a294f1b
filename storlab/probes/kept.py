"""What a probe keeps of each run: its own tables in the results store, made and changed by its own
migrations (versioned under the probe's name, apart from the store's), how a run's record is written
there and read back, and its typed part of the answer. The store (which checks its tables before any
read), the runner, the answer, the terminal, the report and the export find every probe in the registry
(probes/registry.py) and never name a probe's table, so a new probe is one module and one line there:
its part (storlab.probes.part) is held by the answer under the probe's name and shown by its own
sentences and section of the report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from storlab.probes.part import Part

if TYPE_CHECKING:  # the instance's protocol names types of the probes that import this module
    from storlab.probes.target import Probed


class Db(Protocol):
    """The store's connection, in the SQL both of its dialects share (`?` placeholders)."""

    def execute(self, sql: str, params: Iterable = ()) -> Any: ...

    def executemany(self, sql: str, rows: Iterable[Iterable]) -> None: ...


class Recording(Protocol):
    """A probe's own recorder for one run: started once the load's sessions are open, stopped after it."""

    def start(self, sessions: list[int], t0: float) -> None: ...

    def stop(self) -> Any:
        """What the run recorded, as the probe's `write` takes it."""


@dataclass(frozen=True)
class Adapted:
    """A Recording made of a recorder whose own start takes less than the run's sessions and clock."""

    begin: Callable[[list[int], float], None]
    stop: Callable[[], Any]

    def start(self, sessions: list[int], t0: float) -> None:
        self.begin(sessions, t0)


@dataclass(frozen=True)
class RunScope:
    """What a probe is told of the run it records: the instance, and whether every IO's size is
    traced (bpftrace), where that is the question (cell_runs.traces_io)."""

    instance: Probed
    traced: bool


@dataclass(frozen=True)
class KeptCell:
    """What a probe kept of one measured cell's runs, as its summary reads them."""

    cell: str  # its id
    label: str
    rounds: list[int]  # each run's round (its repetition)
    runs: list[Any]  # what each run recorded, as the probe's `read` gives it, in the order of `rounds`


@dataclass(frozen=True)
class Probe:
    """One probe as the store and the answer see it. What it records comes from its own recorder
    (`recorder`), or with the engine's wait capture (`from_capture`: one program of the engine's may
    count several things at once)."""

    name: str  # its part of the run's result, and the name its tables' versions are kept under
    migrations: tuple[str, ...]  # SQL in SQLite's words (the store gives PostgreSQL its own), in order
    write: Callable[[Db, int, Any], None]  # (connection, run id, what the run recorded)
    read: Callable[[Db, int], Any]  # (connection, run id) -> what the run recorded
    recorder: Callable[[RunScope], Recording | None] | None = None
    from_capture: Callable[[Any], Any] | None = None  # from the run's probes.waits.WaitCapture
    # Its part of the answer (None: nothing to say), from what it kept of each measured cell's runs, in the
    # experiment's order of its cells: held under the probe's name, typed in a module that imports only the ground.
    summary: Callable[[list[KeptCell]], Part | None] | None = None
    # The points what a run recorded puts on the run's timeline (recorders.TimelinePoint, on the
    # samplers' axis), beside its own tables.
    timeline: Callable[[Any], list[Any]] | None = None


def histogram(text: str) -> dict[int, int]:
    """A histogram kept as JSON (power-of-two buckets) has its buckets as text; text that is not one
    is ValueError (the store says its table is damaged)."""
    counts = json.loads(text)
    if not isinstance(counts, dict) or not all(bucket.isdigit() and isinstance(n, int) and not isinstance(n, bool)
                                               for bucket, n in counts.items()):
        raise ValueError(f"expected a histogram (an object of bucket: count), got {text[:60]!r}")
    return {int(bucket): count for bucket, count in counts.items()}
