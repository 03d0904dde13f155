"""Ctrl-C during a search: the search is asked to stop until it does, and is never waited on for long."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import pytest

from ppsolve.solvers import api


@pytest.fixture(autouse=True)
def ctrl_c_reaches_python():
    """Python's own SIGINT handler, whatever the test run inherited: a run started in the background
    by a non-interactive shell has SIGINT ignored, and then interrupt_main() does nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _search_that_misses_early_stops(started_after: float, runs_for: float):
    """A search that takes ``started_after`` seconds to start (a stop before then is lost, as with
    CP-SAT's stop_search before solve has begun) and then runs ``runs_for`` seconds unless stopped."""
    state = {"running": False, "stop": False}

    def search():
        time.sleep(started_after)
        state["running"] = True
        ends = time.monotonic() + runs_for
        while time.monotonic() < ends and not state["stop"]:
            time.sleep(0.01)
        return "stopped" if state["stop"] else "ran to its limit"

    def stop():
        if state["running"]:
            state["stop"] = True

    return search, stop


def _ctrl_c_after(seconds: float) -> None:
    threading.Timer(seconds, _thread.interrupt_main).start()


def test_a_ctrl_c_before_the_search_starts_still_stops_it():
    search, stop = _search_that_misses_early_stops(started_after=0.4, runs_for=30)
    _ctrl_c_after(0.1)
    began = time.monotonic()
    value, interrupted, abandoned = api.search_in_thread(search, stop)
    assert interrupted and not abandoned and value == "stopped"
    assert time.monotonic() - began < 5


def test_a_search_that_ignores_ctrl_c_is_abandoned():
    search, _ = _search_that_misses_early_stops(started_after=0.0, runs_for=30)
    _ctrl_c_after(0.1)
    began = time.monotonic()
    value, interrupted, abandoned = api.search_in_thread(search, lambda: None)
    assert interrupted and abandoned and value is None
    assert time.monotonic() - began < api.STOP_GRACE + 5
