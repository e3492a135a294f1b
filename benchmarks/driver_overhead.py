"""Does storlab's load cost the server more than a C client running the same statements?

For each engine and batch size, one throwaway instance with the random-insert workload prepared, then
rounds that alternate storlab's load (a procedure looping in the server) and a C client sending the
same INSERT from 16 connections: pgbench (-M prepared) on PostgreSQL, mariadb-slap on MariaDB (it ships
with the server's client package, needs no script language, and sends each statement as one round
trip, as pgbench does). The table is emptied and checkpointed before each. Prints each round and
storlab's throughput as a ratio of the C client's (median over the rounds; round 0 is a warm-up).

    .venv/bin/python benchmarks/driver_overhead.py [--engines postgres,mariadb] [--batches 10,1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from storlab.engines import provision
from storlab.engines.mariadb import instance as mariadb
from storlab.engines.postgres import instance as postgres
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads import kind
from storlab.workloads.random_insert import RANDOM_UUID, RandomInsertParams

ROWS_PER_CONNECTION = {10: 4_000, 1000: 40_000}
RESET = {"postgres": ["TRUNCATE lab_insert", "CHECKPOINT"], "mariadb": ["TRUNCATE TABLE lab_insert"]}


def insert_params(connections: int, rows: int, batch: int) -> RandomInsertParams:
    return RandomInsertParams(kind="random-insert", connections=connections, rows_per_connection=rows, batch=batch)


def storlab_rows_per_s(instance, connections: int, rows: int, batch: int) -> float:
    load = kind("random-insert").load(instance, insert_params(connections, rows, batch), {})
    try:
        load.open()
        return load.run().figures["rows_per_s"]
    finally:
        load.close()


def pgbench_rows_per_s(instance, connections: int, rows: int, batch: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(f"INSERT INTO lab_insert SELECT FROM generate_series(1, {batch});\n")
        script.flush()
        out = subprocess.run(
            [str(postgres.bin_dir() / "pgbench"), "-n", "-M", "prepared", "-f", script.name, "-c", str(connections),
             "-j", str(connections), "-t", str(rows // batch), "-h", str(instance.socket_dir), "-p", str(postgres.PORT),
             "-U", postgres.WORKLOAD_ROLE, postgres.DATABASE],  # as storlab's own sessions connect
            capture_output=True, text=True, check=True,
        ).stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))
    return tps * batch


def slap_rows_per_s(instance, connections: int, rows: int, batch: int) -> float:
    query = f"INSERT INTO lab_insert (c1) SELECT {RANDOM_UUID} FROM seq_1_to_{batch}"
    out = subprocess.run(
        ["mariadb-slap", "--no-defaults", f"--socket={instance.socket}", f"--user={mariadb.WORKLOAD_USER}",
         f"--create-schema={mariadb.DATABASE}", "--no-drop", f"--concurrency={connections}", "--iterations=1",
         f"--number-of-queries={connections * (rows // batch)}", f"--query={query}"],
        capture_output=True, text=True, check=True,
    ).stdout
    seconds = float(re.search(r"Average number of seconds to run all queries: ([\d.]+)", out).group(1))
    with instance.connect() as conn:
        inserted = conn.execute("SELECT count(*) FROM lab_insert").fetchone()[0]
    return inserted / seconds


C_CLIENT = {"postgres": ("pgbench", pgbench_rows_per_s), "mariadb": ("mariadb-slap", slap_rows_per_s)}


def measure(engine: str, batch: int, rounds: int, connections: int, lab: Path) -> list[float]:
    rows = ROWS_PER_CONNECTION.get(batch, 100 * batch)
    client, client_rows_per_s = C_CLIENT[engine]
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab})
    ratios = []
    with provision(engine, spec, keep=False, connections=connections) as instance:
        kind("random-insert").prepare(instance, insert_params(connections, rows, batch), {})
        for round_no in range(rounds + 1):
            results = {}
            order = ("storlab", client) if round_no % 2 else (client, "storlab")
            for who in order:
                with instance.connect() as conn:
                    for statement in RESET[engine]:
                        conn.execute(statement)
                if who == "storlab":
                    results[who] = storlab_rows_per_s(instance, connections, rows, batch)
                else:
                    results[who] = client_rows_per_s(instance, connections, rows, batch)
            if round_no == 0:
                continue  # warm-up for both: first runs pay for cold caches and file creation
            ratios.append(results["storlab"] / results[client])
            print(f"  {engine} batch {batch} round {round_no}: storlab {results['storlab']:,.0f} rows/s, "
                  f"{client} {results[client]:,.0f} rows/s, ratio {ratios[-1]:.3f}", flush=True)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="postgres,mariadb")
    parser.add_argument("--batches", default="10,1000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()

    lab = Path("/var/tmp/storlab/benchmarks")
    lab.mkdir(parents=True, exist_ok=True)
    lab.chmod(0o755)
    summary = []
    for engine in args.engines.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            ratios = measure(engine, batch, args.rounds, args.connections, lab)
            summary.append(f"{engine:8} batch {batch:>5}: storlab / {C_CLIENT[engine][0]} throughput median "
                           f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) over "
                           f"{args.rounds} rounds, {args.connections} connections x "
                           f"{ROWS_PER_CONNECTION.get(batch, 100 * batch)} rows")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
