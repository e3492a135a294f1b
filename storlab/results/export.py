"""Results as plain files for other tools: every table of every run, in each format. The runs are one
table, a row per run (its id, cell, factors as columns, repetition, figures, where and how it was
measured); each table the store keeps per run is another: its own (waits, timeline) and every table of
every probe in the registry (storlab.probes.registry), found through the store's schema, so a new
probe's tables reach every format with no line here. Columns are typed from the store's schema
(storlab.results.schema); a factor's by the values it was declared with.

CSV cannot nest: one file per table (runs.csv, waits.csv, timeline.csv, <table>.csv), each row with its
run's id (run_id). JSON (runs.json) and Parquet (runs.parquet, for notebooks: pyarrow is an optional
dependency, `pip install 'storlab[parquet]'`) are one file: each run with the rows of each of its
tables under the table's name (in Parquet a list of typed structs). Text a table keeps as JSON (a
histogram) is exported as the text it is."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from storlab.errors import UserError
from storlab.labels import format_value, short_name
from storlab.probes import registry
from storlab.results import outputs, schema
from storlab.results.schema import Table
from storlab.results.store import Store

FORMATS = ("csv", "json", "parquet")
RUN_ID = "run_id"
# The store's tables of a run that the runs table carries as its columns, not as a table of its own.
AS_COLUMNS = ("runs", "figures")
TIMESTAMP = "TIMESTAMP"  # a run's start: seconds since the epoch in the store, a UTC time in Parquet


@dataclass(frozen=True)
class Exported:
    """What an export writes: the runs table (a row per run, each column's kind: INTEGER, REAL, TEXT,
    BOOLEAN or TIMESTAMP) and each table of a run, all of its rows by run."""

    columns: dict[str, str]
    runs: list[dict[str, Any]]
    tables: list[tuple[Table, dict[int, list[tuple]]]]


def run_tables() -> list[Table]:
    """Every table the store keeps per run, the store's own first, then each probe's."""
    return [t for t in schema.tables(registry.PROBES).values() if t.per_run and t.name not in AS_COLUMNS]


def gather(store: Store, declared: list[str] | None = None) -> Exported:
    """`declared`: the workload's figures in its kind's order (the store keeps what each run reported,
    not the order its kind declares them in); the others follow, by name."""
    tables = schema.tables(registry.PROBES)
    stored = store.experiment()
    factors = {short_name(k): v for k, v in (stored.factors if stored is not None else {}).items()}
    cells = {c.id: c for c in store.cells()}
    runs = store.runs()
    declared = declared or []
    recorded = sorted({name for r in runs for name in r.figures})
    figures = [n for n in declared if n in recorded] + [n for n in recorded if n not in declared]
    extras = sorted({name for r in runs for name in r.wait_extras})
    own = tables["runs"]
    columns = {RUN_ID: own.column("id").kind, "cell": own.column("cell_id").kind,
               **{name: _factor_kind(values) for name, values in factors.items()},
               "repetition": own.column("repetition").kind,
               **{name: tables["figures"].column("value").kind for name in figures},
               "started_at": TIMESTAMP, "engine_version": own.column("engine_version").kind,
               "wait_source": own.column("wait_source").kind, "host": own.column("host").kind,
               **{name: "REAL" for name in extras}}  # the wait probe's counters: numbers (RunRecord)
    rows = []
    for run in runs:
        cell = cells[run.cell_id]
        row = {RUN_ID: run.id, "cell": cell.id, **{short_name(k): v for k, v in cell.factors.items()},
               "repetition": run.repetition, **run.figures, "started_at": run.started_at,
               "engine_version": run.engine_version, "wait_source": run.wait_source, "host": run.host,
               **run.wait_extras}
        rows.append({name: row.get(name) for name in columns})
    by_table = []
    for table in run_tables():
        found: dict[int, list[tuple]] = {}
        at = [c.name for c in table.columns].index(RUN_ID)
        for values in store.rows(table):
            found.setdefault(values[at], []).append(values)
        by_table.append((table, found))
    return Exported(columns, rows, by_table)


def _factor_kind(values: list[Any]) -> str:
    """A factor's column from all its declared values: BOOLEAN, INTEGER, REAL, or TEXT (a ratio or a
    mix of kinds is written as its cell label writes it)."""
    if values and all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "INTEGER"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "REAL"
    return "TEXT"


def names(fmt: str) -> list[str]:
    """The files an export in `fmt` writes."""
    if fmt == "csv":
        return ["runs.csv"] + [f"{t.name}.csv" for t in run_tables()]
    return [f"runs.{fmt}"]


def write(store: Store, fmt: str, declared: list[str] | None = None) -> list[Path]:
    """Write the export beside the store; the files written. None is written unless every one of
    them may be (outputs.claim: a file storlab did not write is never replaced)."""
    outputs.claim(store.folder, names(fmt))
    exported = gather(store, declared)
    if fmt == "parquet":
        return [outputs.write(store.folder, "runs.parquet", parquet(exported))]
    if fmt == "json":
        return [outputs.write(store.folder, "runs.json", json.dumps(as_json(exported), indent=1))]
    written = [outputs.write(store.folder, "runs.csv", _csv(list(exported.columns), [
        [_text(row[name], exported.columns[name]) for name in exported.columns] for row in exported.runs]))]
    for table, found in exported.tables:
        rows = [values for run in exported.runs for values in found.get(run[RUN_ID], [])]
        written.append(outputs.write(store.folder, f"{table.name}.csv", _csv([c.name for c in table.columns], rows)))
    return written


def _text(value: Any, kind: str) -> Any:
    """A runs table's value as CSV holds it: a factor that is not one kind of scalar as its label writes it."""
    if value is None:
        return None
    return format_value(value) if kind == "TEXT" and not isinstance(value, str) else value


