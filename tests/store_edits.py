"""An experiment edited in a shared store after it was submitted, as a submitter who can write the
store could leave it, and the fleet's worker that meets it: it refuses that one in one line and goes
on with the others."""

from __future__ import annotations

from pathlib import Path

from tests.commands import storlab
from tests.experiments import fleet_body


def single_cell(name: str) -> str:
    """The fleet's experiment with one cell and one run: the one a worker goes on with is `other`."""
    return fleet_body(name=name, reps=1).replace("data_files = [1, 2]", "data_files = 1")


def submit(store_server, *sources: Path) -> None:
    for source in sources:
        assert storlab("submit", str(source), "--store", store_server.dsn, env=store_server.env()).returncode == 0


def edit(store_server, name: str, change: str, value: str) -> None:
    """`change`, a SET clause of its experiment row with one parameter (`value`), made to the stored
    experiment `name`."""
    with store_server.admin() as conn:
        schema = conn.execute("SELECT schema_name FROM storlab.experiments WHERE name = %s", (name,)).fetchone()[0]
        conn.execute(f"UPDATE {schema}.experiment SET {change}", (value,))


def worker_refuses(store_server, lab_root: Path, name: str, said: str, starts: int = 1) -> None:
    """A worker of host db1, in a working folder of its own, run until nothing is left `starts` times:
    each time it says `said` of the experiment `name` and nothing else of it, and ends well; the first
    time it records the single run of the experiment `other`."""
    here = lab_root / "db1"
    here.mkdir()
    here.chmod(0o755)
    for start in range(starts):
        done = storlab("worker", "--store", store_server.dsn, "--host", "db1", "--until-done", "--no-trace",
                       env=store_server.env(), cwd=here)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert [line for line in done.stdout.splitlines() if line.startswith(f"{name}: ")] == [said]
        if start == 0:
            assert "other: (single cell) #1: recorded" in done.stdout
