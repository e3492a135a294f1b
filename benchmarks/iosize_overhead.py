"""What does tracing the size of every IO cost the workload? (goal: traced / untraced >= 0.99)

Makes one loop device with storlab's device pool, then runs the same fio job on it with and
without the IO-size tracer (bpftrace on block:block_rq_issue), alternating which goes first each
round. Prints each round and the IOPS with the tracer as a ratio of the IOPS without (median). As
root; the device is removed at the end, on every path.

    .venv/bin/python benchmarks/iosize_overhead.py [--rounds 5] [--seconds 20] [--bs 4k] [--rw randread]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from storlab.experiment import places
from storlab.lab.devices import DevicePool
from storlab.probes.iosizes import TRACED, IoSizeTracer


def fio_iops(directory: Path, rw: str, bs: str, seconds: int) -> float:
    out = subprocess.run(
        ["fio", "--name=overhead", f"--directory={directory}", "--size=512M", f"--rw={rw}", f"--bs={bs}",
         "--direct=1", "--ioengine=libaio", "--iodepth=32", "--numjobs=1", "--time_based",
         f"--runtime={seconds}", "--group_reporting", "--output-format=json"],
        capture_output=True, text=True, check=True,
    ).stdout
    job = json.loads(out)["jobs"][0]
    return job["read"]["iops"] + job["write"]["iops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--bs", default="4k", help="small blocks: the most requests per second, the worst case")
    parser.add_argument("--rw", default="randread")
    parser.add_argument("--image-dir", default="/var/tmp/storlab/img")
    args = parser.parse_args()

    spec = places.device("bench", {"loop": "1GB", "image_dir": args.image_dir, "sector": 4096}).spec()
    with DevicePool() as pool:
        device = pool.device("bench", spec)
        fio_iops(device.mount_point, args.rw, args.bs, 5)  # lays out the file, warms both paths
        ratios = []
        for round_no in range(1, args.rounds + 1):
            results = {}
            order = ("traced", "plain") if round_no % 2 else ("plain", "traced")
            for who in order:
                if who == "plain":
                    results[who] = fio_iops(device.mount_point, args.rw, args.bs, args.seconds)
                    continue
                with IoSizeTracer({"bench": device.dev}) as tracer:
                    results[who] = fio_iops(device.mount_point, args.rw, args.bs, args.seconds)
                if tracer.result.source != TRACED:
                    raise SystemExit(f"not traced: {tracer.result.note}")
                requests = sum(sum(d.values()) for d in tracer.result.sizes["bench"].values())
                results["requests"] = requests
            ratios.append(results["traced"] / results["plain"])
            print(f"round {round_no}: traced {results['traced']:,.0f} IOPS ({results['requests']:,} requests seen), "
                  f"plain {results['plain']:,.0f} IOPS, ratio {ratios[-1]:.3f}")
        print(f"traced / untraced IOPS: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {args.rounds} rounds of {args.seconds} s, "
              f"fio {args.rw} bs={args.bs} iodepth=32 on a loop device with direct IO")


if __name__ == "__main__":
    main()
