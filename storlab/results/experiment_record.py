"""The experiment a store holds: what was declared (its identity, which a later run into the store must
match), its factors and cells, how many runs and in what order, how the answer reads them (reference
levels, the margin of equivalence, until settled) and why the runs stopped. Kept as JSON text, read
back once into typed values (StoredExperiment, CellRecord): a value that is not of its type is a
damaged store (storlab.results.damage), never a traceback further on."""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from storlab.errors import UserError
from storlab.results.damage import parsed, shown, validated
from storlab.results.dialects import Connection
from storlab.rounds import RaceSettings, Settling

_STORED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _name(text: str) -> str:
    """An experiment's name or a host's, as the experiment file allows them: a default results folder
    is results/<name>, so a stored name must not be a path."""
    if not _NAME.fullmatch(text):
        raise ValueError("expected 1 to 64 letters, digits, '-', '_' or '.'")
    return text


Name = Annotated[str, AfterValidator(_name)]


def _dotted(text: str) -> str:
    """A factor's key as the file writes it, its table and its key: layout.data_files."""
    if "." not in text.strip("."):
        raise ValueError("expected a factor's dotted key, such as layout.data_files")
    return text


Dotted = Annotated[str, AfterValidator(_dotted)]
_OPEN = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)  # declared keys storlab compares, not reads


class StoredWorkload(BaseModel):
    model_config = _OPEN

    kind: str


