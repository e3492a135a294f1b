"""The results store: one experiment's results, one transaction per finished run, so a crash loses at
most the run that was under way. A results folder keeps it in one SQLite file (folder_store); a fleet
in a shared PostgreSQL (shared_store), with the same tables and statements, written once in the SQL
both dialects share (dialects). Its parts: the tables and their migrations (schema, versions), the
experiment and its cells (experiment_record), the runs and machine facts (runs), device capability
(io_jobs); everything it holds is checked before it is read (damage)."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

from storlab.errors import UserError
from storlab.results import folder_store, versions
from storlab.results.dialects import Connection
from storlab.results.experiment_record import ExperimentRecord
from storlab.results.io_jobs import IoJobs
from storlab.results.runs import RunRecords
from storlab.results.schema import Table


class Store(ExperimentRecord, RunRecords, IoJobs):
    """One experiment's results. `folder`: where files beside the store go (report, export); `where`:
    how messages name the store."""

    def __init__(self, db: Connection, folder: Path, where: str | None = None,
                 versioning: versions.Versioning | None = None):
        self.db = db
        self.folder = folder
        self.where = where or str(folder)
        self.versioning = versioning or versions.UserVersion()
        self.another = "use another --out folder, or restore the file"  # where a different experiment goes
        self.experiment_id: int | None = None  # its id in a shared store's catalogue
        self.file: tuple[Path, int, int] | None = None  # a folder's store file, (path, device, inode)
        self.descriptor: int | None = None  # a descriptor of that file while a writer has it open (folder_store)
        self._depth = 0

    @classmethod
    def open(cls, folder: Path, create: bool = True) -> ContextManager["Store"]:
        """A results folder's store (storlab.results.folder_store): `create` for the commands that
        write it, read-only otherwise."""
        return folder_store.opened(cls, Path(folder), create)

    def migrate(self) -> None:
        versions.migrate(self)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction; a transaction opened inside another is part of it (the fleet records a
        run and closes its claim at once)."""
        if self._depth:
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        self.db.execute(self.db.dialect.begin)
        self._depth = 1
        try:
            yield self.db
        except BaseException:
            self._depth = 0
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.OperationalError:
                pass  # SQLite rolled it back itself (a full disk does): the first error is the one to tell
            raise
        self._depth = 0
        self.db.execute("COMMIT")

    @contextmanager
    def _keeping(self, what: str) -> Iterator[None]:
        """Writes `what` into a folder's store, or says in one line (UserError) that it could not, and
        why: the file was deleted or replaced under the run (its writes would go nowhere), or cannot be
        written (read-only, full). `what` carries the run's figures, so they are not lost unsaid."""
        self._still_there(what)
        cause = folder_store.locked(self.descriptor) if self.descriptor is not None and self.file is not None else None
        if cause:
            raise UserError(f"{self.file[0]}: could not record {what}: {cause}; stopped (the runs recorded "
                            "before it are kept)")
        try:
            yield
        except sqlite3.OperationalError as exc:
            if self.file is None:
                raise
            reason = folder_store.unwritable(self.folder, exc) or f"{exc}"
            raise UserError(f"{self.file[0]}: could not record {what}: {reason}; stopped (the runs recorded "
                            "before it are kept)") from None
        self._still_there(what)

    def _still_there(self, what: str) -> None:
        if self.file is None:
            return
        path, device, inode = self.file
        now = folder_store.identity(path)
        if now is None or now[1:] != (device, inode):
            how = "deleted" if now is None else "replaced"
            raise UserError(f"{path}: the results store was {how} while storlab ran; {what} is not in it; "
                            "stopped (run the same command to start the folder again)")

    def rows(self, table: Table) -> list[tuple]:
        """Every row of one of the store's tables (storlab.results.schema), its columns in their order,
        the rows in the order of their values."""
        names = ", ".join(f'"{c.name}"' for c in table.columns)
        return self.db.execute(f'SELECT {names} FROM "{table.name}" ORDER BY {names}').fetchall()
