"""``ppsolve.solve``: the library's entry point, in a loop inside a program and in several threads at once.

The checker is the oracle of every schedule; signal handlers and the collector's state are compared
before and after; whether a backend was imported is read off ``sys.modules`` in a fresh interpreter.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading

import pytest

import ppsolve
from ppsolve.checker import check
from ppsolve.errors import InputError, PpsolveError
from ppsolve.problem import load_problem
from ppsolve.schedule import Schedule
from ppsolve.solvers.api import WORKER
from ppsolve.solvers.settings import QuickSettings, Settings
from tests.helpers import ROOT, make_problem

UNIFORM = ROOT / "instances" / "linear-uniform-split-4x8.json"
LARGE = ROOT / "instances" / "linear-uniform-8x32-1f1bcap.json"  # 768 ops: 0.5 s cannot pay for its model
PER_MICROBATCH = ROOT / "instances" / "per-microbatch" / "example.json"
DYNAPIPE = ROOT / "instances" / "per-microbatch" / "dynapipe-d8-m32-s0.8-k0.json"
# the quick path with time to spare, so that the wall clock never ends its deterministic steps on a busy machine
QUICK_WITH_TIME = Settings(quick=QuickSettings(below=60, model_seconds=60))


def _workers_ended() -> None:
    """Wait for the worker threads of earlier calls (a quick solve leaves the candidate it was making)."""
    for thread in threading.enumerate():
        if thread.name == WORKER:
            thread.join(60)


def _handlers() -> dict:
    return {s: signal.getsignal(s) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)}


@pytest.mark.parametrize("time_limit, method", [(5.0, "cpsat"), (0.5, "quick")])
def test_solve_returns_a_checked_schedule(time_limit, method):
    problem = load_problem(LARGE if method == "quick" else UNIFORM)
    schedule = ppsolve.solve(problem, time_limit=time_limit, threads=1)
    assert isinstance(schedule, Schedule) and check(schedule).ok
    assert schedule.method.name == method
    assert schedule.method.lower_bound <= schedule.makespan
    assert schedule.method.status in ("optimal", "feasible")


def test_solve_result_carries_status_bound_and_notes():
    result = ppsolve.solve_result(load_problem(LARGE), time_limit=0.5, threads=1)
    assert result.schedule.method.status == result.status.value
    assert result.lower_bound == result.schedule.method.lower_bound
    assert any("cannot pay for building the model" in note for note in result.notes)


@pytest.mark.parametrize("path, time_limit, method", [(PER_MICROBATCH, 0.3, "quick"), (PER_MICROBATCH, 3.0, "cpsat"),
                                                      (DYNAPIPE, 0.5, "quick")])
def test_per_microbatch_problem(path, time_limit, method):
    problem = load_problem(path)
    schedule = ppsolve.solve(problem, time_limit=time_limit, threads=1)
    assert check(schedule).ok and schedule.problem.per_microbatch and schedule.method.name == method


def test_no_signal_handler_or_collector_state_changes():
    _workers_ended()
    before, enabled = _handlers(), gc.isenabled()
    for time_limit, path in ((3.0, UNIFORM), (0.4, LARGE), (0.4, DYNAPIPE)):
        ppsolve.solve(load_problem(path), time_limit=time_limit, threads=1)
        _workers_ended()
        assert _handlers() == before and gc.isenabled() == enabled


def test_a_collector_turned_off_by_the_program_stays_off():
    _workers_ended()
    gc.disable()
    try:
        ppsolve.solve(load_problem(LARGE), time_limit=0.4, threads=1)
        _workers_ended()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_two_threads_at_once_give_the_sequential_schedules():
    """Deterministic settings (one worker, a seed): each thread's answer is the one it gives alone."""
    cases = [(load_problem(LARGE), QUICK_WITH_TIME), (make_problem(devices=3, microbatches=4), Settings())]
    alone = [ppsolve.solve(p, time_limit=5, threads=1, seed=3, settings=s) for p, s in cases]
    together: list = [None] * len(cases)

    def plan(i: int) -> None:
        together[i] = ppsolve.solve(cases[i][0], time_limit=5, threads=1, seed=3, settings=cases[i][1])

    workers = [threading.Thread(target=plan, args=(i,)) for i in range(len(cases))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for one, other in zip(alone, together):
        assert check(other).ok and other.method.name == one.method.name
        assert sorted(other.ops) == sorted(one.ops)


def test_a_short_limit_imports_no_backend():
    code = ("import sys, ppsolve; p = ppsolve.load_problem(sys.argv[1]); s = ppsolve.solve(p, time_limit=0.5); "
            "print(s.method.name, any(m.startswith(('ortools', 'pulp', 'highspy')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(LARGE)], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.split()
    assert out == ["quick", "False"]


def test_warm_start_may_be_a_schedule_to_go_on_from():
    problem = load_problem(UNIFORM)
    first = ppsolve.solve(problem, time_limit=0.3, warm_start="gpipe")
    again = ppsolve.solve(problem, time_limit=3.0, warm_start=first, threads=1)
    assert check(again).ok and again.makespan <= first.makespan
    assert again.method.params["warm_start"] == "schedule"


@pytest.mark.parametrize("options, field", [({"objective": "fastest"}, "objective"),
                                             ({"solver": "gurobi"}, "solver"),
                                             ({"time_limit": -1}, "time-limit"),
                                             ({"solver": "gurobi", "time_limit": 0.2}, "solver")])
def test_bad_options_raise_input_error_naming_them(options, field):
    with pytest.raises(InputError) as error:
        ppsolve.solve(load_problem(LARGE), **options)
    assert str(error.value).startswith(field)


def test_nothing_found_in_time_is_an_error():
    with pytest.raises(PpsolveError, match="no schedule found within the time limit"):
        ppsolve.solve(load_problem(LARGE), time_limit=0.3, warm_start="none")
