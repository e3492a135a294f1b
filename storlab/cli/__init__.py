"""The storlab command: the group here, one module per command or close group of commands
(`host`: check and io; `run`; `statement_log`: capture; `show`: show, waits and compare; `files`:
report and export; `workers`: submit and worker; `clean`; `json_schema`: schema), what they share in
`options`. They are thin wrappers over plain functions, which tests call directly; each command
imports what it needs when it runs, so `storlab --help` and the quick commands do not load the
statistics and chart libraries."""

from __future__ import annotations

import os
import signal
import stat
import sys
from contextlib import suppress

import click

from storlab import interrupts
from storlab.cli import clean, files, host, json_schema, run, show, statement_log, workers
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


_COMMANDS = [host.check_command, host.io_command, run.run_command, statement_log.capture_command, show.show_command,
             show.waits_command, show.compare_command, files.report_command, files.export_command,
             workers.submit_command, workers.worker_command, clean.clean_command, json_schema.schema_command]


@click.group(cls=_Group, commands=_COMMANDS)
@click.version_option(package_name="storlab")
def main() -> None:
    """A storage lab for databases: run one workload under many storage layouts on a real
    PostgreSQL or MariaDB, explain the numbers with wait statistics, and show the answer."""
