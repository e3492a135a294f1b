"""A Ctrl-C is never lost: Python prints and drops a KeyboardInterrupt raised inside a finalizer (a
weakref callback, a __del__), and a run caught there went on to its end, exit code 0; storlab's
handler remembers it, and the next point where a run moves forward raises it again. And a Ctrl-C at
any moment of an instance's making or ending leaves nothing of it."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from storlab import engines, interrupts
from storlab.lab import cgroups, instances, owned
from tests.devicetools import needs_root


@pytest.fixture
def handled(monkeypatch):
    monkeypatch.setattr(interrupts, "_interrupted", False)
    previous = signal.signal(signal.SIGINT, interrupts.interrupt)
    yield
    signal.signal(signal.SIGINT, previous)


class Interrupted:
    """Ctrl-C while Python finalizes it."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_dropped_in_a_finalizer_is_raised_at_the_next_point(handled, monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))
    interrupts.interruption_point()  # nothing asked yet
    Interrupted()
    assert dropped == [KeyboardInterrupt]  # Python's "Exception ignored in": it went no further
    with pytest.raises(KeyboardInterrupt):
        interrupts.interruption_point()


def test_only_the_main_thread_raises_it(handled):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    raised = []

    def elsewhere():
        try:
            interrupts.interruption_point()
        except KeyboardInterrupt:
            raised.append(True)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert raised == []


def test_a_ctrl_c_while_waiting_for_an_instance_ending_in_the_background_still_waits_for_it(handled):
    """A Ctrl-C during the wait before a measured run (quiesce) is raised once the instance has ended: a
    join it cut short would have Python take the thread for ended, and storlab exit with the instance's
    end half done (the SIGHUP test's folders left, now and then, in CI)."""
    ended = threading.Event()

    def end() -> None:  # an instance's end that goes on 0.2 s after the Ctrl-C came: it lands during the wait
        while not interrupts._interrupted:
            time.sleep(0.01)
        time.sleep(0.2)
        ended.set()

    ending = threading.Thread(target=end)
    with pytest.raises(KeyboardInterrupt):
        with instances.ending_in_background():
            ending.start()
            instances._ending.append(ending)  # as workspace() hands its end to the background
            threading.Timer(0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()  # as a terminal's
            instances.wait_ended()
    assert ended.is_set()


# -- a Ctrl-C at every moment of an instance's life -------------------------------------------------

# Where Python may run a signal's handler while an instance is made and ended: a call starting, a call
# to C returning (the rest of Python's check points are loops' jumps back, none of them between two
# steps that must go together). In these modules, whose steps make or remove what an instance owns.
MAKING = ("/storlab/lab/instances.py", "/storlab/lab/server_process.py", "/storlab/lab/owned.py", "/storlab/lab/clients.py",
          "/storlab/interrupts.py", "/storlab/processes.py", "/contextlib.py")


class CtrlC:
    """A profiler that, at the `at`-th check point, runs the SIGINT handler as Python would there."""

    def __init__(self, at: int):
        self.at, self.seen = at, 0

    def __call__(self, frame, event, arg) -> None:
        if event in ("call", "c_return") and frame.f_code.co_filename.endswith(MAKING):
            self.seen += 1
            if self.seen == self.at:
                signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)


def an_instance_life(lab_dir: Path, ctrl_c: CtrlC) -> None:
    """An instance made and ended as a run makes it, its server and a client stand-ins (`sleep`): the
    processes, folders, groups and records are the lab's; what runs in them is not the question."""
    sys.setprofile(ctrl_c)
    try:
        with instances.workspace(engines.engine("postgres"), {"disk": lab_dir}, False, signal.SIGTERM) as ws:
            ws.start(["sleep", "60"])
            with ws.clients.folder() as folder:
                ws.clients.start(["sleep", "60"], {}, folder)
    finally:
        sys.setprofile(None)


def left_of(made: list[str], lab_dir: Path) -> list[str]:
    """Whatever of the instances `made` is still there: a folder, a record, a group, a process."""
    found = [str(p) for iid in made for p in [*lab_dir.glob(f"storlab-{iid}*"), *Path("/tmp").glob(f"storlab-{iid}*")]]
    found += [m.instance_id for m in owned.Manifest.all() if m.instance_id in made]
    found += [str(p.path) for iid in made for name in (iid, f"{iid}-clients") if (p := cgroups.place(name)) and p.path.exists()]
    found += [f"pid {p.pid}" for p in psutil.Process().children() if p.name() == "sleep" and p.status() != "zombie"]
    return found


@needs_root
def test_a_ctrl_c_at_any_moment_of_an_instance_life_leaves_nothing_of_it(handled, lab_dir, monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(instances, "new_instance_id", lambda engine: made.append(owned.new_instance_id(engine)) or made[-1])
    counted = CtrlC(0)
    an_instance_life(lab_dir, counted)
    assert counted.seen > 100 and left_of(made, lab_dir) == []  # the profiler saw the life, which left nothing
    broken = {}
    for at in range(1, counted.seen + 1):
        interrupts.uninterrupted.deferred = interrupts._interrupted = False
        first = len(made)
        try:
            an_instance_life(lab_dir, CtrlC(at))
        except KeyboardInterrupt:
            pass
        if left := left_of(made[first:], lab_dir):
            broken[at] = left
    assert broken == {}, f"{len(broken)} of {counted.seen} moments left something: {broken}"
