"""Does storlab's own memory grow with a load generator's transactions?

Runs `storlab run` on a one-cell pgbench experiment (select-only, closed loop: tens of thousands of
transactions a second here, each a line of pgbench's per-transaction log that storlab reads) for a short
and a long duration, alternately, and reads the storlab process's peak resident memory (VmHWM in
/proc/PID/status, read until it exits: its own pages only, not its children's: the servers and pgbench
are separate processes). Prints each run's peak and transactions, and the ratio of the long runs'
median peak to the short runs' (goal: within 1.3x).

    .venv/bin/python benchmarks/client_memory.py [--short 2] [--long 16] [--rounds 3] [--placement /var/tmp/storlab/bench]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # `python -m storlab` runs the storlab of its working folder
EXPERIMENT = """
name = "client-memory"
engine = "postgres"
repetitions = 1
[placements]
disk = "{disk}"
[layout]
data_on = "disk"
[workload]
kind = "pgbench"
script = "select-only"
scale = 10
clients = 4
duration_s = {seconds}
"""


def peak_kib(pid: int) -> int:
    """The process's peak resident set so far (kB), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(seconds: int, placement: Path) -> tuple[int, int]:
    """One run of `seconds`: storlab's peak resident kB, and the transactions pgbench completed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.toml"
        path.write_text(EXPERIMENT.format(disk=placement, seconds=seconds))
        out = Path(tmp) / "results"
        run = subprocess.Popen([sys.executable, "-m", "storlab", "run", str(path), "--no-trace", "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=CHECKOUT)
        peak = 0
        while run.poll() is None:
            peak = max(peak, peak_kib(run.pid))
            time.sleep(0.02)
        if run.returncode != 0:
            raise SystemExit(f"storlab run failed: {run.stderr.read()}")
        with sqlite3.connect(out / "storlab.sqlite") as db:
            (done,) = db.execute("SELECT value FROM figures WHERE name = 'transactions'").fetchone()
    return peak, int(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--long", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--placement", type=Path, default=Path("/var/tmp/storlab/bench"))
    args = parser.parse_args()
    args.placement.mkdir(parents=True, exist_ok=True)
    os.chmod(args.placement, 0o755)
    peaks: dict[int, list[int]] = {args.short: [], args.long: []}
    for round_ in range(args.rounds):
        for seconds in (args.short, args.long) if round_ % 2 == 0 else (args.long, args.short):
            peak, done = measure(seconds, args.placement)
            peaks[seconds].append(peak)
            print(f"{seconds:3d} s: {done:>9,} transactions, storlab's peak resident memory {peak / 1024:.1f} MiB",
                  flush=True)
    short, long = statistics.median(peaks[args.short]), statistics.median(peaks[args.long])
    print(f"median peak: {short / 1024:.1f} MiB at {args.short} s, {long / 1024:.1f} MiB at {args.long} s: "
          f"{long / short:.2f}x (goal: within 1.3x)")


if __name__ == "__main__":
    main()
