"""How long until the quickstart's answer is settled, and how many runs pairing by round saves.

Runs examples/quickstart.toml (`until = "settled"`) end to end on PostgreSQL into a fresh results folder,
then prints the wall time, the rounds and runs it took, why it stopped, and the factor table. From those
runs it measures the noise: the run-to-run spread once each round's drift is taken out (the residual CV)
and the share of the spread that is the round's (the correlation of two cells' runs in one round). For
that noise it prints how many runs per cell tell a 10 % and a 5 % difference from none at 80 % power
and a 5 % level: unpaired (two-sample t-test on all the spread, storlab's cell-by-cell analysis before
the rounds were paired) and paired by round (the t-test of the within-round differences).

It also says, look by look, what the answer was after each round (when each factor was first decided).
`--folder DIR` reads the runs of a results folder instead of running anything.

    .venv/bin/python benchmarks/time_to_answer.py [--experiment examples/quickstart.toml] [--folder DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from statsmodels.stats.power import TTestIndPower, TTestPower

from storlab.answer import analysis
from storlab.answer.compose import compose, status_line
from storlab.answer.stats import ALPHA, POWER
from storlab.experiment import file as experiment
from storlab.results.store import Store
from storlab.running import runner
from storlab.show import terminal

DIFFERENCES = (0.10, 0.05)


def noise(results: analysis.Results) -> tuple[float, float, float]:
    """(total sd of a run's log, residual sd once cells and rounds are taken out, the round's share of
    the variance: the correlation of two cells' runs in one round), from the complete rounds."""
    cells = [c for c in results.measured if c.runs]
    values = results.paired_values()
    rounds = sorted(set.intersection(*(set(values[c.cell.id]) for c in cells)))
    y = np.log([[values[c.cell.id][r] for c in cells] for r in rounds])  # rounds x cells
    centred = y - y.mean(axis=0)
    round_means = centred.mean(axis=1)
    residual = centred - round_means[:, None]
    k, r = y.shape[1], y.shape[0]
    resid_var = float((residual**2).sum() / ((r - 1) * (k - 1)))
    round_var = max(0.0, float(round_means.var(ddof=1)) - resid_var / k)
    total = round_var + resid_var
    return math.sqrt(total), math.sqrt(resid_var), round_var / total if total else 0.0


def looks(results: analysis.Results) -> list[str]:
    """The answer as it stood after each round from the first look on, replayed from the runs."""
    settling = results.settling
    first = settling.min_rounds if settling else 2
    lines = []
    for rnd in range(first, results.rounds + 1):
        cells = [dataclasses.replace(c, runs=[r for r in c.runs if r.repetition <= rnd]) for c in results.cells]
        then = dataclasses.replace(results, cells=cells)
        then.answer = analysis.factor_answer(then)
        lines.append(f"  after round {rnd}: {analysis.verdicts_line(then)}")
    return lines


def runs_needed(sd: float, difference: float, paired: bool) -> int:
    """Runs per cell (for paired: rounds) for 80 % power at 5 %: statsmodels' t-test power solvers."""
    effect = math.log1p(difference) / sd
    solver = TTestPower() if paired else TTestIndPower()
    return math.ceil(solver.solve_power(effect_size=effect, alpha=ALPHA, power=POWER, alternative="two-sided"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", type=Path, default=Path(__file__).parent.parent / "examples" / "quickstart.toml")
    parser.add_argument("--folder", type=Path, help="Read this results folder's runs instead of running the experiment.")
    args = parser.parse_args()
    if args.folder is not None:
        with Store.open(args.folder, create=False) as store:
            results = analysis.load(store)
        wall = None
    else:
        exp = experiment.load(args.experiment, until_settled=True)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "results"
            began = time.monotonic()
            runner.run(exp, folder, keep=False, console=Console(file=io.StringIO()))
            wall = time.monotonic() - began
            with Store.open(folder, create=False) as store:
                results = analysis.load(store)
    runs = sum(len(c.runs) for c in results.cells)
    elapsed = sum(r.figures.get("elapsed_s", 0.0) for c in results.cells for r in c.runs)
    took = f"{wall:.0f} s wall time, " if wall is not None else ""
    print(f"{results.name}: {took}{runs} runs in {results.rounds} rounds "
          f"({elapsed:.0f} s of them inside the workload)")
    print(f"  {status_line(results)}")
    for line in looks(results):
        print(line)
    console = Console(width=160, highlight=False)
    if results.answer is not None:
        terminal.factor_answer(compose(results), console)
    total_sd, resid_sd, rho = noise(results)
    print(f"noise: run-to-run CV {100 * math.sqrt(math.expm1(total_sd**2)):.1f} %, "
          f"{100 * math.sqrt(math.expm1(resid_sd**2)):.1f} % once each round's drift is taken out; "
          f"correlation of two cells' runs in one round {rho:.2f}")
    paired_sd = total_sd * math.sqrt(2 * (1 - rho))
    for difference in DIFFERENCES:
        unpaired = runs_needed(total_sd, difference, paired=False)
        paired = runs_needed(paired_sd, difference, paired=True) if paired_sd > 0 else 2
        print(f"  a {100 * difference:.0f} % difference, 80 % power at 5 %: {unpaired} runs per cell unpaired, "
              f"{paired} paired by round ({unpaired / paired:.1f}x fewer)")


if __name__ == "__main__":
    main()
