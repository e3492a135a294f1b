"""The machines the kept runs were measured on, their facts judged as `storlab check` judges them
(without its sample of the core's speed under load, which is not recorded with runs)."""

from __future__ import annotations

from typing import Any

from storlab.answer import model
from storlab.machine import system


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def judged(host: str | None, facts: dict) -> model.Machine:
    """One machine's facts as the check judges them; facts from before storlab collected them all
    cannot be judged, and are given as they are."""
    try:
        report = system.assess(facts)
    except (KeyError, TypeError, AttributeError):
        return model.Machine(host=host, fit=None, judged=[], facts=dict(sorted(_flatten(facts).items())))
    return model.Machine(host=host, fit=report.fit, facts={}, judged=[
        model.FactJudged(group=i.group, name=i.name, value=i.value, state=i.state, reason=i.reason, distorts=i.distorts)
        for i in report.items])
