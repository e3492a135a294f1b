"""The experiment file: load a TOML file, validate it, and say what is wrong in one line.

A list value is a factor (one cell per value); a scalar is a constant of every cell.
Errors read `FILE:LINE: KEY: what is wrong`, so a user finds the mistake without reading a traceback.
The stages are modules of their own: the text and where a key is (`text`), the keys (`model`,
`places`), the factors (`swept`), the SQL files (`sql_files`), this machine (`on_this_host`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from storlab.errors import UserError
from storlab.experiment import places, repetitions
from storlab.experiment.design import check_design
from storlab.experiment.model import ALLOW_SERVER_PROGRAMS, ExperimentModel
from storlab.experiment.on_this_host import (capped_devices_problem, data_folders_problem, image_space_problem,
                                             limits_problem, placements_problem, volume_problem)
from storlab.experiment.sql_files import confined, read_sql
from storlab.experiment.swept import check_excludes, check_factors, check_memory, check_reference, swept
from storlab.labels import short_name
from storlab.experiment.text import MAX_DEPTH, MAX_FILE_BYTES, control_character, first_error, read_text, too_deep, where
from storlab.factors import KeyProblem
from storlab.lab import placements
from storlab.rounds import RaceSettings, Settling
from storlab.workloads import KINDS, Workload

# A client script that runs programs on this machine (pgbench's \shell) is taken only from a file run
# here by whoever runs it, never from a fleet's store.
CLIENT_PROGRAMS_ALLOWED_WITH = "storlab run --allow-client-programs"

@dataclass(frozen=True, eq=False)  # one experiment is itself only: its cells are computed once (matrix.cells)
class Experiment:
    """A validated experiment, with the file it came from (for relative placements and errors)."""

    model: ExperimentModel
    path: Path
    source: str
    factors: dict[str, list[Any]] = field(default_factory=dict)
    sql: dict[str, str] = field(default_factory=dict)  # the SQL files the workload names: their text

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def engine(self) -> str:
        return self.model.engine

    @property
    def repetitions(self) -> int:
        """The most runs a cell can get (a race may give it fewer)."""
        return self.model.most_repetitions

    @property
    def figures(self) -> tuple:
        """The workload's figures for this file, the one that ranks the cells first."""
        return self.workload.figures_of(self.model.workload.model_dump(mode="json", exclude_none=True))

    def race(self) -> RaceSettings | None:
        return self.model.race_settings(self.figures[0].better != "higher")

    def settling(self) -> Settling | None:
        """`until = "settled"`: the runs stop once the answer is settled (or at max, or the budget)."""
        return self.model.settling()

    def answer_settings(self) -> dict[str, Any]:
        """How the answer reads the runs, as the store keeps it: each factor's reference level (by its
        short name; the first declared value unless the file names one), the margin of equivalence,
        until settled, a rate kind's latency goal, and a design other than the full one."""
        named = {k: v for k, v in (self.model.reference or {}).items()}
        reference = {short_name(d): named.get(short_name(d), values[0]) for d, values in self.factors.items()}
        settling = self.settling()
        goal = self.model.workload.goal_ms()
        design = self.model.design.model_dump(exclude_none=True)
        return {"reference": reference, "equivalent_within": self.model.margin,
                "settling": None if settling is None else asdict(settling), **({"latency_goal": goal} if goal else {}),
                **({"design": design} if design["kind"] != "full" else {})}

    @property
    def workload(self) -> Workload:
        return KINDS[self.model.workload.kind]

    def placement_path(self, name: str) -> Path:
        """Where a directory placement lives: relative paths are relative to the experiment file."""
        return Path(os.path.realpath(placements.resolve(places.path_text(self.model.placements[name]), self.path.parent)))

    @property
    def directories(self) -> list[str]:
        """The placements that are directories (the others are devices storlab makes for each run)."""
        return [name for name, raw in self.model.placements.items() if places.path_text(raw) is not None]

    @property
    def capped(self) -> dict[str, places.VolumeKeys]:
        """The placements with IO caps on their device, by name: their tables."""
        return {name: table for name, raw in self.model.placements.items() if (table := places.cap_table(raw))}

    @property
    def devices(self) -> dict[str, places.DevicePlacement]:
        """The device placements, by name."""
        return {name: raw for name, raw in self.model.placements.items() if isinstance(raw, places.DevicePlacement)}

    @property
    def device_sizes(self) -> dict[str, int]:
        """Each device placement's size: what its filesystem can hold, at most."""
        return {name: raw.size_bytes for name, raw in self.devices.items()}

    def where(self, loc: tuple) -> str:
        """FILE:LINE of a key, for a one-line error about it."""
        return where(self.path, self.source, loc)

    def identity(self) -> dict[str, Any]:
        """What must not change between two runs into the same results folder (repetitions may):
        the declared values (keys left unset are left out, so a key added to storlab later does not
        make an old folder a different experiment) and the SQL files' digests."""
        body = self.model.model_dump(mode="json", exclude_none=True)
        # How many runs, in what order and how the answer reads them, not what is measured.
        for key in ("repetitions", "race", "equivalent_within", "reference", "order_seed", "design"):
            body.pop(key, None)
        for key in ("stall_after_s", "run_limit_s"):  # when a run is given up, not what it measures
            body.get("workload", {}).pop(key, None)
        for key in self.workload.answer_keys:  # how the answer reads the runs (answer_settings)
            body.get("workload", {}).pop(key, None)
        if self.sql:
            body["sql"] = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(self.sql.items())}
        return body

    def identity_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()


