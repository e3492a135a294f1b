"""The load generators' kinds without a server: what the experiment file may ask of pgbench and
sysbench (each mistake one line, exit 2, before anything starts), how their output is read, and the
rate curve's arithmetic."""

from __future__ import annotations

import io

import numpy as np
import pytest

from storlab.answer import rate_curve
from storlab.answer.analysis import CellResult
from storlab.answer.stats import summarize
from storlab.errors import RunFailed
from storlab.experiment import file as experiment
from storlab.report import rate_chart
from storlab.results.experiment_record import CellRecord
from storlab.results.runs import RunRecord
from storlab.workloads import KINDS, rates
from storlab.workloads import pgbench_log
from storlab.workloads.pgbench import programs_run
from storlab.workloads.sysbench import percentiles
from tests.commands import invoke

PGBENCH = """
name = "rated"
engine = "{engine}"
[placements]
disk = "./disk"
[layout]
data_on = "disk"
[workload]
kind = "pgbench"
{keys}
"""


def refused(write_experiment, keys: str, engine: str = "postgres", kind: str = "pgbench") -> str:
    body = PGBENCH.format(engine=engine, keys=keys).replace('"pgbench"', f'"{kind}"')
    done = invoke("run", write_experiment(body), "--dry-run")
    assert done.exit_code == 2, done.output
    assert done.output.count("\n") == 1 and "Traceback" not in done.output
    return done.output.strip()


@pytest.mark.parametrize("keys, said", [
    ('script = "tpcb"', 'exp.toml:10: workload.script: unknown script "tpcb": pgbench\'s built-in scripts are '
                        "tpcb-like, simple-update, select-only; a script file's name has a suffix, such as .sql"),
    ("rate = 0", "exp.toml:10: workload.rate: expected a rate in transactions a second (above 0, at most 1,000,000) "
                 'or "max" (closed loop) or a list of them, got 0'),
    ("rate = [500, -1]", "workload.rate: expected a rate"),
    ("rate = 5e7", "workload.rate: 50,000,000.0 transactions a second is more than the limit of 1,000,000"),
    ("rate = [1e-300, 500]\nduration_s = 5", "exp.toml:10: workload.rate: 1e-300 transactions a second over a 5 s run "
                                             "expects less than one transaction, so no latency or throughput could be "
                                             "measured; give at least 0.2"),
    ("rate = 0.05", "workload.rate: 0.05 transactions a second over a 10 s run expects less than one transaction"),
    ('rate = "fast"', 'workload.rate: expected a rate'),
    ("scale = 0", "workload.scale: expected a positive integer"),
    ("scale = 1_000_000", "workload.scale: 1,000,000 is more than the limit of 100,000"),
    ("duration_s = 2.5", "workload.duration_s: expected a whole number of seconds"),
    ("duration_s = 100_000", "workload.duration_s: 100,000 is more than the limit of 3,600"),
    ('script = "../outside.sql"', "workload.script: SQL file ../outside.sql: '..' leaves the experiment file's folder"),
    ('script = { "/etc/passwd.sql" = 1 }', "workload.script: SQL file /etc/passwd.sql: an absolute path"),
    ('script = { "tpcb-like" = 0 }', 'workload.script: the weight of "tpcb-like" must be an integer from 1 to 1000'),
    ("transactions = 100\nrate = 500", "workload.rate: a run of a fixed number of transactions at a rate lasts as "
                                       "long as the rate makes it"),
    ("transactions = 100\nduration_s = 5", "workload.transactions: give duration_s or transactions, not both"),
    ("clients = 2\njobs = 4", "workload.jobs: 4 threads for 2 clients"),
    ('protocol = "fast"', "workload.protocol: expected one of simple, extended, prepared"),
    ("latency_goal = { p99_ms = 20 }", "workload.latency_goal: the highest rate inside a goal needs a rate sweep"),
    ("rate = [1, 2]\nlatency_goal = { p42_ms = 20 }", 'workload.latency_goal: "p42_ms" is not a percentile'),
    ('headline = "errors"', 'workload.headline: "errors" is not a figure that ranks'),
    ("warmup_s = 1.5", "workload.warmup_s: whole seconds"),
])
def test_bad_pgbench_input_is_one_line(write_experiment, keys, said):
    assert said in refused(write_experiment, keys)


