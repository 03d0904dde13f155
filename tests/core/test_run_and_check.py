"""run_and_check: every way a method can answer becomes one outcome; only bugs may be raised."""

from __future__ import annotations

import pytest

from ppsolve.errors import InfeasibleError, NotApplicableError, PpsolveError
from ppsolve.methods import ERROR, INFEASIBLE, SKIPPED, Method, get_method, published_methods, run_and_check
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from tests.helpers import make_problem, serial_orders

PROBLEM = make_problem(devices=2, microbatches=2)


def _method(build, why_not=lambda p: None) -> Method:
    return Method(name="fake", family="baseline", description="test double", requirements="-",
                  why_not=why_not, build=build)


def _raises(error):
    def build(problem, options):
        raise error
    return build


def test_a_valid_schedule_is_checked_and_timed():
    outcome = run_and_check(get_method("1f1b"), PROBLEM)
    assert outcome.status == "heuristic" and outcome.valid and outcome.report.ok and outcome.note == ""
    assert outcome.seconds >= 0 and outcome.schedule.makespan > 0


@pytest.mark.parametrize("method, status, note", [
    (_method(_raises(PpsolveError("x")), why_not=lambda p: "never"), SKIPPED, "never"),
    (_method(_raises(NotApplicableError("not here"))), SKIPPED, "not here"),
    (_method(_raises(InfeasibleError("over the cap"))), INFEASIBLE, "over the cap"),
    (_method(_raises(PpsolveError("broken"))), ERROR, "broken"),
])
def test_a_refusal_is_an_outcome(method, status, note):
    outcome = run_and_check(method, PROBLEM)
    assert (outcome.status, outcome.note, outcome.schedule, outcome.valid) == (status, note, None, None)
    assert (outcome.seconds is None) == (status == SKIPPED)


def test_a_bug_is_raised_unless_recorded():
    buggy = _method(_raises(ZeroDivisionError("oops")))
    with pytest.raises(ZeroDivisionError):
        run_and_check(buggy, PROBLEM)
    outcome = run_and_check(buggy, PROBLEM, record_bugs=True)
    assert outcome.status == ERROR and outcome.note == "ZeroDivisionError: oops"


def test_an_invalid_schedule_is_reported_with_its_first_violation():
    capped = make_problem(devices=2, microbatches=2, memory_capacity=1)
    free = capped.replace(capacity=None)
    over = _method(lambda p, o: make_schedule(p, simulate(free, _all_forwards_first(free)), "fake"))
    outcome = run_and_check(over, capped)
    assert outcome.valid is False and outcome.note.startswith("checker: ")
    unchecked = run_and_check(over, capped, checked=False)
    assert unchecked.report is None and unchecked.valid is None and unchecked.schedule is not None


def _all_forwards_first(problem):
    """GPipe-like orders: both forwards before any backward (2 activations on device 0)."""
    orders = serial_orders(problem)
    return [sorted(order, key=lambda op: (op.kind.value != "F", op.microbatch)) for order in orders]


def test_published_methods_are_the_baselines_but_ours():
    names = {m.name for m in published_methods()}
    assert "greedy" not in names and {"1f1b", "zb-h1", "po-h"} <= names
    assert all(m.family == "baseline" for m in published_methods())
