"""Does racing reach the full matrix's answer with half its runs?

Runs one real 16-cell matrix twice on PostgreSQL: every cell 5 times (the full matrix), and as a race
from 2 to 5 rounds. The cells: random inserts in 10-row transactions, the log on the disk or on a RAM
disk, 1 to 8 connections each inserting the same rows (so the work, and the time, differ from cell to
cell; one cell is clearly best). Prints the best cell of each and how many runs each took; the goal is
at most half (the race's paired evidence drops clearly worse cells after round 2).

    .venv/bin/python benchmarks/racing.py [--rows 1500]
"""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

from rich.console import Console

from storlab.answer import analysis
from storlab.experiment import file as experiment
from storlab.results.store import Store
from storlab.running import runner

EXPERIMENT = """
name = "racing"
engine = "postgres"
{repetitions}

[placements]
disk = "/var/tmp/storlab/benchmarks"
ram = "tmpfs"

[layout]
data_on = "disk"
log_on = ["disk", "ram"]

[workload]
kind = "random-insert"
connections = [1, 2, 3, 4, 5, 6, 7, 8]
rows_per_connection = {rows}
batch = 10
"""


def answer(text: str, tmp: Path, name: str) -> tuple[str, int, list[str]]:
    path = tmp / f"{name}.toml"
    path.write_text(text)
    folder = tmp / name
    runner.run(experiment.load(path), folder, keep=False, console=Console(file=io.StringIO()))
    with Store.open(folder, create=False) as store:
        results = analysis.load(store)
    best = results.ranking()[0].result.cell.label
    notes = [f"  dropped {d.cell} {d.evidence}" for d in results.race.drops] if results.race else []
    return best, sum(len(c.runs) for c in results.cells), notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1500, help="rows per connection")
    args = parser.parse_args()
    Path("/var/tmp/storlab/benchmarks").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        full_best, full_runs, _ = answer(EXPERIMENT.format(repetitions="repetitions = 5", rows=args.rows), Path(tmp), "full")
        print(f"full matrix: best {full_best}, {full_runs} runs", flush=True)
        race_best, race_runs, notes = answer(
            EXPERIMENT.format(repetitions="race = true\nrepetitions = { min = 2, max = 5 }", rows=args.rows), Path(tmp), "race")
        print(f"race:        best {race_best}, {race_runs} runs")
        print("\n".join(notes))
    print(f"same best cell: {'yes' if race_best == full_best else 'NO'}; the race took {race_runs} of {full_runs} runs "
          f"({100 * race_runs / full_runs:.0f} %; the goal is at most 50 %)")


if __name__ == "__main__":
    main()
