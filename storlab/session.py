"""A database session as storlab uses it on either engine: statements sent in autocommit, their rows
read back (psycopg's Connection for PostgreSQL; engines/mariadb's Connection over PyMySQL)."""

from __future__ import annotations

from typing import Any, Protocol


class Rows(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Session(Protocol):
    def execute(self, sql: Any, params: Any = None) -> Rows: ...

    def cursor(self) -> Any:
        """The driver's own cursor: the hot path of a load that sends many statements."""

    def close(self) -> None: ...
