"""A fleet: `storlab submit` puts an experiment's plan in a shared store, and `storlab worker` on each
host claims runs from it (storlab.queue), runs each exactly as `storlab run` does (storlab.running.cell_runs:
the same instance, devices, deadline and failures; a scan's next repetitions of the same cell claimed
one at a time on the instance it keeps; a race queued round by round, decided as `storlab run`
decides it) and records it with its own host's name and machine facts, while its lease lasts. A
worker needs nothing but the store: the experiment is read back from the text kept there
(relative placements are relative to the worker's working folder: each host its own places), and a
worker takes only runs it can run (its engine installed, the settings accepted, its placements
there or made)."""

from __future__ import annotations

import os
import platform
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Container, Iterator

import psycopg

from storlab import engines, interrupts
from storlab.errors import RunFailed, UserError
from storlab.experiment import file as experiments
from storlab.experiment import matrix
from storlab.experiment.file import Experiment
from storlab.experiment.model import HOST_NAME
from storlab.lab import devices, instances, server_failures
from storlab.machine import system
from storlab.probes import bpftrace
from storlab.probes.bpftrace import Tracing
from storlab.results import shared_store
from storlab.results.dialects import POSTGRESQL, Connection
from storlab.results.runs import RunResult
from storlab.results.store import Store
from storlab.running import cell_runs, cleanup, plan, queue, stall
from storlab.running.queue import Claim, LeaseLost

POLL_S = 2.0  # how often an idle worker looks for new runs
DEFAULT_LEASE_S = 60.0
MIN_LEASE_S = 3.0
MAX_STALLS = 3  # a run whose server stopped answering this many times is recorded as failed
MAX_LEASE_S = 86400.0  # a day: a dead worker's run must come back to the queue some time

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
    counts: dict[str, int]  # queue state -> runs of the plan
    requeued: int
    unplanned: int  # rows in the queue that are no run of the plan: neither counted nor queued again

    def line(self, name: str) -> str:
        hosts = f" x {len(self.hosts)} hosts ({', '.join(self.hosts)})" if self.hosts else " on any host"
        per_host = self.cells // max(len(self.hosts), 1)
        total = sum(self.counts.values())
        parts = [f"{self.counts.get(s, 0)} {s}" for s in ("queued", "claimed", "done", "failed") if self.counts.get(s)]
        again = f"; {self.requeued} failed runs queued again" if self.requeued else ""
        junk = (f"; {self.unplanned} queue rows that are no run of the plan left out (a worker fails them, never "
                "runs them)" if self.unplanned else "")
        return (f"{name}: {per_host} cells x {self.repetitions} repetitions{hosts} = {total} runs "
                f"({', '.join(parts)}){again}{junk}")


def submit(exp: Experiment, store: Store) -> Submitted:
    """Bind the experiment in the store (refused if a different one holds its name) and queue every
    run not queued yet, each round in the order drawn from the experiment's seed (drawn at the first
    submit and kept); failed runs are queued again. Rows that are no run of the plan (written into the
    queue by hand) are neither counted nor queued again, only said. An experiment run until settled is
    refused: the queue holds a fixed plan, and no one would refit the answer between its rounds."""
    if exp.settling() is not None:
        raise UserError(f'{exp.where(("repetitions",))}: repetitions: until = "settled" decides after each round '
                        "whether to go on, which a fleet's fixed queue cannot; give repetitions = N to submit, or "
                        "use storlab run FILE (into a results folder) to stop when settled")
    cells = matrix.cells(exp)
    store.bind_experiment(exp.name, exp.engine, exp.source, exp.identity(), exp.repetitions, exp.factors,
                          [(c.id, c.label, c.factors) for c in cells], files=exp.sql, answer=exp.answer_settings(),
                          race=raced.model_dump() if (raced := plan.race_settings(exp, cells)) else None)
    seed = store.order_seed(exp.model.order_seed)
    planned = [(c.id, rep, c.host, position)
               for position, (c, rep) in enumerate(matrix.plan(cells, exp.repetitions, set(), seed))]
    with store.transaction() as db:
        if exp.race() is None:
            queue.enqueue(db, store.experiment_id, planned)
        else:  # a race: its first round (the next, on a resubmit); the workers queue the next rounds
            queue_next_round(db, store, exp, cells)
        queued = queue.rows(db, store.experiment_id)
        ours = [row for row in queued if unplanned(exp, {c.id for c in cells}, row.cell_id, row.repetition) is None]
        requeued = queue.requeue_failed(db, [row.id for row in ours if row.state == "failed"])
    counts = Counter("queued" if row.state == "failed" else row.state for row in ours)  # as requeued
    return Submitted(len(cells), exp.repetitions, list(exp.model.hosts or []), dict(counts), requeued,
                     len(queued) - len(ours))


