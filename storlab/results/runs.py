"""The runs a store holds: each finished run written whole in one transaction (its figures, waits,
timeline and what each probe of the registry recorded), the failed ones with their message, and the
machine facts every run is recorded with. Read back as typed records (RunRecord), the JSON each row
keeps parsed once, into its type (storlab.results.damage)."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from storlab.probes import registry
from storlab.probes.kept import Probe
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.damage import Damaged, parsed, problem
from storlab.results.dialects import Connection


@dataclass
class RunRecord:
    id: int
    cell_id: str
    repetition: int
    started_at: float
    wait_source: str
    wait_extras: dict[str, float]
    engine_version: str
    facts_id: int
    figures: dict[str, float]  # name -> value, as the workload kind reported them
    conditions: dict[str, Any] = field(default_factory=dict)  # what the run started from (quiesce.py)
    host: str | None = None  # the host that measured it (None: recorded before storlab kept it)


@dataclass
class RunResult:
    """Everything one finished run hands to the store."""

    started_at: float
    figures: list[tuple[str, float, str]]  # (name, value, unit)
    capture: WaitCapture
    engine_version: str
    timeline: list[tuple[float, str, float]]  # (seconds on the run's axis, metric, value)
    conditions: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)  # what each probe of the registry recorded, by its name


class Conditions(BaseModel):
    """What a run started from (storlab.lab.quiesce), the keys `show` reads typed."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    page_cache: str | None = None
    warmup_s: float | None = None
    devices: dict[str, dict[str, Any]] | None = None
    tracing: Literal["off", "on", "io", "reads"] | None = None  # what bpftrace traced (None: a run from before it was kept)
    server_memory_held_bytes: int | None = None


