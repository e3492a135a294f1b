"""The pressure probe's part of the answer (storlab.probes.pressure makes it): the kernel's stalls and
page-cache writes, each cell's mean per run, typed apart from the probe in a module that imports only the
ground, as every part is (storlab.probes.part)."""

from __future__ import annotations

from storlab.probes.part import Part, PartTable, Section
from storlab.typed import Typed


class PressureCounter(Typed):
    """A kernel counter the pressure probe keeps (probes/pressure.COUNTERS)."""

    name: str  # io_some, io_full, cpu_some, memory_some (/proc/pressure); nr_dirtied, nr_written (/proc/vmstat)
    label: str  # its column in the report
    unit: str  # "s" stalled, "MiB" of pages


class PressureCell(Typed):
    cell: str
    label: str
    runs: int
    means: dict[str, float | None]  # counter name -> its mean per run; None: not every run of the cell had it


class Pressure(Part):
    """The kernel's view of the runs (probes/pressure): how long tasks stalled, how much the page cache
    dirtied and wrote back; the whole machine's, not only the server's."""

    counters: list[PressureCounter]  # those some run had, in the probe's order
    cells: list[PressureCell]
    unavailable: dict[str, list[str]]  # a file some runs could not read as the kernel writes it -> why, each once

    def sentences(self) -> list[str]:
        return []  # its table in the report says it: `show --details` has no table of counters

    def section(self) -> Section:
        """Each cell's mean per run of each counter (— where not every run had it), and the files some runs
        could not read, with why."""
        rows = [[c.label] + ["—" if c.means.get(k.name) is None else f"{c.means[k.name]:,.2f}" for k in self.counters]
                for c in self.cells]
        unavailable = "".join(f" Unavailable in some runs: {source}: {'; '.join(why)}."
                              for source, why in self.unavailable.items())
        return Section("The kernel's view: stalls and page-cache writes", [PartTable(
            ["cell"] + [k.label for k in self.counters], rows,
            "Mean per run, from /proc/pressure (seconds some or every task stalled) and /proc/vmstat (pages dirtied "
            "and written back); the whole machine's, not only the server's." + unavailable)])
