"""The storlab command: thin wrappers over plain functions, which tests call directly. Each command
imports what it needs when it runs, so `storlab --help` and the quick commands do not load the
statistics and chart libraries."""

from __future__ import annotations

import os
import signal
import stat
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from storlab import interrupts
from storlab.errors import RunFailed, UserError


class _Group(click.Group):
    """Turns the lab's two error kinds into one line and an exit code, never a traceback."""

    def invoke(self, ctx: click.Context):
        # A polite kill (SIGTERM) or a closed terminal (SIGHUP) takes the same path as Ctrl-C: servers
        # stopped, finished runs kept. SIGINT too is set here: a shell starts a background job with it
        # ignored, and Python then leaves it so; `kill -INT` must stop storlab however it was started.
        signal.signal(signal.SIGINT, interrupts.interrupt)
        signal.signal(signal.SIGTERM, interrupts.interrupt)
        signal.signal(signal.SIGHUP, _hung_up)
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


def _hung_up(signum: int, frame) -> None:
    """SIGHUP, as Ctrl-C; and what was written to a terminal that hung up now goes nowhere: each write
    to it would fail, and cut the clean-up short."""
    for fd in (1, 2):
        with suppress(OSError):
            if stat.S_ISCHR(os.fstat(fd).st_mode) and not os.isatty(fd):  # a live terminal still is one
                nowhere = os.open(os.devnull, os.O_WRONLY)
                os.dup2(nowhere, fd)
                os.close(nowhere)
    interrupts.interrupt(signum, frame)


@click.group(cls=_Group)
@click.version_option(package_name="storlab")
def main() -> None:
    """A storage lab for databases: run one workload under many storage layouts on a real
    PostgreSQL or MariaDB, explain the numbers with wait statistics, and show the answer."""


def _console() -> Console:
    # Piped output gets rich's default 80 columns, too narrow for the ranking: give it room.
    probe = Console()
    return Console(highlight=False, width=None if probe.is_terminal else 160)


