"""What do the probes that explain a run cost it? (goal: throughput with probes / without >= 0.99)

For each engine, one throwaway instance with the random-insert workload prepared (16 sessions, 4 data
files: the seed-000 set-up, where sessions wait on Lock:extend and the waiting-task reader has work),
then rounds that run the same load with no probe and with each probe set, in an order that rotates
every round so drift favours none. Before each load the table is emptied and the instance settled
as `storlab run` settles it (checkpoint, sync, its files out of the page cache), so each load starts
from the state a measured run starts from. Probe sets:

  all            what `storlab run` starts (storlab.probes.lifecycle.around_run): the wait probe with
                 its traces (PostgreSQL 15: lock and LWLock waits and per-file IO through bpftrace;
                 MariaDB: per-file IO from performance_schema), the waits per second (wait:<WaitType>),
                 the device timeline and every probe of the registry (storlab.probes.registry)
  wait-timeline  the wait probe and its reading once a second
  waiting_tasks, io_sizes, pressure, ...
                 one probe of the registry alone, with its own recorder (waiting_tasks: pg_stat_activity
                 + pg_locks, or events_waits_current, every 0.5 s)

Prints each round, then per engine and probe set the ratio (rows/s with it) / (rows/s without) as the
geometric mean over the rounds with its 95 % interval, and the median (round 0 is a warm-up for every
set and is not counted). The interval says whether enough rounds were run: narrower than 2 % tells a
1 % cost.

    .venv/bin/python benchmarks/probe_overhead.py [--engines postgres,mariadb] [--probes all,waiting_tasks]
        [--rounds 5] [--rows 40000] [--postgres-version 18]

PostgreSQL 18 (the wheel's server, without pg_wait_sampling) samples pg_stat_activity every 50 ms
instead: --postgres-version 18 --probes wait-timeline measures what that sampler costs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

from scipy import stats as sps

from storlab.engines import provision
from storlab.lab import settle
from storlab.lab.layout import CellLayout, spec_for
from storlab.probes.kept import RunScope
from storlab.probes.lifecycle import CAPTURE, TIMELINE, Recorder, RunStart, around_run, recording
from storlab.probes.registry import PROBES
from storlab.probes.wait_timeline import WaitTimeline
from storlab.workloads import kind
from storlab.workloads.random_insert import RandomInsertParams

RESET = {"postgres": "TRUNCATE lab_insert", "mariadb": "TRUNCATE TABLE lab_insert"}
ALONE = {probe.name: probe for probe in PROBES if probe.recorder is not None}
SETS = ("all", "wait-timeline", *ALONE)


def recorders(instance, probes: str) -> list[Recorder]:
    """The recorders of one probe set, as the runner starts them."""
    if probes == "all":  # exactly what `storlab run` starts around a run, its traces included
        return around_run(instance, traced=False)
    if probes == "wait-timeline":
        waits = instance.wait_probe()
        timeline = WaitTimeline(waits.so_far)
        return [Recorder(CAPTURE, lambda run: waits.start(run.sessions), waits.stop),
                Recorder(TIMELINE, lambda run: timeline.start(run.t0), timeline.stop)]
    alone = ALONE[probes].recorder(RunScope(instance, traced=False))
    return [Recorder(probes, lambda run: alone.start(run.sessions, run.t0), alone.stop)]


def rows_per_s(instance, params: RandomInsertParams, probes: str | None) -> float:
    """One load, with the probe set `probes` around it as the runner places them (None: no probe)."""
    load = kind("random-insert").load(instance, params, {})
    with ExitStack() as stack:
        stack.callback(load.close)
        sessions = load.open()
        if probes is not None:
            stack.enter_context(recording(recorders(instance, probes), RunStart(sessions, time.monotonic())))
        return load.run().figures["rows_per_s"]


def measure(engine: str, sets: list[str], rounds: int, rows: int, lab: Path,
            version: str | None = None) -> dict[str, list[float]]:
    params = RandomInsertParams(kind="random-insert", connections=16, rows_per_connection=rows, batch=1000)
    spec = spec_for(CellLayout(data_on="disk", data_files=4), {}, {"disk": lab}, version if engine == "postgres" else None)
    ratios: dict[str, list[float]] = {s: [] for s in sets}
    with provision(engine, spec, keep=False, connections=16) as instance:
        kind("random-insert").prepare(instance, params, {})
        contenders = [None, *sets]
        for round_no in range(rounds + 1):
            shift = round_no % len(contenders)
            results = {}
            for who in contenders[shift:] + contenders[:shift]:
                with instance.connect() as conn:
                    conn.execute(RESET[engine])
                settle.settle(instance.checkpoint, instance.roots.values())
                results[who] = rows_per_s(instance, params, who)
            line = ", ".join(f"{who or 'no probe'} {value:,.0f}" for who, value in results.items())
            if round_no == 0:
                print(f"  {engine} warm-up: {line} rows/s", flush=True)
                continue
            for s in sets:
                ratios[s].append(results[s] / results[None])
            print(f"  {engine} round {round_no}: {line} rows/s; ratios "
                  + ", ".join(f"{s} {ratios[s][-1]:.3f}" for s in sets), flush=True)
    return ratios


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """The ratios' geometric mean and its 95 % interval (Student's t on the logs): each round pairs the
    loads with and without, so the round's mood cancels out of its ratio."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = sps.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
    return math.exp(mean - half), math.exp(mean), math.exp(mean + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="postgres,mariadb")
    parser.add_argument("--probes", default="all,waiting_tasks", help=f"comma-separated, of: {', '.join(SETS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=40_000, help="rows per connection (16 connections)")
    parser.add_argument("--postgres-version", default="15", help="the PostgreSQL version to measure (15 or 18)")
    args = parser.parse_args()
    sets = args.probes.split(",")
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        parser.error(f"unknown probe set {', '.join(unknown)} (known: {', '.join(SETS)})")

    lab = Path("/var/tmp/storlab/benchmarks")
    lab.mkdir(parents=True, exist_ok=True)
    lab.chmod(0o755)
    summary = []
    for engine in args.engines.split(","):
        for s, ratios in measure(engine, sets, args.rounds, args.rows, lab, args.postgres_version).items():
            low, mid, high = interval(ratios)
            summary.append(f"{engine:8} {s:14}: throughput with / without {mid:.3f} [{low:.3f}, {high:.3f}] (geometric "
                           f"mean, 95 % CI; median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max "
                           f"{max(ratios):.3f}) over {args.rounds} rounds, 16 connections x {args.rows} rows, 4 data files")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
