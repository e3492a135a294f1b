"""Ctrl-C as storlab takes it (SIGINT, and the CLI's SIGTERM and SIGHUP, which act the same): a
KeyboardInterrupt in the main thread, never lost, and never in the middle of making or removing
something storlab owns (a directory and its marker, a server and the record of it, an instance's end).

Python runs a signal's handler at the next check point of the main thread: a call starting, a call to
a C function returning, a loop's jump back. A signal that arrives during a system call (a mkdir on a
busy disk, an fsync) is raised the moment that call returns, before the next statement: between
making a directory and marking it, between starting a server and recording it, between a context
manager's yield and its with-block. What must happen together is made so by `uninterrupted` (the
handler holds the signal, with no check point left open on the way in) and `owning` (a context
manager that still ends what it made when the Ctrl-C lands as it hands it over)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

_interrupted = False


class _Uninterrupted:
    """`with uninterrupted:` the CLI's handler holds a Ctrl-C until the outermost such block ends,
    which then raises it. A module-level object rather than a call: the with statement goes straight
    into __enter__, whose frame the handler recognises, so a signal cannot land between the `with`
    and the holding. In the main thread only (a clean-up in another thread is never interrupted)."""

    def __init__(self) -> None:
        self.depth = 0
        self.deferred = False

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.depth += 1

    def __exit__(self, *exc_info) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        self.depth -= 1
        if self.depth == 0 and self.deferred:
            self.deferred = False
            raise KeyboardInterrupt
        return False

    def holds(self, frame) -> bool:
        """Whether a signal that lands in `frame` waits: inside a block, or on the way into or out of one."""
        while self.depth == 0 and frame is not None:
            if frame.f_code in _HOLDING:
                return True
            frame = frame.f_back
        return self.depth > 0


uninterrupted = _Uninterrupted()


def interrupt(signum: int, frame) -> None:
    """The CLI's handler: a KeyboardInterrupt, remembered, or held while `uninterrupted`. Python prints
    and drops one raised inside a weakref callback, a __del__ or an at-fork hook (the run then goes on
    as if never interrupted); interruption_point raises it again."""
    global _interrupted
    _interrupted = True
    if uninterrupted.holds(frame):
        uninterrupted.deferred = True
        return
    raise KeyboardInterrupt


def interruption_point() -> None:
    """The KeyboardInterrupt a Ctrl-C raised, again, if it was dropped on its way (interrupt). Called
    where a run moves forward (a run starts, its progress is told), never while cleaning up; in the
    main thread only, where Python delivers signals."""
    if _interrupted and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt


class _Owning(contextlib._GeneratorContextManager):
    """contextlib's context manager, made for clean-ups: a Ctrl-C raised as __enter__ returns (the
    generator has yielded, the with-block has not begun, so __exit__ would never be called) is thrown
    into the generator, whose clean-up runs as for any error in the block; and the generator's end
    (what follows its yield) is uninterrupted, from __exit__'s first instruction."""

    def __enter__(self):
        try:
            return super().__enter__()
        except BaseException as exc:
            if inspect.getgeneratorstate(self.gen) == inspect.GEN_SUSPENDED:
                self.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(self, typ, value, traceback):
        with uninterrupted:
            return super().__exit__(typ, value, traceback)


# The frames in which a signal waits though no block holds it yet (or any longer): a block's way in
# and out, and an owning context manager's end.
_HOLDING = frozenset(f.__code__ for f in (_Uninterrupted.__enter__, _Uninterrupted.__exit__, _Owning.__exit__))


def owning(make: Callable[..., Iterator[T]]) -> Callable[..., contextlib.AbstractContextManager[T]]:
    """@contextlib.contextmanager for a generator that makes something storlab must remove (an
    instance, a folder, a lock): what it made is removed on every way out, a Ctrl-C at any moment included."""
    @functools.wraps(make)
    def opened(*args, **kwargs):
        return _Owning(make, args, kwargs)
    return opened
