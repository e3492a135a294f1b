"""A Ctrl-C is never lost: Python prints and drops a KeyboardInterrupt raised inside a finalizer (a
weakref callback, a __del__), and a run caught there went on to its end, exit code 0; storlab's
handler remembers it, and the next point where a run moves forward raises it again."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from storlab import processes


@pytest.fixture
def handled(monkeypatch):
    monkeypatch.setattr(processes, "_interrupted", False)
    previous = signal.signal(signal.SIGINT, processes.interrupt)
    yield
    signal.signal(signal.SIGINT, previous)


class Interrupted:
    """Ctrl-C while Python finalizes it."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_dropped_in_a_finalizer_is_raised_at_the_next_point(handled, monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))
    processes.interruption_point()  # nothing asked yet
    Interrupted()
    assert dropped == [KeyboardInterrupt]  # Python's "Exception ignored in": it went no further
    with pytest.raises(KeyboardInterrupt):
        processes.interruption_point()


def test_only_the_main_thread_raises_it(handled):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    raised = []

    def elsewhere():
        try:
            processes.interruption_point()
        except KeyboardInterrupt:
            raised.append(True)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert raised == []
