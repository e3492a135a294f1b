"""Exact waits and IO per file, recorded by `storlab run` on real servers: PostgreSQL's trace points
through bpftrace (every lock wait named by its relation, counts in the wait table, each partition's
and WAL segment's writes), and each file's reads and stalls on a cold scan, on PostgreSQL (smgr trace
points) and MariaDB (performance_schema). The traces read their maps right after the load and end in
the background, never outliving storlab; --no-trace runs none."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from storlab.engines import provision
from storlab.engines.postgres import probe_costs
from storlab.engines.postgres.traced_waits import WITH_IO, WITH_READS, program, why_not_traced
from storlab.lab.layout import CellLayout, spec_for
from storlab.probes import bpftrace, traced_waits
from storlab.probes.bpftrace import Tracing
from storlab.probes.waits import Wait, WaitCapture
from storlab.results.runs import RunResult
from storlab.results.store import Store
from tests.commands import CHECKOUT, COMMAND, invoke, start, storlab
from tests.conftest import stop_storlab
from tests.devicetools import child, gone, read_line, wait_gone

# A string, so that it is judged when a traced test is about to run, not when the module is collected:
# why_not mounts tracefs where it is missing, and a run of the fast tier mounts nothing.
TRACED = pytest.mark.skipif("os.geteuid() != 0 or bpftrace.why_not('bpftrace') is not None",
                            reason="tracing needs root and bpftrace")
POSTGRES_15 = Path("/usr/lib/postgresql/15/bin/postgres")


# The seed-000 twin, small: 16 sessions inserting random UUIDs into 8 hash partitions.
TWIN = """
name = "twin"
engine = "postgres"
repetitions = 1

[placements]
disk = "{disk}"

[layout]
data_files = 8
data_on = "disk"

[workload]
kind = "random-insert"
connections = 16
rows_per_connection = 20000
batch = 1000
"""

SCAN = """
name = "scan"
engine = "{engine}"
repetitions = 1

[placements]
disk = "{disk}"

[layout]
data_files = 1
data_on = "disk"

[workload]
kind = "scan"
table_mb = 16
"""


def traces_of(state: Path) -> list[int]:
    """bpftrace processes a storlab with this state dir started (they inherit its environment; other
    sessions' runs on this machine have their own)."""
    found = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "bpftrace" and p.environ().get("STORLAB_STATE_DIR") == str(state):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


@contextmanager
def laid_out(tmp_path_factory, body: str, **fields) -> Iterator[tuple[Path, Path, dict, Path]]:
    """(experiment file, results folder, environment, state dir) of a run with a state dir of its own;
    its placement removed afterwards."""
    root = tmp_path_factory.mktemp("traced")
    lab = Path("/var/tmp") / f"storlab-test-traced-{os.getpid()}-{root.name}"
    lab.mkdir(mode=0o755, exist_ok=True)
    lab.chmod(0o755)  # the servers' OS user must reach it
    experiment = root / "exp.toml"
    experiment.write_text(body.format(disk=lab, **fields))
    state = tmp_path_factory.mktemp("state")
    try:
        yield experiment, root / "results", {**os.environ, "STORLAB_STATE_DIR": str(state)}, state
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(lab)], check=False)


def record(tmp_path_factory, body: str, *options: str, **fields) -> Path:
    with laid_out(tmp_path_factory, body, **fields) as (experiment, out, env, state):
        done = storlab("run", experiment, "--out", out, *options, env=env)
    assert done.returncode == 0, done.stderr
    assert traces_of(state) == []  # every bpftrace it started is gone
    return out


