"""What does the instrumentation storlab starts a server with cost a load? (goal: the ratio of
throughput with it / without within [0.98, 1.02]) MariaDB's performance_schema, PostgreSQL's
pg_wait_sampling collector.

Every MariaDB instance storlab makes runs performance_schema with the synch and file IO
instruments and the current and history wait consumers: they can only be turned on when the server
starts, so probe_overhead.py, which turns probes on and off around loads on one instance, cannot see
what they cost. Here two instances with the same layout (16 sessions of random inserts into 4 data
files, as probe_overhead.py) share one loop device whose image is in memory: storlab's, and the same
with performance_schema off (--without performance_schema) or without its synch instruments
(--without synch: mutexes, rwlocks and conditions, the file IO instruments kept), without its
table IO instruments (--without table-io: a wait per row the handler reads or writes, on by default)
or without its statement instruments (--without statements, on by default). Each round runs the
load once on each, no probe on either, in an order that alternates; before each load the table is emptied and the instance settled as `storlab run`
settles it. Prints each round, then the ratio as the geometric mean over the rounds with its 95 %
interval (round 0 is a warm-up and not counted).

PostgreSQL 15 runs pg_wait_sampling's collector, which samples every backend's wait event every
10 ms (its profile, and its history), from the server's start: --engine postgres --without
pg_wait_sampling compares storlab's instance with one whose collector samples once in 1,000 s (it is
preloaded all the same: the collector is there, idle). On PostgreSQL it also prints the collector's own
CPU over the rest of the instance's during each load of storlab's instance: counted from its process,
not timed against the other instance, so its interval is the narrow one (it leaves out what the
collector does to the sessions, which only the ratio sees).

    .venv/bin/python benchmarks/instrumentation_overhead.py [--engine mariadb|postgres]
        [--without performance_schema|synch|table-io|statements|pg_wait_sampling] [--rounds 40] [--rows 12000] [--image-dir DIR]
"""

from __future__ import annotations

import argparse
import signal
import time
from contextlib import ExitStack
from pathlib import Path

import psutil
from probe_overhead import RESET, in_memory_lab, interval  # beside it: a script's folder is on its path
from storlab.answer.stats import summarize
from storlab.engines import provision
from storlab.lab import quiesce
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads import kind
from storlab.workloads.random_insert import RandomInsertParams

INSTRUMENTED = "as storlab starts it"
# What the other instance leaves out (its engine_settings, after storlab's own lines in my.cnf).
WITHOUT = {"performance_schema": ("mariadb", {"performance_schema": False}),
           "synch": ("mariadb", {"performance_schema_instrument": "wait/synch/%=OFF"}),
           "table-io": ("mariadb", {"performance_schema_instrument": "wait/io/table/%=OFF"}),
           "statements": ("mariadb", {"performance_schema_instrument": "statement/%=OFF"}),
           "pg_wait_sampling": ("postgres", {"pg_wait_sampling.profile_period": 1_000_000,
                                             "pg_wait_sampling.history_period": 1_000_000})}


COLLECTOR = "postgres: pg_wait_sampling collector"  # its process title (pg_stat_activity does not list it)


def on_cpu_s(process: psutil.Process | None) -> float:
    """The time a process has run on a CPU, to the nanosecond (/proc/<pid>/schedstat: its CPU times in
    /proc/<pid>/stat count whole 10 ms ticks, and the collector runs for less than one in a load)."""
    return 0.0 if process is None else int(Path(f"/proc/{process.pid}/schedstat").read_text().split()[0]) / 1e9


def load(instance, params: RandomInsertParams) -> tuple[float, float | None]:
    """One load's rows per second, from an empty table on a settled instance; and on PostgreSQL the
    pg_wait_sampling collector's own CPU over the rest of the instance's (a count, not a timing
    against the other instance: the machine's wandering speed moves it little)."""
    with instance.connect() as conn:
        conn.execute(RESET[instance.engine])
    quiesce.quiesce(instance.checkpoint, instance.roots.values())
    collector = next((p for p in psutil.Process(instance.workspace.server.pid).children()
                      if " ".join(p.cmdline()).strip() == COLLECTOR), None) if instance.engine == "postgres" else None
    work = kind("random-insert").load(instance, params, {})
    try:
        work.open()
        server, own = instance.cpu_s(), on_cpu_s(collector)
        rows_per_s = work.run().figures["rows_per_s"]
        server, own = instance.cpu_s() - server, on_cpu_s(collector) - own
        return rows_per_s, (100 * own / (server - own) if collector else None)
    finally:
        work.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40, help="paired rounds")
    parser.add_argument("--rows", type=int, default=12_000, help="rows per connection (16 connections)")
    parser.add_argument("--engine", choices=["mariadb", "postgres"], default="mariadb")
    parser.add_argument("--without", choices=sorted(WITHOUT), default=None,
                        help="what the other instance is without (default: performance_schema on MariaDB, "
                             "pg_wait_sampling on PostgreSQL)")
    parser.add_argument("--image-dir", default="/dev/shm/storlab-benchmarks",
                        help="where the loop device's image goes (default in memory)")
    args = parser.parse_args()
    args.without = args.without or ("performance_schema" if args.engine == "mariadb" else "pg_wait_sampling")
    engine, settings_without = WITHOUT[args.without]
    if engine != args.engine:
        parser.error(f"--without {args.without} is {engine}'s")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill takes Ctrl-C's path
    params = RandomInsertParams(kind="random-insert", connections=16, rows_per_connection=args.rows, batch=1000)
    ratios, shares = [], []
    bare = f"without {args.without}"
    with ExitStack() as stack:
        lab = stack.enter_context(in_memory_lab(Path(args.image_dir), "4GB"))
        instances = {}
        for name, settings in ((INSTRUMENTED, {}), (bare, settings_without)):
            spec = spec_for(CellLayout(data_on="lab", data_files=4), settings, {"lab": lab})
            instances[name] = stack.enter_context(provision(engine, spec, keep=False, connections=16))
            kind("random-insert").prepare(instances[name], params, {})
        for round_no in range(args.rounds + 1):
            order = [INSTRUMENTED, bare] if round_no % 2 == 0 else [bare, INSTRUMENTED]
            began = time.monotonic()
            loads = {name: load(instances[name], params) for name in order}
            ratio = loads[INSTRUMENTED][0] / loads[bare][0]
            share = loads[INSTRUMENTED][1]
            print(f"  round {round_no}{' (warm-up)' if round_no == 0 else ''}: "
                  + ", ".join(f"{name} {loads[name][0]:,.0f}" for name in order)
                  + f" rows/s; ratio {ratio:.3f}" + (f", the collector's CPU {share:.4f} %" if share is not None else "")
                  + f" ({time.monotonic() - began:.1f} s)", flush=True)
            if round_no:
                ratios.append(ratio)
                shares += [share] if share is not None else []
    low, mid, high = interval(ratios)
    what = "performance_schema" if engine == "mariadb" else "pg_wait_sampling"
    print(f"{engine}: throughput with {what} as storlab starts it / {bare} {mid:.3f} [{low:.3f}, {high:.3f}] "
          f"(geometric mean, 95 % CI) over {len(ratios)} rounds, 16 connections x {args.rows} rows, 4 data files")
    if shares:
        own = summarize(shares)
        print(f"{engine}: the pg_wait_sampling collector's own CPU over the rest of the instance's "
              f"+{own.mean:.3f} % [+{own.ci_low:.3f}, +{own.ci_high:.3f}] (mean, 95 % CI)")


if __name__ == "__main__":
    main()
