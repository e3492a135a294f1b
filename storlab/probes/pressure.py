"""The kernel's side of a run: how long tasks stalled waiting for IO, CPU or memory (pressure stall
information, /proc/pressure) and how much the page cache dirtied and wrote back (/proc/vmstat), read
at the run's start and end. A server that waits on its disk shows it in its waits; this says whether
the whole machine was stalled on IO meanwhile, and how much of the writing went through the page
cache. Machine-wide: the lab's own work counts too, which is why the run is all that runs."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from storlab.probes.kept import Db, Probe, Section

PROC = Path("/proc")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Counter:
    name: str  # as kept: pressure kind and line (io_some), or the vmstat counter
    label: str  # its column in the report
    scale: float  # from what the kernel counts to what is kept (µs to s, pages to MiB)


COUNTERS = (
    Counter("io_some", "IO some s", 1e-6),  # some task stalled on IO
    Counter("io_full", "IO full s", 1e-6),  # every non-idle task stalled on IO at once
    Counter("cpu_some", "CPU some s", 1e-6),
    Counter("memory_some", "memory some s", 1e-6),
    Counter("nr_dirtied", "dirtied MiB", _PAGE / 2**20),
    Counter("nr_written", "written back MiB", _PAGE / 2**20),
)


def read(proc: Path = PROC) -> dict[str, float]:
    """The cumulative counters now, as the kernel counts them; those it does not have are left out
    (no pressure files before Linux 4.20, or with psi=0)."""
    found: dict[str, float] = {}
    for kind in ("io", "cpu", "memory"):
        try:
            text = (proc / "pressure" / kind).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line_kind, *fields = line.split()
            total = dict(f.split("=", 1) for f in fields).get("total")
            if total is not None:
                found[f"{kind}_{line_kind}"] = float(total)
    try:
        for line in (proc / "vmstat").read_text().splitlines():
            name, value = line.split()
            if name in ("nr_dirtied", "nr_written"):
                found[name] = float(value)
    except OSError:
        pass
    return found


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each kept counter's change over the run, in the unit it is kept in."""
    return {c.name: (after[c.name] - before[c.name]) * c.scale
            for c in COUNTERS if c.name in before and c.name in after}


class _Recording:
    def __init__(self, proc: Path = PROC):
        self.proc = proc
        self.before: dict[str, float] = {}

    def start(self, sessions: list[int], t0: float) -> None:
        self.before = read(self.proc)

    def stop(self) -> dict[str, float]:
        return moved(self.before, read(self.proc))


def _write(db: Db, run_id: int, found: dict[str, float]) -> None:
    db.executemany("INSERT INTO pressure (run_id, name, value) VALUES (?, ?, ?)",
                   [(run_id, name, value) for name, value in found.items()])


def _read(db: Db, run_id: int) -> dict[str, float]:
    return dict(db.execute("SELECT name, value FROM pressure WHERE run_id = ?", (run_id,)))


def section(cells: list[tuple[str, list[dict[str, float]]]]) -> Section | None:
    """Each cell's mean per run of every counter its runs all have."""
    shown = [c for c in COUNTERS if any(c.name in run for _, runs in cells for run in runs)]
    if not shown:
        return None
    rows = []
    for label, runs in cells:
        sums: dict[str, float] = defaultdict(float)
        for run in runs:
            for name, value in run.items():
                sums[name] += value
        rows.append([label] + [f"{sums[c.name] / len(runs):,.2f}" if runs and all(c.name in r for r in runs) else "—"
                               for c in shown])
    return Section("The kernel's view: stalls and page-cache writes",
                   "Mean per run, from /proc/pressure (seconds some or every task stalled) and /proc/vmstat "
                   "(pages dirtied and written back); the whole machine's, not only the server's.",
                   ["cell"] + [c.label for c in shown], rows)


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
    """,),
    _write, _read,
    recorder=lambda run: _Recording(),
    section=section,
)