def table_rows(text: str, first: str) -> list[list[str]]:
    """The rows of the rich table whose header starts with `first`."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in re.split("[│┃]", line)]
        if cells[0] == first:
            inside = True
            continue
        if inside and len(cells) > 1:
            rows.append(cells)
        elif inside and not line.strip():
            inside = False
    return rows


def test_what_a_trace_prints_is_read_whole_and_in_order_while_it_writes():
    """A kept trace's output is read run after run while bpftrace writes it: each write lands at the
    end, never where a read here has just been (a run's flush once found the run before's maps). A
    real child writes 20,000 lines, each its own write, while they are read as a flush reads them."""
    output = bpftrace.appended_output()
    child = subprocess.Popen(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; echo DONE"],
                             stdout=output)
    lines, read_from, deadline = [], 0, time.monotonic() + 60
    while lines[-1:] != ["DONE"] and time.monotonic() < deadline:
        text = bpftrace.read_since(output, read_from)
        whole = text[:text.rfind(b"\n") + 1]
        read_from += len(whole)
        lines += whole.decode().splitlines()
    child.wait()
    assert lines == [f"line {i}" for i in range(20000)] + ["DONE"], (len(lines), lines[:3], lines[-3:])


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return record(tmp_path_factory, TWIN, "--trace-io")


@pytest.mark.engine
@TRACED
def test_every_extend_wait_is_named_by_its_partition_with_counts(twin):
    shown = storlab("waits", twin, "--resources")
    assert shown.returncode == 0, shown.stderr
    assert "pg_wait_sampling + bpftrace counts" in " ".join(shown.stdout.split())
    locks = table_rows(shown.stdout, "WaitType")  # the wait table's rows
    traced = [r for r in table_rows(shown.stdout.split("every lock wait traced")[1], "WaitType") if len(r) == 6]
    extend, current = [], None
    for row in traced:
        current = row[0] or current
        if current == "Lock:extend":
            extend.append(row)
    partitions = {r[1] for r in extend if re.fullmatch(r"lab_insert_[0-7]", r[1])}
    assert len(partitions) >= 6, shown.stdout
    for r in extend:
        assert float(r[2].replace(",", "")) > 0 and float(r[4]) > 0  # a count and an average wait
    wait_row = next(r for r in locks if r[0] == "Lock:extend")
    assert wait_row[3] not in ("", "—") and float(wait_row[3].replace(",", "")) > 0, shown.stdout  # WaitCount
    assert wait_row[5] not in ("", "—"), shown.stdout  # AvgWait_S, from the trace


@pytest.mark.engine
@TRACED
def test_the_twin_records_counts_waits_and_wal_files_and_exports_them(twin):
    with sqlite3.connect(twin / "storlab.sqlite") as db:
        counted = dict(db.execute("SELECT wait_type, wait_count FROM waits WHERE wait_count IS NOT NULL"))
        traced_s = db.execute("SELECT traced_s FROM waits WHERE wait_type = 'Lock:extend'").fetchone()[0]
        wal = db.execute("SELECT sum(writes), sum(write_bytes), sum(syncs) FROM file_io WHERE object = 'WAL'").fetchone()
        partitions = dict(db.execute("SELECT object, write_bytes FROM file_io WHERE object GLOB 'lab_insert_[0-7]'"))
        read, added = db.execute("SELECT sum(reads), sum(write_bytes) / 8192 FROM file_io "
                                 "WHERE object GLOB 'lab_insert_[0-7]'").fetchone()
        sources = dict(db.execute("SELECT file GLOB 'pg_tblspc/*' OR file GLOB 'base/*', group_concat(DISTINCT source) "
                                  "FROM file_io GROUP BY 1"))
    assert counted["Lock:extend"] > 0 and traced_s > 0
    assert any(name.startswith("LWLock:") for name in counted)
    # 320,000 rows of a UUID and a filler: megabytes of WAL, written and synced to its segments.
    assert wal[0] > 0 and wal[1] > 1e6 and wal[2] > 0
    # Each partition's file grows as rows go in: its writes are the extends, a share of the 8 each.
    assert len(partitions) == 8 and all(written > 1e6 for written in partitions.values()), partitions
    # PostgreSQL 15 counts each block a relation grows by as read: those are not reads, and are not listed.
    assert read < 0.05 * added, (read, added)
    # A relation's reads are the server's counts (pg_statio), timed only when asked for (--trace-reads);
    # the other files' (the WAL's, pg_xact's) are not counted, and say so.
    assert sources == {1: "bpftrace + pg_statio, reads untimed (storlab run --trace-reads)",
                       0: "bpftrace, reads not traced (storlab run --trace-reads)"}
    shown = storlab("waits", twin, "--files")
    rows = [r for r in table_rows(shown.stdout, "Object") if len(r) == 13]
    wal = [r for r in rows if r[0] == "WAL"]
    assert wal and all(r[3:7] == ["—"] * 4 for r in wal), shown.stdout  # no reads shown as 0
    assert all(r[3] != "—" and r[5:7] == ["—"] * 2 for r in rows if r[0].startswith("lab_insert")), shown.stdout
    said = " ".join(storlab("show", twin, "--details").stdout.split())  # the probes' cost: behind --details
    assert f"{probe_costs.COLLECTOR}; {probe_costs.SAMPLERS}; {probe_costs.TRACES_IO}" in said
    done = storlab("export", twin, "--format", "json")
    assert done.returncode == 0, done.stderr
    run = json.loads((twin / "runs.json").read_text())[0]
    assert {"Lock:extend"} <= {t["wait_type"] for t in run["traced_waits"]}
    assert any(f["object"] == "WAL" for f in run["file_io"])


@pytest.mark.engine
@pytest.mark.parametrize("engine,options", [pytest.param("postgres", ("--trace-reads",), marks=TRACED),
                                            pytest.param("postgres", (), marks=TRACED), ("mariadb", ())],
                         ids=["postgres-trace-reads", "postgres", "mariadb"])
def test_a_cold_scan_lists_the_tables_files_with_reads_and_read_stalls(tmp_path_factory, engine, options):
    out = record(tmp_path_factory, SCAN, *options, engine=engine)
    shown = storlab("waits", out, "--files")
    assert shown.returncode == 0, shown.stderr
    rows = [r for r in table_rows(shown.stdout, "Object") if len(r) == 13]
    # The table's own file (PostgreSQL: its main fork; MariaDB: lab_wide.ibd), not its free-space map.
    table = [r for r in rows if r[0] == "lab_wide"]
    assert table, shown.stdout
    reads = sum(float(r[3].replace(",", "")) for r in table)
    megabytes = sum(float(r[4].replace(",", "")) for r in table)
    assert reads > 0 and megabytes >= 4, shown.stdout  # a table of 16 MB of rows, read cold
    timed = engine == "mariadb" or "--trace-reads" in options
    if timed:
        assert all(r[5] != "—" and float(r[5]) > 0 for r in table if float(r[3].replace(",", "")) > 0)  # AvgRead_ms
    if engine == "postgres" and timed:
        assert all(r[6] != "—" for r in table if float(r[3].replace(",", "")) > 0)  # a histogram where traced
    if not timed:  # PostgreSQL's reads as the server counted them (pg_statio): untimed, its writes not traced
        assert all(r[5:7] == ["—", "—"] and r[7:] == ["—"] * 6 for r in rows), shown.stdout
        said = " ".join(shown.stdout.split())
        assert "reads untimed (storlab run --trace-reads)" in said and "writes not traced (storlab run --trace-io)" in said
    # The table built is the size declared, on both engines (InnoDB's rows are measured as it fills).
    with sqlite3.connect(out / "storlab.sqlite") as db:
        (built,) = db.execute("SELECT value FROM figures WHERE name = 'table_mb'").fetchone()
    assert 16 * 0.95 <= built <= 16 * 1.05, built


def test_what_costs_more_than_the_budget_is_traced_only_when_asked_for():
    """LWLock waits and each file's writes cost more than the lab's 1 % (--trace-io), every data-file
    read two uprobe traps (--trace-reads): none is in the default program, each is in its level's,
    and --no-trace with either is refused in one line."""
    binary = Path("/usr/lib/postgresql/15/bin/postgres")
    default = program(binary)
    assert "lock__wait__start" in default and "checkpoint__start" in default
    assert not any(probe in default for probe in ("lwlock__wait__start", "sys_enter_pwrite64", "smgr__md__read__start"))
    with_io = program(binary, WITH_IO)
    assert "lwlock__wait__start" in with_io and "sys_enter_pwrite64" in with_io and "smgr__md__read__start" not in with_io
    with_reads = program(binary, WITH_READS)
    assert "smgr__md__read__start /(@postmaster[pid] || @postmaster[(uint64)curtask->real_parent->tgid])/" in with_reads
    for more in ("--trace-io", "--trace-reads"):
        refused = invoke("run", "any.toml", "--no-trace", more)
        assert refused.exit_code == 2
        assert refused.stderr == f"storlab: {more}: --no-trace turns every trace off; give one or the other\n"


def test_a_binary_without_trace_points_is_named():
    reason = why_not_traced(Path("/bin/true"))
    assert reason is not None and ("without trace points" in reason or "root" in reason or "bpftrace" in reason)


def test_a_missing_bpftrace_is_one_note_and_nothing_runs():
    trace = bpftrace.Trace("BEGIN { exit(); }", bpftrace="storlab-no-such-bpftrace")
    trace.start()
    assert not trace.running and trace.stop() is None
    assert trace.note in ("tracing needs root", "storlab-no-such-bpftrace not found (Debian's bpftrace)")


def test_waits_say_why_counts_are_unavailable(tmp_path):
    capture = traced_waits.without_counts(WaitCapture("pg_wait_sampling", [Wait("Lock:extend", 2.0), Wait("CPU", 1.0)]),
                                          "tracing needs root")
    with Store.open(tmp_path) as store:
        store.bind_experiment("e", "postgres", "", {"x": 1}, 1, {}, [("a", "a", {})])
        facts = store.record_facts({"cpu": {"governor": "performance"}}, {"cpu": {"governor": "performance"}})
        store.record_run("a", 1, RunResult(0.0, [("elapsed_s", 1.0, "s")], capture, "15", []), facts)
    shown = invoke("waits", tmp_path, "--resources", "--files")
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())  # a table's title wraps to the table's width
    assert "source pg_wait_sampling (counts unavailable: tracing needs root)" in said
    assert "no traced lock waits: counts unavailable (tracing needs root)" in said
    assert "no per-file IO: counts unavailable (tracing needs root)" in said
    shown = invoke("show", tmp_path, "--details")  # the traces line: behind --details
    assert shown.exit_code == 0, shown.output
    assert "lock waits by relation and traced IO per file unavailable: tracing needs root (sampled waits kept)" in \
        " ".join(shown.stdout.split())


def test_traced_counts_sit_beside_the_sampled_time():
    capture = WaitCapture("pg_wait_sampling", [Wait("Lock:extend", 2.0), Wait("CPU", 1.0)])
    traced = [traced_waits.TracedWait("Lock:extend", "lab_insert_0", 30, 0.9, {1 << 20: 30}),
              traced_waits.TracedWait("Lock:extend", "lab_insert_1", 10, 0.3, {1 << 20: 10}),
              traced_waits.TracedWait("LWLock:WALWrite", "", 5, 0.05)]
    merged = traced_waits.with_counts(capture, traced)
    waits = {w.wait_type: w for w in merged.waits}
    assert merged.source == "pg_wait_sampling + bpftrace counts"
    assert waits["Lock:extend"].wait_s == 2.0 and waits["Lock:extend"].wait_count == 40
    assert waits["Lock:extend"].traced_s == pytest.approx(1.2)
    assert waits["LWLock:WALWrite"].wait_s == 0.0 and waits["LWLock:WALWrite"].wait_count == 5  # only traced
    assert waits["CPU"].wait_count is None
    from storlab.probes.waits import top_share

    row = next(r for r in top_share(merged.waits) if r.wait_type == "Lock:extend")
    assert row.avg_wait_s == pytest.approx(1.2 / 40)  # the trace's own average, not sampled / counted


SMALL = TWIN.replace("repetitions = 1", "repetitions = {reps}").replace("rows_per_connection = 20000",
                                                                      "rows_per_connection = 5000")

# A fresh host, in a mount namespace of the run's own: tracefs unmounted there (every layer of it), the
# host's left as it is for whatever else traces on it.
FRESH_HOST = 'while [ -d {tracefs}/events ]; do umount -l {tracefs} || exit 3; done; exec "$@"'


@pytest.mark.device
@TRACED
def test_a_run_on_a_fresh_host_mounts_tracefs_and_traces_every_run(tmp_path_factory):
    with laid_out(tmp_path_factory, SMALL, reps=2) as (experiment, out, env, state):
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                               FRESH_HOST.format(tracefs=bpftrace.TRACEFS), "sh", *COMMAND, "run", experiment,
                               "--out", out, "--trace-io"], capture_output=True, text=True, timeout=900,
                              env={**env, "PYTHONPATH": str(CHECKOUT)})
        assert done.returncode == 0, done.stderr
        assert traces_of(state) == []
    with sqlite3.connect(out / "storlab.sqlite") as db:
        runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
        traced = db.execute("SELECT count(DISTINCT run_id) FROM file_io WHERE source = 'bpftrace' OR source LIKE 'bpftrace,%'"
                            ).fetchone()[0]
        counted = db.execute("SELECT count(DISTINCT run_id) FROM waits WHERE wait_type LIKE 'Lock:%' AND wait_count > 0"
                             ).fetchone()[0]
    assert runs == 2 and traced == runs and counted == runs


@pytest.mark.device
@TRACED
def test_the_maps_are_read_at_once_and_the_trace_ends_in_the_background():
    trace = bpftrace.Trace('interval:ms:10 { @ticks = count(); @sizes["a", 1] = hist(4096); }')
    trace.start()
    pid = trace.pid
    assert pid is not None, trace.note
    time.sleep(0.3)  # some ticks
    maps = trace.stop()
    assert maps is not None, trace.note
    assert maps["ticks"][("",)] > 0 and list(maps["sizes"][("a", "1")]) == [4096]
    assert not trace.running
    bpftrace.wait_ended()
    assert gone(pid)


@pytest.mark.device
@TRACED
@pytest.mark.skipif(not POSTGRES_15.exists(), reason="PostgreSQL 15 is not installed")
@pytest.mark.parametrize("kept", [False, True], ids=["one run's trace", "kept across runs"])
def test_a_storlab_that_exits_waits_for_its_traces_to_end(kept):
    """The maps read, storlab exits at once: the trace, still detaching its PostgreSQL trace points
    (the kernel takes seconds), is reaped before storlab goes; one killed with its parent instead
    would still be detaching after it. A trace kept across runs ends with the invocation's block."""
    proc = child(f"""
        from contextlib import nullcontext
        from pathlib import Path
        from storlab.engines.postgres.traced_waits import filters, program
        from storlab.probes import bpftrace
        with bpftrace.attached_across_runs() if {kept} else nullcontext():
            for run in range(2):
                # no session of pid 1: nothing counted
                trace = bpftrace.Trace(program(Path("{POSTGRES_15}")), filters=filters([1], 1), across_runs=True)
                trace.start()
                print(trace.pid or f"not attached: {{trace.note}}", flush=True)
                assert trace.stop() is not None, trace.note
    """)
    said = [read_line(proc), read_line(proc)]
    assert all(line.isdigit() for line in said), said  # a trace that could not attach says why
    pids = {int(line) for line in said}
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert len(pids) == (1 if kept else 2)  # kept: one process traced both runs
    assert all(gone(pid) for pid in pids)


