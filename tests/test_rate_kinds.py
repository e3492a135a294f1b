"""pgbench and sysbench as workload kinds, against real servers storlab provisions and the real tools
(small: scale 1, a few seconds a run): the figures storlab records are the ones the tool printed and
logged, sysbench runs on both engines with their waits, a rate well below capacity is kept, "max" is
closed loop, and the client is stopped on every way out."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from storlab.engines import provision
from storlab.lab.layout import CellLayout, spec_for
from tests.commands import start, storlab
from tests.conftest import instances_up, prepared, stop_instance, stop_storlab, stopped_processes, storlab_processes
from tests.experiments import ONE_RUN

pytestmark = pytest.mark.engine

EXPERIMENT = ONE_RUN.replace("{layout}", "log_on = {log_on}")


def figures(out: Path) -> dict[str, dict[str, float]]:
    """cell label -> its one run's figures."""
    with sqlite3.connect(out / "storlab.sqlite") as db:
        rows = db.execute("SELECT c.label, f.name, f.value FROM figures f JOIN runs r ON r.id = f.run_id "
                          "JOIN cells c ON c.id = r.cell_id").fetchall()
    found: dict[str, dict[str, float]] = {}
    for label, name, value in rows:
        found.setdefault(label, {})[name] = value
    return found


def waits(out: Path) -> dict[str, dict[str, float]]:
    """cell label -> wait type -> seconds waited in its one run."""
    with sqlite3.connect(out / "storlab.sqlite") as db:
        rows = db.execute("SELECT c.label, w.wait_type, w.wait_s FROM waits w JOIN runs r ON r.id = w.run_id "
                          "JOIN cells c ON c.id = r.cell_id").fetchall()
    found: dict[str, dict[str, float]] = {}
    for label, name, seconds in rows:
        found.setdefault(label, {})[name] = seconds
    return found


def run(write_experiment, tmp_path, name: str, engine: str, workload: str, log_on: str = '"disk"') -> Path:
    out = tmp_path / name
    path = write_experiment(EXPERIMENT.format(name=name, engine=engine, log_on=log_on, workload=workload), f"{name}.toml")
    done = storlab("run", str(path), "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    return out


@pytest.mark.parametrize("version", ["15", "18"])
def test_the_tps_and_p99_recorded_are_the_ones_pgbench_printed_and_logged(lab_dir, version):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir}, version)
    with provision("postgres", spec, keep=False, connections=4) as instance:
        work, params = prepared(instance, "pgbench", scale=1, clients=2, duration_s=2, rate=400, latency_limit_ms=50)
        load = work.load(instance, params, {})
        try:
            assert len(load.open()) == 2
            measured = load.run()
            printed = "\n".join(load.client.ended.text)
            folder = load.folder
            with folder.written("txn") as files:
                rows = [line.split() for file in files for line in file.read().decode().splitlines()]
            log = np.array(rows, dtype=object)
        finally:
            load.close()
    assert f"pgbench (PostgreSQL) {version}" in subprocess.run([load.client.argv[0], "--version"],
                                                              capture_output=True, text=True).stdout
    tps = float(re.search(r"^tps = ([\d.]+) \(without initial connection time\)$", printed, re.M).group(1))
    lag = re.search(r"^rate limit schedule lag: avg ([\d.]+) \(max ([\d.]+)\) ms$", printed, re.M)
    done = log[log[:, 2] != "skipped"]
    latency_ms = done[:, 2].astype(float) / 1000
    f = measured.figures
    assert f["transactions_per_s"] == tps
    # From a histogram of the log: within 0.5 % of the transaction at each rank.
    assert f["latency_p99_ms"] == pytest.approx(np.percentile(latency_ms, 99, method="inverted_cdf"), rel=0.005)
    assert f["latency_p50_ms"] == pytest.approx(np.percentile(latency_ms, 50, method="inverted_cdf"), rel=0.005)
    assert f["transactions"] == len(done) == int(re.search(r"processed: (\d+)", printed).group(1))
    assert (f["schedule_lag_ms"], f["schedule_lag_max_ms"]) == (float(lag.group(1)), float(lag.group(2)))
    # The log's latencies are the ones pgbench averaged in its report (printed to 3 decimals).
    assert latency_ms.mean() == pytest.approx(float(re.search(r"latency average = ([\d.]+) ms", printed).group(1)), abs=0.001)
    assert f["target_rate"] == 400 and f["client_cpu_s"] > 0 and f["server_cpu_s"] > 0
    per_second = [p for p in measured.timeline if p[1] == "transactions_per_s"]
    assert len(per_second) == 2 and not folder.path.exists()