def load(path: str | Path, race: bool = False, check_placements: bool = True, until_settled: bool = False,
         allow_server_programs: bool = False, allow_client_programs: bool = False) -> Experiment:
    """Read and validate an experiment file; any mistake raises UserError naming file, line and key.
    Nothing is created: placements are checked by looking only (`check_placements`: on this
    machine; `storlab submit` leaves them to the workers, whose placements they are). `race`: as if
    the file said `race = true` (storlab run --race); `until_settled`: as if its repetitions said
    until = "settled" (storlab run --until-settled); `allow_server_programs`: engine settings that run
    a program or load a library on the server are taken (storlab run --allow-server-programs);
    `allow_client_programs`: client scripts that run a program on this machine are taken (storlab run
    --allow-client-programs)."""
    path = Path(path)
    return parse(path, read_text(path), check_placements=check_placements, race=race, until_settled=until_settled,
                 allow_server_programs=allow_server_programs, allow_client_programs=allow_client_programs)


def parse(path: Path, text: str, files: dict[str, str] | None = None, check_placements: bool = True,
          race: bool = False, until_settled: bool = False, allow_server_programs: bool = False,
          allow_client_programs: bool = False) -> Experiment:
    """An experiment from its text, as if read from `path` (relative placements are relative to its
    folder). `files`: the text of the SQL files it names, as a store keeps them (otherwise read)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path.name}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib reads nested brackets by recursion
        raise UserError(f"{path.name}: values nested too deeply; an experiment needs at most {MAX_DEPTH} levels") from None
    deep = too_deep(raw)
    if deep is not None:
        dotted = ".".join(str(k) for k in deep if not isinstance(k, int)) or "(top level)"
        raise UserError(f"{where(path, text, deep)}: {dotted}: nested more than {MAX_DEPTH} levels deep")
    if race:
        raw["race"] = True
    if until_settled:
        raw["repetitions"] = repetitions.until_settled(raw.get("repetitions", 3))

    def fail(loc: tuple, message: str) -> UserError:
        dotted = ".".join(str(k) for k in loc if not isinstance(k, int)) or "(top level)"
        return UserError(f"{where(path, text, loc)}: {dotted}: {message}")

    bad = control_character(raw)
    if bad:
        raise fail(*bad)
    try:
        model = ExperimentModel.model_validate(raw, context={ALLOW_SERVER_PROGRAMS: allow_server_programs})
    except ValidationError as exc:
        raise fail(*first_error(exc)) from None
    if model.layout.data_on is None:
        raise UserError(f"{where(path, text, ('layout',))}: layout.data_on: missing (name the placement that holds the data)")
    declared = swept(model)
    for check in (check_factors, check_excludes, check_reference, check_memory, check_design):
        problem = check(model, declared)
        if problem:
            raise fail(*problem)
    sql = {}
    for key, name in model.workload.sql_files():
        try:
            sql[name] = read_sql(path, name, model.workload.file_bytes.get(key, MAX_FILE_BYTES)) \
                if files is None else files[confined(name)]
        except KeyError:
            raise fail(("workload", key), f"SQL file {name}: not kept in the store") from None
        except ValueError as exc:
            raise fail(("workload", key), f"SQL file {name}: {exc}") from None
        except OSError as exc:
            raise fail(("workload", key), f"cannot read SQL file {name}: {exc.strerror or exc}") from None
    try:
        KINDS[model.workload.kind].check_files(model.workload, sql)
    except KeyProblem as exc:
        raise fail(exc.loc, str(exc)) from None
    runs = KINDS[model.workload.kind].client_programs(model.workload, sql)
    if runs and not allow_client_programs:
        found = runs[0]
        raise fail(("workload", found.key), f"{found.file} line {found.line}: {found.what} runs a program on this "
                   f"machine; taken only with {CLIENT_PROGRAMS_ALLOWED_WITH} (a fleet worker never takes it)")
    experiment = Experiment(model=model, path=path.resolve(), source=text, factors=declared, sql=sql)
    problem = (volume_problem(experiment) or limits_problem(experiment) or placements_problem(experiment) or image_space_problem(experiment)
               or data_folders_problem(experiment) or capped_devices_problem(experiment)) if check_placements else None
    if problem:
        raise fail(*problem)
    return experiment