@pytest.mark.device
@TRACED
@pytest.mark.skipif(not POSTGRES_15.exists(), reason="PostgreSQL 15 is not installed")
def test_a_killed_storlab_takes_its_kept_trace_with_it():
    """SIGKILL leaves storlab no way out of its own: the kernel kills the kept trace with it."""
    proc = child(f"""
        import time
        from pathlib import Path
        from storlab.engines.postgres.traced_waits import filters, program
        from storlab.probes import bpftrace
        with bpftrace.attached_across_runs():
            trace = bpftrace.Trace(program(Path("{POSTGRES_15}")), filters=filters([1], 1), across_runs=True)
            trace.start()
            pid = trace.pid
            assert trace.stop() is not None, trace.note
            print(pid, flush=True)  # kept, between two runs
            time.sleep(600)
    """)
    try:
        pid = int(read_line(proc))
        assert not gone(pid)
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone(pid, timeout=60)


@pytest.mark.engine
def test_no_trace_runs_no_bpftrace_and_says_so(tmp_path_factory):
    out = record(tmp_path_factory, SMALL, "--no-trace", reps=1)
    said = " ".join(storlab("waits", out, "--resources", "--files").stdout.split())
    assert "(counts unavailable: traces turned off (--no-trace))" in said
    assert "no traced lock waits: counts unavailable (traces turned off (--no-trace))" in said
    # The server's own counts of each relation's reads, without a trace: untimed, no writes.
    assert "IO per file, per run (pg_statio, reads untimed (storlab run --trace-reads), writes not traced " \
        "(storlab run --trace-io), 1 of 1 runs)" in said
    shown = storlab("show", out, "--details")  # the traces line and the probes' cost: behind --details
    assert shown.returncode == 0, shown.stderr
    assert "traced IO per file unavailable: traces turned off (--no-trace) (sampled waits kept)" in \
        " ".join(shown.stdout.split())
    # What its probes cost is said, the traces' not among them: none ran.
    said = " ".join(shown.stdout.split())
    assert f"{probe_costs.COLLECTOR}; {probe_costs.SAMPLERS}" in said
    assert f"{probe_costs.SAMPLERS}; {probe_costs.TRACES.what}" not in said
    with sqlite3.connect(out / "storlab.sqlite") as db:
        assert db.execute("SELECT count(*) FROM waits WHERE wait_count IS NOT NULL").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM waits").fetchone()[0] > 0  # the sampled waits are kept


