"""What the paired-cell benchmarks share (latency_layer.py, credit_keeper.py): one `storlab run` of
pgbench (tpcb-like and select-only, a factor) with the data and the WAL on one of two placements (a
factor), each round running every cell in a random order so the pairs compared share the machine's
state; its runs' transactions a second read back from the store, and each script's ratio of the two
placements per round and its median."""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scipy import stats

SCRIPTS = ("tpcb-like", "select-only")

EXPERIMENT = """
name = "{name}"
engine = "postgres"
repetitions = {rounds}
# The data and the WAL on one placement: both on the first, or both on the second.
exclude = [{{ data_on = "{first}", log_on = "{second}" }}, {{ data_on = "{second}", log_on = "{first}" }}]

[placements]
{placements}

[layout]
data_on = ["{first}", "{second}"]
log_on = ["{first}", "{second}"]

[workload]
kind = "pgbench"
script = ["tpcb-like", "select-only"]
scale = {scale}
clients = {clients}
duration_s = {seconds}
"""


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options every paired-cell benchmark takes; a benchmark adds its own."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--image-dir", default="/var/tmp/storlab/img")
    return parser


def run(name: str, placements: str, pair: tuple[str, str], args: argparse.Namespace) -> Path:
    """The results folder of one `storlab run` comparing the placements `pair` (their TOML lines in
    `placements`), in a new folder under /var/tmp; SystemExit with storlab's last words if it fails."""
    experiment = EXPERIMENT.format(name=name, rounds=args.rounds, placements=placements, first=pair[0],
                                   second=pair[1], scale=args.scale, clients=args.clients, seconds=args.seconds)
    work = Path(tempfile.mkdtemp(prefix=f"storlab-{name}-", dir="/var/tmp"))
    work.chmod(0o755)  # the servers' OS user reaches the results' neighbours, not the results
    path = work / f"{name}.toml"
    path.write_text(experiment)
    done = subprocess.run([sys.executable, "-m", "storlab", "run", str(path), "--out", str(work / "r"), "--no-trace"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"storlab run failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return work / "r"


def transactions(results: Path) -> list[tuple[dict, int, float, dict]]:
    """Each run's (its cell's factors, its round, its transactions a second, its conditions)."""
    with sqlite3.connect(results / "storlab.sqlite") as db:
        rows = db.execute("SELECT c.factors, r.repetition, f.value, r.conditions FROM figures f "
                          "JOIN runs r ON r.id = f.run_id JOIN cells c ON c.id = r.cell_id "
                          "WHERE f.name = 'transactions_per_s' ORDER BY r.repetition").fetchall()
    return [(json.loads(factors), rnd, value, json.loads(conditions)) for factors, rnd, value, conditions in rows]


def interval(ratios: list[float]) -> str:
    """The ratios' geometric mean and its 95 % interval (t on the log ratios: a round's pair shares the
    machine's mood, and effects multiply)."""
    logs = [math.log(x) for x in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return f"geometric mean {math.exp(mean):.3f}"
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"geometric mean {math.exp(mean):.3f} [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}] (95 % CI)"


def compare(results: Path, pair: tuple[str, str], each=None) -> None:
    """Print each script's transactions a second per round on both placements, the ratio second /
    first per round and its median; `each(script)`, if given, prints a line more under each script."""
    tps: dict[tuple[str, str], dict[int, float]] = {}
    for f, rnd, value, _ in transactions(results):
        tps.setdefault((f["workload.script"], f["layout.data_on"]), {})[rnd] = value
    first, second = pair
    for script in SCRIPTS:
        a, b = tps[(script, first)], tps[(script, second)]
        ratios = [b[r] / a[r] for r in sorted(a) if r in b]
        print(f"{script:12} {first:7} " + "  ".join(f"{a[r]:8,.0f}" for r in sorted(a)))
        print(f"{'':12} {second:7} " + "  ".join(f"{b[r]:8,.0f}" for r in sorted(b)))
        print(f"{'':12} {second} / {first}: " + ", ".join(f"{x:.3f}" for x in ratios) +
              f"; median {statistics.median(ratios):.3f}; {interval(ratios)}")
        if each is not None:
            each(script)
    print(f"results: {results}")