def test_a_kind_on_an_engine_it_does_not_support_is_one_line(write_experiment):
    assert refused(write_experiment, "", engine="mariadb") == (
        "storlab: exp.toml:9: workload.kind: pgbench does not run on MariaDB (it runs on postgres)")


def test_a_layout_they_cannot_honour_is_one_line(write_experiment):
    body = PGBENCH.format(engine="postgres", keys="").replace('data_on = "disk"', 'data_on = "disk"\ndata_files = 4')
    done = invoke("run", write_experiment(body), "--dry-run")
    assert done.exit_code == 2 and "layout.data_files: pgbench creates its own tables, each in one file" in done.output


@pytest.mark.parametrize("keys, said", [
    ('test = "oltp_nothing"', 'workload.test: unknown test "oltp_nothing" (sysbench\'s OLTP tests: oltp_read_write'),
    ("rate = 100.5", "workload.rate: 100.5: sysbench takes whole transactions a second"),
    ("threads = 0", "workload.threads: expected a positive integer"),
    ("tables = 100_000", "workload.tables: 100,000 is more than the limit of 1,024"),
    ('script = "x.sql"', "workload.script: unknown key"),
])
def test_bad_sysbench_input_is_one_line(write_experiment, keys, said):
    assert said in refused(write_experiment, keys, engine="mariadb", kind="sysbench")


def test_a_script_file_is_part_of_the_experiment(write_experiment, lab_root):
    (lab_root / "mine.sql").write_text("\\set aid random(1, 100000)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n")
    path = write_experiment(PGBENCH.format(engine="postgres", keys='script = { "mine.sql" = 3, "select-only" = 1 }'))
    first = experiment.load(path).identity()
    (lab_root / "mine.sql").write_text("SELECT 1;\n")
    assert experiment.load(path).identity()["sql"] != first["sql"]
    assert list(first["sql"]) == ["mine.sql"]


def test_the_headline_is_txn_per_s_closed_loop_and_p99_under_a_rate():
    pgbench = KINDS["pgbench"]
    assert pgbench.figures_of({"kind": "pgbench"})[0].name == "transactions_per_s"
    assert pgbench.figures_of({"kind": "pgbench", "rate": "max"})[0].name == "transactions_per_s"
    under = pgbench.figures_of({"kind": "pgbench", "rate": [500, "max"]})
    assert under[0].name == "latency_p99_ms" and {f.name for f in under if f.shown} >= {"sustained_percent"}
    assert pgbench.figures_of({"kind": "pgbench", "headline": "latency_p95_ms"})[0].name == "latency_p95_ms"


def test_the_latency_goal_reads_the_runs_and_is_not_what_is_measured(write_experiment):
    path = write_experiment(PGBENCH.format(engine="postgres", keys="rate = [100, 200]\nlatency_goal = { p99_ms = 20 }"))
    loaded = experiment.load(path)
    assert "latency_goal" not in loaded.identity()["workload"]
    assert loaded.answer_settings()["latency_goal"] == {"p99_ms": 20.0}


# -- reading the tools' output ----------------------------------------------------------------------


def test_pgbench_s_log_is_read_from_every_thread_s_file():
    first = io.BytesIO(b"0 1 2633 0 1795611858 622293 88\n0 2 skipped 0 1795611858 623650 9000\n"
                       b"0 3 failed 0 1795611859 900000 10\n")
    second = io.BytesIO(b"1 1 1348 0 1795611858 621041 12\n1 2 4000 0 1795611859 100000 7")  # no last newline
    log = pgbench_log.summary([first, second], 0.0, 2.0)
    assert (log.counted, log.skipped, log.failed, log.late) == (3, 1, 1, 2)
    assert log.span.first_start == pytest.approx(1795611858.622293 - 0.002633, abs=1e-6)
    assert log.span.last_end == pytest.approx(1795611859.1, abs=1e-6)
    assert log.latency_sum_ms == pytest.approx(2.633 + 1.348 + 4.0)
    assert (log.lag_sum_ms, log.lag_max_ms) == pytest.approx((0.107, 0.088))
    # A run shorter than a second is one bucket: its three completed transactions over its length.
    per_second = [(t, v) for t, name, v in log.timeline if name == "transactions_per_s"]
    assert [t for t, _ in per_second] == [0.0] and per_second[0][1] == pytest.approx(3 / 0.48034, rel=1e-5)


