"""`storlab run`: every cell of an experiment into a results folder, or queued in a shared store and
run here beside its workers; then the answer."""

from __future__ import annotations

from pathlib import Path

import click

from storlab.cli import options
from storlab.errors import RunFailed, UserError

_ALLOW_CLIENT_PROGRAMS = ("Take client scripts that run a program on this machine (pgbench's \\shell and \\setshell; "
                          "refused otherwise). The program runs as the OS user storlab-client (never root), in the run's "
                          "control group, and is ended with the run; still, whoever wrote the experiment then runs code "
                          "on this machine: give it only to an experiment you trust. Not with --store (a fleet's workers "
                          "never take such scripts).")
_NOT_WITH_STORE = ("{option}: only into a results folder; a shared store's experiments are run by its workers too, and a "
                   "worker never takes {what}")


@click.command("run")
@click.argument("experiment_file")
@click.option("--out", callback=options.out_folder, help="Results folder (default results/<name>).")
@click.option("--store", "dsn", callback=options.store_dsn, metavar="DSN",
              help="Record into a shared PostgreSQL store instead (postgresql://USER@HOST/DB): the plan is "
                   "queued there and run here, beside any workers.")
@click.option("--host", help="With --store: the host this machine goes by (default its name).")
@click.option("--dry-run", is_flag=True, help="Print the cells and the planned runs (a screening's design: what each main effect is aliased with, its runs against the full factorial's), run nothing.")
@click.option("--keep", is_flag=True, help="Keep each instance's directories after its run (stopped).")
@click.option("--race", is_flag=True,
              help="Race the cells (as race = true in the file): after each round of repetitions, cells "
                   "clearly worse than the best get no more runs.")
@click.option("--until-settled", is_flag=True,
              help='Stop once every factor is different or equivalent (as until = "settled" in the file): '
                   "repetitions = N becomes at most N rounds.")
@options.traces
@click.option("--allow-server-programs", is_flag=True,
              help="Take engine_settings that run a program or load a library on the server (archive_command, "
                   "restore_command, shared_preload_libraries, dynamic_library_path, plugin_load, ...; refused "
                   "otherwise). WARNING: whoever wrote the experiment then runs code as the servers' OS user on "
                   "this machine, which may outlive the run: give it only to an experiment you trust. Not with "
                   "--store (a fleet's workers never take such settings); include files are refused even so.")
@click.option("--allow-client-programs", is_flag=True, help=_ALLOW_CLIENT_PROGRAMS)
def run_command(experiment_file: str, out: Path | None, dsn: str | None, host: str | None, dry_run: bool, keep: bool,
                race: bool, until_settled: bool, no_trace: bool, trace_io: bool, trace_reads: bool,
                allow_server_programs: bool, allow_client_programs: bool) -> None:
    """Run (or resume) every cell x repetition of EXPERIMENT_FILE, then print the answer.
    Everything is checked before anything starts (also with --dry-run): the file, the placements,
    engine_settings against the installed engine, and each placement's free space. A results folder
    takes one run at a time: a second one into it is refused (run in parallel with --store)."""
    from storlab.results import folder_lock
    from storlab.running import fleet, plan, runner
    from storlab.show import terminal

    tracing = options.tracing(no_trace, trace_io, trace_reads)
    if allow_server_programs and dsn is not None:
        raise UserError(_NOT_WITH_STORE.format(option="--allow-server-programs",
                                               what="settings that run programs or load libraries"))
    if allow_client_programs and dsn is not None:
        raise UserError(_NOT_WITH_STORE.format(option="--allow-client-programs",
                                               what="client scripts that run programs"))
    exp = options.load(experiment_file, race, until_settled, allow_server_programs, allow_client_programs)
    console = options.console()
    if dsn is not None:
        if out is not None:
            raise UserError("--out: give a results folder or --store, not both")
        if dry_run:
            raise UserError("--dry-run: works on a results folder; with --store, storlab submit queues the plan and says what it holds")
        outcome = fleet.run_here(exp, dsn, fleet.check_host(host or fleet.this_host()), keep, options.say(console),
                                 tracing)
        console.print()
        terminal.show(options.answer(None, dsn, exp.name), console)
        if outcome.failed:
            raise RunFailed(f"{len(outcome.failed)} runs failed; run the same command again to retry them")
        return
    if host is not None:
        raise UserError("--host: only with --store (a results folder is this machine's)")
    folder = out or options.results_folder(plan.default_folder(exp), "the results folder")
    if dry_run:
        for line in plan.describe_plan(exp, folder):
            console.print(line, markup=False)
        return
    if exp.model.hosts:
        raise UserError(f"{exp.where(('hosts',))}: hosts: a results folder is one machine's; put the experiment in "
                        "a shared store (storlab submit FILE --store DSN) and start storlab worker on each host")
    with folder_lock.writing(folder):  # one writer per results folder
        outcome = runner.run(exp, folder, keep, console, tracing)
    console.print()
    terminal.show(options.answer(str(folder)), console)
    console.print(f"results: {folder}  (storlab report {folder} writes the HTML report)", markup=False)
    if outcome.failed:
        raise RunFailed(f"{len(outcome.failed)} runs failed; run the same command again to retry them")
