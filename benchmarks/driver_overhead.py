"""How much does storlab's driver cost compared with pgbench on the same load?

Provisions one throwaway PostgreSQL, then alternates storlab's driver and pgbench running the same
random-insert transaction (same connections, rows, batch), emptying the table before each so both start
from the same state. Prints each round and storlab's throughput as a ratio of pgbench's (median).

    .venv/bin/python benchmarks/driver_overhead.py [--rounds 5] [--connections 16] [--rows 40000]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from storlab.engines import postgres, provision
from storlab.engines.base import spec_for
from storlab.workloads import Driver, prepare

RESET = ["TRUNCATE lab_insert", "CHECKPOINT"]


def storlab_rows_per_s(instance, connections: int, rows: int, batch: int) -> float:
    with Driver(instance, connections, rows, batch) as driver:
        driver.open()
        return driver.run().rows_per_s


def pgbench_rows_per_s(instance, script: Path, connections: int, rows: int, batch: int) -> float:
    out = subprocess.run(
        [str(postgres.bin_dir() / "pgbench"), "-n", "-M", "prepared", "-f", str(script), "-c", str(connections),
         "-j", str(connections), "-t", str(rows // batch), "-h", str(instance.socket_dir), "-p", str(postgres.PORT),
         "-U", postgres.SUPERUSER, postgres.DATABASE],
        capture_output=True, text=True, check=True,
    ).stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))
    return tps * batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rows", type=int, default=40_000, help="rows per connection")
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()

    lab = Path("/var/tmp/storlab/benchmarks")
    lab.mkdir(parents=True, exist_ok=True)
    spec = spec_for({"data_files": 1, "data_on": "disk"}, {"shared_buffers": "256MB"}, {"disk": lab})
    with provision("postgres", spec, keep=False, connections=args.connections) as instance, \
            tempfile.TemporaryDirectory() as tmp:
        prepare(instance, "random-insert")
        script = Path(tmp) / "insert.sql"
        # The same statement the driver sends, with the batch as a literal.
        script.write_text(postgres.RANDOM_INSERT.replace("%s", str(args.batch)) + ";\n")
        ratios = []
        for round_no in range(0, args.rounds + 1):
            results = {}
            order = ("storlab", "pgbench") if round_no % 2 else ("pgbench", "storlab")
            for who in order:
                with instance.connect() as conn:
                    for statement in RESET:
                        conn.execute(statement)
                if who == "storlab":
                    results[who] = storlab_rows_per_s(instance, args.connections, args.rows, args.batch)
                else:
                    results[who] = pgbench_rows_per_s(instance, script, args.connections, args.rows, args.batch)
            if round_no == 0:
                continue  # warm-up for both: first runs pay for cold caches and file creation
            ratios.append(results["storlab"] / results["pgbench"])
            print(f"round {round_no}: storlab {results['storlab']:,.0f} rows/s, pgbench {results['pgbench']:,.0f} rows/s, "
                  f"ratio {ratios[-1]:.3f}")
        print(f"storlab / pgbench throughput: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {args.rounds} rounds, "
              f"{args.connections} connections x {args.rows} rows, batch {args.batch}")


if __name__ == "__main__":
    main()