def _log(latency_us: np.ndarray, per_second: int, threads: int) -> list[io.BytesIO]:
    """pgbench's log of these latencies, `per_second` transactions ending each second, spread over threads."""
    ends = 1_800_000_000 + np.arange(len(latency_us)) / per_second + 1
    files = []
    for t in range(threads):
        rows = [f"{t} {i} {lat} 0 {int(end)} {int(round((end % 1) * 1e6)) % 1_000_000}"
                for i, (lat, end) in enumerate(zip(latency_us[t::threads], ends[t::threads]))]
        files.append(io.BytesIO(("\n".join(rows) + "\n").encode()))
    return files


def test_the_run_s_percentiles_are_within_half_a_percent_of_the_transaction_at_their_rank():
    rng = np.random.default_rng(7)
    latency_us = np.maximum(1, rng.lognormal(np.log(800), 1.0, 200_000).round()).astype(int)
    log = pgbench_log.summary(_log(latency_us, 20_000, 3), 0.0, None)
    assert log.counted == len(latency_us)
    for p in (50, 95, 99, 99.9):
        exact = np.percentile(latency_us / 1000, p, method="inverted_cdf")
        assert log.latency.percentile(p) == pytest.approx(exact, rel=0.005), p
    # Each second's percentiles are its own transactions', exactly.
    p99 = [v for t, name, v in log.timeline if name == "latency_p99_ms"]
    assert len(p99) == 10 and p99[3] == np.percentile(latency_us[60_000:80_000] / 1000, 99)


def test_the_histogram_s_size_does_not_grow_with_the_transactions():
    small, large = pgbench_log.Histogram(), pgbench_log.Histogram()
    small.add(np.array([1.25, 1.25]))
    large.add(np.random.default_rng(1).lognormal(0, 2, 1_000_000))
    assert small.counts.nbytes == large.counts.nbytes < 64 * 1024
    assert small.percentile(50) == small.percentile(99) == 1.25  # never outside what was seen


def test_a_negative_latency_fails_the_run():
    with pytest.raises(RunFailed, match="negative latency"):
        pgbench_log.summary([io.BytesIO(b"0 1 -9200000000000000 0 1795611858 622293\n")], 0.0, None)


@pytest.mark.parametrize("script, line", [
    ("\\shell id\n", 1), ("SELECT 1;\n\\setshell x echo 1\n", 2), ("\\SHELL id\n", 1),
    ("\\   shell id\n", 1), ("\\\\\nshell id\n", 1), ("\\shell\\\n id\n", 1), ("-- \\shell in a comment\n", 1)])
def test_every_spelling_of_a_meta_command_that_runs_a_program_is_found(script, line):
    found = programs_run("s.sql", script)
    assert [(f.file, f.line) for f in found] == [("s.sql", line)]


def test_meta_commands_that_run_nothing_are_not_found():
    assert programs_run("s.sql", "\\set aid random(1, 10)\n\\sleep 1 ms\nSELECT 'shell';\n\\shellx\n") == []


def test_percentiles_are_read_from_the_histogram_as_sysbench_reads_it():
    histogram = [(1.0, 50), (2.0, 45), (10.0, 4), (100.0, 1)]
    assert percentiles(histogram, (50, 95, 99, 100)) == [1.0, 2.0, 10.0, 100.0]


def test_a_shortfall_beyond_the_schedule_s_own_variation_is_not_sustained():
    assert rates.sustained(1000, 990, 10)  # 1 %: inside a Poisson schedule's spread over 10,000 transactions
    assert not rates.sustained(1000, 900, 10)
    assert rates.sustained(10, 8, 10)  # 100 transactions vary by 10: 20 % short is 2 sigma
    assert rates.rate_figures(None, 500, 10) == {}


# -- the rate curve ------------------------------------------------------------------------------------


def _cell(ident: str, level, runs: list[dict]) -> CellResult:
    records = [RunRecord(i, ident, rep, 0.0, "", {}, "15", 1, figures) for i, (rep, figures) in enumerate(runs, 1)]
    names = set.intersection(*(set(r.figures) for r in records))
    return CellResult(CellRecord(ident, f"rate={level}", {"workload.rate": level}), records,
                      {n: summarize([r.figures[n] for r in records]) for n in names}, [], "", {})


def _run(tps: float, p99: float, sustained: bool = True, target: float | None = None) -> dict:
    found = {"transactions_per_s": tps, "latency_p99_ms": p99, "latency_p50_ms": p99 / 4}
    if target is not None:
        found.update({"sustained_percent": 100.0 if sustained else 0.0, "target_rate": target})
    return found


