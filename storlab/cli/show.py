"""The answer in the terminal: `storlab show`, `storlab waits` and `storlab compare`, from a results
folder or a shared store."""

from __future__ import annotations

import click

from storlab.cli import options
from storlab.errors import UserError


@click.command("show")
@options.read_from
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON (docs/answer-json.md; its "
                                                      "schema: storlab schema --answer).")
@click.option("--details", is_flag=True, help="Also the workload's figures and the runs in the ranking, the interactions "
                                              "that are not significant, the noise, each cell a race dropped, and every "
                                              "sentence behind the warnings: each cell's noise and the noise split, each "
                                              "run's steady state and checkpoints, the IO caps, buckets and memory limits, "
                                              "what every run started from, the machine, the probes' cost.")
def show_command(folder: str | None, dsn: str | None, experiment: str | None, as_json: bool, details: bool) -> None:
    """The answer on one screen: what each factor does (each level against its reference, with its
    verdict) and the interactions that matter, then one row per cell, mean ± 95 % CI, the best cell, and
    one line per kind of warning naming the cells it concerns (the sentences behind them: --details)."""
    from storlab.show import terminal

    if as_json and details:
        raise UserError("--details: --json holds every detail already; give one of them")
    answer = options.answer(folder, dsn, experiment)
    if as_json:
        click.echo(answer.model_dump_json(indent=2))
        return
    terminal.show(answer, options.console(), details)


@click.command("waits")
@options.read_from
@click.option("--cell", help="One cell's id (or a unique prefix).")
@click.option("--resources", is_flag=True, help="Also who waits on what: each top wait's resources and their share, "
                                               "and every traced lock wait by relation (PostgreSQL, bpftrace).")
@click.option("--files", is_flag=True, help="Also the IO of each file of the instance: reads, writes, bytes, stalls "
                                           "(PostgreSQL: reads per relation counted by the server, timed in runs made "
                                           "with --trace-reads; writes in runs made with --trace-io).")
def waits_command(folder: str | None, dsn: str | None, experiment: str | None, cell: str | None, resources: bool,
                  files: bool) -> None:
    """Wait statistics per cell: top 95 %, the seeds' columns; --resources adds the waiting tasks and
    traced lock waits, --files the IO per file."""
    from storlab.show import terminal, traced

    answer = options.answer(folder, dsn, experiment)
    console = options.console()
    terminal.waits(answer, console, cell, resources)
    traced.show(answer, console, cell, resources, files)


@click.command("compare")
@options.read_from
@click.option("--baseline", help="The cell to compare against (default: the first cell).")
def compare_command(folder: str | None, dsn: str | None, experiment: str | None, baseline: str | None) -> None:
    """% change in elapsed time between cells, and whether it is significant."""
    from storlab.answer.compose import comparison
    from storlab.show import terminal

    terminal.compare(comparison(options.results(folder, dsn, experiment), baseline), options.console())
