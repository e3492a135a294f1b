"""Who waits on what, and the waits per interval: the samplers' arithmetic with a fake clock and a
scripted reader (the engines' readers are tested against real servers in test_explain_engines.py)."""

import pytest

from storlab.probes import waiting_tasks
from storlab.probes.wait_timeline import WaitTimeline, points
from storlab.probes.waiting_tasks import WaitingTasksSampler, mean_per_run, resource_label, resources_of
from storlab.probes.waits import Wait, WaitCapture, WaitingTask, top_share
from storlab.results.runs import RunResult
from storlab.results.store import Store


class Script:
    """A reader that hands out one prepared reading per call."""

    def __init__(self, readings):
        self.readings = iter(readings)
        self.opened = self.closed = False

    def open(self, sessions):
        self.opened = sessions

    def read(self):
        return next(self.readings)

    def close(self):
        self.closed = True


def test_waiting_tasks_are_summed_by_the_time_each_sample_covers():
    ticks = iter([0.0, 0.1, 0.2, 0.5])
    stops = iter([False, False, False, True])
    reader = Script([
        [("Lock:extend", "lab_insert_1"), ("Lock:extend", "lab_insert_1"), ("LWLock:WALWrite", "WAL")],
        [("Lock:extend", "lab_insert_2")],
        [("Lock:extend", "lab_insert_1"), ("LWLock:BufferContent", "")],
    ])
    sampler = WaitingTasksSampler(reader, 0.1, clock=lambda: next(ticks), wait=lambda _: next(stops))
    sampler.sampler.loop()
    tasks = {(t.wait_type, t.resource): t for t in sampler.tasks()}
    assert tasks[("Lock:extend", "lab_insert_1")].seconds == pytest.approx(0.1 + 0.1 + 0.3)
    assert tasks[("Lock:extend", "lab_insert_1")].samples == 3
    assert tasks[("Lock:extend", "lab_insert_2")].seconds == pytest.approx(0.1)
    assert tasks[("LWLock:BufferContent", "")].seconds == pytest.approx(0.3)
    assert [t.wait_type for t in sampler.tasks()][0] == "Lock:extend"  # largest first


def test_a_failing_reader_fails_the_run_and_is_closed():
    class Broken(Script):
        def read(self):
            raise OSError("server gone")

    reader = Broken([])
    stops = iter([False, True])
    sampler = WaitingTasksSampler(reader, 0.01, wait=lambda _: next(stops))
    sampler.start([1, 2])
    with pytest.raises(Exception, match="waiting-task sampler failed: server gone"):
        sampler.stop()
    assert reader.opened == [1, 2] and reader.closed


def test_resources_share_out_each_top_wait():
    waits = [Wait("Lock:extend", 6.0), Wait("CPU", 3.0), Wait("IO:WALSync", 1.0)]
    runs = [
        [WaitingTask("Lock:extend", "lab_insert_0", 2.0, 20), WaitingTask("Lock:extend", "lab_insert_1", 1.0, 10)],
        [WaitingTask("Lock:extend", "lab_insert_0", 4.0, 40), WaitingTask("Lock:extend", "", 1.0, 10),
         WaitingTask("IO:WALSync", "WAL", 0.5, 5)],
    ]
    tasks = mean_per_run(runs)
    found = resources_of(top_share(waits), tasks)
    assert [w.wait_type for w in found] == ["Lock:extend", "CPU", "IO:WALSync"]
    extend = found[0].resources
    assert [(r.resource, r.seconds, r.samples) for r in extend] == [("lab_insert_0", 3.0, 60), ("", 0.5, 10), ("lab_insert_1", 0.5, 10)]
    assert [r.share for r in extend] == pytest.approx([75.0, 12.5, 12.5])
    assert resource_label(extend[1]) == "— (not named)"
    assert found[1].resources == []  # the sampler counts waits, never CPU
    assert [r.share for r in found[2].resources] == [100.0]


def test_many_resources_end_in_one_row_of_the_rest():
    tasks = [WaitingTask("Lock:extend", f"p{i}", 10.0 - i, 1) for i in range(10)]
    found = resources_of(top_share([Wait("Lock:extend", 1.0)]), tasks, limit=4)[0].resources
    assert [resource_label(r) for r in found] == ["p0", "p1", "p2", "7 others"]
    assert sum(r.share for r in found) == pytest.approx(100.0)
    assert found[-1].seconds == pytest.approx(sum(10.0 - i for i in range(3, 10)))


def test_waits_per_interval_are_rates_and_a_short_tail_is_folded():
    ticks = iter([10.0, 11.0, 12.0, 12.2])  # sampler's first tick, two whole seconds, then the stop
    stops = iter([False, False, True])
    readings = iter([
        {},  # at start
        {"Lock:extend": 3.0, "CPU": 0.5},
        {"Lock:extend": 5.0, "CPU": 1.5, "IO:WALSync": 0.25},
        {"Lock:extend": 5.6, "CPU": 1.7, "IO:WALSync": 0.25},  # the last 0.2 s, read at stop
    ])
    timeline = WaitTimeline(lambda: next(readings), 1.0, clock=lambda: next(ticks), wait=lambda _: next(stops))
    timeline._t0 = timeline._at = 10.0
    timeline._last = timeline.so_far()
    timeline.sampler.loop()
    timeline.record(0.2)
    got = {(p.t_s, p.metric): p.value for p in points(timeline.intervals)}
    assert got == pytest.approx({
        (0.0, "wait:Lock:extend"): 3.0, (0.0, "wait:CPU"): 0.5,
        (1.0, "wait:Lock:extend"): (2.0 + 0.6) / 1.2, (1.0, "wait:CPU"): (1.0 + 0.2) / 1.2,
        (1.0, "wait:IO:WALSync"): 0.25 / 1.2,
    })


def test_a_long_tail_keeps_its_own_interval_divided_by_its_width():
    got = {(p.t_s, p.metric): p.value for p in points([(0.0, 1.0, {"a": 2.0}), (1.0, 0.6, {"a": 0.3})])}
    assert got == pytest.approx({(0.0, "wait:a"): 2.0, (1.0, "wait:a"): 0.5})


def test_waiting_tasks_are_stored_with_their_run(tmp_path):
    with Store.open(tmp_path) as store:
        store.bind_experiment("e", "postgres", "src", {"k": 1}, 1, {}, [("a", "all", {})])
        facts = store.record_facts({}, {})
        tasks = [WaitingTask("Lock:extend", "lab_insert_1", 0.5, 5), WaitingTask("Lock:extend", "", 0.25, 3)]
        result = RunResult(0.0, [("elapsed_s", 1.0, "s")], WaitCapture("pg_wait_sampling", [Wait("Lock:extend", 0.8)]),
                           "15", [(0.0, "wait:Lock:extend", 0.8)], kept={waiting_tasks.PROBE.name: tasks})
        run_id = store.record_run("a", 1, result, facts)
        assert store.kept(waiting_tasks.PROBE, run_id) == tasks
        assert store.timeline(run_id) == [(0.0, "wait:Lock:extend", 0.8)]
