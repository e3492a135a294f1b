"""Does a device storlab has just made write as fast as it will once written? Each round makes a fresh
device (the pool's format: ext4 on a loop device, direct IO) and writes three new files of 8 KiB commits
(a write, then fdatasync) for the given time each: the first on the fresh filesystem, a second beside it
(space this filesystem never used either), then, once the first is deleted, a third that takes the
blocks the first freed. Prints each round's commits a second and the medians' ratios to the second file.

Measured on this VM (4 rounds of 4 s, 512 MB): first / beside 0.96-1.0, reused / beside 1.15-1.2. So a
fresh device is not slower; new space is, against space a file just freed. Not the host's sparse image
either: the same ratios with the image written whole before mkfs, with zeros or with a pattern (a
patched pool, by hand). The engines' logs mostly overwrite (PostgreSQL recycles its WAL segments, zeroed
when made; InnoDB's redo is a fixed file), so a commit-bound answer is not touched by it; a load that
grows its files is, alike in every cell.

    .venv/bin/python benchmarks/fresh_device.py [--rounds 4] [--seconds 4] [--size 512MB]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from storlab.lab import devices
from storlab.sizes import parse_size


def commits(file: Path, seconds: int) -> float:
    """8 KiB writes through the page cache, each followed by fdatasync, into a new file (no layout: every
    write goes where nothing was before); commits a second."""
    out = subprocess.run(["fio", "--name=fresh", f"--filename={file}", "--size=1G", "--rw=write", "--bs=8k",
                          "--fdatasync=1", "--fallocate=none", "--create_on_open=1", "--ioengine=psync",
                          f"--runtime={seconds}", "--time_based=0", "--output-format=json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["write"]["iops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--size", default="512MB", help="each fresh device's size")
    args = parser.parse_args()
    images = Path(tempfile.mkdtemp(prefix="storlab-fresh-", dir="/var/tmp"))
    first, beside, reused = [], [], []
    try:
        for round_ in range(args.rounds):
            with devices.DevicePool() as pool:
                device = pool.device("fresh", devices.DeviceSpec(
                    devices.DeviceFormat(parse_size(args.size), 512, "ext4", "", images), 128))
                mount = Path(device.mount_point)
                first.append(commits(mount / "first.dat", args.seconds))
                beside.append(commits(mount / "beside.dat", args.seconds))
                (mount / "first.dat").unlink()
                reused.append(commits(mount / "reused.dat", args.seconds))
            print(f"round {round_}: first {first[-1]:,.0f} commits/s, beside {beside[-1]:,.0f}, "
                  f"into the first's freed space {reused[-1]:,.0f}", flush=True)
    finally:
        shutil.rmtree(images, ignore_errors=True)
    new = statistics.median(beside)
    print(f"medians against the file beside: first {statistics.median(first) / new:.2f}, "
          f"reused {statistics.median(reused) / new:.2f}")


if __name__ == "__main__":
    main()
