"""``gc_paused`` from several threads: off while any thread is inside, as before once the last one leaves."""

from __future__ import annotations

import gc
import threading

import pytest

from ppsolve.gcpause import gc_paused


@pytest.mark.parametrize("enabled", [True, False])
def test_overlapping_pauses_of_two_threads(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        inside, leave = threading.Event(), threading.Event()

        def other() -> None:
            with gc_paused():
                inside.set()
                leave.wait(10)

        worker = threading.Thread(target=other)
        with gc_paused():
            worker.start()
            inside.wait(10)
        assert not gc.isenabled()  # this thread left first: the other one is still inside
        leave.set()
        worker.join(10)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
