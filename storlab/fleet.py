"""A fleet: `storlab submit` puts an experiment's plan in a shared store, and `storlab worker` on each
host claims runs from it (storlab.queue), runs each exactly as `storlab run` does (runner.run_once,
a fresh instance per run) and records it with its own host's name and machine facts, while its lease
lasts. A worker needs nothing but the store: the experiment is read back from the text kept there
(relative placements are relative to the worker's working folder: each host its own places), and a
worker takes only runs it can run (its engine installed, the settings accepted, its placements
there or made)."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psycopg

from storlab import experiment as experiments, instances, matrix, queue, runner, shared_store, system
from storlab.dialects import POSTGRESQL, Connection
from storlab.errors import RunFailed, UserError
from storlab.experiment import HOST_NAME, Experiment
from storlab.queue import Claim, LeaseLost
from storlab.store import Store

POLL_S = 2.0  # how often an idle worker looks for new runs
DEFAULT_LEASE_S = 60.0
MIN_LEASE_S = 3.0

Say = Callable[[str], None]


def check_host(name: str) -> str:
    if not HOST_NAME.fullmatch(name):
        raise UserError(f"--host {name[:64]!r}: expected 1 to 64 letters, digits, '-', '_' or '.'")
    return name


def this_host() -> str:
    """The name a worker goes by unless given --host: this machine's, cut to a host name's limits."""
    name = platform.node().split(".")[0] or "localhost"
    return name if HOST_NAME.fullmatch(name) else "localhost"


# -- submit ----------------------------------------------------------------------------------


@dataclass
class Submitted:
    cells: int
    repetitions: int
    hosts: list[str]
    counts: dict[str, int]  # queue state -> runs
    requeued: int

    def line(self, name: str) -> str:
        hosts = f" x {len(self.hosts)} hosts ({', '.join(self.hosts)})" if self.hosts else " on any host"
        per_host = self.cells // max(len(self.hosts), 1)
        total = sum(self.counts.values())
        parts = [f"{self.counts.get(s, 0)} {s}" for s in ("queued", "claimed", "done", "failed") if self.counts.get(s)]
        again = f"; {self.requeued} failed runs queued again" if self.requeued else ""
        return (f"{name}: {per_host} cells x {self.repetitions} repetitions{hosts} = {total} runs "
                f"({', '.join(parts)}){again}")


def submit(exp: Experiment, store: Store) -> Submitted:
    """Bind the experiment in the store (refused if a different one holds its name) and queue every
    run not queued yet; failed runs are queued again."""
    cells = matrix.cells(exp)
    store.bind_experiment(exp.name, exp.engine, exp.source, exp.identity(), exp.repetitions, exp.factors,
                          [(c.id, c.label, c.factors) for c in cells], files=exp.sql)
    planned = [(c.id, rep, c.host, (rep - 1) * len(cells) + i)
               for rep in range(1, exp.repetitions + 1) for i, c in enumerate(cells)]
    with store.transaction() as db:
        queue.enqueue(db, store.experiment_id, planned)
        requeued = queue.requeue_failed(db, store.experiment_id)
    return Submitted(len(cells), exp.repetitions, list(exp.model.hosts or []),
                     queue.counts(store.db, store.experiment_id), requeued)


# -- the worker ------------------------------------------------------------------------------


@dataclass
class WorkerOptions:
    host: str
    experiment: str | None = None  # only this experiment
    lease_s: float = DEFAULT_LEASE_S
    until_done: bool = False  # stop when every run this worker may take is recorded
    keep: bool = False


@dataclass
class WorkOutcome:
    finished: int = 0
    failed: list[str] = field(default_factory=list)
    lost: int = 0  # runs given up because their lease ran out


@dataclass
class Runnable:
    """An experiment this worker can run: read back from the store, checked, its placements made."""

    store: Store
    experiment: Experiment
    cells: dict[str, matrix.Cell]
    paths: dict[str, Path]
    facts_id: int


def _failure(exc: Exception) -> str:
    """A failed run in one line, as `storlab run` records it."""
    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    return message if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {message}"


def check(exp: Experiment, say: Say) -> None:
    """What `storlab run` checks before anything starts, on this host: the engine installed, the
    settings accepted, each placement's free space. Refusals raise; warnings are said."""
    if exp.engine == "postgres":
        from storlab.engines.postgres import bin_dir

        bin_dir()
    else:
        from storlab.engines.mariadb import binaries

        binaries()
    for warning in runner.preflight(exp, matrix.cells(exp)):
        say(f"{exp.name}: warning: {warning}")


