"""`duration_s = { max = …, until = "steady" }`: a pgbench run ends once the per-second throughput its
figures will keep holds SNIA's range and excursion (fio's `ss=` for a database), read from pgbench's
progress lines while it runs; its figures are of what ended before it was stopped, and the answer says per run
why it ended. A kind that cannot end a run early refuses it in one line."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from storlab import steady_state
from storlab.workloads.pgbench import _per_second as per_second
from storlab.workloads.rates import Until
from storlab.workloads.tool import SteadyWatch
from tests.commands import invoke, storlab
from tests.experiments import BASE, changed
from tests.test_warmup_cut import PGBENCH, RAMP_SQL, SYSBENCH

UNTIL = 'duration_s = { max = 60, until = "steady", least = 10 }'


@pytest.mark.parametrize("base, old, new, line, said", [
    (SYSBENCH, "duration_s = 20", UNTIL, 16,
     'workload.duration_s: until = "steady" cannot end a sysbench run: it prints its totals and histogram only when '
     "its run ends by its own clock (a run stopped early has no figures); give duration_s in seconds"),
    (BASE, "batch = 100", "batch = 100\n" + UNTIL, 19,
     'workload.duration_s: "random-insert" does not run by duration, so its runs cannot end once steady '
     '(until = "steady" ends a pgbench run by duration)'),
    (PGBENCH, "duration_s = 20", 'duration_s = { max = 60, until = "steady", least = 5 }', 17,
     "workload.duration_s: least: expected a whole number of seconds from 10 to 60, got 5"),
    (PGBENCH, "duration_s = 20", 'duration_s = { until = "steady" }', 17,
     "workload.duration_s: max: a run until steady needs its cap, the most seconds it may last"),
    (PGBENCH, "duration_s = 20", 'duration_s = { max = 60, until = "settled" }', 17,
     'workload.duration_s: until: expected "steady", got "settled"'),
    (PGBENCH, "duration_s = 20", 'duration_s = { max = 60, until = "steady", least = 70 }', 17,
     "workload.duration_s: least: expected a whole number of seconds from 10 to 60, got 70"),
    (PGBENCH, "duration_s = 20", 'duration_s = { max = 60, until = "steady", window = 10 }', 17,
     'workload.duration_s: "window" is not a key of a run until steady (one of max, until, least)'),
], ids=["sysbench", "random-insert", "short least", "no max", "until settled", "least past max", "unknown key"])
def test_a_run_until_steady_that_cannot_be_is_refused_in_one_line(lab_root, base, old, new, line, said):
    path = lab_root / "fz.toml"
    path.write_text(changed(old, new, lab_root / "disk", base))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr == f"storlab: fz.toml:{line}: {said}\n"


def progress(values: list[float]) -> list[tuple[float, str]]:
    return [(0.0, f"progress: {i + 1}.0 s, {v:.1f} tps, lat 1.000 ms stddev 0.100, 0 failed") for i, v in enumerate(values)]


def test_the_watch_stops_at_the_first_second_its_measured_part_holds():
    rng = np.random.default_rng(5)
    values = list(np.r_[np.linspace(300, 1000, 15), np.full(45, 1000.0)] * rng.lognormal(0, 0.03, 60))
    watch = SteadyWatch(Until(max=60, least=20), 15.0, per_second)
    lines = progress(values)
    stopped = next(i for i in range(1, len(lines) + 1) if watch.steady(lines[:i]))
    # Seconds from 15 on are measured; least 20 of them, and one more that the answer leaves out.
    assert stopped == next(i for i in range(36, 61) if steady_state.snia_holds(np.array(values[15:i])))
    assert watch.stopped == {"least_s": 20, "max_s": 60, "by": "steady", "at_s": float(stopped)}
    ramping = SteadyWatch(Until(max=60, least=20), 0.0, per_second)
    assert not ramping.steady(lines)  # its ramp in its measured part: never steady
    ramping.reached_max()
    assert ramping.stopped_at is None and ramping.stopped == {"least_s": 20, "max_s": 60, "by": "max", "at_s": 60.0}


def test_the_watch_counts_from_the_declared_warmup():
    watch = SteadyWatch(Until(max=30, least=10), 5.0, per_second)
    assert not watch.steady(progress([1000.0] * 15)) and len(watch.measured()) == 10  # seconds 6 to 15
    assert watch.steady(progress([1000.0] * 16)) and watch.stopped["at_s"] == 16.0


def test_under_a_found_warmup_the_least_length_counts_after_the_warmup_found_so_far():
    rng = np.random.default_rng(9)
    values = list(np.r_[np.linspace(300, 1000, 12), np.full(48, 1000.0)] * rng.lognormal(0, 0.03, 60))
    watch = SteadyWatch(Until(max=60, least=10), 0.0, per_second, finds=True)
    lines = progress(values)
    stopped = next(i for i in range(1, len(lines) + 1) if watch.steady(lines[:i]))
    t = np.arange(stopped, dtype=float)
    cut = steady_state.warmup_to_cut(t, np.array(values[:stopped]))
    assert cut >= 6 and stopped - cut > 10 and len(watch.measured()) == stopped - cut


@pytest.mark.engine
def test_a_pgbench_run_ends_once_steady_and_its_figures_end_there(write_experiment, lab_root, tmp_path):
    """At 200 transactions a second (a schedule keeps the throughput steady on a busy machine), a script
    whose transactions sleep 50 ms in their session's first 4 s: the schedule falls behind, catches up,
    then holds; the run ends once 10 s after the warm-up found hold, long before its max, the warm-up found and cut; the
    figures are the log's up to the stop."""
    body = changed("duration_s = 20", 'script = "ramp.sql"\nclients = 2\nrate = 200\nwarmup_s = "found"\n' + UNTIL,
                   lab_root / "disk", PGBENCH).replace("repetitions = 2", "repetitions = 1")
    path = write_experiment(body, "until.toml")
    (path.parent / "ramp.sql").write_text(RAMP_SQL.replace("0.005", "0.05"))
    out = tmp_path / "out"
    done = storlab("run", str(path), "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    with sqlite3.connect(out / "storlab.sqlite") as db:
        conditions = [json.loads(c) for (c,) in db.execute("SELECT conditions FROM runs")]
        figures = dict(db.execute("SELECT name, value FROM figures"))
    for held in conditions:
        stopped = held["stopped"]
        assert stopped["by"] == "steady" and 14 <= stopped["at_s"] < 40 and held["warmup_found"]
        assert 3 <= held["warmup_s"] <= 10
    assert figures["elapsed_s"] < 40
    assert figures["transactions_per_s"] == pytest.approx(figures["transactions"] / figures["elapsed_s"])
    said = json.loads(storlab("show", str(out), "--json").stdout)["steadiness"]
    assert all(r["steady"] for c in said["cells"] for r in c["runs"]), [s["said"] for c in said["cells"] for r in c["runs"] for s in r["series"]]
    assert any("warm-up found and cut" in line and "stopped steady at" in line for line in said["lines"])
