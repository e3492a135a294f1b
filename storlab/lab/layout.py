"""A cell's storage layout resolved to places on this machine: which placement holds each data
file, where the log lives, its size and growth, the page size. Engines build instances from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storlab.sizes import parse_size


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

    @property
    def data_placements(self) -> list[Placement]:
        """Each distinct placement holding data, in first-use order."""
        seen: dict[str, Placement] = {}
        for p in self.data_files:
            seen.setdefault(p.name, p)
        return list(seen.values())

    @property
    def placements(self) -> dict[str, Path]:
        """Every placement the instance uses, data and log."""
        return {p.name: p.path for p in [*self.data_placements, self.log]}

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


def _size(layout: dict[str, Any], key: str) -> int | None:
    return parse_size(layout[key]) if layout.get(key) else None


def spec_for(layout: dict[str, Any], settings: dict[str, Any], placements: dict[str, Path],
             engine_version: str | None = None) -> InstanceSpec:
    data_on = layout["data_on"]
    ratio = {data_on: 1} if isinstance(data_on, str) else dict(data_on)
    names = assign_files(layout.get("data_files") or 1, ratio, layout.get("striping") or "round-robin")
    data = [Placement(n, placements[n]) for n in names]
    log_name = layout.get("log_on") or data[0].name
    return InstanceSpec(
        data_files=data,
        log=Placement(log_name, placements[log_name]),
        log_size_bytes=_size(layout, "log_size"),
        log_growth_bytes=_size(layout, "log_growth"),
        page_size=layout.get("page_size"),
        file_kind=layout.get("file_kind") or "partitions",
        settings=settings,
        engine_version=engine_version,
    )
