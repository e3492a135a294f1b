"""The kernel's side of a run: how long tasks stalled waiting for IO, CPU or memory (pressure stall
information, /proc/pressure) and how much the page cache dirtied and wrote back (/proc/vmstat), read
at the run's start and end. A server that waits on its disk shows it in its waits; this says whether
the whole machine was stalled on IO meanwhile, and how much of the writing went through the page
cache. Machine-wide: the lab's own work counts too, which is why the run is all that runs.

A file the kernel does not have is left out. A file it has but that cannot be read as the kernel
writes it (a changed format, a kernel's bug) makes its counters unavailable for that run, the reason
kept and shown beside the others; it never fails the run."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from storlab.probes.kept import Db, KeptCell, Probe
from storlab.probes.pressure_part import Pressure, PressureCell, PressureCounter

PROC = Path("/proc")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Counter:
    name: str  # as kept: pressure kind and line (io_some), or the vmstat counter
    label: str  # its column in the report
    unit: str  # what is kept
    scale: float  # from what the kernel counts to what is kept (µs to s, pages to MiB)


COUNTERS = (
    Counter("io_some", "IO some s", "s", 1e-6),  # some task stalled on IO
    Counter("io_full", "IO full s", "s", 1e-6),  # every non-idle task stalled on IO at once
    Counter("cpu_some", "CPU some s", "s", 1e-6),
    Counter("memory_some", "memory some s", "s", 1e-6),
    Counter("nr_dirtied", "dirtied MiB", "MiB", _PAGE / 2**20),
    Counter("nr_written", "written back MiB", "MiB", _PAGE / 2**20),
)


@dataclass
class Reading:
    """The counters read, and the files that could not be read as the kernel writes them, with why."""

    counters: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # file -> why


@dataclass
class Moved:
    """A run's change in each counter, in the unit it is kept in; the files whose counters were
    unavailable for the run, with why."""

    counters: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


class _Malformed(ValueError):
    pass


_COUNT = re.compile(r"[0-9]{1,20}")  # what the kernel prints for a counter (ASCII digits only)


def _pressure_totals(text: str) -> dict[str, int]:
    """Each line's `total=` (µs stalled) of a pressure file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=N`."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        kind, *fields = line.split() or [""]
        pairs = dict(f.split("=", 1) for f in fields if "=" in f)
        if kind not in ("some", "full") or kind in found or not _COUNT.fullmatch(pairs.get("total", "")):
            raise _Malformed(_line(number, line))
        found[kind] = int(pairs["total"])
    if "some" not in found:
        raise _Malformed("no line 'some … total=N' in it")
    return found


def _vmstat(text: str) -> dict[str, int]:
    """The counters storlab keeps of /proc/vmstat's `name value` lines (the others are not looked at)."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        name, *value = line.split() or [""]
        if name in ("nr_dirtied", "nr_written"):
            if len(value) != 1 or not _COUNT.fullmatch(value[0]) or name in found:
                raise _Malformed(_line(number, line))
            found[name] = int(value[0])
    return found


def _line(number: int, line: str) -> str:
    shown = line if len(line) <= 60 else line[:60] + "…"
    return f"line {number} is not as the kernel writes it: {shown!r}"


def read(proc: Path = PROC) -> Reading:
    """The cumulative counters now, as the kernel counts them; those it does not have are left out
    (no pressure files before Linux 4.20, or with psi=0), a file it cannot parse is unavailable."""
    reading = Reading()
    sources = [(proc / "pressure" / kind, kind, _pressure_totals) for kind in ("io", "cpu", "memory")]
    for path, prefix, parse in sources + [(proc / "vmstat", None, _vmstat)]:
        try:
            text = path.read_text()
        except OSError:
            continue
        except UnicodeDecodeError:
            reading.unavailable[str(path)] = "not text"
            continue
        try:
            counters = parse(text)
        except _Malformed as exc:
            reading.unavailable[str(path)] = str(exc)
            continue
        reading.counters.update({f"{prefix}_{name}" if prefix else name: float(value) for name, value in counters.items()})
    return reading


def moved(before: Reading, after: Reading) -> Moved:
    """Each kept counter's change over the run, in the unit it is kept in; a file unavailable at
    either end is unavailable for the run."""
    counters = {c.name: (after.counters[c.name] - before.counters[c.name]) * c.scale
                for c in COUNTERS if c.name in before.counters and c.name in after.counters}
    return Moved(counters, {**after.unavailable, **before.unavailable})


class _Recording:
    def __init__(self, proc: Path = PROC):
        self.proc = proc
        self.before = Reading()

    def start(self, sessions: list[int], t0: float) -> None:
        self.before = read(self.proc)

    def stop(self) -> Moved:
        return moved(self.before, read(self.proc))


def _write(db: Db, run_id: int, found: Moved) -> None:
    db.executemany("INSERT INTO pressure (run_id, name, value) VALUES (?, ?, ?)",
                   [(run_id, name, value) for name, value in found.counters.items()])
    db.executemany("INSERT INTO pressure_unavailable (run_id, source, reason) VALUES (?, ?, ?)",
                   [(run_id, source, reason) for source, reason in found.unavailable.items()])


def _read(db: Db, run_id: int) -> Moved:
    return Moved(dict(db.execute("SELECT name, value FROM pressure WHERE run_id = ?", (run_id,))),
                 dict(db.execute("SELECT source, reason FROM pressure_unavailable WHERE run_id = ? ORDER BY source",
                                 (run_id,))))


def _means(runs: list[Moved], shown: list[Counter]) -> dict[str, float | None]:
    """Each counter's mean per run; None unless every run has it (a mean of some of its runs is not the cell's)."""
    return {c.name: sum(run.counters[c.name] for run in runs) / len(runs)
            if runs and all(c.name in run.counters for run in runs) else None for c in shown}


def summary(cells: list[KeptCell]) -> Pressure | None:
    """Each cell's mean per run of every counter its runs all have; the files unavailable, and why."""
    shown = [c for c in COUNTERS if any(c.name in run.counters for cell in cells for run in cell.runs)]
    reasons: dict[str, set[str]] = defaultdict(set)
    for cell in cells:
        for run in cell.runs:
            for source, why in run.unavailable.items():
                reasons[source].add(why)
    if not shown and not reasons:
        return None
    return Pressure(
        counters=[PressureCounter(name=c.name, label=c.label, unit=c.unit) for c in shown],
        cells=[PressureCell(cell=cell.cell, label=cell.label, runs=len(cell.runs), means=_means(cell.runs, shown))
               for cell in cells],
        unavailable={source: sorted(why) for source, why in sorted(reasons.items())})


PROBE = Probe(
    "pressure",
    # Each run's change in the kernel's pressure and page-cache counters, by name, as COUNTERS keeps them.
    ("""
    CREATE TABLE pressure (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        name TEXT NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    """,
     # 2: the files a run could not read as the kernel writes them, and why (their counters unavailable).
     """
    CREATE TABLE pressure_unavailable (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        source TEXT NOT NULL,
        reason TEXT NOT NULL,
        PRIMARY KEY (run_id, source)
    );
    """),
    _write, _read,
    recorder=lambda run: _Recording(),
    summary=summary,
)
