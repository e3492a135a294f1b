"""The work of a fleet's workers around a shared store: `storlab submit` queues an experiment's plan,
`storlab worker` claims its runs and runs them on this host."""

from __future__ import annotations

import click

from storlab.cli import options
from storlab.errors import UserError

_STORE_HELP = ("The shared PostgreSQL store (postgresql://USER@HOST/DB; the password from ~/.pgpass, PGPASSWORD "
               "or a service file).")


def _seconds(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A number of seconds in the digits 0 to 9 (Python's float() reads "５" as 5 and "1_0" as 10)."""
    try:
        if value.isascii() and "_" not in value:
            return float(value)
    except ValueError:
        pass
    raise UserError(f"{param.opts[0]} {value[:64]!r}: expected a number of seconds, such as 60")


@click.command("submit")
@click.argument("experiment_file")
@click.option("--store", "dsn", required=True, callback=options.store_dsn, metavar="DSN", help=_STORE_HELP)
def submit_command(experiment_file: str, dsn: str) -> None:
    """Put EXPERIMENT_FILE's plan in a shared store, for the workers: every run not queued yet (and
    failed runs again). Its placements and engine are checked by each worker, on its own host."""
    from storlab.experiment import file as experiment
    from storlab.results import shared_store
    from storlab.running import fleet

    exp = experiment.load(experiment_file, check_placements=False)
    with shared_store.open(dsn, exp.name, create=True, purpose="submit") as store:
        click.echo(fleet.submit(exp, store).line(exp.name))


@click.command("worker")
@click.option("--store", "dsn", required=True, callback=options.store_dsn, metavar="DSN", help=_STORE_HELP)
@click.option("--host", help="The host this worker runs for (default this machine's name).")
@click.option("--experiment", help="Take only this experiment's runs.")
@click.option("--lease", "lease_s", callback=_seconds, default="60", show_default=True, metavar="SECONDS",
              help="Seconds a claim lasts unless renewed (3 to 86400): a dead worker's run goes back to the queue after it.")
@click.option("--until-done", is_flag=True,
              help="Stop once every run this worker may take is recorded; with --experiment, fail if it refuses that one.")
@click.option("--keep", is_flag=True, help="Keep each instance's directories after its run (stopped).")
@options.traces
def worker_command(dsn: str, host: str | None, experiment: str | None, lease_s: float, until_done: bool, keep: bool,
                   no_trace: bool, trace_io: bool, trace_reads: bool) -> None:
    """Claim runs from a shared store, run them on this host (relative placements are relative to
    the working folder), and record each with this host's name and machine facts. Takes only runs it
    can run: its engine installed, the settings accepted, its placements there or made."""
    from storlab.running import fleet

    work = fleet.WorkerOptions(fleet.check_host(host or fleet.this_host()), experiment, lease_s, until_done, keep,
                               options.tracing(no_trace, trace_io, trace_reads))
    outcome = fleet.work(dsn, work, options.say(options.console()))
    if until_done:
        click.echo(f"{work.host}: {outcome.finished} runs recorded, {len(outcome.failed)} failed, {outcome.lost} given up")
