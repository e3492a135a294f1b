"""The base of every typed part of the answer (storlab.answer.model, and the parts probes give it):
frozen once made, and refusing any key it does not declare, so a renderer reads only what was computed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Typed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