def test_a_rate_well_below_capacity_is_kept_and_max_is_the_closed_loop(write_experiment, tmp_path):
    """...and the curve shown is the answer's: the terminal, `show --json` and the report give the same
    figures, the highest rate inside the latency goal a number in the JSON."""
    # 24,000 transactions on a Poisson schedule vary by 0.65 %: 2.5 % is nearly four times that.
    out = run(write_experiment, tmp_path, "rated", "postgres",
              'kind = "pgbench"\nscript = "select-only"\nclients = 2\nwarmup_s = 1\nduration_s = 6\n'
              'rate = [1000, 4000, "max"]\nlatency_goal = { p99_ms = 1000 }')
    found = figures(out)
    rated, closed = found["rate=4000"], found["rate=max"]
    assert rated["transactions_per_s"] == pytest.approx(4000, rel=0.025)
    assert rated["sustained_percent"] == 100 and rated["achieved_percent"] == pytest.approx(100, abs=2.5)
    assert rated["schedule_lag_ms"] < 1000 / 4000 * 100  # the schedule's lag is a small share of a second's work
    assert "target_rate" not in closed and "sustained_percent" not in closed and closed["transactions_per_s"] > 0
    shown = storlab("show", str(out))
    assert shown.returncode == 0
    assert "rate curve: throughput achieved and latency (p50, p99) at each rate" in shown.stdout
    assert re.search(r"\(one layout\): 1000: [\d,]+ txn/s \(p50 [\d.]+, p99 [\d.]+ ms\); 4000: [\d,]+ txn/s "
                     r"\(p50 [\d.]+, p99 [\d.]+ ms\); max: [\d,]+ txn/s", shown.stdout)
    detailed = storlab("show", str(out), "--details")  # the notes (the client's CPU): behind --details
    assert detailed.returncode == 0, detailed.stderr
    assert "client CPU: the load generator used up to" in detailed.stdout
    curves = json.loads(storlab("show", str(out), "--json").stdout)["rate_curves"]
    (layout,) = curves["layouts"]
    assert [p["level"] for p in layout["points"]] == [1000, 4000] and layout["closed"]["level"] == "max"
    assert [p["achieved"] for p in layout["points"]] == [found["rate=1000"]["transactions_per_s"], rated["transactions_per_s"]]
    assert layout["points"][1]["latency_ms"]["p99"] == rated["latency_p99_ms"]
    goal = layout["goal"]
    # Both rates inside the goal in the one round: its highest is a floor, the 4000's throughput.
    assert (goal["highest_level"], goal["floor"]) == (4000, True)
    assert goal["reached"] == pytest.approx(rated["transactions_per_s"], rel=1e-12)  # a geometric mean of one round
    said = f"(one layout): 4000 txn/s in every round; where the goal is reached: at least {goal['reached']:,.0f} txn/s (1 round)"
    assert said in shown.stdout
    assert storlab("report", str(out)).returncode == 0
    page = (out / "report.html").read_text()
    assert "<h2>Latency against throughput</h2>" in page and html.escape(said) in page
    assert (out / "rate_curve.png").stat().st_size > 0


