"""The engines storlab drives, one package each, found here by the name an experiment file gives:
`engine(name)` is everything storlab knows of it (storlab.engines.base.Engine). An engine is added
by writing its package, registering it below, and giving each workload kind that should run on it an
entry in that kind's `engines` table (docs/development.md, "Adding an engine")."""

from __future__ import annotations

from contextlib import AbstractContextManager

from storlab.engines.base import Engine, Instance
from storlab.engines.mariadb import Mariadb
from storlab.engines.postgres import Postgres
from storlab.lab.layout import InstanceSpec

_REGISTRY: dict[str, Engine] = {}


def register(found: Engine) -> Engine:
    """Make an engine known by its name; each workload kind says, per engine, what it runs there."""
    _REGISTRY[found.name] = found
    return found


register(Postgres())
register(Mariadb())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def engine(name: str) -> Engine:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown engine {name} (storlab knows {', '.join(names())})") from None


def provision(name: str, spec: InstanceSpec, keep: bool, connections: int) -> AbstractContextManager[Instance]:
    return engine(name).provision(spec, keep, connections)
