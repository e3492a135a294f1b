"""The replay kind's part of the answer: the errors the server answered the replayed statements with,
counted per kind (MariaDB's error number, PostgreSQL's message) over each cell's runs, with the first
statement of each and the log line it came from. A replay never stops at an error, so without this
part a run under max_failed_percent would hide them. Imports only the ground, as every part does
(storlab.probes.part)."""

from __future__ import annotations

from storlab.probes.kept import KeptCell
from storlab.probes.part import Part, PartTable, Section
from storlab.typed import Typed

SHOWN_STATEMENT = 120  # characters of a statement shown


class ErrorKind(Typed):
    """One kind of error in one cell: how often over its runs, in how many runs, its first occurrence."""

    error: str  # MariaDB's error number, or the server's message where it has no number (pgreplay's)
    count: int
    runs: int  # runs that met it
    message: str
    log: str  # the log's name
    line: int  # the log line of the first statement that met it (0: not known)
    statement: str


class CellErrors(Typed):
    cell: str
    label: str
    runs: int
    errors: list[ErrorKind]  # the most frequent first


class ReplayErrors(Part):
    """Each measured cell's errors by kind; cells without an error are left out."""

    cells: list[CellErrors]

    def sentences(self) -> list[str]:
        return [f"replay errors in {c.label} ({c.cell}): {e.count:,} x {_named(e)} in {e.runs} of {c.runs} runs, "
                f"first {_where(e)}{e.statement[:SHOWN_STATEMENT]!r}" for c in self.cells for e in c.errors]

    def section(self) -> Section:
        rows = [[f"{c.label} ({c.cell})", _named(e), f"{e.count:,}", f"{e.runs} of {c.runs}", _where(e).rstrip(": "),
                 e.statement[:SHOWN_STATEMENT]] for c in self.cells for e in c.errors]
        return Section("Replay errors by kind", [PartTable(["cell", "error", "count", "runs", "first at", "first statement"],
                                                           rows, left=2, words=(4, 5))],
                       "Each kind of error the server answered the replayed statements with, over each cell's runs: "
                       "the replay goes on past an error, and a run fails only past max_failed_percent.")


def _named(e: ErrorKind) -> str:
    return f"error {e.error} ({e.message})" if e.error != e.message else e.message


def _where(e: ErrorKind) -> str:
    return f"at {e.log} line {e.line}: " if e.line else ""


def kept(errors: list[tuple[str, int, int, str, str]], log: str) -> dict:
    """A run's errors as the run keeps them (kind.Measurement.kept): (error, count, line, message, statement)."""
    return {"log": log, "errors": [{"error": error, "count": count, "line": line, "message": message,
                                    "statement": statement} for error, count, line, message, statement in errors]}


def part(cells: list[KeptCell]) -> ReplayErrors | None:
    """The cells' errors by kind, summed over their runs (each run's kept(), None where it kept none)."""
    found = []
    for cell in cells:
        kinds: dict[str, ErrorKind] = {}
        for run in cell.runs:
            for e in (run or {}).get("errors", []):
                seen = kinds.get(e["error"])
                if seen is None:
                    kinds[e["error"]] = ErrorKind(error=e["error"], count=e["count"], runs=1, message=e["message"],
                                                  log=run["log"], line=e["line"], statement=e["statement"])
                else:
                    kinds[e["error"]] = seen.model_copy(update={"count": seen.count + e["count"], "runs": seen.runs + 1})
        if kinds:
            found.append(CellErrors(cell=cell.cell, label=cell.label, runs=len(cell.runs),
                                    errors=sorted(kinds.values(), key=lambda k: (-k.count, k.error))))
    return ReplayErrors(cells=found) if found else None