@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_sysbench_runs_on_both_engines_with_its_waits(write_experiment, tmp_path, engine):
    out = run(write_experiment, tmp_path, f"sb-{engine}", engine,
              'kind = "sysbench"\ntest = "oltp_write_only"\ntables = 2\ntable_size = 2000\nthreads = 2\nduration_s = 2')
    f = figures(out)["(single cell)"]
    assert f["transactions_per_s"] > 0 and f["transactions"] > 0
    assert f["latency_p50_ms"] <= f["latency_p95_ms"] <= f["latency_p99_ms"]
    recorded = waits(out)["(single cell)"]
    assert recorded.get("CPU", 0) > 0 and len(recorded) > 1, recorded  # the sessions' own waits, beside CPU
    with sqlite3.connect(out / "storlab.sqlite") as db:
        per_second = db.execute("SELECT count(*) FROM timeline WHERE metric = 'transactions_per_s'").fetchone()[0]
    assert per_second >= 1  # one a second; sysbench may leave out the last as it ends


def test_the_wal_flush_waits_set_the_disk_apart_from_the_ram_disk(write_experiment, tmp_path):
    out = run(write_experiment, tmp_path, "wal", "postgres",
              'kind = "pgbench"\nclients = 4\nduration_s = 3', log_on='["disk", "ram"]')
    found = waits(out)
    on_disk, on_ram = found["log_on=disk"], found["log_on=ram"]
    # A flush to a RAM disk returns at once: the WAL's sync waits are the disk's alone.
    assert on_disk.get("IO:WALSync", 0) > 10 * on_ram.get("IO:WALSync", 0), (on_disk, on_ram)


def measured_clients(proc: subprocess.Popen) -> list[psutil.Process]:
    """The measured pgbench under a storlab run (not pgbench -i, which builds the data), once it runs."""
    found = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if child.name() == "pgbench" and "--log" in child.cmdline():
                found.append(child)
        except psutil.Error:  # gone, or a zombie not reaped yet
            pass
    return found


def start_long_run(write_experiment, tmp_path, extra: str = "") -> subprocess.Popen:
    """A pgbench run of 10 minutes under `storlab run`, once its measured client runs."""
    path = write_experiment(EXPERIMENT.format(name="long", engine="postgres", log_on='"disk"',
                                              workload='kind = "pgbench"\nclients = 2\nduration_s = 600\n' + extra),
                            "long.toml")
    proc = start("run", path, "--no-trace", "--out", tmp_path / "r", stdout=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not measured_clients(proc):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    return proc


def test_an_interrupted_run_stops_the_client_and_the_server(write_experiment, tmp_path):
    proc = start_long_run(write_experiment, tmp_path)
    running = measured_clients(proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in running)
    assert storlab_processes() == []


def test_a_stalled_server_fails_the_run_and_stops_its_client(write_experiment, tmp_path):
    proc = start_long_run(write_experiment, tmp_path, "stall_after_s = 3")
    running = measured_clients(proc)
    stopped: list[int] = []
    try:
        stopped = stop_instance(instances_up()[0])
        output, errors = proc.communicate(timeout=180)
    finally:
        stop_storlab(proc)
        for pid in stopped_processes(stopped):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 1, output + errors
    assert "the server stopped answering for 3 s; its instance was stopped" in output
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in running)
    assert stopped_processes(stopped) == [] and storlab_processes() == []


def test_a_script_file_runs_weighted_and_a_mistake_in_it_is_named(write_experiment, lab_root, tmp_path):
    (lab_root / "mine.sql").write_text("\\set aid random(1, 100000)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n")
    (lab_root / "bad.sql").write_text("SELECT * FROM no_such_table;\n")
    out = run(write_experiment, tmp_path, "mine", "postgres",
              'kind = "pgbench"\nclients = 2\nduration_s = 1\nscript = { "mine.sql" = 3, "select-only" = 1 }')
    assert figures(out)["(single cell)"]["transactions_per_s"] > 0
    path = write_experiment(EXPERIMENT.format(name="bad", engine="postgres", log_on='"disk"',
                                              workload='kind = "pgbench"\nclients = 2\nduration_s = 1\nscript = "bad.sql"'),
                            "bad.toml")
    done = storlab("run", str(path), "--out", str(tmp_path / "bad"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith('storlab: bad.sql: pgbench could not run it: ') and "no_such_table" in done.stderr
    assert storlab_processes() == []
