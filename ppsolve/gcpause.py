"""Pausing Python's cyclic garbage collector around work on large schedules.

Building, timing, checking or writing a schedule of 10^5 ops allocates hundreds of
thousands of small tuples and dicts and no reference cycles; the collector's passes
over them cost a third to a half of the time. Memory is still freed as usual
(reference counting); the collector runs again when the work is done. The pause is the
process's (the collector is one per interpreter): while any thread is inside such work, it is off
for every thread; when the last one leaves, it is as it was before the first came in.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)


_lock = threading.Lock()
_paused = [0, False]  # blocks inside gc_paused now (any thread); whether the collector was on before the first


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The collector is off inside the block (unless it was off already, when it stays off). Blocks of
    several threads overlap safely: the first one in turns it off, the last one out restores it."""
    with _lock:
        if _paused[0] == 0:
            _paused[1] = gc.isenabled()
            gc.disable()
        _paused[0] += 1
    try:
        yield
    finally:
        with _lock:
            _paused[0] -= 1
            if _paused[0] == 0 and _paused[1]:
                gc.enable()


def without_gc(function: F) -> F:
    """``function`` runs with the collector paused."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with gc_paused():
            return function(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
