"""Does the answer hold at production length? One experiment run twice: at its declared run length, and
at whole checkpoint cycles (checkpoint_timeout set to --cycle, each run's measured part --cycles of them);
prints each factor's verdicts at both lengths, whether they agree, what the runs held (steady or not,
checkpoints) and the noise split at each.

The experiment's workload must be a kind run by duration (pgbench, sysbench, replay, custom with
duration_s) on PostgreSQL: the cycle is checkpoint_timeout.

    .venv/bin/python benchmarks/run_length.py [--experiment examples/oltp-wal-rate.toml] [--cycle 30]
        [--cycles 2] [--repetitions 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from storlab.answer import analysis
from storlab.answer.compose import compose
from storlab.experiment import file as experiment
from storlab.results.store import Store
from storlab.running import runner

EXAMPLES = Path(__file__).parent.parent / "examples"


def lengthened(text: str, duration_s: int | None, cycle_s: int, repetitions: int) -> str:
    """The experiment file with its rounds, and (when given) its runs' duration and checkpoint_timeout, set."""
    text = re.sub(r"(?m)^repetitions\s*=.*$", f"repetitions = {repetitions}", text)
    if duration_s is None:
        return text
    text = re.sub(r"(?m)^duration_s\s*=.*$", f"duration_s = {duration_s}", text)
    setting = f'checkpoint_timeout = "{cycle_s}s"'
    if re.search(r"(?m)^\[engine_settings\]", text):
        return re.sub(r"(?m)^\[engine_settings\]\s*$", f"[engine_settings]\n{setting}", text)
    return text + f"\n[engine_settings]\n{setting}\n"


def run(text: str, where: Path, name: str) -> tuple[analysis.Results, float]:
    path = where / f"{name}.toml"
    path.write_text(text)
    began = time.monotonic()
    runner.run(experiment.load(path), where / name, keep=False, console=Console(file=io.StringIO()))
    with Store.open(where / name, create=False) as store:
        return analysis.load(store), time.monotonic() - began


def verdicts(results: analysis.Results) -> dict[str, str]:
    """Each level against its reference: its verdict and ratio, as the factor table says them."""
    answer = compose(results).factor_effects
    if answer is None:
        return {}
    return {f"{e.factor}={e.level}": f"{e.verdict} {e.ratio:.2f}x [{e.ci_low or 0:.2f}, {e.ci_high or 0:.2f}]"
            for e in answer.effects}


def held(results: analysis.Results) -> list[str]:
    answer = compose(results)
    lines = list(answer.steadiness.lines if answer.steadiness else [])
    if answer.noise.split is not None:
        lines.append("noise split: " + answer.noise.split.line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", type=Path, default=EXAMPLES / "oltp-wal-rate.toml")
    parser.add_argument("--cycle", type=int, default=30, help="checkpoint_timeout in seconds (30 at least)")
    parser.add_argument("--cycles", type=int, default=2, help="checkpoint cycles in each long run's measured part")
    parser.add_argument("--repetitions", type=int, default=2, help="rounds at each length")
    parser.add_argument("--keep", type=Path, help="keep both results folders here")
    args = parser.parse_args()
    text = args.experiment.read_text()
    if not re.search(r"(?m)^duration_s\s*=\s*\d+\s*$", text):
        print(f"{args.experiment}: run_length needs a workload run by one duration_s (a number)", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        short, short_wall = run(lengthened(text, None, args.cycle, args.repetitions), where, "declared")
        long, long_wall = run(lengthened(text, args.cycle * args.cycles, args.cycle, args.repetitions), where, "cycles")
    said = {}
    for name, results, wall in (("declared length", short, short_wall),
                                (f"{args.cycles} cycles of checkpoint_timeout {args.cycle}s", long, long_wall)):
        said[name] = verdicts(results)
        print(f"{results.name} at {name}: {sum(len(c.runs) for c in results.cells)} runs, {wall:.0f} s wall time")
        for level, verdict in said[name].items():
            print(f"  {level}: {verdict}")
        for line in held(results):
            print(f"  {line}")
    first, second = said.values()
    agree = [lv for lv in first if first[lv].split()[0] == second.get(lv, "").split(" ")[0]]
    print(f"verdicts agree on {len(agree)} of {len(first)} levels"
          + ("" if len(agree) == len(first) else ": differ on " + ", ".join(lv for lv in first if lv not in agree)))


if __name__ == "__main__":
    main()
