"""Workload kinds, one module each, found by their `kind` name. Adding a kind is one new module in
this package whose class is decorated with `kind.register`: every module here is imported below."""

from __future__ import annotations

import importlib
import pkgutil

from storlab.workloads.kind import KINDS, Figure, Measurement, Workload

_MACHINERY = {"kind", "driver", "client", "inserts", "tables", "rates", "tool", "captured_log"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _MACHINERY:
        importlib.import_module(f"{__name__}.{_module.name}")


def kind(name: str) -> Workload:
    return KINDS[name]


__all__ = ["KINDS", "Figure", "Measurement", "Workload", "kind"]
