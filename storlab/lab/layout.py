"""A cell's storage layout, as declared (CellLayout) and resolved to places on this machine
(InstanceSpec): which placement holds each data file, where the log lives, its size and growth, the
page size, the IO caps on each placement's device and the server's memory. Engines build instances
from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storlab.lab.caps import IoCaps


@dataclass(frozen=True)
class CellLayout:
    """One cell's `[layout]`, one value of every key (the matrix has chosen the factors' values), its
    sizes in bytes. A key the file leaves unset takes the default here."""

    data_on: str | dict[str, int]  # a placement, or a ratio across placements ({disk: 7, ram: 1})
    data_files: int = 1
    log_on: str | None = None  # None: with the first data file
    temp_on: str | None = None  # None: where the engine keeps them by default (in its catalog's placement)
    log_size_bytes: int | None = None  # None: the engine's default
    log_growth_bytes: int | None = None
    page_size: str | None = None
    file_kind: str = "partitions"
    striping: str = "round-robin"
    server_memory_bytes: int | None = None  # the instance's memory limit, page cache included; None: none


@dataclass(frozen=True)
class Placement:
    name: str
    path: Path


@dataclass(frozen=True)
class InstanceSpec:
    """One cell's storage layout, resolved to directories."""

    data_files: list[Placement]  # one entry per data file (partition), in order
    log: Placement
    log_size_bytes: int | None
    log_growth_bytes: int | None
    page_size: str | None
    file_kind: str
    settings: dict[str, Any]
    engine_version: str | None = None  # the engine's version the cell runs (None: the engine's only one)
    temp: Placement | None = None  # where the temporary files go; None: the engine's default place
    caps: dict[str, IoCaps] = field(default_factory=dict)  # placement name -> the caps on its device
    memory_bytes: int | None = None  # the server's memory limit, page cache included

    @property
    def data_placements(self) -> list[Placement]:
        """Each distinct placement holding data, in first-use order."""
        seen: dict[str, Placement] = {}
        for p in self.data_files:
            seen.setdefault(p.name, p)
        return list(seen.values())

    @property
    def placements(self) -> dict[str, Path]:
        """Every placement the instance uses: data, log and temporary files."""
        return {p.name: p.path for p in [*self.data_placements, self.log, *([self.temp] if self.temp else [])]}

    @property
    def home(self) -> Placement:
        """Where the engine's own catalog lives: the first data placement."""
        return self.data_files[0]


def assign_files(count: int, ratio: dict[str, int], striping: str) -> list[str]:
    """Spread `count` data files over placements in proportion to `ratio`.

    round-robin interleaves the placements (7:1 over 8 files: d d d r d d d d... spread evenly);
    contiguous puts each placement's share in one run (d d d d d d d r).
    Shares use largest remainders, so 8 files at 7:1 give exactly 7 and 1.
    """
    total = sum(ratio.values())
    exact = {name: count * w / total for name, w in ratio.items()}
    shares = {name: int(v) for name, v in exact.items()}
    for name in sorted(ratio, key=lambda n: exact[n] - shares[n], reverse=True)[: count - sum(shares.values())]:
        shares[name] += 1
    if striping == "contiguous":
        return [name for name in ratio for _ in range(shares[name])]
    # Smooth weighted round-robin: each step takes the placement furthest behind its share.
    given = {name: 0 for name in ratio}
    order = []
    for step in range(1, count + 1):
        name = max(ratio, key=lambda n: (shares[n] * step / count - given[n], shares[n]))
        given[name] += 1
        order.append(name)
    return order


def spec_for(layout: CellLayout, settings: dict[str, Any], placements: dict[str, Path],
             engine_version: str | None = None, caps: dict[str, IoCaps] | None = None) -> InstanceSpec:
    ratio = {layout.data_on: 1} if isinstance(layout.data_on, str) else dict(layout.data_on)
    data = [Placement(n, placements[n]) for n in assign_files(layout.data_files, ratio, layout.striping)]
    log_name = layout.log_on or data[0].name
    return InstanceSpec(
        data_files=data,
        log=Placement(log_name, placements[log_name]),
        log_size_bytes=layout.log_size_bytes,
        log_growth_bytes=layout.log_growth_bytes,
        page_size=layout.page_size,
        file_kind=layout.file_kind,
        settings=settings,
        engine_version=engine_version,
        temp=Placement(layout.temp_on, placements[layout.temp_on]) if layout.temp_on else None,
        caps={name: c for name, c in (caps or {}).items() if c},
        memory_bytes=layout.server_memory_bytes,
    )