def _runs(out: Path) -> int:
    try:
        with sqlite3.connect(out / "storlab.sqlite") as db:
            return db.execute("SELECT count(*) FROM runs").fetchone()[0]
    except sqlite3.Error:  # not made yet
        return 0


@pytest.mark.engine
@TRACED
@pytest.mark.parametrize("moment, stop", [("while a trace counts", signal.SIGINT), ("as a run is recorded", signal.SIGINT),
                                          ("as a run is recorded", signal.SIGTERM)], ids=["ctrl-c counting",
                                                                                        "ctrl-c recording", "sigterm"])
def test_ctrl_c_leaves_no_trace_running(tmp_path_factory, moment, stop):
    with laid_out(tmp_path_factory, SMALL, reps=4) as (experiment, out, env, state):
        proc = start("run", experiment, "--out", out, env=env)
        try:
            deadline = time.monotonic() + 300
            while not (traces_of(state) if moment == "while a trace counts" else _runs(out)):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.02)
            proc.send_signal(stop)
            assert proc.wait(timeout=120) == 130, proc.stderr.read()
            assert traces_of(state) == []
        finally:
            stop_storlab(proc)


@pytest.mark.engine
@TRACED
def test_checkpoints_and_wal_switches_are_the_runs_timeline_events(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("postgres", spec, keep=False, connections=1) as inst, inst.admin() as conn:  # pg_switch_wal and CHECKPOINT are storlab's to run
        probe = inst.wait_probe()
        t0 = time.monotonic()
        probe.start([conn.execute("SELECT pg_backend_pid()").fetchone()[0]])
        try:
            conn.execute("CREATE TABLE lab_events AS SELECT g FROM generate_series(1, 10000) g")
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
        finally:
            capture = probe.stop()
        traced_s = time.monotonic() - t0
    assert capture.source.endswith("+ bpftrace counts"), capture.source
    points = [(at - t0, metric, value) for at, metric, value in capture.events]
    switches = [(t, v) for t, metric, v in points if metric == "event:wal_switch"]
    checkpoints = [(t, v) for t, metric, v in points if metric == "event:checkpoint"]
    assert len(switches) == 1 and switches[0][1] == 1.0 and 0 < switches[0][0] < traced_s, points
    # The checkpoint asked for, on the same clock: it starts after the switch and ends inside the trace.
    assert checkpoints and all(switches[0][0] < t and 0 < duration and t + duration < traced_s
                               for t, duration in checkpoints), points


@pytest.mark.engine
@TRACED
def test_one_trace_across_runs_counts_each_run_apart_and_only_its_instance(lab_dir, tmp_path):
    """Two runs on one instance through the kept trace, another instance of the same binary busy
    beside the second: run 1's WAL switch and table are in run 1's counts only, and nothing of the
    other instance is in either."""
    other_dir = Path(tempfile.mkdtemp(prefix="storlab-test-other-", dir="/var/tmp"))
    other_dir.chmod(0o755)
    pids, captures = [], []
    try:
        with bpftrace.attached_across_runs(), \
                provision("postgres", spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir}), keep=False,
                          connections=1) as inst, inst.admin() as conn, \
                provision("postgres", spec_for(CellLayout(data_on="disk"), {}, {"disk": other_dir}), keep=False,
                          connections=1) as other, other.admin() as other_conn:  # WAL switches and checkpoints: the superuser's
            for run in (1, 2):
                probe = inst.wait_probe(Tracing.IO)  # the writes tell the runs' tables apart
                probe.start([conn.execute("SELECT pg_backend_pid()").fetchone()[0]])
                try:
                    pids.append(probe.trace.pid)
                    if run == 1:
                        conn.execute("CREATE TABLE lab_run1 AS SELECT g FROM generate_series(1, 10000) g")
                        conn.execute("SELECT pg_switch_wal()")
                    else:
                        conn.execute("CREATE TABLE lab_run2 AS SELECT g FROM generate_series(1, 10000) g")
                        other_conn.execute("CREATE TABLE lab_other AS SELECT g FROM generate_series(1, 10000) g")
                        other_conn.execute("SELECT pg_switch_wal()")
                        other_conn.execute("CHECKPOINT")
                    conn.execute("CHECKPOINT")
                finally:
                    captures.append(probe.stop())
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(other_dir)], check=False)
    assert pids[0] is not None and pids == [pids[0]] * 2  # one bpftrace traced both runs
    bpftrace.wait_ended()
    assert gone(pids[0])  # and ended with the block
    for capture in captures:
        assert capture.source.endswith("+ bpftrace counts"), capture.source
    objects = [{f.object for f in capture.files} for capture in captures]
    switches = [[e for e in capture.events if e[1] == "event:wal_switch"] for capture in captures]
    assert "lab_run1" in objects[0] and "lab_run2" not in objects[0], objects
    # run 1's writes went with run 1 (twice in a full suite, run 2's maps were garbled or run 1's: the
    # output file's reads moved the offset bpftrace wrote at; test_what_a_trace_prints_is_read_whole…)
    assert "lab_run2" in objects[1] and "lab_run1" not in objects[1], \
        [[(f.file, f.object, f.writes, f.syncs) for f in capture.files] for capture in captures]
    assert not any("lab_other" in found for found in objects), objects
    assert len(switches[0]) == 1 and switches[1] == [], switches  # the other instance's switch is not counted


