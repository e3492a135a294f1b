"""Results as plain files for other tools: one row per run, factors as columns (typed columns in
parquet, for notebooks: pyarrow is an optional dependency, `pip install 'storlab[parquet]'`)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from storlab.errors import UserError
from storlab.experiment.file import short_name
from storlab.experiment.matrix import format_value
from storlab.probes import waiting_tasks
from storlab.probes.registry import PROBES
from storlab.results import outputs
from storlab.results.store import Store

FORMATS = ("csv", "json", "parquet")


def rows(store: Store, runs: list) -> list[dict]:
    cells = {c.id: c for c in store.cells()}
    out = []
    for run in runs:
        cell = cells[run.cell_id]
        row = {"cell": cell.id, **{short_name(k): v for k, v in cell.factors.items()}}
        row["repetition"] = run.repetition
        row.update(run.figures)
        row.update(started_at=run.started_at, engine_version=run.engine_version, wait_source=run.wait_source,
                   host=run.host)
        row.update(run.wait_extras)
        out.append(row)
    return out


def write(store: Store, fmt: str) -> Path:
    name = f"runs.{fmt}"
    outputs.claim(store.folder, [name])
    runs = store.runs()
    table = rows(store, runs)
    if fmt == "parquet":
        return outputs.write(store.folder, name, parquet(store, runs, table))
    if fmt == "json":
        for row, run in zip(table, runs):
            row["waits"] = [asdict(w) for w in store.waits(run.id)]
            row.update({probe.name: _plain(store.kept(probe, run.id)) for probe in PROBES})
        return outputs.write(store.folder, name, json.dumps(table, indent=1, default=str))
    columns = list(dict.fromkeys(k for row in table for k in row))
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    for row in table:
        writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()})
    return outputs.write(store.folder, name, text.getvalue())


def _plain(value: Any) -> Any:
    """What a probe recorded, as JSON holds it: its records as objects, its rows as lists."""
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _factor_type(pa, values: list[Any]):
    """A factor's column type from all its values: bool, int64, float64, or string (a ratio or a mix
    of kinds is written as its cell label writes it)."""
    if values and all(isinstance(v, bool) for v in values):
        return pa.bool_()
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return pa.int64()
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return pa.float64()
    return pa.string()


def parquet(store: Store, runs: list, table: list[dict]) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError("--format parquet needs pyarrow, which is not installed: pip install 'storlab[parquet]'") from None
    experiment = store.experiment() or {}
    factors = {short_name(k): v for k, v in experiment.get("factors", {}).items()}
    wait = pa.struct([("wait_type", pa.string()), ("wait_s", pa.float64()), ("wait_count", pa.int64()),
                      ("signal_s", pa.float64()), ("traced_s", pa.float64())])
    task = pa.struct([("wait_type", pa.string()), ("resource", pa.string()), ("seconds", pa.float64()),
                      ("samples", pa.int64())])
    fixed = {"cell": pa.string(), "repetition": pa.int64(), "started_at": pa.timestamp("us", tz="UTC"),
             "engine_version": pa.string(), "wait_source": pa.string()}
    columns = list(dict.fromkeys(k for row in table for k in row))
    fields, arrays = [], []
    for column in columns:
        values = [row.get(column) for row in table]
        if column in fixed:
            kind = fixed[column]
            if column == "started_at":
                values = [None if v is None else datetime.fromtimestamp(v, timezone.utc) for v in values]
        elif column in factors:
            kind = _factor_type(pa, factors[column])
            if kind == pa.string():
                values = [None if v is None else format_value(v) for v in values]
            elif kind == pa.float64():
                values = [None if v is None else float(v) for v in values]
        else:  # the workload's figures and the wait probe's counters
            kind = pa.float64()
        fields.append(pa.field(column, kind))
        arrays.append(pa.array(values, type=kind))
    fields += [pa.field("waits", pa.list_(wait)), pa.field("waiting_tasks", pa.list_(task))]
    arrays += [pa.array([[asdict(w) for w in store.waits(r.id)] for r in runs], type=pa.list_(wait)),
               pa.array([[asdict(t) for t in store.kept(waiting_tasks.PROBE, r.id)] for r in runs], type=pa.list_(task))]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), buffer)
    return buffer.getvalue()