def _points(cells: list[CellResult]) -> list[rate_curve.Point]:
    return [rate_curve.Point(c.cell.factors["workload.rate"], c, c.figures["transactions_per_s"],
                             {"latency_p99_ms": c.figures["latency_p99_ms"]},
                             c.figures["sustained_percent"].mean / 100) for c in cells]


def test_the_highest_rate_inside_the_goal_is_read_where_p99_reaches_it_in_each_round():
    cells = [
        _cell("a", 500, [(1, _run(500, 5, target=500)), (2, _run(500, 6, target=500))]),
        _cell("b", 1000, [(1, _run(1000, 10, target=1000)), (2, _run(1000, 12, target=1000))]),
        _cell("c", 2000, [(1, _run(1800, 30, target=2000)), (2, _run(1700, 52, target=2000))]),
        _cell("d", 4000, [(1, _run(1900, 900, False, target=4000)), (2, _run(1800, 1200, False, target=4000))]),
    ]
    goal = rate_curve.goal_answer(_points(cells), {"p99_ms": 20})
    assert goal.highest_level == 1000 and not goal.floor and goal.below == 0
    # Round 1: 20 ms is half way from 10 to 30 ms, so half way from 1000 to 1800 txn/s; round 2: 8/40 of 700.
    assert goal.rounds == {1: pytest.approx(1400), 2: pytest.approx(1140)}
    assert goal.crossing.mean == pytest.approx((1400 * 1140) ** 0.5) and 0 < goal.crossing.low < 1140 < 1400 < goal.crossing.high


def test_a_goal_every_rate_meets_is_a_floor_and_one_none_meets_is_said():
    inside = [_cell("a", 500, [(1, _run(500, 5, target=500))]), _cell("b", 900, [(1, _run(900, 6, target=900))])]
    goal = rate_curve.goal_answer(_points(inside), {"p99_ms": 20})
    assert goal.floor and goal.rounds == {1: 900} and goal.highest_level == 900
    outside = [_cell("a", 500, [(1, _run(500, 50, target=500))])]
    none = rate_curve.goal_answer(_points(outside), {"p99_ms": 20})
    assert none.crossing is None and none.below == 1 and none.highest_level is None


def test_the_knee_is_where_the_curve_bends():
    latencies = {500: 2.0, 1000: 2.2, 1500: 2.6, 2000: 4.0, 2500: 40.0}
    cells = [_cell(str(r), r, [(1, _run(r, p99, target=r))]) for r, p99 in latencies.items()]
    assert rate_curve.knee(_points(cells)).level == 2000
    assert rate_curve.knee(_points(cells[:2])) is None  # two points make no bend


def test_a_straight_curve_has_no_knee():
    cells = [_cell(str(r), r, [(1, _run(r, r / 100 + (0.2 if r == 1000 else 0), target=r))]) for r in (500, 1000, 1500, 2000)]
    assert rate_curve.knee(_points(cells)) is None  # a wobble of 0.2 ms on 5 to 20 ms is no bend


def test_the_rate_chart_labels_a_rate_both_layouts_kept_up_with_once(tmp_path):
    """Two layouts that both keep up with 1150 and 1650 txn/s draw those points one above the other:
    their labels would lie on each other, so each is written once; 3300, which one of them could not
    sustain, is labelled where each ended up. (Rates off the axis' ticks: the SVG names every text.)"""
    curves = []
    for label, p99 in (("log_on=disk", 4.0), ("log_on=ram", 3.6)):
        cells = [_cell(f"{label}{r}", r, [(1, _run(r, p99 * r / 1000, target=r))]) for r in (1150, 1650)]
        cells.append(_cell(f"{label}3300", 3300, [(1, _run(2100 if label == "log_on=disk" else 3250, 400,
                                                          sustained=label != "log_on=disk", target=3300))]))
        curves.append(rate_curve.Curve(label, _points(cells), None))
    drawn = rate_chart.chart(rate_curve.typed(rate_curve.RateAnswer(curves, None)), "t", tmp_path / "rate_curve.png")
    assert drawn.count("<!-- 1150 -->") == 1 and drawn.count("<!-- 1650 -->") == 1
    assert drawn.count("<!-- 3300 -->") == 1 and drawn.count("<!-- 3300 not sustained -->") == 1
