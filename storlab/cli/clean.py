"""`storlab clean`: what a crashed or interrupted run left behind, stopped and removed."""

from __future__ import annotations

import click


@click.command("clean")
@click.option("--all", "everything", is_flag=True, help="Also stop instances of storlab runs still going.")
def clean_command(everything: bool) -> None:
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