class Worker:
    def __init__(self, dsn: str, options: WorkerOptions, say: Say, loaded: dict[str, Experiment] | None = None):
        self.dsn = dsn
        self.options = options
        self.say = say
        self.loaded = loaded or {}  # experiments read from their file here (storlab run --store)
        self.name = f"{options.host} ({platform.node()} pid {os.getpid()})"
        self.db = Connection(shared_store.connect(dsn, f"worker {options.host}"), POSTGRESQL)
        self.runnable: dict[int, Runnable] = {}
        self.refused: dict[int, str] = {}
        self.waiting = False
        self.outcome = WorkOutcome()

    def close(self) -> None:
        self.db.close()

    def _connect(self) -> Connection:
        return Connection(shared_store.connect(self.dsn, f"worker {self.options.host} lease"), POSTGRESQL)

    # which experiments it takes

    def _refuse(self, entry: shared_store.ExperimentEntry, why: str) -> None:
        self.refused[entry.id] = why
        self.runnable.pop(entry.id, None)
        self.say(f"{entry.name}: not taken by {self.options.host}: {why}")

    def _prepare(self, entry: shared_store.ExperimentEntry) -> None:
        store = shared_store.bind(self.db, entry, None, "--store")
        held = store.experiment()
        if held is None:
            return  # being submitted right now: looked at again next time
        hosts = held["identity"].get("hosts")
        if hosts and self.options.host not in hosts:
            self.refused[entry.id] = f"it runs on hosts {', '.join(hosts)}"  # not ours: nothing to say
            return
        try:
            exp = self.loaded.get(entry.name)
            if exp is None:  # (one read from its file here was checked before it was submitted)
                exp = experiments.parse(Path.cwd() / f"{entry.name}.toml", held["source"], held["files"])
                check(exp, self.say)
            cells = matrix.cells(exp)
            paths = runner.prepare_placements(exp)
        except (UserError, RunFailed) as exc:
            self._refuse(entry, str(exc))
            return
        facts = system.collect_facts(sorted(set(paths.values())))
        facts_id = store.record_facts(facts, system.comparable(facts))
        self.runnable[entry.id] = Runnable(store, exp, {c.id: c for c in cells}, paths, facts_id)

    def _look(self) -> bool:
        """Find experiments submitted since the last look; False while the one named by --experiment
        is not there yet (a worker may start before the submit)."""
        found = shared_store.experiments(self.db)
        if self.options.experiment is not None:
            found = [e for e in found if e.name == self.options.experiment]
            if not found and not self.waiting:
                self.say(f"{self.options.host}: waiting for experiment {self.options.experiment} to be submitted")
            self.waiting = not found
        for entry in found:
            if entry.id not in self.runnable and entry.id not in self.refused:
                self._prepare(entry)
        return bool(found) or self.options.experiment is None

    # one run

    def _run(self, claim: Claim) -> None:
        target = self.runnable[claim.experiment_id]
        exp, cell = target.experiment, target.cells[claim.cell_id]
        what = f"{exp.name}: {cell.label} #{claim.repetition}"
        again = f" (attempt {claim.attempts})" if claim.attempts > 1 else ""
        self.say(f"{self.options.host}: {what}: running{again}")
        shared_store.use(target.store)
        started = time.monotonic()
        try:
            with queue.Lease(self._connect, claim, self.options.lease_s) as lease:
                result = runner.run_once(exp, cell, target.paths, self.options.keep,
                                         lambda done, total: lease.check())
                lease.check()
        except LeaseLost as exc:
            self.outcome.lost += 1
            self.say(f"{self.options.host}: {what}: given up: {exc}")
            return
        except KeyboardInterrupt:
            queue.release(self.db, claim)
            raise
        except Exception as exc:  # a failed run is recorded, never retried here: submit queues it again
            self._record_failure(target, claim, what, exc)
            return
        try:
            with queue.holding(target.store, claim) as db:
                run_id = target.store.record_run(cell.id, claim.repetition, result, target.facts_id, self.options.host)
                queue.done(db, claim, run_id)
        except LeaseLost as exc:
            self.outcome.lost += 1
            self.say(f"{self.options.host}: {what}: not recorded: {exc}")
            return
        self.outcome.finished += 1
        self.say(f"{self.options.host}: {what}: recorded ({time.monotonic() - started:.1f} s)")

    def _record_failure(self, target: Runnable, claim: Claim, what: str, exc: Exception) -> None:
        message = _failure(exc)
        try:
            with queue.holding(target.store, claim) as db:
                target.store.record_failure(claim.cell_id, claim.repetition, message)
                queue.failed(db, claim)
        except LeaseLost:
            self.outcome.lost += 1
            return
        self.outcome.failed.append(f"{what}: {message}")
        self.say(f"{self.options.host}: {what}: failed: {message}")
        # A refused setting, a full placement or the user's own SQL would fail every later run here alike.
        if isinstance(exc, (UserError, instances.PlacementFull)):
            entry = shared_store.ExperimentEntry(claim.experiment_id, target.experiment.name, "")
            self._refuse(entry, "every later run would fail alike; submit it again once that is fixed")

    # the loop

    def work(self) -> WorkOutcome:
        shared_store.catalogue(self.db, create=True)  # a worker may start before the first submit
        while True:
            for left in instances.clean(live=False, kept=False):
                self.say(f"cleaned up instance {left.instance_id} left by a worker that died")
            there = self._look()
            ids = sorted(self.runnable)
            claim = queue.claim(self.db, ids, self.options.host, self.name, self.options.lease_s) if ids else None
            if claim is not None:
                self._run(claim)
                continue
            if self.options.until_done and there and (not ids or queue.outstanding(self.db, ids, self.options.host) == 0):
                return self.outcome
            time.sleep(POLL_S)


