"""Ctrl-C during a search: the search is asked to stop until it does, and is never waited on for long;
the schedule written says it was interrupted (``method.interrupted``)."""

from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.errors import InputError
from ppsolve.schedule import load_schedule, schedule_from_dict
from ppsolve.solvers import api
from tests.helpers import ROOT


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


def _solve_and_ctrl_c(tmp_path, problem: str, after_line: str, extra: tuple = ()):
    """``ppsolve solve`` in a subprocess, Ctrl-C (SIGINT) once stderr shows a line starting with
    ``after_line`` (and half a second more); (exit code, stdout, the schedule file's path). A run that
    ignored the Ctrl-C (went on with its next phase) would run to its 600 s limit and time out here."""
    out = tmp_path / "s.json"
    cmd = [sys.executable, "-m", "ppsolve", "solve", str(ROOT / problem), "-o", str(out), "--time-limit", "600",
           *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith(after_line):
                break
        else:
            raise AssertionError(f"no line {after_line!r} on stderr: {''.join(seen)[-2000:]!r}")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=120)  # a phase after the Ctrl-C would run on to the 600 s limit
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stdout, out


def test_ctrl_c_in_the_least_overhead_search_says_so_in_the_file(tmp_path):
    code, stdout, out = _solve_and_ctrl_c(tmp_path, "instances/example.json", "cpsat least overhead")
    assert code == 0, stdout
    assert stdout.startswith(f"{out}: interrupted: best so far")
    schedule = load_schedule(out)
    assert check(schedule).ok
    assert schedule.method.interrupted and json.loads(out.read_text())["method"]["interrupted"] is True
    # the makespan was proven before the Ctrl-C (it meets the analytic bound): "optimal" stays honest
    assert schedule.method.status == "optimal" and schedule.makespan == schedule.method.lower_bound
    assert main(["check", str(out)]) == 0


def test_a_solve_that_ends_by_itself_is_not_interrupted(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["solve", str(ROOT / "instances/example.json"), "-o", str(out), "--time-limit", "3", "--quiet"]) == 0
    schedule = load_schedule(out)
    assert json.loads(out.read_text())["method"]["interrupted"] is False and not schedule.method.interrupted
    capsys.readouterr()
    main(["check", str(out)])
    assert "interrupted" not in capsys.readouterr().out


def test_interrupted_is_part_of_the_schedule_schema(tmp_path):
    data = json.loads((ROOT / "docs/example/example-cpsat.json").read_text())
    data["method"]["interrupted"] = "yes"
    with pytest.raises(InputError, match=r"schedule\.method\.interrupted"):
        schedule_from_dict(data)
    data["method"]["interrupted"] = True
    assert schedule_from_dict(data).method.interrupted
