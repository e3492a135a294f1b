"""`storlab run` end to end on real PostgreSQL: the answer, resume, refusal, and nothing left behind."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab import owned
from storlab.running import stall
from storlab.workloads.kind import DEFAULT_RUN_LIMIT_S
from tests.commands import invoke, start, storlab
from tests.conftest import instances_up, stop_instance, stop_storlab, stopped_processes, storlab_processes
from tests.experiments import random_insert

pytestmark = pytest.mark.engine

TINY = random_insert("tiny", data_files="[1, 4]", connections=4)



def runs_in(folder: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(folder / "storlab.sqlite") as db:
        return sorted(db.execute("SELECT cell_id, repetition FROM runs").fetchall())


@pytest.fixture
def tiny(write_experiment, lab_dir):
    def make(reps: int = 2, rows: int = 2000, name: str = "tiny.toml") -> Path:
        return write_experiment(TINY.format(reps=reps, disk=lab_dir, rows=rows), name)

    return make


def test_run_show_waits_report_and_resume(tiny, tmp_path):
    out = tmp_path / "results"
    done = storlab("run", str(tiny()), "--no-trace", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "best: data_files=" in done.stdout
    assert len(runs_in(out)) == 4

    shown = invoke("show", str(out))  # the reading commands in this process: they start no server
    assert shown.exit_code == 0 and "± " in shown.stdout
    detailed = invoke("show", str(out), "--details")  # the workload's other figures: a column each
    assert detailed.exit_code == 0 and "± " in detailed.stdout and "rows/s" in detailed.stdout

    waits = invoke("waits", str(out))
    assert waits.exit_code == 0 and "source pg_wait_sampling" in waits.stdout and "Wait_S" in waits.stdout
    assert "WaitCount" in waits.stdout and "—" in waits.stdout  # sampling gives time, not counts

    report = invoke("report", str(out))
    assert report.exit_code == 0, report.output
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 2 and "data_files" in html and "Wait statistics" in html
    if Path("/proc/pressure/io").exists():  # the kernel's pressure probe kept each run's, and shows them
        with sqlite3.connect(out / "storlab.sqlite") as db:
            kept = db.execute("SELECT count(DISTINCT run_id) FROM pressure WHERE name = 'nr_dirtied' AND value > 0")
            assert kept.fetchone()[0] == 4
        assert "The kernel&#x27;s view: stalls and page-cache writes" in html

    exported = invoke("export", str(out), "--format", "csv")
    assert exported.exit_code == 0
    lines = (out / "runs.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("run_id,cell,data_files,repetition,elapsed_s,rows_per_s,latency_p99_ms")
    assert len((out / "pressure.csv").read_text().splitlines()) > 4  # a probe's table, a file of its own

    # Raising repetitions runs only the new ones.
    again = storlab("run", str(tiny(reps=3, name="tiny3.toml")), "--no-trace", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert len(runs_in(out)) == 6 and len(set(runs_in(out))) == 6
    assert storlab_processes() == []


def test_changed_experiment_is_refused(tiny, tmp_path):
    out = tmp_path / "results"
    assert storlab("run", str(tiny(reps=1)), "--no-trace", "--out", str(out)).returncode == 0
    changed = storlab("run", str(tiny(reps=1, rows=3000, name="other.toml")), "--out", str(out))
    assert changed.returncode == 2
    assert changed.stderr.strip().count("\n") == 0
    assert "holds results of a different experiment (workload.rows_per_connection: 2000 -> 3000)" in changed.stderr
    assert len(runs_in(out)) == 2


def test_dry_run_and_bad_input(tiny, tmp_path, write_experiment):
    dry = storlab("run", str(tiny()), "--dry-run", "--out", str(tmp_path / "r"))
    assert dry.returncode == 0
    assert "2 cells x 2 repetitions" in dry.stdout and "4 runs to do" in dry.stdout
    assert not (tmp_path / "r").exists()
    bad = storlab("run", str(write_experiment('name = "x"\nengine = "postgres"\n', "bad.toml")))
    assert bad.returncode == 2 and "bad.toml" in bad.stderr and "Traceback" not in bad.stderr
    missing = storlab("show", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no storlab results here" in missing.stderr


def _wait_for_runs(out: Path, count: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "storlab.sqlite").exists():
            try:
                if len(runs_in(out)) >= count:
                    return
            except sqlite3.OperationalError:
                pass
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    raise AssertionError("runs did not appear in time")


def _ignoring_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job (`storlab run … &`)


@pytest.mark.parametrize("how, started", [(signal.SIGKILL, None), (signal.SIGINT, None),
                                          (signal.SIGINT, _ignoring_ctrl_c)],
                         ids=["killed", "ctrl-c", "ctrl-c to a background job"])
def test_killed_run_leaves_nothing_and_resumes_exactly(tiny, tmp_path, lab_dir, how, started):
    out = tmp_path / "results"
    experiment = tiny(reps=3, rows=6000)
    proc = start("run", "--no-trace", experiment, "--out", out, preexec_fn=started)
    _wait_for_runs(out, 1, proc)
    time.sleep(0.7)  # most likely inside the next run's workload
    proc.send_signal(how)
    code = proc.wait(timeout=60)
    if how == signal.SIGINT:
        said = proc.stderr.read()
        assert code == 130, said
        assert "interrupted" in said
    deadline = time.monotonic() + 10
    while storlab_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert storlab_processes() == []
    before = runs_in(out)
    assert 1 <= len(before) < 6

    finished = storlab("run", str(experiment), "--no-trace", "--out", str(out))
    assert finished.returncode == 0, finished.stderr
    after = runs_in(out)
    assert len(after) == 6 and len(set(after)) == 6 and set(before) <= set(after)
    assert storlab_processes() == []
    assert not list(lab_dir.glob("storlab-*")) and owned.Manifest.all() == []


def test_unreachable_placement_is_named_before_any_run(write_experiment, tmp_path):
    private = tmp_path / "private" / "disk"  # pytest's tmp dirs are mode 0700, closed to other users
    body = TINY.format(reps=1, disk=private, rows=1000)
    result = storlab("run", str(write_experiment(body)), "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "placements.disk" in result.stderr and "not reachable by the servers' OS user storlab" in result.stderr
    assert not (tmp_path / "r").exists()


def test_markup_and_math_in_values_run_and_render(write_experiment, lab_dir, tmp_path):
    body = TINY.format(reps=1, disk=lab_dir, rows=1000).replace("data_files = [1, 4]", "data_files = 1")
    body += '\n[engine_settings]\napplication_name = ["[/]", "$x$", "[red]", "[blue]"]\n'
    out = tmp_path / "results"
    done = storlab("run", str(write_experiment(body)), "--no-trace", "--out", str(out))
    assert done.returncode == 0, done.stderr
    for command in ("waits", "compare", "report"):  # in this process: they start no server
        result = invoke(command, str(out))
        assert result.exit_code == 0, (command, result.output)
    shown = invoke("show", str(out))
    assert shown.exit_code == 0, shown.output
    shown = shown.stdout
    assert all(f'application_name="{v}"' in shown for v in ("[/]", "$x$", "[red]", "[blue]"))


def test_a_stalled_server_fails_its_run_and_the_next_goes_on(write_experiment, lab_dir, tmp_path):
    """Every process of a run's instance stopped (SIGSTOP): that run fails once the server has not
    answered for the declared 3 s, its instance is killed, and the runs after it are recorded."""
    out = tmp_path / "results"
    path = write_experiment(TINY.format(reps=3, disk=lab_dir, rows=150000).replace("data_files = [1, 4]", "data_files = 1")
                            + "stall_after_s = 3\n")
    proc = start("run", path, "--no-trace", "--out", out, stdout=subprocess.PIPE)
    stopped: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not instances_up():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        time.sleep(0.3)  # most likely inside the load (anywhere, the server stops answering alike)
        stopped_at = time.time()
        stopped = stop_instance(instances_up()[0])
        output, errors = proc.communicate(timeout=180)  # it hung for good before
    finally:
        stop_storlab(proc)
        for pid in stopped_processes(stopped):  # whatever a failing test left, continued and ended
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 1, output + errors
    said = "the server stopped answering for 3 s; its instance was stopped"
    assert errors.strip() == "storlab: 1 runs failed; run the same command again to retry them"
    with sqlite3.connect(out / "storlab.sqlite") as db:
        failures = db.execute("SELECT cell_id, repetition, message, at FROM failures").fetchall()
        runs = db.execute("SELECT cell_id, repetition FROM runs").fetchall()
    [(cell_id, failed, message, at)] = failures
    assert message == said and f"#{failed}: {said}" in output
    assert at - stopped_at < 3 + 30  # failed soon after the declared deadline, not when resumed
    assert sorted(runs) == [(cell_id, rep) for rep in (1, 2, 3) if rep != failed] and failed < 3  # it went on
    assert stopped_processes(stopped) == [] and storlab_processes() == []
    assert not list(lab_dir.glob("storlab-*")) and owned.Manifest.all() == []


@pytest.mark.parametrize("value", ["[3, 4]", "1", "true", '"60s"', "90000", "nan"])
def test_a_bad_stall_deadline_is_one_line(write_experiment, lab_dir, value):
    path = write_experiment(TINY.format(reps=2, disk=lab_dir, rows=10) + f"stall_after_s = {value}\n")
    with pytest.raises(UserError) as caught:
        experiment.load(path)
    assert str(caught.value) == (f"exp.toml:{TINY.count(chr(10)) + 1}: workload.stall_after_s: expected a number of "
                                 f"seconds from 2 to 86400 (one value, not a factor), got {value.replace('nan', 'NaN')}")


def test_the_stall_deadline_is_not_part_of_what_is_measured(write_experiment, lab_dir):
    """Changing when a run is given up leaves the results folder's experiment the same."""
    default = experiment.load(write_experiment(TINY.format(reps=2, disk=lab_dir, rows=10)))
    declared = experiment.load(write_experiment(TINY.format(reps=2, disk=lab_dir, rows=10) + "stall_after_s = 5\n"))
    assert default.identity() == declared.identity()
    assert stall.stall_after(matrix.cells(default)[0].workload) == stall.DEFAULT_STALL_S
    assert stall.stall_after(matrix.cells(declared)[0].workload) == 5


