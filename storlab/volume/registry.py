"""Every property a volume has, in the order a placement's table lists them: the experiment's schema,
its refusals, `storlab check`, `storlab io` and the answer read them from here. A new property is its
module and one line below (docs/development.md, "Adding a device property")."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from storlab.factors import KeyProblem
from storlab.volume import added_latency, credit_buckets, device_format, io_caps
from storlab.volume.property import Key, Property

PROPERTIES: list[Property] = [device_format.PROPERTY, added_latency.PROPERTY, io_caps.PROPERTY, credit_buckets.PROPERTY]


def keys(directory: bool = False) -> Iterator[tuple[Property, Key]]:
    """Every key a device's table takes (a directory's: those of the properties it takes), by property."""
    for prop in PROPERTIES:
        if prop.directory or not directory:
            yield from ((prop, key) for key in prop.keys)


def key_names(directory: bool = False) -> list[str]:
    return [key.name for _, key in keys(directory)]


def owner(name: str) -> tuple[Property, Key] | None:
    """The property a key belongs to, and the key; None for a key no property has."""
    return next(((p, k) for p, k in keys() if k.name == name), None)


def conflict(given: Mapping[str, Any]) -> KeyProblem | None:
    """The first conflict between the keys given on one table, by the property that refuses them."""
    return next((found for prop in PROPERTIES if (found := prop.conflicts(given)) is not None), None)
