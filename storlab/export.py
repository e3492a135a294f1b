"""Results as plain files for other tools: one row per run, factors as columns."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

from storlab.experiment import short_name
from storlab.store import Store

FORMATS = ("csv", "json")


def rows(store: Store, runs: list) -> list[dict]:
    cells = {c.id: c for c in store.cells()}
    out = []
    for run in runs:
        cell = cells[run.cell_id]
        row = {"cell": cell.id, **{short_name(k): v for k, v in cell.factors.items()}}
        row.update({k: v for k, v in asdict(run).items() if k not in ("id", "cell_id", "wait_extras", "facts_id")})
        row.update(run.wait_extras)
        out.append(row)
    return out


def write(store: Store, fmt: str) -> Path:
    runs = store.runs()
    table = rows(store, runs)
    path = store.folder / f"runs.{fmt}"
    if fmt == "json":
        for row, run in zip(table, runs):
            row["waits"] = [asdict(w) for w in store.waits(run.id)]
        path.write_text(json.dumps(table, indent=1, default=str))
    else:
        columns = list(dict.fromkeys(k for row in table for k in row))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            for row in table:
                writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()})
    return path
