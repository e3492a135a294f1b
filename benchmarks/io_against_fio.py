"""Does `storlab io` measure what fio measures by hand? Runs every job of the sqlio preset through
storlab and as a plain fio command, in an S H H S pattern repeated (drift hurts both sides alike), and
prints per job the medians' difference beside fio's own hand-vs-hand spread on this machine.

    .venv/bin/python benchmarks/io_against_fio.py [DIR] [--rounds 2] [--seconds 1] [--size 64M]

The hand command (one job):
    fio --name=hand --filename=DIR/hand.dat --size=64M --rw=RW --bs=BS --iodepth=2 --direct=1
        --ioengine=libaio --runtime=1 --time_based --output-format=json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from storlab.machine import iobench


def by_hand(directory: Path, rw: str, bs: int, size: str, seconds: int) -> float:
    """The same job, typed as a user would, on a fresh file as storlab's is; IOPS from fio's JSON."""
    (directory / "hand.dat").unlink(missing_ok=True)
    out = subprocess.run(
        ["fio", "--name=hand", f"--filename={directory / 'hand.dat'}", f"--size={size}", f"--rw={rw}", f"--bs={bs}",
         "--iodepth=2", "--direct=1", "--ioengine=libaio", f"--runtime={seconds}", "--time_based",
         "--output-format=json"], capture_output=True, text=True, check=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return job["read"]["iops"] + job["write"]["iops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?", default="/var/tmp")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=1)
    parser.add_argument("--size", default="64M")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        tmp_path = Path(tmp)
        hand_dir = tmp_path / "hand"
        hand_dir.mkdir()
        size = iobench.parse_size(args.size)
        ratios = []
        for job in iobench.preset("sqlio"):
            ours, theirs = [], []
            for who in ("storlab", "hand", "hand", "storlab") * args.rounds:
                if who == "hand":
                    theirs.append(by_hand(hand_dir, job.rw, job.block_size, args.size, args.seconds))
                else:
                    ours.append(iobench.run(tmp_path, [job], size, args.seconds)[0].iops)
            ratio = statistics.median(ours) / statistics.median(theirs) - 1
            noise = statistics.median(abs(theirs[i] / theirs[i + 1] - 1) for i in range(0, len(theirs), 2))
            ratios.append(ratio)
            print(f"{job.name:>14}: storlab {statistics.median(ours):>8,.0f} IOPS, by hand {statistics.median(theirs):>8,.0f} IOPS, "
                  f"difference {ratio:+.1%}, fio against itself {noise:.1%}")
        print(f"mean difference over {len(ratios)} jobs: {statistics.mean(ratios):+.1%}")


if __name__ == "__main__":
    main()
