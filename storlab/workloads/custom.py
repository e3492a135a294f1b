"""custom: the user's own SQL. A `setup` file run once in each fresh instance, then a `transaction`
file that each of `connections` sessions runs `transactions_per_connection` times, each time as one
transaction. The statements are sent by storlab's client, one thread per session (client.py), so at
small transactions the client's own speed is part of the figure: `show` says so.

Errors name the file, the statement's number and its line, and are the user's (exit 2): the setup
runs before the first measurement, and the transaction is tried once, rolled back, before the load."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Mapping

from pydantic import field_validator, model_validator

from storlab import factors, timeline
from storlab.engines.base import Instance
from storlab.errors import UserError
from storlab.workloads.statements import Statement, StatementLoad
from storlab.workloads.driver import TRANSACTION_LATENCY, session_error
from storlab.session import Session
from storlab.workloads.kind import (ELAPSED, TEMPORARY, Connections, Figure, Load, UnitOfWork, Warmup, Workload,
                                    WorkloadParams)

MAX_TRANSACTIONS = 10**7  # per run, as the insert kinds (inserts.py says why)

@dataclass(frozen=True)
class Grammar:
    """How one engine's SQL splits into statements: a statement ends at a semicolon outside quotes,
    quoted identifiers, dollar quotes and comments (`token` finds each of those and each semicolon);
    `leading` is the blank and comment text before a statement."""

    token: re.Pattern
    leading: re.Pattern


GRAMMARS = {
    "postgres": Grammar(
        re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|(\$[A-Za-z_0-9]*\$).*?\1|--[^\n]*|/\*.*?\*/|;""", re.S),
        re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)),
    "mariadb": Grammar(
        re.compile(r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`]|``)*`|(?:--\s|\#)[^\n]*|/\*.*?\*/|;""", re.S),
        re.compile(r"(?:\s+|(?:--\s|\#)[^\n]*|/\*.*?\*/)*", re.S)),
}


def split(text: str, grammar: Grammar, name: str) -> list[Statement]:
    """The statements of a SQL file, each with the line it starts on, for errors that point at it."""
    found, start = [], 0

    def add(end: int) -> None:
        lead = grammar.leading.match(text, start, end).end()
        if lead < end:
            line = text.count("\n", 0, lead) + 1
            found.append(Statement(text[lead:end].strip(), f"{name} statement {len(found) + 1} (line {line})"))

    for match in grammar.token.finditer(text):
        if match.group(0) == ";":
            add(match.start())
            start = match.end()
    add(len(text))
    return found


class CustomParams(Warmup, WorkloadParams):
    kind: Literal["custom"]
    setup: str | None = None
    transaction: str | list[str]
    connections: Connections = 16
    transactions_per_connection: int | list[int] = 1000

    @field_validator("setup", "transaction", mode="before")
    @classmethod
    def _files(cls, v):
        return factors.optional(v, factors.text, "a SQL file's path")

    @field_validator("transactions_per_connection", mode="before")
    @classmethod
    def _transactions(cls, v):
        return factors.factor(v, factors.positive_int, "a positive integer")

    @model_validator(mode="after")
    def _finite(self):
        most = max(factors.values(self.connections)) * max(factors.values(self.transactions_per_connection))
        if most > MAX_TRANSACTIONS:
            raise factors.KeyProblem(("workload", "transactions_per_connection"),
                                     f"up to {most:,} transactions in one run; the limit is {MAX_TRANSACTIONS:,}")
        return self

    def sql_files(self) -> list[tuple[str, str]]:
        setup = [("setup", self.setup)] if self.setup is not None else []
        return setup + [("transaction", f) for f in factors.values(self.transaction)]


def _run_each(conn: Session, statements: list[Statement]) -> None:
    cursor = conn.cursor()
    for statement in statements:
        try:
            cursor.execute(statement.sql)
        except Exception as exc:
            raise UserError(f"{statement.where}: {session_error(exc)}") from None


class Custom(Workload):
    name = "custom"
    unit_of_work = UnitOfWork("transactions", "transaction", 1)
    throughput = timeline.TRANSACTIONS_PER_S
    answer_keys = frozenset()
    Params = CustomParams
    figures = (
        ELAPSED,
        Figure("transactions_per_s", "txn/s", "txn/s", "higher"),
        *TRANSACTION_LATENCY,
        Figure("transactions", "txn", "transactions", shown=False),
        *TEMPORARY,
    )
    note = "custom: the transactions are sent by storlab's client (a thread per connection), not looped in the server"
    engines = GRAMMARS

    def sessions(self, params: CustomParams, files: Mapping[str, str] | None = None) -> int:
        return params.connections

    def _transaction(self, engine: str, params: CustomParams, files: dict[str, str]) -> list[Statement]:
        name = params.transaction
        statements = split(files[name], self.engines[engine], name)
        if not statements:
            raise UserError(f"{name}: no SQL statement in the transaction file")
        return statements

    def prepare(self, instance: Instance, params: CustomParams, files: dict[str, str]) -> None:
        transaction = self._transaction(instance.engine, params, files)
        with instance.connect() as conn:
            if params.setup:
                _run_each(conn, split(files[params.setup], self.engines[instance.engine], params.setup))
            # Tried once and rolled back: a mistake is named before anything is measured.
            conn.cursor().execute("BEGIN")
            try:
                _run_each(conn, transaction)
            finally:
                conn.cursor().execute("ROLLBACK")

    def load(self, instance: Instance, params: CustomParams, files: dict[str, str]) -> Load:
        return StatementLoad(instance, self._transaction(instance.engine, params, files),
                          params.transactions_per_connection, params.connections, params.warmup_s or 0.0)
