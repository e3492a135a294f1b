"""This host and its devices: `storlab check` (is this machine fit to benchmark) and `storlab io` (what
the device behind a path can do, through the volume a placement declares)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from storlab.cli import options
from storlab.errors import UserError


def _placement_path(text: str) -> Path:
    """A directory, or the placement word "tmpfs" (the RAM disk an experiment's placement names)."""
    from storlab.lab.placements import TMPFS, TMPFS_ROOT

    path = TMPFS_ROOT if text == TMPFS else Path(text)
    if not path.exists():
        raise UserError(f"{text}: no such file or directory")
    return path


@click.command("check")
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
        console = options.console()
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


@click.command("io", cls=_VolumeOptions)
@click.argument("target", metavar="PLACEMENT_OR_PATH")
@click.option("--preset", help="The job matrix: sqlio (seed 004's; the default), latency (4 KiB random reads and "
              "writes at queue depth 1 and 8; the default with a read or write latency), or commit (a log's "
              "commit: 4 and 8 KiB sequential writes each followed by fdatasync, one at a time, latency of the "
              "flush; the default with a flush latency).")
@click.option("--size", default="256M", show_default=True, help="Test file size.")
@click.option("--duration", default="10s", show_default=True, help="Time per job: a number with s, m or h (10s, 2m).")
@click.option("--buffered", is_flag=True, help="Through the page cache instead of direct IO.")
@click.option("--out", callback=options.out_folder, help="Results folder (default results/io-<path>).")
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
    console = options.console()
    folder = out or options.results_folder(iobench.default_folder(path), "the results folder")
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
