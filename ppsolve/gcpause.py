"""Pausing Python's cyclic garbage collector around work on large schedules.

Building, timing, checking or writing a schedule of 10^5 ops allocates hundreds of
thousands of small tuples and dicts and no reference cycles; the collector's passes
over them cost a third to a half of the time. Memory is still freed as usual
(reference counting); the collector runs again when the work is done.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The collector is off inside the block (unless it was off already, when it stays off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def without_gc(function: F) -> F:
    """``function`` runs with the collector paused."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with gc_paused():
            return function(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
