"""Files written from the results: `storlab report` (the HTML page and its charts) and `storlab export`
(every table of every run as csv, json or parquet), beside a results folder's store or a shared one's."""

from __future__ import annotations

from pathlib import Path

import click

from storlab.cli import options


@click.command("report")
@options.read_from
@click.option("--out", callback=options.out_folder, help="With --store: the folder for the report (default results/<experiment>).")
@click.option("--io", "io_dirs", multiple=True, type=click.Path(),
              help="A `storlab io` results folder to show beside the database's figures (repeatable).")
@click.option("--cell", help="The cell whose median run the waits-over-time chart draws (default: the best).")
def report_command(folder: str | None, dsn: str | None, experiment: str | None, out: Path | None,
                   io_dirs: tuple[str, ...], cell: str | None) -> None:
    """Write FOLDER/report.html: one self-contained file with every chart, and a PNG of each."""
    from storlab.answer import analysis
    from storlab.answer.compose import compose
    from storlab.report import page as html_report

    with options.opened(folder, dsn, experiment, out) as store:
        options.beside(store, out)
        answer = compose(analysis.load(store, [Path(d) for d in io_dirs]), cell)
        path = html_report.write(answer, store, store.folder)
    click.echo(f"wrote {path}")


@click.command("export")
@options.read_from
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "parquet"]), default="csv", show_default=True)
@click.option("--out", callback=options.out_folder, help="With --store: the folder for the files (default results/<experiment>).")
def export_command(folder: str | None, dsn: str | None, experiment: str | None, fmt: str, out: Path | None) -> None:
    """Write every table of every run into FOLDER: the runs (one row each, factors and figures as
    columns) and each table the store keeps per run (waits, timeline and every probe's). csv: one file a
    table (runs.csv, waits.csv, timeline.csv, <table>.csv), each row with its run_id; json and parquet:
    runs.json or runs.parquet, each run with its tables' rows. Parquet's columns are typed from the
    store's schema; it needs pyarrow (pip install 'storlab[parquet]')."""
    from storlab.results import export as exporter
    from storlab.workloads import KINDS

    with options.opened(folder, dsn, experiment, out) as store:
        options.beside(store, out)
        stored = store.experiment()
        kind = KINDS.get(stored.kind or "") if stored is not None else None
        for path in exporter.write(store, fmt, [f.name for f in kind.figures] if kind is not None else None):
            click.echo(f"wrote {path}")