def unplanned(exp: Experiment, cells: Container[str], cell_id: str, repetition: int) -> str | None:
    """Why a queue row is no run of the experiment's plan: a queue row is the store's, which anyone
    who can submit can write. None when it is one."""
    if cell_id not in cells:
        return f"the queue names cell {cell_id[:64]!r}, which experiment {exp.name} does not have"
    if not 1 <= repetition <= exp.repetitions:
        return f"the queue names repetition {repetition} of cell {cell_id}; experiment {exp.name} has 1 to {exp.repetitions}"
    return None


# -- the worker ------------------------------------------------------------------------------


@dataclass
class WorkerOptions:
    host: str
    experiment: str | None = None  # only this experiment
    lease_s: float = DEFAULT_LEASE_S
    until_done: bool = False  # stop when every run this worker may take is recorded
    keep: bool = False
    tracing: Tracing = Tracing.ON  # what bpftrace traces (--no-trace, --trace-reads)


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


def _claim_problem(target: Runnable, claim: Claim) -> str | None:
    """A claimed row that is no run of the plan (unplanned) is refused, never run."""
    return unplanned(target.experiment, target.cells, claim.cell_id, claim.repetition)


@dataclass
class ClaimedRun:
    """A run claimed from the queue (cell_runs.Slot): its progress keeps an eye on the lease, its
    result is recorded and its claim closed in one transaction, by this worker only."""

    worker: "Worker"
    target: Runnable
    cell: matrix.Cell
    claim: Claim
    lease: queue.Lease | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def repetition(self) -> int:
        return self.claim.repetition

    @property
    def what(self) -> str:
        return f"{self.target.experiment.name}: {self.cell.label} #{self.claim.repetition}"

    def progress(self, done: int, total: int) -> None:
        self.lease.check()

    def record(self, result: RunResult) -> None:
        store, host = self.target.store, self.worker.options.host
        self.lease.check()
        with queue.holding(store, self.claim) as db:
            run_id = store.record_run(self.cell.id, self.claim.repetition, result, self.target.facts_id, host)
            queue.done(db, self.claim, run_id)
            queue_next_round(db, store, self.target.experiment, list(self.target.cells.values()))
        self.worker.outcome.finished += 1
        self.worker.say(f"{host}: {self.what}: recorded ({time.monotonic() - self.started:.1f} s)")

    def abandoned(self) -> None:
        self.lease.give_up()  # a stalled or overlong run keeps no claim: it is failed or back in the queue shortly


def queue_next_round(db: Connection, store: Store, exp: Experiment, cells: list[matrix.Cell]) -> None:
    """A race is queued round by round, decided as `storlab run` decides it (plan.next_runs over
    the store's runs): the first round at submit, each next round of the cells still racing by the
    worker that records the last run of a round. The lock makes workers finishing runs at once take
    turns, so the last of them sees every run of the round."""
    if exp.race() is None:
        return
    queue.lock_experiment(db, store.experiment_id)
    todo = plan.next_runs(exp, cells, store, set())
    queue.enqueue(db, store.experiment_id,
                  [(c.id, rep, c.host, (rep - 1) * len(cells) + i) for i, (c, rep) in enumerate(todo)])


