"""Each cell's volumes in the answer: for every placement with a volume's keys, each property's part
(storlab.volume), declared as the cell's values and observed as its runs recorded it."""

from __future__ import annotations

from typing import Any

from storlab.answer.analysis import CellResult
from storlab.probes.limits_part import Limits
from storlab.results.experiment_record import StoredExperiment
from storlab.volume import registry
from storlab.volume.property import Observed, Part


def parts(experiment: StoredExperiment | None, cells: list[CellResult], limits: Limits | None = None) -> list[Part]:
    """By cell, then placement, then property in the registry's order; a cell without runs has none, and
    a placement its layout does not use is not its.
    `limits`: what the cells' control groups did (the limits probe's part), read into each placement's."""
    if experiment is None:
        return []
    seen = _limits_seen(limits)
    layout = experiment.identity.as_dict().get("layout") or {}
    found = []
    for cell in cells:
        if not cell.runs:
            continue
        used = _used(layout, cell.cell.factors)
        for name, table in experiment.placements.items():
            declared = _declared(name, table, cell.cell.factors) if name in used else None
            if declared is None:
                continue
            observed = Observed(name, cell.cell.id, [r.conditions for r in cell.runs],
                                sum((r.conditions.get("delay_layer_load_s") or {}).get(name, 0.0) for r in cell.runs),
                                seen.get((cell.cell.id, name), {}))
            found += [part for prop in registry.PROPERTIES if (part := prop.part(declared, observed)) is not None]
    return found


def _used(layout: dict[str, Any], factors: dict[str, Any]) -> set[str]:
    """The placements a cell's instance puts files on: its data's (one, or a ratio's), its log's, its
    temporary files'; a placement no key of its layout names holds nothing of its."""
    named = set()
    for key in ("data_on", "log_on", "temp_on"):
        value = factors.get(f"layout.{key}", layout.get(key))
        named |= set(value) if isinstance(value, dict) else {value} if isinstance(value, str) else set()
    return named


def _declared(name: str, table: str | dict[str, Any], factors: dict[str, Any]) -> dict[str, Any] | None:
    """A placement's volume keys in one cell: a factor's value is the cell's; None for a plain directory."""
    if not isinstance(table, dict):
        return None
    return {key: factors.get(f"placements.{name}.{key}", value) for key, value in table.items()
            if registry.owner(key) is not None}


def _limits_seen(limits: Limits | None) -> dict[tuple[str, str], dict[str, Any]]:
    """(cell, placement) -> what its device's caps and bucket did: a cap row's time at the cap, a bucket
    row's dry runs (a device shared by placements is each one's)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for row in limits.caps if limits else []:
        for name in row.placements:
            found.setdefault((row.cell, name), {})["at_cap_share"] = row.at_cap_share
    for bucket in limits.buckets if limits else []:
        for name in bucket.placements:
            found.setdefault((bucket.cell, name), {}).update(
                bucket_runs=bucket.runs, dry_at_s=[d.at_s for d in bucket.dry], baseline_share=bucket.dry_share)
    return found
