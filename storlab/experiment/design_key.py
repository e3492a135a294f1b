"""The experiment file's `design` key: "full" (the default), "screening", or a follow-up's table. Apart
from the designs it names (storlab.experiment.design), which read the whole experiment model: the model
holds this key."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema, field_validator

from storlab.factors import show

FULL, SCREENING, FOLLOW_UP = "full", "screening", "follow-up"
RESOLUTIONS = (3, 4, 5)
DEFAULT_RESOLUTION = 4
class DesignKey(BaseModel):
    """The file's `design`: "full" (the default), "screening", or a table with `kind`, a screening's
    `resolution`, a follow-up's `factors` (short names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["full", "screening", "follow-up"] = FULL
    resolution: int | None = None
    factors: list[str] | None = None

    @field_validator("resolution", mode="before")
    @classmethod
    def _resolution(cls, v):
        if v is not None and (isinstance(v, bool) or v not in RESOLUTIONS):
            raise ValueError(f"expected 3, 4 or 5, got {show(v)}")
        return v

    @field_validator("factors", mode="before")
    @classmethod
    def _factors(cls, v):
        if v is not None and (not isinstance(v, list) or not v or not all(isinstance(f, str) for f in v)):
            raise ValueError(f'expected a list of factors by their short names, such as ["log_on"], got {show(v)}')
        if v is not None and len(set(v)) < len(v):
            raise ValueError(f"a factor is named twice in {show(v)}")
        return v

    @property
    def wanted_resolution(self) -> int:
        return self.resolution or DEFAULT_RESOLUTION


def design_key(v: Any) -> DesignKey:
    """`design = "screening"` is `design = { kind = "screening" }`."""
    if isinstance(v, str):
        if v not in (FULL, SCREENING):
            raise ValueError(f'expected "full", "screening" or a table such as {{ kind = "follow-up", factors = ["log_on"] }}, '
                             f"got {show(v)}")
        return DesignKey(kind=v)
    if isinstance(v, dict):
        return DesignKey.model_validate(v)
    if isinstance(v, DesignKey):
        return v
    raise ValueError(f'expected "full", "screening" or a table with kind, got {show(v)}')


# The experiment file's key: a word or a table, one type once read; an editor's schema says both forms.
Design = Annotated[DesignKey, BeforeValidator(design_key), WithJsonSchema({"anyOf": [
    {"enum": [FULL, SCREENING]},
    {"type": "object", "additionalProperties": False, "required": ["kind"], "properties": {
        "kind": {"enum": [FULL, SCREENING, FOLLOW_UP]}, "resolution": {"enum": list(RESOLUTIONS)},
        "factors": {"type": "array", "items": {"type": "string"}, "minItems": 1}}}]})]