def check(exp: Experiment, say: Say) -> None:
    """What `storlab run` checks before anything starts, on this host: the engine installed, the
    settings accepted, each placement's free space. Refusals raise; warnings are said."""
    engines.engine(exp.engine).installed()
    for warning in plan.preflight(exp, matrix.cells(exp)):
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
        self.resources = ExitStack()  # what the worker has open while it works: its device pool
        self.pool: devices.DevicePool | None = None
        self.under_way: Claim | None = None  # the claim of the run under way
        self.refused: dict[int, str] = {}
        self.asked_refused: Exception | None = None  # the refusal of the experiment named by --experiment
        self.waiting = False
        self.outcome = WorkOutcome()

    def close(self) -> None:
        try:
            self.resources.close()
        finally:
            self.db.close()

    def _connect(self) -> Connection:
        return Connection(shared_store.connect(self.dsn, f"worker {self.options.host} lease"), POSTGRESQL)

    # which experiments it takes

    def _refuse(self, entry: shared_store.ExperimentEntry, why: str, error: type[Exception] = UserError,
                quiet: bool = False) -> None:
        """`error`: what the refusal is, should it be of the experiment this worker was asked for
        (UserError: the experiment's mistake; RunFailed: this host's)."""
        self.refused[entry.id] = why
        self.runnable.pop(entry.id, None)
        if not quiet:
            self.say(f"{entry.name}: not taken by {self.options.host}: {why}")
        if entry.name == self.options.experiment:
            self.asked_refused = error(f"{entry.name}: not taken by {self.options.host}: {why}")

    def _prepare(self, entry: shared_store.ExperimentEntry) -> None:
        try:  # the store's rows are anyone's who can submit: what it holds is checked as it is read
            store = shared_store.bind(self.db, entry, None, "--store")
            stored = store.experiment()
        except UserError as exc:
            self._refuse(entry, str(exc))
            return
        if stored is None:
            return  # being submitted right now: looked at again next time
        hosts = stored.identity.hosts
        if hosts is not None and self.options.host not in hosts:
            self._refuse(entry, f"it runs on hosts {', '.join(hosts)}", quiet=True)  # not ours: nothing to say
            return
        try:
            exp = self.loaded.get(entry.name)
            if exp is None:  # (one read from its file here was checked before it was submitted)
                exp = experiments.parse(Path.cwd() / f"{entry.name}.toml", stored.source, stored.files)
                check(exp, self.say)
            cells = matrix.cells(exp)
            paths = plan.prepare_placements(exp)
        except (UserError, RunFailed) as exc:
            self._refuse(entry, str(exc), RunFailed if isinstance(exc, RunFailed) else UserError)
            return
        except Exception as exc:  # whatever a store's rows hold, one experiment never stops the worker serving the others
            self._refuse(entry, f"storlab cannot read it ({type(exc).__name__}: {str(exc)[:200]})")
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

    # the runs of one cell

    def _pool(self, exp: Experiment) -> devices.DevicePool | None:
        """The devices of this worker's device placements, kept while it works (a cell whose format
        is the device's reuses it, as in `storlab run`)."""
        if not exp.device_sizes:
            return None
        if self.pool is None:
            self.pool = self.resources.enter_context(devices.DevicePool())
        return self.pool

    def _run(self, claim: Claim) -> None:
        """The claimed run on a fresh instance; for a kind whose repetitions share one instance (a
        scan), the next repetitions of the same cell are claimed one at a time while it is kept."""
        target = self.runnable[claim.experiment_id]
        shared_store.use(target.store)
        problem = _claim_problem(target, claim)
        if problem is not None:
            self._record_failure(target, claim, f"{target.experiment.name}: {claim.cell_id} #{claim.repetition}",
                                 RunFailed(problem))
            return
        cell = target.cells[claim.cell_id]
        lab = cell_runs.Lab(target.experiment, target.paths, self.options.keep, self._pool(target.experiment),
                            self.options.tracing)
        slots = self._claims(target, cell, claim)
        try:
            failure = cell_runs.run_cell(lab, cell, slots)
            if failure is not None:
                self._failed(target, failure)
        except LeaseLost as exc:
            self.outcome.lost += 1
            self.say(f"{self.options.host}: {target.experiment.name}: {cell.label}: given up: {exc}")
        except KeyboardInterrupt:
            if self.under_way is not None:
                queue.release(self.db, self.under_way)
            raise
        finally:
            slots.close()  # ends the lease of a claim that was not recorded

    def _claims(self, target: Runnable, cell: matrix.Cell, claim: Claim | None) -> Iterator["ClaimedRun"]:
        made_by = None  # the repetition that made the instance this one runs on
        while claim is not None:
            interrupts.interruption_point()
            run = ClaimedRun(self, target, cell, claim)
            again = f" (attempt {claim.attempts})" if claim.attempts > 1 else ""
            on = f" on the instance of #{made_by}" if made_by is not None else ""
            self.say(f"{self.options.host}: {run.what}: running{again}{on}")
            made_by = claim.repetition if made_by is None else made_by
            with queue.Lease(self._connect, claim, self.options.lease_s) as run.lease:
                self.under_way = claim
                try:
                    yield run
                finally:
                    self.under_way = None
            if not cell_runs.shares_instance(target.experiment):
                return
            claim = queue.claim(self.db, [claim.experiment_id], self.options.host, self.name, self.options.lease_s,
                                cell=cell.id)
            problem = None if claim is None else _claim_problem(target, claim)
            if problem is not None:
                self._record_failure(target, claim, f"{target.experiment.name}: {cell.label} #{claim.repetition}",
                                     RunFailed(problem))
                return

    def _failed(self, target: Runnable, failure: cell_runs.Failure) -> None:
        """A stalled run goes back to the queue (the next instance, here or on another host, may well
        answer), up to MAX_STALLS attempts; any other failure is recorded (a run past its limit too:
        what never ends here would never end elsewhere)."""
        run = failure.slot
        if isinstance(failure.error, stall.Stalled) and run.claim.attempts < MAX_STALLS:
            queue.release(self.db, run.claim)
            self.say(f"{self.options.host}: {run.what}: {failure.message}; back in the queue")
            return
        self._record_failure(target, run.claim, run.what, failure.error)

    def _record_failure(self, target: Runnable, claim: Claim, what: str, exc: Exception) -> None:
        message = cell_runs.failure_message(exc)
        try:
            with queue.holding(target.store, claim) as db:
                target.store.record_failure(claim.cell_id, claim.repetition, message)
                queue.failed(db, claim)
                queue_next_round(db, target.store, target.experiment, list(target.cells.values()))
        except LeaseLost:
            self.outcome.lost += 1
            return
        self.outcome.failed.append(f"{what}: {message}")
        self.say(f"{self.options.host}: {what}: failed: {message}")
        # A refused setting, a full placement or the user's own SQL would fail every later run here alike.
        if isinstance(exc, (UserError, server_failures.PlacementFull)):
            entry = shared_store.ExperimentEntry(claim.experiment_id, target.experiment.name, "")
            self._refuse(entry, f"{message}; every later run would fail alike; submit it again once that is fixed",
                         RunFailed if isinstance(exc, RunFailed) else UserError)

    # the loop

    def work(self) -> WorkOutcome:
        shared_store.catalogue(self.db, create=True)  # a worker may start before the first submit
        while True:
            for left in cleanup.clean(live=False, kept=False):
                self.say(f"cleaned up instance {left.instance_id} left by a worker that died")
            there = self._look()
            ids = sorted(self.runnable)
            claim = queue.claim(self.db, ids, self.options.host, self.name, self.options.lease_s) if ids else None
            if claim is not None:
                self._run(claim)
                continue
            if self.options.until_done and there and (not ids or queue.outstanding(self.db, ids, self.options.host) == 0):
                if self.asked_refused is not None:  # asked for one experiment, and it could not be run here
                    raise self.asked_refused
                return self.outcome
            time.sleep(POLL_S)


