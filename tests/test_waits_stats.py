import pytest
from rich.console import Console

from storlab.probes.recorders import SessionsSched, sched_delta, sched_time
from storlab.sampler import Sampler
from storlab.probes.waits import Wait, delta, is_benign, mean_per_run, top_share


def test_top_share_keeps_the_row_that_crosses_95():
    waits = [Wait("a", 60), Wait("b", 30), Wait("c", 6), Wait("d", 3), Wait("e", 1)]
    rows = top_share(waits)
    assert [r.wait_type for r in rows] == ["a", "b", "c"]  # 60, 90, then 96 crosses 95: kept
    assert rows[2].percentage == pytest.approx(6.0)


def test_top_share_exactly_95_stops_there_and_counts_give_averages():
    rows = top_share([Wait("a", 95, wait_count=10), Wait("b", 5)])
    assert [r.wait_type for r in rows] == ["a"]
    assert rows[0].avg_wait_s == pytest.approx(9.5)
    assert top_share([]) == []


def test_delta_benign_and_mean():
    assert delta({"x": 5, "y": 2}, {"x": 9, "y": 2, "z": 1}) == {"x": 4, "z": 1}
    benign = frozenset({"Client:ClientRead", "Activity:*"})
    assert is_benign("Activity:WalWriterMain", benign) and is_benign("Client:ClientRead", benign)
    assert not is_benign("IO:DataFileRead", benign)
    mean = {w.wait_type: w for w in mean_per_run([[Wait("a", 2, 4)], [Wait("a", 4, None), Wait("b", 2)]])}
    assert mean["a"].wait_s == 3 and mean["a"].wait_count is None and mean["b"].wait_s == 1


def test_sampler_weights_each_sample_by_the_time_it_covers():
    ticks = iter([0.0, 0.05, 0.10, 0.25])
    stops = iter([False, False, False, True])
    weights = []
    sampler = Sampler(0.05, weights.append, clock=lambda: next(ticks), wait=lambda _: next(stops))
    sampler.loop()
    assert weights == pytest.approx([0.05, 0.05, 0.15])


def test_sched_time_reads_proc_schedstat(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "schedstat").write_text("2000000000 500000000 10\n")
    before = sched_time([7], proc=tmp_path)
    (tmp_path / "7" / "schedstat").write_text("3500000000 600000000 12\n")
    d = sched_delta(before, sched_time([7], proc=tmp_path))
    assert d.cpu_s == pytest.approx(1.5) and d.runqueue_s == pytest.approx(0.1)
    assert sched_time([999], proc=tmp_path) is None


def test_a_session_that_ended_counts_its_last_reading(tmp_path):
    for pid in (7, 8):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "schedstat").write_text("1000000000 0 1\n")
    sched = SessionsSched([7, 8], proc=tmp_path)
    (tmp_path / "7" / "schedstat").write_text("2000000000 100000000 2\n")
    assert sched.since_start().cpu_s == pytest.approx(1.0)  # a reading while both live
    (tmp_path / "7" / "schedstat").unlink()  # session 7 disconnected
    (tmp_path / "8" / "schedstat").write_text("1500000000 0 2\n")
    assert sched.since_start().cpu_s == pytest.approx(1.5)
    (tmp_path / "7" / "schedstat").write_text("5000 0 1\n")  # another process took the pid
    assert sched.since_start().cpu_s == pytest.approx(1.5)
    assert SessionsSched([999], proc=tmp_path).since_start() is None


def test_a_cells_file_io_is_the_mean_of_the_runs_that_measured_each_figure():
    """A cell whose runs mixed tracing levels (a resumed run, workers with different flags): its reads
    counted over the runs that counted them, their times over the runs that timed them, its writes over
    the runs that traced them; a file is shown as its most fully measured record."""
    from storlab.probes.file_io import READS_UNTIMED, READS_UNTRACED, WRITES_UNTRACED, measured
    from storlab.probes.waits import FileIO
    from storlab.probes.file_io import mean_per_run as files_per_run

    timed = [FileIO("base/5/16390", "lab_wide", "disk", reads=100, read_bytes=819200, read_s=0.5, writes=10,
                    source="bpftrace")]
    untraced = [FileIO("base/5/16390", "lab_wide", "disk", writes=30, source=f"bpftrace, {READS_UNTRACED}")]
    counted = [FileIO("base/5/16390", "lab_wide", "disk", reads=40, read_bytes=327680,
                      source=f"pg_statio, {READS_UNTIMED}, {WRITES_UNTRACED}")]
    (mixed,) = files_per_run([timed, untraced, counted])
    assert (mixed.reads, mixed.read_bytes) == (70, 573440)  # the timed and the counted run
    assert (mixed.read_s, mixed.writes) == (0.5, 20)  # the one run that timed them; the two that traced writes
    assert mixed.source == "bpftrace" and measured(mixed) == (True, True, True)
    (none,) = files_per_run([untraced, untraced])
    assert none.reads == 0 and measured(none) == (False, False, True)  # the table says "—": reads not traced
    (by_server,) = files_per_run([counted, counted])
    assert (by_server.reads, by_server.writes) == (40, 0) and measured(by_server) == (True, False, False)
    # A run that counted its relations' reads counts them although its temporary files' were not traced.
    temp = FileIO("pgsql_tmp/pgsql_tmp*", "temporary files", "disk", writes=5, source=f"bpftrace, {READS_UNTRACED}")
    files = {f.object: f for f in files_per_run([[counted[0], temp], [temp]])}
    assert files["lab_wide"].reads == 40 and measured(files["temporary files"])[0] is False


def test_the_file_table_shows_what_was_not_measured_as_a_dash():
    from storlab.answer.traced import file_rows
    from storlab.probes.file_io import READS_UNTIMED, WRITES_UNTRACED
    from storlab.probes.waits import FileIO
    from storlab.show.traced import file_table

    counted = FileIO("base/5/16390", "lab_wide", "disk", reads=40, read_bytes=327680,
                     source=f"pg_statio, {READS_UNTIMED}, {WRITES_UNTRACED}")
    traced = FileIO("pg_wal/000000010000000000000001", "WAL", "log", writes=3, write_bytes=24576, write_s=0.003,
                    syncs=3, sync_s=0.006, write_histogram={1024: 3}, source="bpftrace, reads not traced")
    console = Console(width=200, record=True)
    console.print(file_table("files", file_rows([counted, traced])))
    rows = {line.split("│")[0].strip(): [c.strip() for c in line.split("│")[3:]] for line in
            console.export_text().splitlines() if "│" in line}
    assert rows["lab_wide"] == ["40", "0.33", "—", "—"] + ["—"] * 6
    assert rows["WAL"] == ["—"] * 4 + ["3", "0.02", "1.000", "≤0.00205", "3", "2.000"]
    # Past the limit the rest is one row, summed, a dash where none of them measured a figure.
    console = Console(width=200, record=True)
    console.print(file_table("files", file_rows([traced, counted, counted], limit=2)))
    rows = {line.split("│")[0].strip(): [c.strip() for c in line.split("│")[3:]] for line in
            console.export_text().splitlines() if "│" in line}
    assert rows["2 others"] == ["80", "0.66", "—", "—"] + ["—"] * 6