class Facts(BaseModel):
    """A machine's facts (storlab.machine.system), the parts the answer reads typed."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    cpu: dict[str, Any] | None = None
    paths: dict[str, dict[str, Any]] | None = None


def facts_digest(comparable: dict) -> str:
    return hashlib.sha256(json.dumps(comparable, sort_keys=True).encode()).hexdigest()[:16]


def _dumped(text: Any, model: type[BaseModel], where: str, at: str) -> dict[str, Any]:
    return parsed(text, model, where, at).model_dump(exclude_unset=True)


class RunRecords:
    """The store's part that keeps the runs and the machine facts (a part of storlab.results.store.Store)."""

    db: Connection
    where: str

    # machine facts

    def record_facts(self, body: dict, comparable: dict) -> int:
        digest = facts_digest(comparable)
        with self.transaction() as db:
            # One statement: two processes of one machine (a worker and `storlab run --store`) may
            # record the same facts at once, and a look before the insert would let both insert.
            return db.execute(
                "INSERT INTO facts (digest, comparable, body, recorded_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (digest) DO UPDATE SET body = excluded.body, recorded_at = excluded.recorded_at "
                "RETURNING id",
                (digest, json.dumps(comparable), json.dumps(body), time.time()),
            ).fetchone()[0]

    def facts(self) -> dict[int, dict]:
        """facts id -> {'comparable': ..., 'body': ...}"""
        return {
            fid: {"comparable": _dumped(comp, Facts, self.where, f"table facts (id {fid}): column comparable"),
                  "body": _dumped(body, Facts, self.where, f"table facts (id {fid}): column body")}
            for fid, comp, body in self.db.execute("SELECT id, comparable, body FROM facts ORDER BY id").fetchall()
        }

    # runs

    def done(self) -> set[tuple[str, int]]:
        return {(c, r) for c, r in self.db.execute("SELECT cell_id, repetition FROM runs")}

    def record_run(self, cell_id: str, repetition: int, result: RunResult, facts_id: int,
                   host: str | None = None) -> int:
        """Everything about one finished run, in one transaction: all of it is kept, or none. `host`:
        the host that measured it (by default this machine)."""
        capture = result.capture
        figures = ", ".join(f"{name} {value:g} {unit}" for name, value, unit in result.figures)
        with self._keeping(f"run {repetition} of cell {cell_id} ({figures})"), self.transaction() as db:
            run_id = db.execute(
                """INSERT INTO runs (cell_id, repetition, started_at, wait_source, wait_extras, engine_version, facts_id,
                                     host, conditions)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                (cell_id, repetition, result.started_at, capture.source, json.dumps(capture.extras),
                 result.engine_version, facts_id, host or platform.node(), json.dumps(result.conditions)),
            ).fetchone()[0]
            db.executemany("INSERT INTO figures (run_id, name, value, unit) VALUES (?, ?, ?, ?)",
                           [(run_id, *f) for f in result.figures])
            db.executemany(
                "INSERT INTO waits (run_id, wait_type, wait_s, wait_count, signal_s, traced_s) VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, w.wait_type, w.wait_s, w.wait_count, w.signal_s, w.traced_s) for w in capture.waits],
            )
            db.executemany("INSERT INTO timeline (run_id, t_s, metric, value) VALUES (?, ?, ?, ?)",
                           [(run_id, *p) for p in result.timeline])
            for probe in registry.PROBES:
                if probe.name in result.kept:
                    probe.write(db, run_id, result.kept[probe.name])
        return run_id

    def record_failure(self, cell_id: str, repetition: int, message: str) -> None:
        with self._keeping(f"the failure of run {repetition} of cell {cell_id} ({message})"), self.transaction() as db:
            db.execute(
                "INSERT INTO failures (cell_id, repetition, at, message) VALUES (?, ?, ?, ?)",
                (cell_id, repetition, time.time(), message),
            )

    def runs(self) -> list[RunRecord]:
        figures: dict[int, dict[str, float]] = {}
        for run_id, name, value in self.db.execute("SELECT run_id, name, value FROM figures"):
            figures.setdefault(run_id, {})[name] = value
        rows = self.db.execute(
            """SELECT id, cell_id, repetition, started_at, wait_source, wait_extras, engine_version, facts_id, host,
                      conditions
               FROM runs ORDER BY id"""
        ).fetchall()
        out = []
        for run_id, cell_id, repetition, started_at, source, extras, version, facts_id, host, conditions in rows:
            at = f"table runs (id {run_id})"
            if repetition < 1:
                raise Damaged(self.where, f"{at}: column repetition holds {repetition}, not a repetition (1 and up)")
            out.append(RunRecord(
                run_id, cell_id, repetition, started_at, source,
                parsed(extras, dict[str, float], self.where, f"{at}: column wait_extras"), version, facts_id,
                figures.get(run_id, {}), _dumped(conditions, Conditions, self.where, f"{at}: column conditions"), host))
        return out

    def units(self) -> dict[str, str]:
        """Each figure's unit, as recorded."""
        return dict(self.db.execute("SELECT DISTINCT name, unit FROM figures"))

    def waits(self, run_id: int) -> list[Wait]:
        return [
            Wait(t, s, c, sig, traced)
            for t, s, c, sig, traced in self.db.execute(
                "SELECT wait_type, wait_s, wait_count, signal_s, traced_s FROM waits WHERE run_id = ?", (run_id,)
            )
        ]

    def kept(self, probe: Probe, run_id: int) -> Any:
        """What one probe recorded in one run, as it reads it back; what it cannot read (its JSON, say)
        is a damaged store."""
        try:
            return probe.read(self.db, run_id)
        except ValueError as exc:
            said = problem(exc) if isinstance(exc, ValidationError) else str(exc)
            raise Damaged(self.where, f"the tables of probe {probe.name} (run {run_id}): {said}") from None

    def timeline(self, run_id: int) -> list[tuple[float, str, float]]:
        return list(self.db.execute("SELECT t_s, metric, value FROM timeline WHERE run_id = ? ORDER BY t_s", (run_id,)))

    def failures(self) -> list[tuple[str, int, str]]:
        return list(self.db.execute("SELECT cell_id, repetition, message FROM failures ORDER BY id"))

