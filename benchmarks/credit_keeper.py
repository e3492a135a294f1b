"""What does holding a credit bucket cost a database? (goal: a bucket that never runs dry / the same
plain cap >= 0.97 for a commit-bound and a read-only load)

A bucket is held by storlab reading the server's control group and rewriting its cap every 0.1 s
(storlab.lab.credits). One `storlab run` of pgbench (tpcb-like and select-only, a factor) with the data
and the WAL on a loop device capped at the same IOPS, either plainly or as a bucket's burst rate from a
bucket too large to run dry in a run (a factor): each round runs every cell in a random order, so the
pairs share the machine's state. Prints each cell's txn/s per round, the ratio bucket / plain cap per
round and its median. As root.

    .venv/bin/python benchmarks/credit_keeper.py [--rounds 3] [--seconds 10] [--scale 10] [--clients 4]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics

import paired_cells

EXPERIMENT = """
name = "credit-keeper"
engine = "postgres"
repetitions = {rounds}
# The data and the WAL on one placement: both plainly capped, or both under the bucket.
exclude = [{{ data_on = "capped", log_on = "bucket" }}, {{ data_on = "bucket", log_on = "capped" }}]

[placements]
capped = {{ loop = "1GB", image_dir = "{images}", iops = {iops} }}
bucket = {{ loop = "1GB", image_dir = "{images}", iops_bucket = {{ baseline = 1, burst = {iops}, size = 1e12 }} }}

[layout]
data_on = ["capped", "bucket"]
log_on = ["capped", "bucket"]

[workload]
kind = "pgbench"
script = ["tpcb-like", "select-only"]
scale = {scale}
clients = {clients}
duration_s = {seconds}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--iops", type=int, default=100_000, help="the cap, held plainly or as the bucket's burst")
    parser.add_argument("--image-dir", default="/var/tmp/storlab/img")
    args = parser.parse_args()

    results = paired_cells.run("credit-keeper", EXPERIMENT.format(
        rounds=args.rounds, images=args.image_dir, scale=args.scale, iops=args.iops, clients=args.clients,
        seconds=args.seconds))
    with sqlite3.connect(results / "storlab.sqlite") as db:
        dry = db.execute("SELECT count(*) FROM io_buckets WHERE dry_at_s IS NOT NULL").fetchone()[0]
    tps: dict[tuple[str, str], dict[int, float]] = {}
    for f, rnd, value, _ in paired_cells.transactions(results):
        tps.setdefault((f["workload.script"], f["layout.data_on"]), {})[rnd] = value
    print(f"pgbench scale {args.scale}, {args.clients} clients, {args.seconds} s a run, {args.iops:,} IOPS; "
          f"txn/s per round (runs whose bucket ran dry: {dry})")
    for script in ("tpcb-like", "select-only"):
        capped, bucket = tps[(script, "capped")], tps[(script, "bucket")]
        ratios = [bucket[r] / capped[r] for r in sorted(capped) if r in bucket]
        print(f"{script:12} capped  " + "  ".join(f"{capped[r]:8,.0f}" for r in sorted(capped)))
        print(f"{'':12} bucket  " + "  ".join(f"{bucket[r]:8,.0f}" for r in sorted(bucket)))
        print(f"{'':12} bucket / capped: " + ", ".join(f"{x:.3f}" for x in ratios) +
              f"; median {statistics.median(ratios):.3f}")
    print(f"results: {results}")


if __name__ == "__main__":
    main()
