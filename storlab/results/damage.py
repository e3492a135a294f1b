"""What a store holds is checked before anything reads it: every table storlab's migrations make is
there with its columns, every value is of the kind its column declares (a number finite, a value its
column requires present), every run, cell and facts row a row names is there; text that holds JSON
is checked where it is parsed, once, into the stored experiment's and the runs' types. A damaged or
tampered store is the user's input, not storlab's fault: one line naming the store, the table and what
is wrong (Damaged, exit 2), never a traceback."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from storlab.errors import UserError
from storlab.probes import registry
from storlab.results import schema
from storlab.results.dialects import Connection
from storlab.results.schema import Column, Table


class Damaged(UserError):
    """A store that does not hold what storlab wrote there."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: the results store is damaged: {what}")


def check(db: Connection, where: str) -> None:
    """Every table of the store (storlab.results.schema) against what it holds, all of it, before
    anything is read; a probe this storlab does not know has tables it does not read."""
    expected = schema.tables(registry.PROBES)
    in_store: dict[str, dict[str, str]] = {}
    for table, column, declared in db.execute(db.dialect.columns).fetchall():
        in_store.setdefault(table, {})[column] = declared
    for table in expected.values():
        if table.name not in in_store:
            raise Damaged(where, f"table {table.name} is missing")
        for column in table.columns:
            if column.name not in in_store[table.name]:
                raise Damaged(where, f"table {table.name} has no column {column.name}")
            stored = db.dialect.stored_as(column.kind)
            if stored is not None and in_store[table.name][column.name].lower() != stored:
                raise Damaged(where, f"table {table.name}: column {column.name} is {in_store[table.name][column.name]}, "
                                     f"not {stored}")
        _values(db, where, table)
    for table in expected.values():
        for column, other, key in table.references:
            _reference(db, where, table, column, other, key)


def _values(db: Connection, where: str, table: Table) -> None:
    names = ", ".join(f'"{c.name}"' for c in table.columns)
    wrong = " OR ".join(f"({db.dialect.wrong(c.name, c.kind, c.nullable)})" for c in table.columns)
    row = db.execute(f'SELECT {names} FROM "{table.name}" WHERE {wrong} LIMIT 1').fetchone()
    if row is None:
        return
    found = dict(zip((c.name for c in table.columns), row))
    for column in table.columns:
        problem = value_problem(found[column.name], column)
        if problem is not None:
            raise Damaged(where, f"table {table.name}{_row(table, found)}: column {column.name} {problem}")
    raise Damaged(where, f"table {table.name}{_row(table, found)}: a value its column's type does not allow")


def _reference(db: Connection, where: str, table: Table, column: str, other: str, key: str) -> None:
    named = _key(table) or column
    row = db.execute(
        f'SELECT t."{column}", t."{named}" FROM "{table.name}" t LEFT JOIN "{other}" o ON o."{key}" = t."{column}" '
        f'WHERE t."{column}" IS NOT NULL AND o."{key}" IS NULL LIMIT 1'
    ).fetchone()
    if row is not None:
        raise Damaged(where, f"table {table.name} ({named} {shown(row[1])}): column {column} names {shown(row[0])}, "
                             f"which table {other} does not hold")


def _key(table: Table) -> str | None:
    """The column that tells a row apart in a message: its run, its id, its probe."""
    return next((k for k in ("run_id", "id", "probe") if any(c.name == k for c in table.columns)), None)


def _row(table: Table, row: dict[str, Any]) -> str:
    key = _key(table)
    return f" ({key} {shown(row[key])})" if key is not None and row.get(key) is not None else ""


def value_problem(value: Any, column: Column) -> str | None:
    """What is wrong with one value of a column, in a few words; None when nothing is."""
    if value is None:
        return None if column.nullable else "is empty"
    if column.kind == "INTEGER":
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"holds {shown(value)}, not an integer"
    if column.kind == "REAL":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return None if math.isfinite(value) else f"holds {shown(value)}, not a finite number"
        try:
            number = float(value)
        except (TypeError, ValueError):
            return f"holds {shown(value)}, not a number"
        return f"holds {shown(value)}, not a finite number" if not math.isfinite(number) else \
            f"holds {shown(value)} as text, not a number"
    if column.kind == "TEXT":
        return None if isinstance(value, str) else f"holds {shown(value)}, not text"
    return None if isinstance(value, (bytes, memoryview)) else f"holds {shown(value)}, not bytes"


def shown(value: Any, limit: int = 60) -> str:
    """A stored value as a message shows it: text quoted and cut short, a number as Python writes it."""
    text = json.dumps(value, ensure_ascii=False, default=repr) if isinstance(value, (str, list, dict)) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- text that holds JSON --------------------------------------------------------------------------

STORED = ConfigDict(allow_inf_nan=False)  # what the store keeps as JSON: numbers finite


@lru_cache(maxsize=None)
def adapter(kind: Any) -> TypeAdapter:
    """A validator of `kind`; a model keeps its own config (it says its numbers are finite)."""
    return TypeAdapter(kind) if isinstance(kind, type) and issubclass(kind, BaseModel) else TypeAdapter(kind, config=STORED)


def parsed(text: Any, kind: Any, where: str, at: str) -> Any:
    """A column's JSON text as `kind`, or Damaged: `at` names the table, its row and the column."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except (ValueError, RecursionError):
        raise Damaged(where, f"{at}: not JSON: {shown(text)}") from None
    try:
        return adapter(kind).validate_python(value)
    except ValidationError as exc:
        raise Damaged(where, f"{at}: {problem(exc)}") from None


def validated(model: Any, values: dict[str, Any], where: str, table: str) -> Any:
    """A row's values as a pydantic model, or Damaged naming the table and the first key that is wrong."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise Damaged(where, f"table {table}: {problem(exc)}") from None


_PLAIN = {
    "dict_type": "expected an object", "model_type": "expected an object", "dataclass_type": "expected an object",
    "model_attributes_type": "expected an object", "list_type": "expected a list", "string_type": "expected text",
    "int_type": "expected an integer", "int_parsing": "expected an integer", "int_from_float": "expected an integer",
    "float_type": "expected a number", "float_parsing": "expected a number", "finite_number": "expected a finite number",
    "bool_type": "expected true or false", "bool_parsing": "expected true or false", "missing": "missing",
    "extra_forbidden": "not a key storlab writes",
}


def problem(exc: ValidationError) -> str:
    """pydantic's first error in one line: where in the value, what was expected, what is there."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    what = _PLAIN.get(error["type"]) or \
        error["msg"].removeprefix("Value error, ").replace("Input should be ", "expected ").replace("Input should ", "expected to ")
    if error["type"] not in ("missing",):
        what += f", got {shown(error.get('input'))}"
    return f"{where}: {what}" if where else what
