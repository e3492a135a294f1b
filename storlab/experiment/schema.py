"""The experiment file's JSON Schema, made from the pydantic models that validate the file (the
workload a union told apart by `kind`), so an editor checks keys and types as the file is typed. What
needs the file's context (placement names a layout uses, sizes, limits, the engine's settings) is
checked when storlab loads it: `storlab run --dry-run` says everything."""

from __future__ import annotations

from typing import Any

from storlab.experiment.model import ExperimentModel


def experiment_schema() -> dict[str, Any]:
    schema = ExperimentModel.model_json_schema()
    schema["title"] = "storlab experiment"
    schema["description"] = ("A storlab experiment file (TOML). A list value in [layout], [workload] or "
                             "[engine_settings] is a factor: one cell per value.")
    return schema
