"""Experiment files several test modules start from: the bad-input tests' two-cell file (BASE, on
either engine, changed one line at a time), the fleet's, the rate kinds' one cell (PGBENCH, SYSBENCH)
with a script that warms up (RAMP_SQL), and the replay's. Plain text and functions; the fixtures the
modules share are in conftest.py."""

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


def random_insert(name: str, *, repetitions: str = "{reps}", disk: str = "{disk}", data_files: str | None = "{files}",
                  log_on: str = '"ram"', connections: int = 2, rows: str = "{rows}", batch: int = 500) -> str:
    """The small random-insert experiment most tests against a real server start from, its placements a
    disk folder and a RAM disk. A value left as its {placeholder} is for the test to fill with str.format;
    data_files None: the key left out (one data file)."""
    files = "" if data_files is None else f"data_files = {data_files}\n"
    return f"""
name = "{name}"
engine = "postgres"
repetitions = {repetitions}

[placements]
disk = "{disk}"
ram = "tmpfs"

[layout]
{files}data_on = "disk"
log_on = {log_on}

[workload]
kind = "random-insert"
connections = {connections}
rows_per_connection = {rows}
batch = {batch}
"""


def fleet_body(name: str = "fleet", reps: int = 2, hosts: str = "", rows: int = 2000) -> str:
    """The fleet's experiment: its placement `disk` relative, so each worker's is in its own working folder."""
    return random_insert(name, repetitions=f"{reps}\n{hosts}", disk="disk", data_files="[1, 2]", rows=str(rows), batch=200)


# A pgbench experiment with its data on the placement "vol", for the caps' and the buckets' tests.
CAPPED = """
name = "caps"
engine = "postgres"

[placements]
{placements}

[layout]
data_on = "vol"
{layout}

[workload]
kind = "pgbench"
{workload}

[engine_settings]
{settings}
"""


def write_capped(lab_root: Path, placements: str, layout: str = "", workload: str = "scale = 1\nduration_s = 5",
                 settings: str = "", name: str = "caps.toml", repetitions: int | None = None) -> Path:
    """CAPPED filled in, as `name` in `lab_root`; `repetitions` the runs of each cell (None: storlab's
    default, and the file's lines as CAPPED numbers them)."""
    text = CAPPED.format(placements=placements, layout=layout, workload=workload, settings=settings)
    if repetitions is not None:
        text = text.replace('engine = "postgres"\n', f'engine = "postgres"\nrepetitions = {repetitions}\n', 1)
    path = lab_root / name
    path.write_text(text)
    return path


# The rate kinds' one-cell file (pgbench; sysbench with its kind's name), run by duration.
PGBENCH = BASE.replace("data_files = [1, 2]", "data_files = 1").replace(
    'kind = "random-insert"\nconnections = 2\nrows_per_connection = 1000\nbatch = 100\n',
    'kind = "pgbench"\nscale = 1\nduration_s = 20\n')
SYSBENCH = PGBENCH.replace('kind = "pgbench"\nscale = 1', 'kind = "sysbench"')


# A pgbench script slow for each session's first 4 s (each transaction sleeps 5 ms), then fast: a warm-up to find.
RAMP_SQL = """SELECT pg_sleep(CASE WHEN now() - (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
                     < interval '4 s' THEN 0.005 ELSE 0 END);
"""


# One run of each cell, its data on `./disk` beside the file (a RAM disk too): the layout's other lines
# and the workload's are the test's ({layout}, {workload}).
ONE_RUN = """
name = "{name}"
engine = "{engine}"
repetitions = 1
[placements]
disk = "./disk"
ram = "tmpfs"
[layout]
data_on = "disk"
{layout}
[workload]
{workload}
"""

# A replay of `day.log` after `setup.sql`, both beside the file, on either engine.
REPLAY = ONE_RUN.replace("{name}", "replayed").replace("{workload}", 'kind = "replay"\nlog = "day.log"\nsetup = "setup.sql"\n{keys}')