@pytest.mark.engine
@TRACED
def test_two_traced_experiments_at_once_each_keep_every_count(tmp_path_factory):
    """Two `storlab run`s on one host at the same time (a second experiment, a fleet worker): each
    traces its own instances only (its own bpftrace, its sessions and postmaster in its filter), and
    every run of both keeps its lock waits counted and its files' IO."""
    small = TWIN.replace("repetitions = 1", "repetitions = 3").replace("connections = 16", "connections = 8") \
        .replace("rows_per_connection = 20000", "rows_per_connection = 4000")
    with laid_out(tmp_path_factory, small) as (first, first_out, first_env, _), \
            laid_out(tmp_path_factory, small.replace('name = "twin"', 'name = "twin2"')) as (second, second_out, second_env, _):
        procs = [start("run", exp, "--out", out, "--trace-io", env=env, stdout=subprocess.PIPE)
                 for exp, out, env in ((first, first_out, first_env), (second, second_out, second_env))]
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err
    for out in (first_out, second_out):
        with sqlite3.connect(out / "storlab.sqlite") as db:
            runs = [r for (r,) in db.execute("SELECT id FROM runs")]
            assert len(runs) == 3
            for run in runs:
                (source,) = db.execute("SELECT wait_source FROM runs WHERE id = ?", (run,)).fetchone()
                counted = dict(db.execute("SELECT wait_type, wait_count FROM waits WHERE run_id = ? AND wait_count > 0",
                                          (run,)).fetchall())
                files = db.execute("SELECT count(*) FROM file_io WHERE run_id = ? AND writes > 0", (run,)).fetchone()[0]
                assert source.endswith("+ bpftrace counts") and counted and files > 0, (out, run, source, counted, files)
