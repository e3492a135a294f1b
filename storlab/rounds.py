"""How many rounds the cells get and when they stop: a race's settings and `until = "settled"`, as the
experiment file declares them (storlab.experiment.repetitions), the results store keeps them and the
answer reads them back (a stored experiment's settings are these types, parsed once when read)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass

ALPHA = 0.05  # every verdict's error rate: a race's drops and the answer's tests alike (storlab.answer.stats)
DEFAULT_MARGIN = 0.05  # equivalent_within's default: a level within ±5 % of its reference is equivalent
DEFAULT_MIN_ROUNDS = 3
MAX_ROUNDS = 100  # the experiment file's limit on repetitions (docs/experiment-file.md, "Limits")


class RaceSettings(BaseModel):
    """What one race needs. `equivalent_within` is a fraction (0.02 for "2%"; None: DEFAULT_MARGIN);
    lower_is_better is True for elapsed seconds, False for a throughput. `levels`: each cell's factor levels
    (storlab.answer.racing.levels_of), which let the race drop a factor's level at once; None: cell by cell."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min_rounds: int = Field(DEFAULT_MIN_ROUNDS, ge=2)
    max_rounds: int = Field(10, ge=2, le=MAX_ROUNDS)
    equivalent_within: float | None = Field(None, gt=0, le=0.5)
    lower_is_better: bool = True
    alpha: float = Field(ALPHA, gt=0, lt=0.5)
    levels: dict[str, dict[str, str]] | None = None

    @model_validator(mode="after")
    def _bounds(self):
        if self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds ({self.max_rounds}) is below min_rounds ({self.min_rounds})")
        return self


Rounds = Annotated[int, Field(ge=2, le=MAX_ROUNDS)]


@dataclass(frozen=True, config=ConfigDict(allow_inf_nan=False))
class Settling:
    """`until = "settled"`: after each round from `min_rounds`, the factor effects are fitted again and
    the runs stop once they are settled, at `max_rounds`, or once `budget_s` of wall time is spent. With
    `shortest_s` and `longest_s` (`run_length`, both resolved against the declared duration_s), each
    round after `min_rounds` runs at the length the noise split plans (storlab.answer.noise_split);
    None: every round at the declared length."""

    min_rounds: Rounds
    max_rounds: Rounds
    budget_s: Annotated[float, Field(gt=0)] | None = None
    shortest_s: Annotated[float, Field(gt=0)] | None = None
    longest_s: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _bounds(self):
        if self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds ({self.max_rounds}) is below min_rounds ({self.min_rounds})")
        if (self.shortest_s is None) != (self.longest_s is None):
            raise ValueError("shortest_s and longest_s: both or neither")
        if self.shortest_s is not None and self.longest_s < self.shortest_s:
            raise ValueError(f"longest_s ({self.longest_s:g}) is below shortest_s ({self.shortest_s:g})")
        return self

    @property
    def plans_length(self) -> bool:
        """The runs' length is planned before each round after `min_rounds`."""
        return self.longest_s is not None