def work(dsn: str, options: WorkerOptions, say: Say, loaded: dict[str, Experiment] | None = None) -> WorkOutcome:
    if not MIN_LEASE_S <= options.lease_s <= MAX_LEASE_S:  # nan fails both comparisons
        raise UserError(f"--lease {options.lease_s:g}: expected seconds from {MIN_LEASE_S:g} to {MAX_LEASE_S:g}")
    worker = Worker(dsn, options, say, loaded)
    try:
        # One trace per server binary for the worker's runs; each instance ends while the next sets up.
        with bpftrace.attached_across_runs(), \
                instances.ending_in_background(lambda why: say(f"{options.host}: warning: {why}")):
            return worker.work()
    except psycopg.OperationalError as exc:  # the run under way goes back to the queue with its lease
        text = str(exc).strip()
        raise RunFailed(f"--store: lost the connection: {text.splitlines()[0] if text else type(exc).__name__}") from None
    finally:
        worker.close()


def run_here(exp: Experiment, dsn: str, host: str, keep: bool, say: Say, tracing: Tracing = Tracing.ON) -> WorkOutcome:
    """`storlab run --store`: submit, then work on this experiment here until its runs are done
    (workers elsewhere may take some of them meanwhile)."""
    if exp.model.hosts and host not in exp.model.hosts:
        raise UserError(f"{exp.where(('hosts',))}: hosts: this machine goes by {host}, not one of "
                        f"{', '.join(exp.model.hosts)}; give --host NAME, or start storlab worker on each host")
    check(exp, say)  # before anything is queued, as `storlab run` checks before anything starts
    plan.prepare_placements(exp)
    with shared_store.open(dsn, exp.name, create=True, purpose="submit") as store:
        say(submit(exp, store).line(exp.name))
    return work(dsn, WorkerOptions(host, exp.name, until_done=True, keep=keep, tracing=tracing), say, {exp.name: exp})