class Identity(BaseModel):
    """What was declared, as `Experiment.identity()` wrote it: compared whole when the experiment is
    run again, read in part (the workload, the hosts, the placements)."""

    model_config = _OPEN

    workload: StoredWorkload | None = None
    hosts: list[Name] | None = None
    placements: dict[str, str | dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class StoredDesign(BaseModel):
    """The design the runs were last planned by (storlab.experiment.design), and where its runs begin:
    `after_run` is the last run recorded before the design changed (a follow-up after its screening), so
    the answer keeps a round's runs of the two apart (they did not share the machine's mood)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: str
    resolution: int | None = None
    factors: list[str] | None = None
    after_run: Annotated[int, Field(ge=0)] | None = None


class AnswerSettings(BaseModel):
    """How the answer reads the runs: each factor's reference level by its short name, the margin of
    equivalence (None: the answer's default), until settled, a rate kind's latency goal. A key a later
    storlab adds is left unread."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    reference: dict[str, Any] = {}
    equivalent_within: Annotated[float, Field(gt=0, le=0.5)] | None = None
    settling: Settling | None = None
    latency_goal: dict[str, Annotated[float, Field(gt=0)]] | None = None  # a rate kind's: percentile -> ms
    design: StoredDesign | None = None  # None: the full factorial


class StoredExperiment(BaseModel):
    model_config = _STORED

    name: Name
    engine: str
    source: str  # the experiment file's text
    identity: Identity
    repetitions: Annotated[int, Field(ge=1)]
    factors: dict[Dotted, Annotated[list[Any], Field(min_length=1)]]  # dotted key -> its values, in file order
    race: RaceSettings | None = None
    files: dict[str, str] = {}  # the SQL files the experiment names: their text
    order_seed: Annotated[int, Field(ge=0)] | None = None
    answer: AnswerSettings = AnswerSettings()
    stopped: str | None = None  # why the last `storlab run` stopped (until settled)

    @property
    def kind(self) -> str | None:
        """The workload's kind (None: no workload declared)."""
        return None if self.identity.workload is None else self.identity.workload.kind

    @property
    def workload(self) -> dict[str, Any]:
        """The workload's declared keys."""
        return {} if self.identity.workload is None else self.identity.workload.model_dump()

    @property
    def placements(self) -> dict[str, str | dict[str, Any]]:
        return self.identity.placements or {}


@dataclass
class CellRecord:
    id: str
    label: str
    factors: dict[str, Any]


_COLUMNS = ("name", "engine", "source", "identity", "repetitions", "factors", "race", "files", "order_seed",
            "answer", "stopped")
_JSON = ("identity", "factors", "race", "files", "answer")


class ExperimentRecord:
    """The store's part that keeps the experiment and its cells (a part of storlab.results.store.Store)."""

    db: Connection
    where: str  # how messages name the store
    another: str  # where a different experiment goes

    def experiment(self) -> StoredExperiment | None:
        row = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM experiment").fetchone()
        if row is None:
            return None
        values = dict(zip(_COLUMNS, row))
        for key in _JSON:
            values[key] = parsed(values[key], Any, self.where, f"table experiment: column {key}")
        values["files"] = {} if values["files"] is None else values["files"]
        values["answer"] = {} if values["answer"] is None else values["answer"]
        return validated(StoredExperiment, values, self.where, "experiment")

    def bind_experiment(self, name: str, engine: str, source: str, identity: dict, repetitions: int,
                        factors: dict[str, list], cells: list[tuple[str, str, dict]], race: dict | None = None,
                        files: dict[str, str] | None = None, answer: dict | None = None) -> None:
        """Record the experiment the first time; afterwards accept it only if nothing but its repetitions,
        its race (how many runs, which cells get them) and how the answer reads the runs changed.
        `files`: the text of the SQL files it names; `answer`: reference levels, margin, until settled."""
        stored = self.experiment()
        if stored is not None and _without_none(stored.identity.as_dict()) != _without_none(identity):
            changed = _first_difference(_without_none(stored.identity.as_dict()), _without_none(identity))
            raise UserError(
                f"{self.where}: holds results of a different experiment ({changed}); {self.another}"
            )
        with self.transaction() as db:
            if stored is None:
                db.execute(
                    """INSERT INTO experiment (id, name, engine, source, identity, repetitions, factors, created_at, race,
                                               files, answer)
                       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (name, engine, source, json.dumps(identity), repetitions, json.dumps(factors), time.time(),
                     json.dumps(race) if race else None, json.dumps(files or {}), json.dumps(answer or {})),
                )
            else:
                answer = _phased(answer or {}, stored.answer.design, db)
                db.execute("UPDATE experiment SET repetitions = ?, source = ?, race = ?, answer = ?",
                           (repetitions, source, json.dumps(race) if race else None, json.dumps(answer)))
                if files:
                    db.execute("UPDATE experiment SET files = ?", (json.dumps(files),))
            db.executemany(
                "INSERT INTO cells (id, position, label, factors) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(cell_id, position, label, json.dumps(cell_factors))
                 for position, (cell_id, label, cell_factors) in enumerate(cells)],
            )

    def order_seed(self, fixed: int | None = None) -> int:
        """The seed each round's order is drawn from: the file's (`fixed`), else the one kept, else a new
        one drawn now and kept, so a resume, a race and the fleet run every round in the same order."""
        with self.transaction() as db:
            stored = db.execute("SELECT order_seed FROM experiment").fetchone()
            if stored is None:
                raise UserError(f"{self.where}: no experiment recorded here yet")
            seed = fixed if fixed is not None else stored[0]
            if seed is None:
                seed = secrets.randbelow(2**31)
            if seed != stored[0]:
                db.execute("UPDATE experiment SET order_seed = ?", (seed,))
        return seed

    def record_stop(self, why: str | None) -> None:
        """Why the runs stopped (settled, max reached, budget spent); None while more runs may come."""
        with self.transaction() as db:
            db.execute("UPDATE experiment SET stopped = ?", (why,))

    def cells(self) -> list[CellRecord]:
        return [
            CellRecord(cid, label, parsed(factors, dict[Dotted, Any], self.where,
                                          f"table cells (id {shown(cid)}): column factors"))
            for cid, label, factors in self.db.execute("SELECT id, label, factors FROM cells ORDER BY position")
        ]


def _phased(answer: dict, stored: StoredDesign | None, db: Connection) -> dict:
    """`answer` with its design's `after_run`: kept while the design stays the one stored, else the last run
    recorded so far (the runs of the new design begin after it)."""
    design = answer.get("design")
    same = (stored.kind, stored.resolution, stored.factors) if stored is not None else ("full", None, None)
    asked = (design["kind"], design.get("resolution"), design.get("factors")) if design else ("full", None, None)
    if design is None:
        return answer
    if asked == same:
        after = stored.after_run if stored is not None else None
    else:
        after = db.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    return {**answer, "design": {**design, **({"after_run": after} if after is not None else {})}}


def _without_none(value: Any) -> Any:
    """An identity with unset keys left out: folders written before a key existed stored it as null."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def _first_difference(old: Any, new: Any, path: str = "") -> str:
    """The first key whose value differs, as 'layout.data_files: [1, 2] -> [1, 2, 4]'."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    return f"{path or 'experiment'}: {json.dumps(old)} -> {json.dumps(new)}"
