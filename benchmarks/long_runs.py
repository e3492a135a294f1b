"""Does a long run cost storlab what a short one does, a second at a time? (goal: the 10-minute run's
CPU per measured second within 1.2x of the 10-second runs')

Two parts, in one invocation:

- Runs: one throwaway PostgreSQL instance per run, pgbench's TPC-B-like load at a fixed rate (pgbench
  is its own process, so storlab's CPU is what it spends around the load: the samplers, the kept
  bpftrace's flush and the parsing of its maps, reading pgbench's log, recording the run), measured as
  `storlab run` measures a run (storlab.running.cell_runs.measure, every probe and the trace kept across
  runs) and recorded in a results folder. A 10 s run, the long run, and a 10 s run again, so drift
  between them shows. Prints, for each, storlab's own CPU (this process, every thread; not the server's,
  pgbench's or bpftrace's) from the run's start to its record in the store, per measured second, and
  the long run's against the short ones' mean.
- The stop check of `until = "settled"` (storlab.running.plan.stop_reason, which loads the answer from
  the store) on stores filled round by round with copies of those recorded runs (each cell's runs a
  copy of its recorded run's tables, its headline figure given a little noise), checked after every
  round as `storlab run` checks it: its CPU time after round 2 and after round 20, the median over
  --fills stores (this machine's speed wanders), and beside the check at round 20 a load that reads
  every run's tables again (what each check cost before they were cached).

    .venv/bin/python benchmarks/long_runs.py [--long 600] [--short 10] [--rate 300] [--rounds 20] [--fills 5]
        [--stop-check-from RESULTS_DIR]

--stop-check-from skips the runs and fills the stop check's store from the runs of an existing results
folder (its own experiment, its cells' runs copied round by round).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from storlab.answer import analysis
from storlab.experiment import file as experiment, matrix
from storlab.experiment.file import Experiment
from storlab.machine import system
from storlab.probes import bpftrace, registry
from storlab.probes.waits import WaitCapture
from storlab.results import schema
from storlab.results.runs import RunResult
from storlab.results.schema import Table
from storlab.results.store import Store
from storlab.running import cell_runs, plan

EXPERIMENT = """name = "long-runs"
engine = "postgres"
repetitions = 1

[placements]
disk = "/var/tmp/storlab/long-runs"

[layout]
data_on = "disk"
log_on = "disk"

[workload]
kind = "pgbench"
script = "tpcb-like"
scale = 10
clients = 4
jobs = 1
duration_s = [{short}, {long}]
rate = {rate}

[engine_settings]
shared_buffers = "128MB"
"""


def recorded_runs(where: Path, short: int, long: int, rate: int) -> tuple[Path, list[str]]:
    """The short, the long and the short run again, each on a fresh instance, recorded in a results
    folder; the lines saying storlab's CPU per measured second in each."""
    path = where / "long-runs.toml"
    path.write_text(EXPERIMENT.format(short=short, long=long, rate=rate))
    exp = experiment.load(path)
    cells = {c.workload.duration_s: c for c in matrix.cells(exp)}
    lab = cell_runs.Lab(exp, plan.prepare_placements(exp), keep=False)
    folder = where / "runs"
    per_second: dict[int, list[float]] = {short: [], long: []}
    spent: dict[int, list[tuple[float, float]]] = {short: [], long: []}  # (CPU s, measured s)
    lines = []
    with Store.open(folder) as store, bpftrace.attached_across_runs():
        store.bind_experiment(exp.name, exp.engine, exp.source, exp.identity(), exp.repetitions, exp.factors,
                              [(c.id, c.label, c.factors) for c in cells.values()], answer=exp.answer_settings())
        facts = system.collect_facts(sorted(set(lab.paths.values())))
        facts_id = store.record_facts(facts, system.comparable(facts))
        for repetition, duration in enumerate([short, long, short], 1):
            cell = cells[duration]
            paths = cell_runs.cell_paths(cell, lab.paths, None)
            with cell_runs.cell_instance(lab, cell, paths, time.monotonic()) as instance:
                exp.workload.prepare(instance, cell.workload, exp.sql)
                began = time.process_time()
                result = cell_runs.measure(exp, cell, instance)
                store.record_run(cell.id, repetition, result, facts_id)
                cpu_s = time.process_time() - began
            measured_s = dict((name, value) for name, value, _ in result.figures).get("elapsed_s", float(duration))
            per_second[duration].append(cpu_s / measured_s)
            spent[duration].append((cpu_s, measured_s))
            lines.append(f"{duration:>4} s run: storlab's CPU {cpu_s:.2f} s over {measured_s:.1f} measured s: "
                         f"{1000 * cpu_s / measured_s:.1f} ms per measured second")
    shorts = statistics.mean(per_second[short])
    lines.append(f"the {long} s run against the {short} s runs' mean: {per_second[long][0] / shorts:.2f}x per measured "
                 "second (goal: within 1.2x)")
    # Each second more, beyond what every run costs whatever its length: what grows with the run's length.
    (long_cpu, long_s), = spent[long]
    short_cpu, short_s = (statistics.mean(x) for x in zip(*spent[short]))
    beyond = (long_cpu - short_cpu) / (long_s - short_s)
    lines.append(f"  each measured second beyond the {short} s runs': {1000 * beyond:.1f} ms of storlab's CPU")
    return folder, lines