NAPS = """
name = "naps"
engine = "postgres"
repetitions = 1
order_seed = 7

[placements]
disk = "{disk}"

[layout]
data_files = 1
data_on = "disk"
log_on = "disk"

[workload]
kind = "custom"
setup = "setup.sql"
transaction = ["nap-in-prepare.sql", "nap-in-load.sql", "quick.sql"]
connections = 1
transactions_per_connection = 3
run_limit_s = 10
"""


def test_a_run_past_its_limit_fails_and_the_next_goes_on(write_experiment, lab_dir, lab_root):
    """A statement that sleeps holds a server that still answers `SELECT 1`: the run fails once it
    has lasted its declared 10 s (the least a file may declare), whether it sleeps in the prepare (the custom kind tries its
    transaction once, rolled back) or in the load (a sequence is not rolled back: the second call
    sleeps), its instance is killed, and the next cell's run is recorded."""
    (lab_root / "setup.sql").write_text("CREATE SEQUENCE naps;")
    (lab_root / "nap-in-prepare.sql").write_text("SELECT pg_sleep(3600);")
    (lab_root / "nap-in-load.sql").write_text("SELECT pg_sleep(CASE WHEN nextval('naps') > 1 THEN 3600 ELSE 0 END);")
    (lab_root / "quick.sql").write_text("SELECT nextval('naps');")
    path = write_experiment(NAPS.format(disk=lab_dir))
    planned = [cell.id for cell, _ in matrix.plan(matrix.cells(experiment.load(path)), 1, set(), 7)]
    out = lab_root / "results"
    proc = start("run", path, "--no-trace", "--out", out, stdout=subprocess.PIPE)
    seen: dict[str, list[float]] = {}  # each instance: when its server was first and last seen ready
    try:
        deadline = time.monotonic() + 600  # it never ended before
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run never ended"
            for manifest in instances_up():
                seen.setdefault(manifest.instance_id, [time.time()] * 2)[1] = time.time()
            time.sleep(0.05)
        output, errors = proc.communicate()
    finally:
        stop_storlab(proc)
    assert proc.returncode == 1, output + errors
    assert errors.strip() == "storlab: 2 runs failed; run the same command again to retry them"
    said = "the run passed its limit of 10 s (workload.run_limit_s); its instance was stopped"
    with sqlite3.connect(out / "storlab.sqlite") as db:
        failures = dict(db.execute("SELECT cell_id, message FROM failures").fetchall())
        at = dict(db.execute("SELECT cell_id, at FROM failures").fetchall())
        runs = db.execute("SELECT cell_id, repetition FROM runs").fetchall()
        cells = dict(db.execute("SELECT label, id FROM cells").fetchall())
    napping = {cells[f"transaction={name}"] for name in ("nap-in-prepare.sql", "nap-in-load.sql")}
    assert failures == {cell: said for cell in napping}
    assert runs == [(cells["transaction=quick.sql"], 1)]
    assert all(f"failed: transaction={name} #1: {said}" in output for name in ("nap-in-prepare.sql", "nap-in-load.sql"))
    # One instance per run, in the plan's order; a napping one is up for its limit at least.
    naps = sorted(first for first, last in seen.values() if last - first > 8)
    started = dict(zip([cell for cell in planned if cell in napping], naps))
    assert len(naps) == 2 and all(at[cell] - started[cell] < 20 for cell in napping)
    assert storlab_processes() == [] and owned.Manifest.all() == []
    assert not list(lab_dir.glob("storlab-*"))


