"""Experiment files several test modules start from: the bad-input tests' two-cell file (BASE, on
either engine, changed one line at a time) and the fleet's. Plain text and functions; the fixtures
the modules share are in conftest.py."""

from __future__ import annotations

from pathlib import Path

BASE = """\
name = "fz"
engine = "postgres"
repetitions = 2

[placements]
disk = "{disk}"
ram = "tmpfs"

[layout]
data_files = [1, 2]
data_on = "disk"
log_on = "ram"

[workload]
kind = "random-insert"
connections = 2
rows_per_connection = 1000
batch = 100
"""

MARIADB = BASE.replace('engine = "postgres"', 'engine = "mariadb"')


def changed(old: str, new: str, disk: Path, base: str = BASE) -> str:
    """`base` with its placement at `disk` and its first `old` replaced by `new` (either may say {disk})."""
    text = base.format(disk=disk)
    old, new = old.replace("{disk}", str(disk)), new.replace("{disk}", str(disk))
    assert old in text, old
    return text.replace(old, new, 1)


FLEET = """
name = "{name}"
engine = "postgres"
repetitions = {reps}
{hosts}

[placements]
disk = "disk"
ram = "tmpfs"

[layout]
data_files = [1, 2]
data_on = "disk"
log_on = "ram"

[workload]
kind = "random-insert"
connections = 2
rows_per_connection = {rows}
batch = 200
"""


def fleet_body(name: str = "fleet", reps: int = 2, hosts: str = "", rows: int = 2000) -> str:
    """The fleet's experiment: its placement `disk` relative, so each worker's is in its own working folder."""
    return FLEET.format(name=name, reps=reps, hosts=hosts, rows=rows)
