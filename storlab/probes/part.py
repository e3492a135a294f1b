"""A probe's part of the answer: the typed value its summary gives (probes/kept.Probe.summary), which the
answer holds under the probe's name, and what the terminal and the report show of it. A part says
what it shows itself, so the terminal and the report loop over the parts and never name a probe.

A part's type lives in a module that imports only the ground (as this one does): the answer's model
holds the parts without reaching what the probes record with (lab/)."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

from storlab.typed import Typed


@dataclass(frozen=True)
class PartTable:
    """One table of a part's section of the report, every cell as text."""

    headers: list[str]
    rows: list[list[str]]
    note: str = ""  # the caption under it
    left: int = 1  # the first columns are text, aligned left
    words: tuple[int, ...] = ()  # other columns of text, aligned left too


@dataclass(frozen=True)
class Section:
    """A part's section of the report: its heading, what it covers, its tables."""

    title: str
    tables: list[PartTable] = field(default_factory=list)
    intro: str = ""


class Part(Typed):
    """The base of every probe's part; its fields are the part's figures, as `show --json` gives them."""

    @abstractmethod
    def sentences(self) -> list[str]:
        """What `show --details` says of it, a line each; [] when its section of the report says it all."""

    @abstractmethod
    def section(self) -> Section:
        """Its section of the report."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        # The answer's schema types each part its model declares by the part's own type; a part of a probe
        # it does not declare is held as this base, which is any object (its fields are its probe's).
        if cls is Part:
            return {"type": "object", "description": "a probe's part, typed in its probe's part module"}
        return handler(core_schema)
