"""A store's versions and how it is brought up to date: the schema's version (a folder's in SQLite's
header, a shared store's experiment in its catalogue) steps through the store's migrations one at a
time, then each probe's tables through the probe's own, its version kept under its name in
`probe_versions`. A store a newer storlab changed is refused; so is a version no storlab writes."""

from __future__ import annotations

from typing import Protocol

from storlab.errors import UserError
from storlab.probes import registry
from storlab.results.damage import Damaged, shown
from storlab.results.dialects import Connection
from storlab.results.schema import MIGRATIONS


class Versioning(Protocol):
    """Where a store keeps its schema's version, and the lock its migrations take."""

    def lock(self, db: Connection) -> None: ...

    def get(self, db: Connection) -> int: ...

    def set(self, db: Connection, version: int) -> None: ...


class UserVersion:
    """SQLite keeps the schema's version in its header (PRAGMA user_version)."""

    def lock(self, db: Connection) -> None:
        """BEGIN IMMEDIATE already holds the only write lock."""

    def get(self, db: Connection) -> int:
        return db.execute("PRAGMA user_version").fetchone()[0]

    def set(self, db: Connection, version: int) -> None:
        db.execute(f"PRAGMA user_version = {int(version)}")


class Migrating(Protocol):
    """What migrating needs of a store (storlab.results.store.Store)."""

    db: Connection
    where: str
    versioning: Versioning

    def transaction(self): ...


def migrate(store: Migrating) -> None:
    """One step per transaction; the version is read again under the lock, so two processes
    opening one store at once migrate it once."""
    while True:
        with store.transaction():
            store.versioning.lock(store.db)
            version = store.versioning.get(store.db)
            if version > len(MIGRATIONS):
                raise UserError(f"{store.where}: written by a newer storlab (schema {version}); upgrade storlab to read it")
            if version == len(MIGRATIONS):
                break
            for statement in store.db.dialect.statements(MIGRATIONS[version]):
                store.db.execute(statement)
            store.versioning.set(store.db, version + 1)
    for probe in registry.PROBES:
        with store.transaction():
            store.versioning.lock(store.db)
            probe_version = probe_versions(store).get(probe.name, 0)
            if probe_version > len(probe.migrations):
                raise newer_probe(store.where, probe.name, probe_version, len(probe.migrations))
            for migration in probe.migrations[probe_version:]:
                for statement in store.db.dialect.statements(migration):
                    store.db.execute(statement)
            if probe_version < len(probe.migrations):
                store.db.execute("INSERT INTO probe_versions (probe, version) VALUES (?, ?) ON CONFLICT (probe) "
                                 "DO UPDATE SET version = excluded.version", (probe.name, len(probe.migrations)))


def probe_versions(store: Migrating) -> dict[str, int]:
    """Each probe's version of its own tables (none before the store's migration 10), each a name
    and a version from 0 up, or the store is damaged."""
    if store.versioning.get(store.db) < len(MIGRATIONS):
        return {}
    found = {}
    for probe, version in store.db.execute("SELECT probe, version FROM probe_versions").fetchall():
        if not isinstance(probe, str) or isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise Damaged(store.where, f"table probe_versions: probe {shown(probe)} at version {shown(version)}: "
                                       "expected a probe's name and a version from 0 up")
        found[probe] = version
    return found


def behind(store: Migrating) -> bool:
    """The schema, or a probe's tables, older than this storlab's."""
    if store.versioning.get(store.db) < len(MIGRATIONS):
        return True
    versions = probe_versions(store)
    return any(versions.get(p.name, 0) < len(p.migrations) for p in registry.PROBES)


def check_probes(store: Migrating) -> None:
    """Refuse a store whose probe's tables are at a version this storlab does not know (a probe this
    storlab does not know is left alone: its tables are simply not read)."""
    known = {p.name: len(p.migrations) for p in registry.PROBES}
    for name, version in probe_versions(store).items():
        if name in known and version > known[name]:
            raise newer_probe(store.where, name, version, known[name])


def newer_probe(where: str, name: str, version: int, known: int) -> UserError:
    return UserError(f"{where}: table probe_versions: probe {name} at version {version}, where this storlab knows its "
                     f"tables up to version {known}: written by a newer storlab (upgrade storlab to read it), or damaged")