@pytest.mark.parametrize("value", ["[30, 60]", "9", "604801", "true", '"1h"', "nan", "inf"])
def test_a_bad_run_limit_is_one_line(write_experiment, lab_dir, value):
    result = storlab("run", str(write_experiment(TINY.format(reps=2, disk=lab_dir, rows=10) + f"run_limit_s = {value}\n")))
    assert result.returncode == 2 and result.stdout == ""
    shown = value.replace("nan", "NaN").replace("inf", "Infinity")
    assert result.stderr == (f"storlab: exp.toml:{TINY.count(chr(10)) + 1}: workload.run_limit_s: expected a number of "
                             f"seconds from 10 to 604800 (one value, not a factor), got {shown}\n")


def test_the_run_limit_is_not_part_of_what_is_measured(write_experiment, lab_dir):
    default = experiment.load(write_experiment(TINY.format(reps=2, disk=lab_dir, rows=10)))
    declared = experiment.load(write_experiment(TINY.format(reps=2, disk=lab_dir, rows=10) + "run_limit_s = 600\n"))
    assert default.identity() == declared.identity()
    assert matrix.cells(default)[0].workload.run_limit == DEFAULT_RUN_LIMIT_S == 86400
    assert matrix.cells(declared)[0].workload.run_limit == 600
