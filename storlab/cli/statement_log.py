"""`storlab capture`: one cell's load run once with every statement logged, into the log the replay
kind replays."""

from __future__ import annotations

from pathlib import Path

import click

from storlab.cli import options
from storlab.errors import UserError


@click.command("capture")
@click.argument("experiment_file")
@click.option("--out", "log", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The log to write (a new file; the replay kind's `log`).")
@click.option("--cell", help="The cell whose workload is captured (its id or a unique prefix; default the first).")
@click.option("--keep", is_flag=True, help="Keep the instance's directories after the capture (stopped).")
@click.option("--allow-server-programs", is_flag=True,
              help="Take engine_settings that run a program or load a library on the server (as storlab run's).")
@click.option("--allow-client-programs", is_flag=True,
              help="Take client scripts that run a program on this machine (as storlab run's).")
def capture_command(experiment_file: str, log: Path, cell: str | None, keep: bool, allow_server_programs: bool,
                    allow_client_programs: bool) -> None:
    """Run one cell of EXPERIMENT_FILE once with every statement of its workload logged, and write the
    statement log the replay kind replays: on PostgreSQL its stderr log (log_line_prefix '%m|%u|%d|%c|'),
    on MariaDB its general log written as a table and dumped (microseconds). The workload's prepare runs
    before the log starts: the replay's setup must build what it built."""
    from storlab.running import capture as capturing

    if log.name in ("", ".", ".."):
        raise UserError("--out: give the name of the log file to write, not a folder")
    exp = options.load(experiment_file, allow_server_programs=allow_server_programs,
                       allow_client_programs=allow_client_programs)
    captured = capturing.capture(exp, log.absolute(), cell, keep)
    found = captured.log
    of = f" of {captured.cell}" if captured.cell else ""
    options.console().print(f"captured {found.statements:,} statements{of} in {found.sessions} sessions over "
                            f"{found.span_s:.1f} s into {captured.path}; replay it with kind = \"replay\", "
                            f"log = \"{log}\"", markup=False)