def work(dsn: str, options: WorkerOptions, say: Say, loaded: dict[str, Experiment] | None = None) -> WorkOutcome:
    if options.lease_s < MIN_LEASE_S:
        raise UserError(f"--lease {options.lease_s:g}: at least {MIN_LEASE_S:g} seconds")
    worker = Worker(dsn, options, say, loaded)
    try:
        return worker.work()
    except psycopg.OperationalError as exc:  # the run under way goes back to the queue with its lease
        text = str(exc).strip()
        raise RunFailed(f"--store: lost the connection: {text.splitlines()[0] if text else type(exc).__name__}") from None
    finally:
        worker.close()


def run_here(exp: Experiment, dsn: str, host: str, keep: bool, say: Say) -> WorkOutcome:
    """`storlab run --store`: submit, then work on this experiment here until its runs are done
    (workers elsewhere may take some of them meanwhile)."""
    if exp.model.hosts and host not in exp.model.hosts:
        raise UserError(f"{exp.where(('hosts',))}: hosts: this machine goes by {host}, not one of "
                        f"{', '.join(exp.model.hosts)}; give --host NAME, or start storlab worker on each host")
    check(exp, say)  # before anything is queued, as `storlab run` checks before anything starts
    runner.prepare_placements(exp)
    with shared_store.open(dsn, exp.name, create=True, purpose="submit") as store:
        say(submit(exp, store).line(exp.name))
    return work(dsn, WorkerOptions(host, exp.name, until_done=True, keep=keep), say, {exp.name: exp})
