"""One adapter per engine; `provision` picks it by the experiment's engine name."""

from __future__ import annotations

from contextlib import AbstractContextManager

from storlab.layout import InstanceSpec


def provision(engine: str, spec: InstanceSpec, keep: bool, connections: int) -> AbstractContextManager:
    if engine == "postgres":
        from storlab.engines import postgres

        return postgres.provision(spec, keep, connections)
    if engine == "mariadb":
        from storlab.engines import mariadb

        return mariadb.provision(spec, keep, connections)
    raise ValueError(f"unknown engine {engine}")