@dataclass
class Recorded:
    """One recorded run, as the runner handed it to the store, and its probes' rows (table -> rows,
    each row's run id left out)."""

    result: RunResult
    probe_rows: dict[Table, list[tuple]]


def recorded_in(store: Store) -> dict[str, Recorded]:
    """Each cell's last run in `store`."""
    units = store.units()
    tables = [t for t in schema.tables(registry.PROBES).values() if t.probe is not None]
    rows = {t: store.rows(t) for t in tables}
    found = {}
    for run in store.runs():
        capture = WaitCapture(run.wait_source, store.waits(run.id), run.wait_extras)
        result = RunResult(run.started_at, [(name, value, units[name]) for name, value in run.figures.items()], capture,
                           run.engine_version, store.timeline(run.id), run.conditions)
        found[run.cell_id] = Recorded(result, {t: [row[1:] for row in rows[t] if row[0] == run.id] for t in tables})
    return found


def record(store: Store, cell: str, repetition: int, run: Recorded, figures: list, facts_id: int) -> None:
    run_id = store.record_run(cell, repetition, replace(run.result, figures=figures), facts_id)
    with store.transaction() as db:
        for table, rows in run.probe_rows.items():
            names = ", ".join(f'"{c.name}"' for c in table.columns)
            db.executemany(f'INSERT INTO "{table.name}" ({names}) VALUES ({", ".join("?" * len(table.columns))})',
                           [(run_id, *row) for row in rows])


def filled(folder: Path, exp: Experiment, recorded: dict[str, Recorded], rounds: int, seed: int) -> dict[int, float]:
    """A store at `folder` filled round by round with copies of the recorded runs, the stop check made
    after every round as `storlab run` makes it: the CPU seconds of each round's check, and (key 0) those
    of a load at the last round that reads every run's tables again."""
    cells = [c for c in matrix.cells(exp) if c.id in recorded]
    headline = exp.figures[0].name
    noise = random.Random(seed)
    cpu: dict[int, float] = {}
    with Store.open(folder) as store:
        store.bind_experiment(exp.name, exp.engine, exp.source, exp.identity(), exp.repetitions, exp.factors,
                              [(c.id, c.label, c.factors) for c in cells], answer=exp.answer_settings())
        facts = {"cpu": {}}
        facts_id = store.record_facts(facts, facts)
        for rep in range(1, rounds + 1):
            for cell in cells:
                run, scale = recorded[cell.id], noise.lognormvariate(0, 0.05)
                figures = [(name, value * scale if name == headline else value, unit)
                           for name, value, unit in run.result.figures]
                record(store, cell.id, rep, run, figures, facts_id)
            began = time.process_time()
            plan.stop_reason(exp, store)
            cpu[rep] = time.process_time() - began
        began = time.process_time()
        analysis.load(store)
        cpu[0] = time.process_time() - began
    return cpu


def stop_check(source: Path, where: Path, rounds: int, fills: int) -> list[str]:
    """The stop check's CPU time after round 2 and round `rounds` on stores filled with copies of the runs
    in `source` (each cell's last), the median over `fills` stores (this machine's speed wanders)."""
    with Store.open(source, create=False) as held:
        stored = held.experiment()
        recorded = recorded_in(held)
    text = re.sub(r"(?m)^repetitions\s*=.*$", f'repetitions = {{ max = {rounds}, until = "settled" }}', stored.source)
    path = where / "settled.toml"
    path.write_text(text)
    exp = experiment.load(path, check_placements=False)
    timed = [filled(where / f"settled-{k}", exp, recorded, rounds, k) for k in range(fills)]
    at = {rep: statistics.median(t[rep] for t in timed) for rep in (2, rounds, 0)}
    with Store.open(where / "settled-0", create=False) as store:
        points = store.db.execute("SELECT count(*) FROM timeline").fetchone()[0]
    return [f"stop check on {len(recorded)} cells, each run a copy of a recorded one ({points} timeline points at round "
            f"{rounds}), CPU, the median of {fills} stores: {1000 * at[2]:.1f} ms after round 2, "
            f"{1000 * at[rounds]:.1f} ms after round {rounds}: {at[rounds] / at[2]:.2f}x",
            f"  at round {rounds}, a load reading every run's tables again: {1000 * at[0]:.1f} ms "
            f"({at[0] / at[rounds]:.1f}x the check)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=int, default=600, help="the long run's duration_s")
    parser.add_argument("--short", type=int, default=10, help="the short runs' duration_s")
    parser.add_argument("--rate", type=int, default=300, help="pgbench's transactions per second")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the stop check's stores")
    parser.add_argument("--fills", type=int, default=5, help="stores filled for the stop check (its median)")
    parser.add_argument("--stop-check-from", type=Path, help="no runs: the stop check's runs from this results folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = args.stop_check_from
        if source is None:
            source, lines = recorded_runs(Path(tmp), args.short, args.long, args.rate)
            for line in lines:
                print(line, flush=True)
        for line in stop_check(source, Path(tmp), args.rounds, args.fills):
            print(line, flush=True)


if __name__ == "__main__":
    main()
