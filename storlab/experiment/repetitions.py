"""The experiment file's keys for how many runs each cell gets: a fixed number of repetitions, a race's
bounds (`race = true`), or rounds until the answer is settled (`until = "settled"`, an optional budget of
wall time), with the margin of equivalence and each factor's reference level. The race itself and the
answer's statistics read these settings (storlab.answer)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from storlab.factors import KeyProblem, show
from storlab.rounds import DEFAULT_MARGIN, DEFAULT_MIN_ROUNDS, MAX_ROUNDS, RaceSettings, Settling
from storlab.sizes import NUMBER, digits_note, parse_duration

DEFAULT_MIN_SETTLING = 2  # until settled: the first look is after round 2


def parse_percent(text: object) -> float:
    """'2%' -> 0.02, in ASCII digits (float() reads "５" as 5). A bare number is refused: 2 and 0.02
    would both be plausible readings."""
    match = re.fullmatch(NUMBER + r"\s*%\s*", text, re.ASCII) if isinstance(text, str) else None
    if match and 0 < float(match[1]) <= 50:
        return float(match[1]) / 100
    raise ValueError(f'expected a percentage above 0 and at most 50, such as "2%", got {show(text)}{digits_note(text)}')


# Parsed once when the file loads; written as text ("25%", "10m"), as an editor's schema says.
Percent = Annotated[float, BeforeValidator(parse_percent), WithJsonSchema({"type": "string", "pattern": "%$"})]
Duration = Annotated[float, BeforeValidator(parse_duration),
                     WithJsonSchema({"type": "string", "description": 'a duration such as "90s", "10m" or "2h"'})]


class RunLength(BaseModel):
    """`run_length = { min = "10s", max = "2m" }` under until settled: before each round after `min`, the
    noise split plans the runs' length (the workload's duration_s) within these bounds; a bound not given
    is the declared duration_s."""

    model_config = ConfigDict(extra="forbid")

    min: Duration | None = None  # seconds
    max: Duration | None = None

    @field_validator("min", "max")
    @classmethod
    def _whole(cls, v):
        if v is not None and v != int(v):
            raise ValueError(f"expected whole seconds (a load generator counts its run time so), got {v:g} s")
        return v

    @model_validator(mode="after")
    def _given(self):
        if self.min is None and self.max is None:
            raise ValueError('expected min, max or both, such as { min = "10s", max = "2m" }')
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max:g} s) is below min ({self.min:g} s)")
        return self


class RepetitionRange(BaseModel):
    """`repetitions = { min = 3, max = 10 }`: a race's bounds on the rounds; with `until = "settled"`
    (min 2 by default, an optional `budget = "10m"` of wall time), the rounds stop once the answer
    is settled (storlab.answer.effects)."""

    model_config = ConfigDict(extra="forbid")

    min: int | None = None
    max: int
    until: Literal["settled"] | None = None
    budget: Duration | None = None  # seconds
    run_length: RunLength | None = None

    @field_validator("min", "max", mode="before")
    @classmethod
    def _count(cls, v):
        if isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= MAX_ROUNDS:
            raise ValueError(f"expected an integer from 2 to {MAX_ROUNDS}, got {show(v)}")
        return v

    @field_validator("until", mode="before")
    @classmethod
    def _until(cls, v):
        if v != "settled":
            raise ValueError(f'expected "settled" (stop once every factor is different or equivalent), got {show(v)}')
        return v

    @model_validator(mode="after")
    def _ordered(self):
        if self.min is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.budget is not None and self.until is None:
            raise ValueError('budget: only with until = "settled"')
        if self.run_length is not None and self.until is None:
            raise ValueError('run_length: only with until = "settled"')
        return self


class RacingKeys(BaseModel):
    """The experiment file's keys for how many runs each cell gets, in what order, and how the answer
    reads them, for the experiment model to inherit: `race` is declared first so the other keys'
    validators can see it (`storlab run --race` sets it in the raw file before validation)."""

    race: bool = False
    repetitions: int | RepetitionRange = 3
    equivalent_within: Percent | None = None  # a fraction
    reference: dict[str, Any] | None = None  # short factor name -> its reference level (default: the first)
    order_seed: int | None = None  # fixes the seed each round's order is drawn from (default: drawn once)

    @field_validator("race", mode="before")
    @classmethod
    def _race(cls, v):
        if not isinstance(v, bool):
            raise ValueError(f"expected true or false, got {show(v)}")
        return v

    @field_validator("repetitions", mode="before")
    @classmethod
    def _repetitions(cls, v, info: ValidationInfo):
        racing = info.data.get("race", False)
        if isinstance(v, dict):
            if not racing and "until" not in v:
                raise ValueError(
                    'a { min, max } table is for racing: set race = true (or run with --race), add until = "settled", '
                    "or give one number"
                )
            try:
                return RepetitionRange.model_validate(v)
            except ValidationError as exc:  # one line naming the inner key, not pydantic's union of branches
                err = exc.errors()[0]
                key = ".".join(str(k) for k in err["loc"])
                cause = err.get("ctx", {}).get("error")
                plain = {"extra_forbidden": "unknown key", "missing": "missing"}
                what = plain.get(err["type"]) or str(cause or err["msg"])
                raise ValueError(f"{key}: {what}" if key else what) from None
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_ROUNDS:
            raise ValueError(
                f"expected an integer from 1 to {MAX_ROUNDS}, or {{ min = 3, max = 10 }} with race = true, "
                f'or {{ max = 12, until = "settled" }}, got {show(v)}'
            )
        if racing and v < 2:
            raise ValueError("a race needs at least 2 repetitions")
        return v

    @model_validator(mode="after")
    def _run_length(self):
        """The run length planned is the workload's duration_s: one whole number of seconds, within the bounds."""
        rng = self.repetitions
        if not isinstance(rng, RepetitionRange) or rng.run_length is None:
            return self
        from storlab.workloads.rates import MAX_DURATION_S  # the workload kinds load after the file's keys

        workload = getattr(self, "workload", None)
        where = ("repetitions", "run_length")
        if "duration_s" not in type(workload).model_fields:
            raise KeyProblem(where, f"{show(workload.kind)} runs a fixed amount of work, not for a duration: only a "
                             "kind with duration_s (pgbench, sysbench) has a run length to plan")
        declared = workload.duration_s
        if isinstance(declared, (list, dict)) or workload.cycles_per_run() is not None:
            raise KeyProblem(where, "planned from one declared length: duration_s must be one whole number of "
                             "seconds (not a factor, a run until steady, or checkpoint_cycles)")
        length = workload.duration
        low, high = rng.run_length.min or length, rng.run_length.max or length
        for bound, outside in (("min", length < low), ("max", length > high)):
            if outside:
                raise KeyProblem(where, f"{bound}: the declared duration_s ({length:g} s), the first rounds' length, "
                                 f"is {'below' if bound == 'min' else 'above'} it ({low if bound == 'min' else high:g} s)")
        if high > MAX_DURATION_S:
            raise KeyProblem(where, f"max: {high:g} s is longer than a run's {MAX_DURATION_S} s")
        return self

    @field_validator("reference", mode="before")
    @classmethod
    def _reference(cls, v):
        if not isinstance(v, dict) or not v:
            raise ValueError(f'expected a table of factor = level, such as {{ log_on = "disk" }}, got {show(v)}')
        return v

    @field_validator("order_seed", mode="before")
    @classmethod
    def _order_seed(cls, v):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**31:
            raise ValueError(f"expected an integer from 0 to {2**31 - 1}, got {show(v)}")
        return v

    def race_settings(self, lower_is_better: bool = True) -> RaceSettings | None:
        """The race these keys declare, or None when the matrix runs every repetition. One number of
        repetitions races from min(3, N) rounds to N."""
        if not self.race:
            return None
        if isinstance(self.repetitions, RepetitionRange):
            high = self.repetitions.max
            low = self.repetitions.min or min(DEFAULT_MIN_ROUNDS, high)
        else:
            low, high = min(DEFAULT_MIN_ROUNDS, self.repetitions), self.repetitions
        return RaceSettings(min_rounds=low, max_rounds=high, equivalent_within=self.equivalent_within,
                            lower_is_better=lower_is_better)

    def settling(self) -> Settling | None:
        """`until = "settled"`, or None when every repetition (or the race's) is run."""
        rng = self.repetitions
        if not isinstance(rng, RepetitionRange) or rng.until is None:
            return None
        low = rng.min or DEFAULT_MIN_SETTLING
        if rng.run_length is None:
            return Settling(min(low, rng.max), rng.max, rng.budget)
        length = self.workload.duration  # the bounds were checked against it (_run_length)
        return Settling(min(low, rng.max), rng.max, rng.budget, rng.run_length.min or length,
                        rng.run_length.max or length)

    @property
    def margin(self) -> float:
        """The practical margin of equivalence (`equivalent_within`, 5 % by default)."""
        return DEFAULT_MARGIN if self.equivalent_within is None else self.equivalent_within

    @property
    def most_repetitions(self) -> int:
        """The most runs a cell can get: what a plan and its ETA count."""
        return self.repetitions.max if isinstance(self.repetitions, RepetitionRange) else self.repetitions


def until_settled(raw_repetitions: Any) -> Any:
    """`storlab run --until-settled`: `repetitions = N` read as { max = N, until = "settled" } (a
    table gets `until` added; a missing key is the default 3)."""
    if isinstance(raw_repetitions, dict):
        return {**raw_repetitions, "until": "settled"}
    return {"max": raw_repetitions, "until": "settled"}  # 1 is refused there: one round settles nothing
