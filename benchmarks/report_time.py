"""How long does `storlab report` take on a store, and how many times does it draw each chart?

Writes the report of a copy of STORE with this checkout's storlab and, paired in the same run, with the
storlab of a second checkout (--against, e.g. a worktree of an earlier commit), alternately, each in a
process of its own so neither warms the other's caches. Prints each side's median wall time of
`report.write` (imports excluded), its figure draws (matplotlib Figure.draw calls, which savefig makes
too) per chart, and the ratio this / against.

    .venv/bin/python benchmarks/report_time.py results/quickstart [--against ../before] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
# Run inside the checkout being measured: its storlab is the one imported (PYTHONPATH first).
ONE_REPORT = """
import json, sys, time
from pathlib import Path
from matplotlib.figure import Figure
from storlab.report import page
from storlab.results.store import Store

draws, figures = 0, set()
draw = Figure.draw
def counted(self, renderer):
    global draws
    draws += 1
    figures.add(id(self))
    return draw(self, renderer)
Figure.draw = counted
with Store.open(Path(sys.argv[1]), create=False) as store:
    started = time.perf_counter()
    page.write(store)
    seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "draws": draws, "charts": len(figures)}))
"""


def one(checkout: Path, store: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", ONE_REPORT, str(store)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"}, cwd=checkout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the report with {checkout} failed: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="a results folder (it is copied; the original is not written)")
    parser.add_argument("--against", type=Path, help="a second checkout to pair against")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sides = {"this": CHECKOUT} | ({"against": args.against.resolve()} if args.against else {})
    found: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for side in sides:
            shutil.copytree(args.store, Path(tmp) / side, ignore=shutil.ignore_patterns("*.png", "report.html"))
        for _ in range(args.rounds):
            for side, checkout in sides.items():
                found[side].append(one(checkout, Path(tmp) / side))
    medians = {}
    for side, runs in found.items():
        medians[side] = statistics.median(r["seconds"] for r in runs)
        last = runs[-1]
        print(f"{side} ({sides[side]}): report.write {medians[side]:.2f} s median of {len(runs)} "
              f"(min {min(r['seconds'] for r in runs):.2f}, max {max(r['seconds'] for r in runs):.2f}); "
              f"{last['draws']} figure draws for {last['charts']} charts ({last['draws'] / max(last['charts'], 1):.1f} each)")
    if "against" in medians:
        print(f"ratio this / against: {medians['this'] / medians['against']:.2f}")


if __name__ == "__main__":
    main()
