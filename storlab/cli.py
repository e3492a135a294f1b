"""The storlab command: thin wrappers over plain functions, which tests call directly."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
from rich.console import Console

from storlab.errors import RunFailed, UserError


class _Group(click.Group):
    """Turns the lab's two error kinds into one line and an exit code, never a traceback."""

    def invoke(self, ctx: click.Context):
        # A polite kill (SIGTERM) takes the same path as Ctrl-C: servers stopped, finished runs kept.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"storlab: {exc}", err=True)
            sys.exit(exc.exit_code)
        except RunFailed as exc:
            click.echo(f"storlab: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("storlab: interrupted; finished runs are kept, run the same command to resume", err=True)
            sys.exit(130)


@click.group(cls=_Group)
@click.version_option(package_name="storlab")
def main() -> None:
    """A storage lab for databases: run one workload under many storage layouts on a real
    PostgreSQL or MariaDB, explain the numbers with wait statistics, and show the answer."""


def _console() -> Console:
    # Piped output gets rich's default 80 columns, too narrow for the ranking: give it room.
    probe = Console()
    return Console(highlight=False, width=None if probe.is_terminal else 160)


# -- device and machine commands (storlab check, storlab io) ---------------------------------


def _placement_path(text: str) -> Path:
    """A directory, or the placement word "tmpfs" (the RAM disk an experiment's placement names)."""
    from storlab.experiment import TMPFS, TMPFS_ROOT

    path = TMPFS_ROOT if text == TMPFS else Path(text)
    if not path.exists():
        raise UserError(f"{text}: no such file or directory")
    return path


@main.command("check")
@click.argument("targets", nargs=-1, metavar="[PLACEMENT_OR_PATH]...")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_command(targets: tuple[str, ...], as_json: bool) -> None:
    """Is this machine fit to benchmark? CPU power saving, memory, and the device behind each path.
    Exit 0 when fit, 2 when a warning would distort results."""
    import json

    from storlab import system

    report = system.check([_placement_path(t) for t in targets])
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console = _console()
        for line in system.render(report):
            console.print(line, markup=False)
    if not report.fit:
        click.get_current_context().exit(2)


@main.command("io")
@click.argument("target", metavar="PLACEMENT_OR_PATH")
@click.option("--preset", default="sqlio", show_default=True, help="The job matrix (sqlio: seed 004's).")
@click.option("--size", default="256M", show_default=True, help="Test file size.")
@click.option("--duration", default="10s", show_default=True, help="Time per job.")
@click.option("--buffered", is_flag=True, help="Through the page cache instead of direct IO.")
@click.option("--out", type=click.Path(file_okay=False), help="Results folder (default results/io-<path>).")
def io_command(target: str, preset: str, size: str, duration: str, buffered: bool, out: str | None) -> None:
    """Raw capability of the device behind PLACEMENT_OR_PATH: IOPS, MB/s and latency per job (fio)."""
    from storlab import iobench, system
    from storlab.store import Store

    jobs = iobench.preset(preset, buffered)
    size_bytes, seconds = iobench.parse_size(size), iobench.parse_duration(duration)
    path = _placement_path(target)
    console = _console()
    facts = system.collect_facts([path])
    results = iobench.run(path, jobs, size_bytes, seconds, console)
    folder = Path(out) if out else iobench.default_folder(path)
    with Store.open(folder) as store:
        store.record_io(results, target=str(path), facts=facts, comparable=system.comparable(facts))
    console.print(iobench.table(results))
    for line in iobench.flag_lines(results):
        console.print(line, markup=False)
    console.print(f"results: {folder}")


# -- experiment commands ---------------------------------------------------------------------


def _load(path: str):
    from storlab import experiment

    return experiment.load(path)


def _results(folder: str):
    from storlab import analysis
    from storlab.store import Store

    with Store.open(Path(folder), create=False) as store:
        return analysis.load(store)


@main.command()
@click.argument("experiment_file", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), help="Results folder (default results/<name>).")
@click.option("--dry-run", is_flag=True, help="Print the cells and the planned runs, run nothing.")
@click.option("--keep", is_flag=True, help="Keep each instance's directories after its run (stopped).")
def run(experiment_file: str, out: str | None, dry_run: bool, keep: bool) -> None:
    """Run (or resume) every cell x repetition of EXPERIMENT_FILE, then print the answer."""
    from storlab import answer, runner

    exp = _load(experiment_file)
    folder = Path(out) if out else runner.default_folder(exp)
    console = _console()
    if dry_run:
        for line in runner.describe_plan(exp, folder):
            console.print(line)
        return
    outcome = runner.run(exp, folder, keep, console)
    console.print()
    answer.show(_results(str(folder)), console)
    console.print(f"results: {folder}  (storlab report {folder} writes the HTML report)")
    if outcome.failed:
        raise RunFailed(f"{len(outcome.failed)} runs failed; run the same command again to retry them")


@main.command()
@click.argument("folder", type=click.Path())
def show(folder: str) -> None:
    """The answer: one row per cell, mean elapsed ± 95 % CI, the best cell."""
    from storlab import answer

    answer.show(_results(folder), _console())


@main.command()
@click.argument("folder", type=click.Path())
@click.option("--cell", help="One cell's id (or a unique prefix).")
def waits(folder: str, cell: str | None) -> None:
    """Wait statistics per cell: top 95 %, the seeds' columns."""
    from storlab import answer

    answer.waits(_results(folder), _console(), cell)


@main.command()
@click.argument("folder", type=click.Path())
@click.option("--baseline", help="The cell to compare against (default: the first cell).")
def compare(folder: str, baseline: str | None) -> None:
    """% change in elapsed time between cells, and whether it is significant."""
    from storlab import answer

    answer.compare_cells(_results(folder), _console(), baseline)


@main.command()
@click.argument("folder", type=click.Path())
def report(folder: str) -> None:
    """Write FOLDER/report.html: one self-contained file with every chart."""
    from storlab import report as html_report
    from storlab.store import Store

    with Store.open(Path(folder), create=False) as store:
        path = html_report.write(store)
    click.echo(f"wrote {path}")


@main.command()
def clean() -> None:
    """Stop and remove whatever a crashed or interrupted run left behind."""
    from storlab import instances

    cleaned = instances.clean(only_orphans=False)
    for item in cleaned:
        what = "stopped and removed" if item.stopped else "removed"
        click.echo(f"{item.instance_id}: {what} {', '.join(item.removed) or 'nothing'}")
        for path in item.refused:
            click.echo(f"{item.instance_id}: left {path} (it has no storlab marker for this instance)")
    if not cleaned:
        click.echo("nothing to clean")


@main.command()
@click.argument("folder", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
def export(folder: str, fmt: str) -> None:
    """Write FOLDER/runs.csv or runs.json: one row per run, factors as columns."""
    from storlab import export as exporter
    from storlab.store import Store

    with Store.open(Path(folder), create=False) as store:
        click.echo(f"wrote {exporter.write(store, fmt)}")
