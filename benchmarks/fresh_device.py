"""Does a device storlab has just made write as fast as it will once written? A loop device's image is
sparse: the host allocates each of its blocks at its first write, and a database writes new places all
run long (the WAL's new segments, a table's new pages). Each round makes a fresh device (the pool's
format: ext4 on a loop device, direct IO), writes a new file of 8 KiB commits (a write, then fdatasync)
for the given time, deletes it and writes another: the second file takes blocks the first freed, whose
image blocks the host has already allocated. Prints each round's commits a second and the medians'
ratio, fresh / written (1.0: a fresh device measures as a used one).

--preallocate fallocates each image whole on the host as soon as it is made (unwritten extents: the
host still converts each at its first write), to see whether that is enough.

    .venv/bin/python benchmarks/fresh_device.py [--rounds 4] [--seconds 4] [--size 512MB] [--preallocate]
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
    parser.add_argument("--preallocate", action="store_true", help="fallocate each image whole once made")
    args = parser.parse_args()
    images = Path(tempfile.mkdtemp(prefix="storlab-fresh-", dir="/var/tmp"))
    fresh, written = [], []
    try:
        for round_ in range(args.rounds):
            with devices.DevicePool() as pool:
                device = pool.device("fresh", devices.DeviceSpec(
                    devices.DeviceFormat(parse_size(args.size), 512, "ext4", "", images), 128))
                if args.preallocate:
                    subprocess.run(["fallocate", "-l", str(parse_size(args.size)), str(device.image)], check=True)
                first = Path(device.mount_point) / "first.dat"
                fresh.append(commits(first, args.seconds))
                first.unlink()
                written.append(commits(Path(device.mount_point) / "second.dat", args.seconds))
            print(f"round {round_}: fresh {fresh[-1]:,.0f} commits/s, written {written[-1]:,.0f} commits/s", flush=True)
    finally:
        shutil.rmtree(images, ignore_errors=True)
    print(f"fresh / written, medians: {statistics.median(fresh) / statistics.median(written):.2f}")


if __name__ == "__main__":
    main()
