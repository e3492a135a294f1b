"""What a run held, on real servers storlab provisions (small: scale 1, one run a cell): a 40 s pgbench
run with checkpoint_timeout = 30s is judged for a steady state, its warm-up found, and holds a checkpoint
at the time it happened; a 3 s run is said to be measured without one, shorter than checkpoint_timeout;
a 5 s MariaDB run wrote less redo than its log holds: shorter than a checkpoint cycle (InnoDB's
checkpoint may still move in it, the page cleaner flushing what came before)."""

from __future__ import annotations

import json

import pytest

from tests.commands import storlab

pytestmark = pytest.mark.engine

PGBENCH = """
name = "run-length"
engine = "postgres"
repetitions = 1
[placements]
disk = "./disk"
[layout]
data_on = "disk"
[workload]
kind = "pgbench"
script = "tpcb-like"
scale = 1
clients = 2
rate = 200  # the checkpoints need the run's length, not the machine's cores (the suite is CPU-bound)
duration_s = [3, 38]
warmup_s = 2
[engine_settings]
checkpoint_timeout = "30s"
"""

SYSBENCH = """
name = "run-length-mariadb"
engine = "mariadb"
repetitions = 1
[placements]
disk = "./disk"
[layout]
data_on = "disk"
[workload]
kind = "sysbench"
test = "oltp_write_only"
tables = 1
table_size = 10_000
threads = 2
duration_s = 5
"""


def answer(write_experiment, tmp_path, body: str) -> dict:
    out = tmp_path / "out"
    done = storlab("run", str(write_experiment(body)), "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    shown = storlab("show", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_a_run_across_a_checkpoint_holds_it_and_a_short_one_is_said_to_hold_none(write_experiment, tmp_path, lab_dir):
    found = answer(write_experiment, tmp_path, PGBENCH)
    cells = {c["label"]: c for c in found["steadiness"]["cells"]}
    long, short = cells["duration_s=38"], cells["duration_s=3"]
    run = long["runs"][0]
    assert run["steady"] is not None and run["series"][0]["metric"] == "transactions_per_s"
    assert run["found_warmup_s"] is not None and run["declared_warmup_s"] == 2
    assert run["checkpoints"] >= 1 and run["checkpoint_setting"] == "checkpoint_timeout" and run["checkpoint_cycle_s"] == 30
    assert all(2 <= t <= 41 for t in run["checkpoint_times_s"])
    assert not any("without a checkpoint" in line for line in long["lines"])
    assert short["runs"][0]["checkpoints"] == 0 and short["runs"][0]["steady"] is None
    assert "measured without a checkpoint: a 3.0 s run is shorter than checkpoint_timeout 30s" in short["lines"]
    # At a glance, one line naming the cell without a checkpoint; the sentence per cell behind --details.
    (none,) = [c for c in found["concerns"] if c["kind"] == "no checkpoint"]
    assert none["cells"] == [short["cell"]] and (none["runs"], none["of_runs"]) == (1, 2)
    shown = storlab("show", str(tmp_path / "out"))
    assert shown.returncode == 0, shown.stderr
    assert " ".join(none["line"].split()) in " ".join(shown.stdout.split())
    detailed = storlab("show", str(tmp_path / "out"), "--details")
    assert detailed.returncode == 0, detailed.stderr
    assert "measured without a checkpoint" in detailed.stdout


def test_a_short_mariadb_run_is_said_to_hold_no_checkpoint(write_experiment, tmp_path, lab_dir):
    found = answer(write_experiment, tmp_path, SYSBENCH)
    (cell,) = found["steadiness"]["cells"]
    run = cell["runs"][0]
    assert run["checkpoint_setting"] == "innodb_log_file_size" and 0 < run["log_bytes"] < run["checkpoint_cycle_bytes"]
    assert any(line.startswith("shorter than a checkpoint cycle: a 5.0 s run wrote ") for line in cell["lines"])


CYCLES = PGBENCH.replace('name = "run-length"', 'name = "checkpoint-cycles"').replace(
    "duration_s = [3, 38]\nwarmup_s = 2\n", "checkpoint_cycles = 1\n")


def test_a_run_of_whole_checkpoint_cycles_lasts_them_and_places_its_checkpoints_on_the_cycle(write_experiment, tmp_path,
                                                                                            lab_dir):
    found = answer(write_experiment, tmp_path, CYCLES)
    (run,) = found["steadiness"]["cells"][0]["runs"]
    assert run["measured_s"] == pytest.approx(30, abs=1) and run["checkpoint_cycle_s"] == 30
    assert run["checkpoint_phases"] == [pytest.approx(t / 30) for t in run["checkpoint_times_s"]]
    assert all(0 <= phase <= 1.05 for phase in run["checkpoint_phases"])
