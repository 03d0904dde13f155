"""Warm starts come from the method registry (family "baseline") when baselines are installed."""

from __future__ import annotations

import pytest

from ppsolve import methods
from ppsolve.checker import check
from ppsolve.errors import NotApplicableError, PpsolveError
from ppsolve.methods import Method
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.warm_start import best_warm_start, list_plan, serial_orders
from tests.helpers import make_problem


def _fake(name, build, why_not=lambda p: None):
    return Method(name=name, family="baseline", description="test double", requirements="-",
                  why_not=why_not, build=build)


@pytest.fixture
def fake_baselines(monkeypatch):
    problem = make_problem(devices=3, microbatches=4, memory_capacity=2)
    good = make_schedule(problem, simulate(problem, list_plan(problem)), "fake-good")

    def too_big(p, o):  # ignores the capacity: must be rejected by the checker
        free = p.replace(capacity=None)
        ops = simulate(free, [[op for op in order] for order in list_plan(free, "FBW")])
        return make_schedule(p, ops, "fake-too-big")

    def broken(p, o):
        raise PpsolveError("cannot")

    for method in (_fake("fake-good", lambda p, o: good), _fake("fake-too-big", too_big),
                   _fake("fake-broken", broken), _fake("fake-na", broken, why_not=lambda p: "never applies")):
        monkeypatch.setitem(methods._REGISTRY, method.name, method)
    return problem, good


def test_auto_keeps_the_best_acceptable_baseline(fake_baselines):
    problem, good = fake_baselines
    warm = best_warm_start(problem, "auto")
    assert check(warm).ok
    assert warm.makespan <= good.makespan
    assert not check(methods.get_method("fake-too-big").run(problem)).ok


def test_named_warm_start(fake_baselines):
    problem, good = fake_baselines
    assert best_warm_start(problem, "fake-good").method.name == "fake-good"
    with pytest.raises(NotApplicableError):
        best_warm_start(problem, "no-such-method")
    with pytest.raises(PpsolveError):
        best_warm_start(problem, "fake-na")
    result = solve(problem, SolveOptions(time_limit=5, warm_start="fake-good"))
    assert check(result.schedule).ok and result.schedule.makespan <= good.makespan


def test_own_warm_start_without_baselines():
    # Serial orders always fit the least capacity: a warm start exists even with no baseline installed.
    problem = make_problem(devices=3, microbatches=3, chunks=2, placement="vshape", memory_capacity=2)
    warm = best_warm_start(problem, "auto")
    assert warm is not None and check(warm).ok
    serial = make_schedule(problem, simulate(problem, serial_orders(problem)), "serial")
    assert warm.makespan <= serial.makespan
    assert best_warm_start(problem, "none") is None


def test_a_counted_warm_start_tries_only_methods_that_apply():
    # --threads 1 gives the warm start a number of tries fixed by the problem's size. Methods that do
    # not apply (the linear ones, on a V-shape) must not use them up: with six tries, a V-shape
    # problem still gets its V-shape schedules, not the serial plan (3650 against 995 before).
    problem = make_problem(devices=8, microbatches=32, chunks=2, placement="vshape")
    applicable = [m for m in methods.all_methods("baseline") if m.why_not(problem) is None]
    assert len(applicable) < len(methods.all_methods("baseline"))
    unlimited = best_warm_start(problem, "auto")
    counted = best_warm_start(problem, "auto", max_tries=6)
    assert counted.makespan == unlimited.makespan
    assert not counted.method.name.startswith("warm:serial")
