"""What the commands share: the options several take (--out, --store, the traces), where a command
finds its results and puts its files, and the console it prints to. Each helper imports what it needs
when it runs, as the commands do, so `storlab --help` loads neither rich nor the lab."""

from __future__ import annotations

from pathlib import Path

import click

from storlab.errors import UserError


def console():
    """A rich Console; piped output gets rich's default 80 columns, too narrow for the ranking: give it room."""
    from rich.console import Console

    probe = Console()
    return Console(highlight=False, width=None if probe.is_terminal else 160)


def say(to):
    """A line of a run's or a worker's log, printed to the console `to` as it is: never markup, never
    wrapped (a refusal a script greps for stays one line)."""
    return lambda line: to.print(line, markup=False, soft_wrap=True)


def out_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """--out: a folder name, never the empty one (which would mean the working folder)."""
    if value is None:
        return None
    if not value.strip():
        raise UserError("--out: an empty folder name; give a folder, or leave --out out")
    return results_folder(Path(value), "--out")


def results_folder(folder: Path, named: str) -> Path:
    """A folder storlab writes results into (--out, or a default under the working folder), checked
    before anything is made: not a system or shared folder (storlab may run as root: a run once wrote
    /storlab.sqlite), one that can be a folder, and as root one that only root can change."""
    from storlab.lab.placements import foreign_results_folder, results_folder_problem
    from storlab.results.folder_store import check_folder

    problem = results_folder_problem(folder)
    if problem:
        raise UserError(f"{named}: {problem}")
    check_folder(folder)
    problem = foreign_results_folder(folder)
    if problem:
        raise UserError(f"{named}: {problem}")
    return folder


def load(path: str, race: bool = False, until_settled: bool = False, allow_server_programs: bool = False,
         allow_client_programs: bool = False):
    """The experiment file at `path`, checked (storlab.experiment.file)."""
    from storlab.experiment import file as experiment

    return experiment.load(path, race, until_settled=until_settled, allow_server_programs=allow_server_programs,
                           allow_client_programs=allow_client_programs)


# -- a shared store ----------------------------------------------------------------------------


def store_dsn(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--store: a PostgreSQL connection string without a password (never echoed back)."""
    if value is None:
        return None
    from storlab.results.shared_store import check_dsn

    return check_dsn(value)


def read_from(command):
    """FOLDER, or --store DSN with --experiment NAME: where a read command finds its results."""
    command = click.option("--experiment", help="With --store: the experiment's name (needed when the store holds several).")(command)
    command = click.option("--store", "dsn", callback=store_dsn, metavar="DSN",
                           help="A shared PostgreSQL store (postgresql://USER@HOST/DB) instead of a results folder.")(command)
    return click.argument("folder", required=False, type=click.Path())(command)


def opened(folder: str | None, dsn: str | None, experiment: str | None, out: Path | None = None):
    """The results store a read command names (read-only)."""
    from storlab.results import shared_store
    from storlab.results.store import Store

    if dsn is None:
        if folder is None:
            raise UserError("give a results folder, or --store DSN")
        if experiment is not None:
            raise UserError("--experiment: only with --store (a results folder holds one experiment)")
        if out is not None:
            raise UserError("--out: only with --store (files go beside a results folder's store)")
        return Store.open(Path(folder), create=False)
    if folder is not None:
        raise UserError(f"{folder}: give a results folder or --store, not both")
    return shared_store.open(dsn, experiment, create=False)


def beside(store, out: Path | None) -> None:
    """Where a shared store's report and export go: --out, or results/<experiment name>."""
    if store.folder is None:
        stored = store.experiment()
        store.folder = out or results_folder(Path("results") / (stored.name if stored is not None else "store"),
                                             "the folder for its files")
        try:
            store.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{store.folder}: cannot make the folder: {exc.strerror}") from None


def results(folder: str | None, dsn: str | None = None, experiment: str | None = None, io: list[Path] | None = None):
    """`io`: as analysis.load takes it (None: no `storlab io` results read)."""
    from storlab.answer import analysis

    with opened(folder, dsn, experiment) as store:
        return analysis.load(store, io)


def answer(folder: str | None, dsn: str | None = None, experiment: str | None = None):
    """The whole answer, the devices `storlab io` measured in the folder or beside it included."""
    from storlab.answer.compose import compose

    return compose(results(folder, dsn, experiment, io=[]))


# -- the traces around a run (storlab run, storlab worker) -------------------------------------


_NO_TRACE = ("Run without bpftrace: the sampled waits only (no wait counts, traced lock waits or traced IO per "
             "file; PostgreSQL's reads per relation are still counted by the server), IO sizes as averages.")
_TRACE_IO = ("Also trace every LWLock wait and each file's writes and syncs (PostgreSQL: LWLock wait counts, "
             "writes and write stalls per file, and in a temp_on cell the temporary files' reads; about 3 % of the "
             "server's CPU on a CPU-bound load, so off unless asked for).")
_TRACE_READS = ("Also trace every read of a data file, and all --trace-io traces (PostgreSQL: read stalls and "
                "their histogram per file, where the server's own counts give reads per relation untimed; on a "
                "cold scan it made one 16 to 29 % slower, so it is off unless asked for).")


def traces(command):
    """--no-trace, --trace-io and --trace-reads."""
    command = click.option("--trace-reads", is_flag=True, help=_TRACE_READS)(command)
    command = click.option("--trace-io", is_flag=True, help=_TRACE_IO)(command)
    return click.option("--no-trace", is_flag=True, help=_NO_TRACE)(command)


def tracing(no_trace: bool, trace_io: bool, trace_reads: bool):
    """What bpftrace traces around each run, from the three options."""
    from storlab.probes.bpftrace import Tracing

    more = "--trace-reads" if trace_reads else "--trace-io" if trace_io else None
    if no_trace and more:
        raise UserError(f"{more}: --no-trace turns every trace off; give one or the other")
    return Tracing.OFF if no_trace else Tracing.READS if trace_reads else Tracing.IO if trace_io else Tracing.ON
