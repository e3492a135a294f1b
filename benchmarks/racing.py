"""Does racing reach the full matrix's answer with half its runs?

Runs two real 16-cell matrices on PostgreSQL, each twice: every cell 5 times (the full matrix), and as a
race from 2 to 5 rounds.
- connections: random inserts in 10-row transactions, the log on the disk or on a RAM disk, 1 to 8
  connections each inserting the same rows (so the work, and the time, differ from cell to cell; one cell
  is clearly best);
- data files: 1, 2, 4 or 8 data files x the log on the disk or a RAM disk x 10 or 100 rows a transaction,
  where the number of data files does not matter: the race ends naming the four best cells, equivalent
  within the file's margin (equivalent_within, 25 % here) or not told apart once the rounds left could not
  tell them apart at the noise seen, rather than running them to the last round.
Prints, for each, the best cell of both and how many runs each took; the goal is at most half.

    .venv/bin/python benchmarks/racing.py [--rows 1500] [--only connections|data-files]
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

CONNECTIONS = """
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

DATA_FILES = """
name = "racing-data-files"
engine = "postgres"
{repetitions}
equivalent_within = "25%"

[placements]
disk = "/var/tmp/storlab/benchmarks"
ram = "tmpfs"

[layout]
data_on = "disk"
data_files = [1, 2, 4, 8]
log_on = ["disk", "ram"]

[workload]
kind = "random-insert"
connections = 4
rows_per_connection = {rows}
batch = [10, 100]
"""

CASES = {"connections": (CONNECTIONS, 1), "data-files": (DATA_FILES, 4)}  # the template, and its rows a run x this


def answer(text: str, tmp: Path, name: str) -> tuple[str, set[str], int, list[str]]:
    """The best cell's label, the labels of the cells a race left (every cell without one), the runs, the race's
    drops and end in words."""
    path = tmp / f"{name}.toml"
    path.write_text(text)
    folder = tmp / name
    runner.run(experiment.load(path), folder, keep=False, console=Console(file=io.StringIO()))
    with Store.open(folder, create=False) as store:
        results = analysis.load(store)
    best = results.ranking()[0].result.cell.label
    labels = {c.cell.id: c.cell.label for c in results.cells}
    left = {labels[c] for c in results.race.alive} if results.race else set(labels.values())
    notes = [f"  dropped {d.cell} {d.evidence}" for d in results.race.drops] if results.race else []
    notes += [f"  {results.race.finished}"] if results.race and results.race.finished else []
    return best, left, sum(len(c.runs) for c in results.cells), notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1500, help="rows per connection (the data-files case: 4 times this)")
    parser.add_argument("--only", choices=sorted(CASES), help="one of the two matrices")
    args = parser.parse_args()
    Path("/var/tmp/storlab/benchmarks").mkdir(parents=True, exist_ok=True)
    counts = []
    for case, (template, scale) in CASES.items():
        if args.only not in (None, case):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            rows = args.rows * scale
            full_best, _, full_runs, _ = answer(template.format(repetitions="repetitions = 5", rows=rows), Path(tmp), "full")
            print(f"{case}: full matrix: best {full_best}, {full_runs} runs", flush=True)
            race_best, left, race_runs, notes = answer(
                template.format(repetitions="race = true\nrepetitions = { min = 2, max = 5 }", rows=rows), Path(tmp), "race")
            print(f"{case}: race:        best {race_best}, {race_runs} runs")
            print("\n".join(notes), flush=True)
        # Cells equivalent to the best are as good an answer: the full matrix's best among the race's cells left is one.
        kept = "the same best cell" if race_best == full_best else \
            "the full matrix's best among the race's cells left" if full_best in left else "NOT the full matrix's best"
        counts.append(f"{case}: {kept}; the race took {race_runs} of {full_runs} runs "
                      f"({100 * race_runs / full_runs:.0f} %; the goal is at most 50 %)")
    print("\n".join(counts))


if __name__ == "__main__":
    main()