def _csv(header: list[str], rows: list) -> str:
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue()


def as_json(exported: Exported) -> list[dict[str, Any]]:
    """The runs, each with its tables' rows as objects (a row's run_id is the run's own)."""
    out = []
    for run in exported.runs:
        row = dict(run)
        for table, found in exported.tables:
            keys = [c.name for c in table.columns]
            row[table.name] = [{k: v for k, v in zip(keys, values) if k != RUN_ID} for values in found.get(run[RUN_ID], [])]
        out.append(row)
    return out


def parquet(exported: Exported) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError("--format parquet needs pyarrow, which is not installed: pip install 'storlab[parquet]'") from None
    types = {"INTEGER": pa.int64(), "REAL": pa.float64(), "TEXT": pa.string(), "BLOB": pa.binary(),
             "BOOLEAN": pa.bool_(), TIMESTAMP: pa.timestamp("us", tz="UTC")}
    fields, arrays = [], []
    for name, kind in exported.columns.items():
        values = [_parquet_value(row[name], kind) for row in exported.runs]
        fields.append(pa.field(name, types[kind]))
        arrays.append(pa.array(values, type=types[kind]))
    for table, found in exported.tables:
        own_columns = [c for c in table.columns if c.name != RUN_ID]
        struct = pa.struct([pa.field(c.name, types[c.kind], nullable=c.nullable) for c in own_columns])
        values = [[{c.name: v for c, v in zip(table.columns, row) if c.name != RUN_ID} for row in found.get(run[RUN_ID], [])]
                  for run in exported.runs]
        fields.append(pa.field(table.name, pa.list_(struct)))
        arrays.append(pa.array(values, type=pa.list_(struct)))
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), buffer)
    return buffer.getvalue()


def _parquet_value(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == TIMESTAMP:
        return datetime.fromtimestamp(value, timezone.utc)
    if kind == "TEXT" and not isinstance(value, str):
        return format_value(value)
    if kind == "REAL":
        return float(value)
    return value