def _out(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """--out: a folder name, never the empty one (which would mean the working folder)."""
    if value is None:
        return None
    if not value.strip():
        raise UserError("--out: an empty folder name; give a folder, or leave --out out")
    return _results_folder(Path(value), "--out")


def _results_folder(folder: Path, named: str) -> Path:
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


# -- device and machine commands (storlab check, storlab io) ---------------------------------


def _placement_path(text: str) -> Path:
    """A directory, or the placement word "tmpfs" (the RAM disk an experiment's placement names)."""
    from storlab.lab.placements import TMPFS, TMPFS_ROOT

    path = TMPFS_ROOT if text == TMPFS else Path(text)
    if not path.exists():
        raise UserError(f"{text}: no such file or directory")
    return path


@main.command("check")
@click.argument("targets", nargs=-1, metavar="[PLACEMENT_OR_PATH]...")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_command(targets: tuple[str, ...], as_json: bool) -> None:
    """Is this machine fit to benchmark? CPU power saving, memory, the device behind each path, and
    which PostgreSQL versions (engine_version) are installed.
    Exit 0 when fit, 2 when a warning would distort results."""
    import json

    from storlab import engines
    from storlab.machine import system
    from storlab.probes import iosizes

    report = system.check([_placement_path(t) for t in targets])
    report.items += system.engine_items([i for name in engines.names() for i in engines.engine(name).installations()])
    report.items += system.lab_items()
    report.items += system.latency_items()
    report.items += system.trace_items(iosizes.groups() + [g for name in engines.names()
                                                          for g in engines.engine(name).trace_groups()])
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console = _console()
        for line in system.render(report):
            console.print(line, markup=False)
    if not report.fit:
        click.get_current_context().exit(2)


class _VolumeOptions(click.Command):
    """`storlab io`'s options for a volume's keys, one per key with a flag, read from the registry when
    the command line is read (a property added to it has its options)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        from storlab.volume import registry

        own = super().get_params(ctx)
        return own[:-1] + [click.Option([f"--{key.flag}", key.name], metavar=key.metavar, help=key.help)
                           for _, key in registry.keys() if key.flag] + own[-1:]


@main.command("io", cls=_VolumeOptions)
@click.argument("target", metavar="PLACEMENT_OR_PATH")
@click.option("--preset", help="The job matrix: sqlio (seed 004's; the default), latency (4 KiB random reads and "
              "writes at queue depth 1 and 8; the default with a read or write latency), or commit (a log's "
              "commit: 4 and 8 KiB sequential writes each followed by fdatasync, one at a time, latency of the "
              "flush; the default with a flush latency).")
@click.option("--size", default="256M", show_default=True, help="Test file size.")
@click.option("--duration", default="10s", show_default=True, help="Time per job: a number with s, m or h (10s, 2m).")
@click.option("--buffered", is_flag=True, help="Through the page cache instead of direct IO.")
@click.option("--out", callback=_out, help="Results folder (default results/io-<path>).")
def io_command(target: str, preset: str | None, size: str, duration: str, buffered: bool, out: Path | None,
               **given: str | None) -> None:
    """Raw capability of the device behind PLACEMENT_OR_PATH: IOPS, MB/s and latency per job (fio).
    The options after --out are a placement's keys (--write-iops 3000 is write_iops = 3000), checked as
    the file's are, and fio runs through the volume they declare, each job saying whether what binds
    it held: with caps, fio runs inside them, as an experiment's server would; with a credit bucket
    (--iops-bucket 300/3000/30000), each job starts with the bucket's credits and says when it ran dry
    and whether the kernel let through no more than it allowed; with a latency (--read-latency 2, or
    a p50/p99 pair 1/4), each job runs on the device alone and then through the delay layer holding
    it; beside caps or a bucket (a volume class whole), a depth where the cap binds first is judged
    against the cap. Without --preset, the jobs are those that show the declared keys held (seed
    004's matrix when none is declared)."""
    from storlab.machine import iobench, system
    from storlab.results import folder_lock
    from storlab.results.store import Store

    declared = _io_volume(given)
    jobs = iobench.preset(preset, buffered) if preset else iobench.default_jobs(declared, buffered)
    size_bytes, seconds = iobench.parse_size(size), iobench.parse_duration(duration)
    path = _placement_path(target)
    iobench.check_volume(path, declared)  # before its results folder is made
    console = _console()
    folder = out or _results_folder(iobench.default_folder(path), "the results folder")
    # One writer per results folder (a run beside it would distort both); the store opened before fio
    # runs, so one it cannot write (damaged, immutable) is said before the minutes fio takes, not after.
    with folder_lock.writing(folder), Store.open(folder) as store:
        facts = system.collect_facts([path])
        results = iobench.run(path, jobs, size_bytes, seconds, console, declared)
        store.record_io(results, target=str(path), facts=facts, comparable=system.comparable(facts))
    console.print(iobench.table(results))
    for line in iobench.flag_lines(results):
        console.print(line, markup=False)
    console.print(f"results: {folder}", markup=False)


def _io_volume(given: dict[str, str | None]) -> dict[str, Any]:
    """The volume `storlab io` was given, each option read as its key's value and checked as the file's
    is (storlab.volume), then the keys together."""
    from storlab.volume import registry

    declared = {}
    for name, text in given.items():
        if text is None:
            continue
        _, key = registry.owner(name)
        try:
            value = key.from_flag(text) if key.from_flag else text
            declared[name] = key.check(value, key.what)
        except ValueError as exc:
            raise UserError(f"--{key.flag} {text[:40]!r}: {str(exc).replace(' or a list of them', '')}") from None
    problem = registry.conflict(declared)
    if problem is not None:
        raise UserError(f"--{registry.owner(problem.loc[0])[1].flag}: {problem}")
    return declared


# -- experiment commands ---------------------------------------------------------------------


def _load(path: str, race: bool = False, until_settled: bool = False, allow_server_programs: bool = False,
          allow_client_programs: bool = False):
    from storlab.experiment import file as experiment

    return experiment.load(path, race, until_settled=until_settled, allow_server_programs=allow_server_programs,
                           allow_client_programs=allow_client_programs)


_ALLOW_CLIENT_PROGRAMS = ("Take client scripts that run a program on this machine (pgbench's \\shell and \\setshell; "
                          "refused otherwise). The program runs as the OS user storlab-client (never root), in the run's "
                          "control group, and is ended with the run; still, whoever wrote the experiment then runs code "
                          "on this machine: give it only to an experiment you trust. Not with --store (a fleet's workers "
                          "never take such scripts).")
_NOT_WITH_STORE = ("{option}: only into a results folder; a shared store's experiments are run by its workers too, and a "
                   "worker never takes {what}")


def _dsn(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--store: a PostgreSQL connection string without a password (never echoed back)."""
    if value is None:
        return None
    from storlab.results.shared_store import check_dsn

    return check_dsn(value)


def _seconds(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A number of seconds in the digits 0 to 9 (Python's float() reads "５" as 5 and "1_0" as 10)."""
    try:
        if value.isascii() and "_" not in value:
            return float(value)
    except ValueError:
        pass
    raise UserError(f"{param.opts[0]} {value[:64]!r}: expected a number of seconds, such as 60")


def _store_options(command):
    """FOLDER, or --store DSN with --experiment NAME: where a read command finds its results."""
    command = click.option("--experiment", help="With --store: the experiment's name (needed when the store holds several).")(command)
    command = click.option("--store", "dsn", callback=_dsn, metavar="DSN",
                           help="A shared PostgreSQL store (postgresql://USER@HOST/DB) instead of a results folder.")(command)
    return click.argument("folder", required=False, type=click.Path())(command)


def _opened(folder: str | None, dsn: str | None, experiment: str | None, out: Path | None = None):
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


def _beside(store, out: Path | None) -> None:
    """Where a shared store's report and export go: --out, or results/<experiment name>."""
    if store.folder is None:
        held = store.experiment()
        store.folder = out or _results_folder(Path("results") / (held.name if held is not None else "store"),
                                              "the folder for its files")
        try:
            store.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{store.folder}: cannot make the folder: {exc.strerror}") from None


def _results(folder: str | None, dsn: str | None = None, experiment: str | None = None, io: list[Path] | None = None):
    """`io`: as analysis.load takes it (None: no `storlab io` results read)."""
    from storlab.answer import analysis

    with _opened(folder, dsn, experiment) as store:
        return analysis.load(store, io)


def _answer(folder: str | None, dsn: str | None = None, experiment: str | None = None):
    """The whole answer, the devices `storlab io` measured in the folder or beside it included."""
    from storlab.answer.compose import compose

    return compose(_results(folder, dsn, experiment, io=[]))


_NO_TRACE = ("Run without bpftrace: the sampled waits only (no wait counts, traced lock waits or traced IO per "
             "file; PostgreSQL's reads per relation are still counted by the server), IO sizes as averages.")
_TRACE_IO = ("Also trace every LWLock wait and each file's writes and syncs (PostgreSQL: LWLock wait counts, "
             "writes and write stalls per file, and in a temp_on cell the temporary files' reads; about 3 % of the "
             "server's CPU on a CPU-bound load, so off unless asked for).")
_TRACE_READS = ("Also trace every read of a data file, and all --trace-io traces (PostgreSQL: read stalls and "
                "their histogram per file, where the server's own counts give reads per relation untimed; on a "
                "cold scan it made one 16 to 29 % slower, so it is off unless asked for).")


def _tracing(no_trace: bool, trace_io: bool, trace_reads: bool):
    """What bpftrace traces around each run, from the three options."""
    from storlab.probes.bpftrace import Tracing

    more = "--trace-reads" if trace_reads else "--trace-io" if trace_io else None
    if no_trace and more:
        raise UserError(f"{more}: --no-trace turns every trace off; give one or the other")
    return Tracing.OFF if no_trace else Tracing.READS if trace_reads else Tracing.IO if trace_io else Tracing.ON


def _say(console: Console):
    """A line of a run's or a worker's log, as it is: never markup, never wrapped (a refusal a script
    greps for stays one line)."""
    return lambda line: console.print(line, markup=False, soft_wrap=True)


@main.command()
@click.argument("experiment_file")
@click.option("--out", callback=_out, help="Results folder (default results/<name>).")
@click.option("--store", "dsn", callback=_dsn, metavar="DSN",
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
@click.option("--no-trace", is_flag=True, help=_NO_TRACE)
@click.option("--trace-io", is_flag=True, help=_TRACE_IO)
@click.option("--trace-reads", is_flag=True, help=_TRACE_READS)
@click.option("--allow-server-programs", is_flag=True,
              help="Take engine_settings that run a program or load a library on the server (archive_command, "
                   "restore_command, shared_preload_libraries, dynamic_library_path, plugin_load, ...; refused "
                   "otherwise). WARNING: whoever wrote the experiment then runs code as the servers' OS user on "
                   "this machine, which may outlive the run: give it only to an experiment you trust. Not with "
                   "--store (a fleet's workers never take such settings); include files are refused even so.")
@click.option("--allow-client-programs", is_flag=True, help=_ALLOW_CLIENT_PROGRAMS)
def run(experiment_file: str, out: Path | None, dsn: str | None, host: str | None, dry_run: bool, keep: bool,
        race: bool, until_settled: bool, no_trace: bool, trace_io: bool, trace_reads: bool,
        allow_server_programs: bool, allow_client_programs: bool) -> None:
    """Run (or resume) every cell x repetition of EXPERIMENT_FILE, then print the answer.
    Everything is checked before anything starts (also with --dry-run): the file, the placements,
    engine_settings against the installed engine, and each placement's free space. A results folder
    takes one run at a time: a second one into it is refused (run in parallel with --store)."""
    from storlab.results import folder_lock
    from storlab.running import fleet, plan, runner
    from storlab.show import terminal

    tracing = _tracing(no_trace, trace_io, trace_reads)
    if allow_server_programs and dsn is not None:
        raise UserError(_NOT_WITH_STORE.format(option="--allow-server-programs",
                                               what="settings that run programs or load libraries"))
    if allow_client_programs and dsn is not None:
        raise UserError(_NOT_WITH_STORE.format(option="--allow-client-programs",
                                               what="client scripts that run programs"))
    exp = _load(experiment_file, race, until_settled, allow_server_programs, allow_client_programs)
    console = _console()
    if dsn is not None:
        if out is not None:
            raise UserError("--out: give a results folder or --store, not both")
        if dry_run:
            raise UserError("--dry-run: works on a results folder; with --store, storlab submit queues the plan and says what it holds")
        outcome = fleet.run_here(exp, dsn, fleet.check_host(host or fleet.this_host()), keep, _say(console),
                                 tracing)
        console.print()
        terminal.show(_answer(None, dsn, exp.name), console)
        if outcome.failed:
            raise RunFailed(f"{len(outcome.failed)} runs failed; run the same command again to retry them")
        return
    if host is not None:
        raise UserError("--host: only with --store (a results folder is this machine's)")
    folder = out or _results_folder(plan.default_folder(exp), "the results folder")
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
    terminal.show(_answer(str(folder)), console)
    console.print(f"results: {folder}  (storlab report {folder} writes the HTML report)", markup=False)
    if outcome.failed:
        raise RunFailed(f"{len(outcome.failed)} runs failed; run the same command again to retry them")


@main.command()
@click.argument("experiment_file")
@click.option("--out", "log", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The log to write (a new file; the replay kind's `log`).")
@click.option("--cell", help="The cell whose workload is captured (its id or a unique prefix; default the first).")
@click.option("--keep", is_flag=True, help="Keep the instance's directories after the capture (stopped).")
@click.option("--allow-server-programs", is_flag=True,
              help="Take engine_settings that run a program or load a library on the server (as storlab run's).")
@click.option("--allow-client-programs", is_flag=True,
              help="Take client scripts that run a program on this machine (as storlab run's).")
def capture(experiment_file: str, log: Path, cell: str | None, keep: bool, allow_server_programs: bool,
            allow_client_programs: bool) -> None:
    """Run one cell of EXPERIMENT_FILE once with every statement of its workload logged, and write the
    statement log the replay kind replays: on PostgreSQL its stderr log (log_line_prefix '%m|%u|%d|%c|'),
    on MariaDB its general log written as a table and dumped (microseconds). The workload's prepare runs
    before the log starts: the replay's setup must build what it built."""
    from storlab.running import capture as capturing

    if log.name in ("", ".", ".."):
        raise UserError("--out: give the name of the log file to write, not a folder")
    exp = _load(experiment_file, allow_server_programs=allow_server_programs,
                allow_client_programs=allow_client_programs)
    captured = capturing.capture(exp, log.absolute(), cell, keep)
    found = captured.log
    of = f" of {captured.cell}" if captured.cell else ""
    _console().print(f"captured {found.statements:,} statements{of} in {found.sessions} sessions over {found.span_s:.1f} s "
                     f"into {captured.path}; replay it with kind = \"replay\", log = \"{log}\"", markup=False)


@main.command()
@_store_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON (docs/answer-json.md; its "
                                                      "schema: storlab schema --answer).")
@click.option("--details", is_flag=True, help="Also the workload's figures and the runs in the ranking, the interactions "
                                              "that are not significant, the noise, each cell a race dropped, and every "
                                              "sentence behind the warnings: each cell's noise and the noise split, each "
                                              "run's steady state and checkpoints, the IO caps, buckets and memory limits, "
                                              "what every run started from, the machine, the probes' cost.")
def show(folder: str | None, dsn: str | None, experiment: str | None, as_json: bool, details: bool) -> None:
    """The answer on one screen: what each factor does (each level against its reference, with its
    verdict) and the interactions that matter, then one row per cell, mean ± 95 % CI, the best cell, and
    one line per kind of warning naming the cells it concerns (the sentences behind them: --details)."""
    from storlab.show import terminal

    if as_json and details:
        raise UserError("--details: --json holds every detail already; give one of them")
    answer = _answer(folder, dsn, experiment)
    if as_json:
        click.echo(answer.model_dump_json(indent=2))
        return
    terminal.show(answer, _console(), details)


@main.command()
@_store_options
@click.option("--cell", help="One cell's id (or a unique prefix).")
@click.option("--resources", is_flag=True, help="Also who waits on what: each top wait's resources and their share, "
                                               "and every traced lock wait by relation (PostgreSQL, bpftrace).")
@click.option("--files", is_flag=True, help="Also the IO of each file of the instance: reads, writes, bytes, stalls "
                                           "(PostgreSQL: reads per relation counted by the server, timed in runs made "
                                           "with --trace-reads; writes in runs made with --trace-io).")
def waits(folder: str | None, dsn: str | None, experiment: str | None, cell: str | None, resources: bool,
          files: bool) -> None:
    """Wait statistics per cell: top 95 %, the seeds' columns; --resources adds the waiting tasks and
    traced lock waits, --files the IO per file."""
    from storlab.show import terminal, traced

    answer = _answer(folder, dsn, experiment)
    console = _console()
    terminal.waits(answer, console, cell, resources)
    traced.show(answer, console, cell, resources, files)


@main.command()
@_store_options
@click.option("--baseline", help="The cell to compare against (default: the first cell).")
def compare(folder: str | None, dsn: str | None, experiment: str | None, baseline: str | None) -> None:
    """% change in elapsed time between cells, and whether it is significant."""
    from storlab.answer.compose import comparison
    from storlab.show import terminal

    terminal.compare(comparison(_results(folder, dsn, experiment), baseline), _console())


@main.command()
@_store_options
@click.option("--out", callback=_out, help="With --store: the folder for the report (default results/<experiment>).")
@click.option("--io", "io_dirs", multiple=True, type=click.Path(),
              help="A `storlab io` results folder to show beside the database's figures (repeatable).")
@click.option("--cell", help="The cell whose median run the waits-over-time chart draws (default: the best).")
def report(folder: str | None, dsn: str | None, experiment: str | None, out: Path | None, io_dirs: tuple[str, ...],
           cell: str | None) -> None:
    """Write FOLDER/report.html: one self-contained file with every chart, and a PNG of each."""
    from storlab.answer import analysis
    from storlab.answer.compose import compose
    from storlab.report import page as html_report

    with _opened(folder, dsn, experiment, out) as store:
        _beside(store, out)
        answer = compose(analysis.load(store, [Path(d) for d in io_dirs]), cell)
        path = html_report.write(answer, store, store.folder)
    click.echo(f"wrote {path}")


@main.command()
@click.argument("experiment_file")
@click.option("--store", "dsn", required=True, callback=_dsn, metavar="DSN",
              help="The shared PostgreSQL store (postgresql://USER@HOST/DB; the password from ~/.pgpass, PGPASSWORD or a service file).")
def submit(experiment_file: str, dsn: str) -> None:
    """Put EXPERIMENT_FILE's plan in a shared store, for the workers: every run not queued yet (and
    failed runs again). Its placements and engine are checked by each worker, on its own host."""
    from storlab.experiment import file as experiment
    from storlab.results import shared_store
    from storlab.running import fleet

    exp = experiment.load(experiment_file, check_placements=False)
    with shared_store.open(dsn, exp.name, create=True, purpose="submit") as store:
        click.echo(fleet.submit(exp, store).line(exp.name))


@main.command()
@click.option("--store", "dsn", required=True, callback=_dsn, metavar="DSN",
              help="The shared PostgreSQL store (postgresql://USER@HOST/DB; the password from ~/.pgpass, PGPASSWORD or a service file).")
@click.option("--host", help="The host this worker runs for (default this machine's name).")
@click.option("--experiment", help="Take only this experiment's runs.")
@click.option("--lease", "lease_s", callback=_seconds, default="60", show_default=True, metavar="SECONDS",
              help="Seconds a claim lasts unless renewed (3 to 86400): a dead worker's run goes back to the queue after it.")
@click.option("--until-done", is_flag=True,
              help="Stop once every run this worker may take is recorded; with --experiment, fail if it refuses that one.")
@click.option("--keep", is_flag=True, help="Keep each instance's directories after its run (stopped).")
@click.option("--no-trace", is_flag=True, help=_NO_TRACE)
@click.option("--trace-io", is_flag=True, help=_TRACE_IO)
@click.option("--trace-reads", is_flag=True, help=_TRACE_READS)
def worker(dsn: str, host: str | None, experiment: str | None, lease_s: float, until_done: bool, keep: bool,
           no_trace: bool, trace_io: bool, trace_reads: bool) -> None:
    """Claim runs from a shared store, run them on this host (relative placements are relative to
    the working folder), and record each with this host's name and machine facts. Takes only runs it
    can run: its engine installed, the settings accepted, its placements there or made."""
    from storlab.running import fleet

    options = fleet.WorkerOptions(fleet.check_host(host or fleet.this_host()), experiment, lease_s, until_done, keep,
                                  _tracing(no_trace, trace_io, trace_reads))
    outcome = fleet.work(dsn, options, _say(_console()))
    if until_done:
        click.echo(f"{options.host}: {outcome.finished} runs recorded, {len(outcome.failed)} failed, {outcome.lost} given up")


@main.command()
@click.option("--all", "everything", is_flag=True, help="Also stop instances of storlab runs still going.")
def clean(everything: bool) -> None:
    """Stop and remove what a crashed or interrupted run left behind (instances whose storlab process
    is gone, and those kept with --keep); runs still going are left alone unless --all."""
    from storlab.lab import owned
    from storlab.running import cleanup

    cleaned = cleanup.clean(live=everything, unreadable=True)
    for item in cleaned:
        if item.unreadable:
            click.echo(f"{item.instance_id}: cannot read its manifest {item.unreadable}; nothing of it was cleaned")
            continue
        if item.live:
            what = "stopped a running instance, removed" if item.stopped else "removed a running instance's"
        else:
            what = "stopped and removed" if item.stopped else "removed"
        click.echo(f"{item.instance_id}: {what} {', '.join(item.removed) or 'nothing'}")
        for path in item.refused:
            click.echo(f"{item.instance_id}: left {path}")
    if not cleaned:
        running = [m for m in owned.Manifest.all() if not m.kept and m.owner_running]
        click.echo("nothing to clean" + (f" ({len(running)} instances of runs still going; --all stops them)" if running else ""))


@main.command()
@_store_options
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "parquet"]), default="csv", show_default=True)
@click.option("--out", callback=_out, help="With --store: the folder for the files (default results/<experiment>).")
def export(folder: str | None, dsn: str | None, experiment: str | None, fmt: str, out: Path | None) -> None:
    """Write every table of every run into FOLDER: the runs (one row each, factors and figures as
    columns) and each table the store keeps per run (waits, timeline and every probe's). csv: one file a
    table (runs.csv, waits.csv, timeline.csv, <table>.csv), each row with its run_id; json and parquet:
    runs.json or runs.parquet, each run with its tables' rows. Parquet's columns are typed from the
    store's schema; it needs pyarrow (pip install 'storlab[parquet]')."""
    from storlab.results import export as exporter
    from storlab.workloads import KINDS

    with _opened(folder, dsn, experiment, out) as store:
        _beside(store, out)
        held = store.experiment()
        kind = KINDS.get(held.kind or "") if held is not None else None
        for path in exporter.write(store, fmt, [f.name for f in kind.figures] if kind is not None else None):
            click.echo(f"wrote {path}")


@main.command()
@click.option("--answer", is_flag=True, help="The JSON Schema of `storlab show --json` instead, made from the answer's types.")
def schema(answer: bool) -> None:
    """Print the experiment file's JSON Schema (for editors), made from the models that validate it."""
    import json

    if answer:
        from storlab.answer.model import Answer

        click.echo(json.dumps(Answer.model_json_schema(), indent=2))
        return
    from storlab.experiment.schema import experiment_schema

    click.echo(json.dumps(experiment_schema(), indent=2))
