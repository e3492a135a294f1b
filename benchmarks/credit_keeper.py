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

import sqlite3

import paired_cells

PLACEMENTS = """capped = {{ loop = "1GB", image_dir = "{images}", iops = {iops} }}
bucket = {{ loop = "1GB", image_dir = "{images}", iops_bucket = {{ baseline = 1, burst = {iops}, size = 1e12 }} }}"""


def main() -> None:
    parser = paired_cells.arguments(__doc__)
    parser.add_argument("--iops", type=int, default=100_000, help="the cap, held plainly or as the bucket's burst")
    args = parser.parse_args()
    results = paired_cells.run("credit-keeper", PLACEMENTS.format(images=args.image_dir, iops=args.iops),
                               ("capped", "bucket"), args)
    with sqlite3.connect(results / "storlab.sqlite") as db:
        dry = db.execute("SELECT count(*) FROM io_buckets WHERE dry_at_s IS NOT NULL").fetchone()[0]
    print(f"pgbench scale {args.scale}, {args.clients} clients, {args.seconds} s a run, {args.iops:,} IOPS; "
          f"txn/s per round (runs whose bucket ran dry: {dry})")
    paired_cells.compare(results, ("capped", "bucket"))


if __name__ == "__main__":
    main()
