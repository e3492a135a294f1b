"""How much of `storlab run` is the workload, and how much is storlab setting up and tearing down?

Runs the quickstart experiment (examples/quickstart.toml) end to end into a fresh results folder on
PostgreSQL, and the same experiment on MariaDB (its engine_settings left out: they are PostgreSQL's),
then prints, for each, the wall time, the time inside the workload (the sum of the runs' elapsed
times: first transaction start to last commit) and its share of the wall time, and the seconds of
set-up and tear-down per run (provision from the template, prepare, checkpoint, sync, page cache,
probes, stop, removal, recording). --no-trace runs it as `storlab run --no-trace` does (no bpftrace):
the difference is what the traces cost around the load (on PostgreSQL one bpftrace kept for the whole
invocation: it compiles and attaches once, then each run sets its filter and reads and clears the
maps).

    .venv/bin/python benchmarks/setup_overhead.py [--engines postgres,mariadb] [--experiment examples/quickstart.toml] [--no-trace]
"""

from __future__ import annotations

import argparse
import io
import re
import tempfile
import time
from pathlib import Path

from rich.console import Console

from storlab.experiment import file as experiment
from storlab.probes.bpftrace import Tracing
from storlab.results.store import Store
from storlab.running import runner


def measure(path: Path, engine: str, tracing: Tracing) -> str:
    text = path.read_text()
    if engine != "postgres":
        text = re.sub(r'engine = "postgres"', f'engine = "{engine}"', text)
        text = re.sub(r"\[engine_settings\][^\[]*", "", text)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text)
        exp = experiment.load(copy)
        folder = Path(tmp) / "results"
        began = time.monotonic()
        runner.run(exp, folder, keep=False, console=Console(file=io.StringIO()), tracing=tracing)
        wall = time.monotonic() - began
        with Store.open(folder, create=False) as store:
            runs = store.runs()
    inside = sum(r.figures["elapsed_s"] for r in runs)
    return (f"{engine:8}: {len(runs)} runs in {wall:.1f} s, {inside:.1f} s inside the workload: "
            f"{100 * inside / wall:.1f} % of the wall time; set-up and tear-down {(wall - inside) / len(runs):.2f} s per run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="postgres,mariadb")
    parser.add_argument("--experiment", default=str(Path(__file__).parent.parent / "examples" / "quickstart.toml"))
    parser.add_argument("--no-trace", action="store_true", help="Without bpftrace, as storlab run --no-trace.")
    args = parser.parse_args()
    for engine in args.engines.split(","):
        print(measure(Path(args.experiment), engine, Tracing.OFF if args.no_trace else Tracing.ON), flush=True)


if __name__ == "__main__":
    main()
