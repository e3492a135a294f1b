"""How far does one shared store go? Many simulated workers against one store on this machine, each
doing what a real worker does between two runs: claim the next run (storlab.queue.claim: one UPDATE
over FOR UPDATE SKIP LOCKED), then record a run and close its claim in one transaction
(storlab.queue.holding + Store.record_run + queue.done) with a run's usual rows: 8 figures, 12 waits,
60 timeline points. No database server is started per run: the store is the only thing measured.

Each simulated worker is its own process with its own connection (as on a real fleet), started
together and stopped together after --seconds. The store is a throwaway PostgreSQL 15 that storlab
provisions itself (unix socket only), with max_connections above the largest worker count. Prints
for each worker count: claims per second, claim latency p50 and p99, record latency p99, and whether
any claim came back empty (the queue must never run dry during the measurement).

    .venv/bin/python benchmarks/claim_throughput.py [--workers 10,50,200] [--seconds 20] [--queued 100000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from storlab.engines import provision
from storlab.engines.postgres import instance as postgres
from storlab.lab.layout import CellLayout, spec_for
from storlab.probes.waits import Wait, WaitCapture
from storlab.results import shared_store
from storlab.results.dialects import POSTGRESQL, Connection
from storlab.results.runs import RunResult
from storlab.running import queue

CELLS = 100
LEASE_S = 60.0


def fake_run() -> RunResult:
    figures = [(f"figure_{i}", float(i), "s") for i in range(8)]
    capture = WaitCapture("pg_wait_sampling", [Wait(f"IO:Wait{i}", 0.1 * i) for i in range(12)],
                          {"sessions_cpu_s": 1.0})
    timeline = [(float(t), metric, 1.0) for t in range(20) for metric in ("rows_per_s", "latency_p99_ms", "cpu_percent")]
    return RunResult(time.time(), figures, capture, "15", timeline)


def prepare(dsn: str, name: str, queued: int) -> tuple[int, int]:
    """An experiment with `queued` runs in the queue: its id and its facts id."""
    with shared_store.open(dsn, name, create=True, purpose="bench") as store:
        cells = [(f"c{i:03d}", f"cell={i}", {"bench.cell": i}) for i in range(CELLS)]
        repetitions = -(-queued // CELLS)
        store.bind_experiment(name, "postgres", "bench", {"name": name}, repetitions, {"bench.cell": list(range(CELLS))}, cells)
        planned = [(cid, rep, None, (rep - 1) * CELLS + i)
                   for rep in range(1, repetitions + 1) for i, (cid, _, _) in enumerate(cells)][:queued]
        with store.transaction() as db:
            queue.enqueue(db, store.experiment_id, planned)
        facts = store.record_facts({"bench": True}, {"bench": True})
        store.db.execute("ANALYZE storlab.queue")
        return store.experiment_id, facts


def worker(dsn: str, experiment_id: int, name: str, facts_id: int, index: int, start: multiprocessing.Event,
           deadline: float, results: multiprocessing.Queue) -> None:
    db = Connection(shared_store.connect(dsn, f"bench {index}"), POSTGRESQL)
    store = shared_store.bind(db, shared_store.ExperimentEntry(experiment_id, name, ""), None, "bench")
    claims, records, empty = [], [], 0
    result = fake_run()
    start.wait()
    while time.time() < deadline:
        t0 = time.perf_counter()
        held = queue.claim(db, [experiment_id], f"h{index}", f"bench {index}", LEASE_S)
        t1 = time.perf_counter()
        if held is None:
            empty += 1
            time.sleep(0.01)
            continue
        with queue.holding(store, held) as tx:
            run_id = store.record_run(held.cell_id, held.repetition, result, facts_id, f"h{index}")
            queue.done(tx, held, run_id)
        claims.append(t1 - t0)
        records.append(time.perf_counter() - t1)
    db.close()
    results.put((claims, records, empty))


def measure(dsn: str, workers: int, seconds: float, queued: int) -> dict:
    name = f"bench-{workers}"
    experiment_id, facts_id = prepare(dsn, name, queued)
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    deadline_box = time.time() + 5 + workers * 0.05  # time to connect every worker before the start
    procs = [context.Process(target=worker, args=(dsn, experiment_id, name, facts_id, i, start,
                                                  deadline_box + seconds, results)) for i in range(workers)]
    for p in procs:
        p.start()
    time.sleep(max(0.0, deadline_box - time.time()))
    start.set()
    gathered = [results.get() for _ in procs]
    for p in procs:
        p.join()
    claims = sorted(c for g in gathered for c in g[0])
    records = sorted(r for g in gathered for r in g[1])
    empty = sum(g[2] for g in gathered)

    def pct(values: list[float], q: float) -> float:
        return 1000 * values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    return {"workers": workers, "claims": len(claims), "claims_per_s": len(claims) / seconds,
            "claim_p50_ms": pct(claims, 0.50), "claim_p99_ms": pct(claims, 0.99),
            "record_p99_ms": pct(records, 0.99), "record_median_ms": 1000 * statistics.median(records) if records else float("nan"),
            "empty": empty}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="10,50,200")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--queued", type=int, default=100_000, help="runs queued per worker count")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    place = Path(tempfile.mkdtemp(prefix="storlab-bench-store-", dir="/var/tmp"))
    place.chmod(0o755)
    spec = spec_for(CellLayout(data_on="store"), {}, {"store": place})
    with provision("postgres", spec, False, max(counts) + 10) as instance:
        with instance.admin() as conn:
            conn.execute("CREATE DATABASE fleetbench")
        dsn = f"host={instance.socket_dir} port={postgres.PORT} user={postgres.SUPERUSER} dbname=fleetbench"
        print(f"store: PostgreSQL {instance.version}, {args.seconds:g} s per worker count, {args.queued:,} runs queued each")
        print(f"{'workers':>8} {'claims':>8} {'claims/s':>9} {'claim p50 ms':>13} {'claim p99 ms':>13} "
              f"{'record p50 ms':>14} {'record p99 ms':>14} {'empty claims':>13}")
        for workers in counts:
            m = measure(dsn, workers, args.seconds, args.queued)
            print(f"{m['workers']:>8} {m['claims']:>8} {m['claims_per_s']:>9.0f} {m['claim_p50_ms']:>13.2f} "
                  f"{m['claim_p99_ms']:>13.2f} {m['record_median_ms']:>14.2f} {m['record_p99_ms']:>14.2f} {m['empty']:>13}",
                  flush=True)
    place.rmdir()


if __name__ == "__main__":
    main()
