"""The summary's gap line suggests more --time-limit only when the search used its time, and names the
engine that proved an optimum; ``least_overhead`` says "none" for a schedule without a lever."""

from __future__ import annotations

import pytest

from ppsolve.schedule import MethodInfo
from ppsolve.solvers.api import Status
from ppsolve.solvers.phases import least_overhead_value
from ppsolve.studies.advice import explain_gap
from tests.helpers import make_problem, schedule_from_orders, serial_orders


def _schedule(seconds: float, threads, interrupted: bool = False, name: str = "milp"):
    problem = make_problem(devices=2, microbatches=3)
    schedule = schedule_from_orders(problem, serial_orders(problem))
    method = MethodInfo(name, {"time_limit": 30, "threads": threads}, "feasible", 1.0, seconds,
                        {"interrupted": interrupted})
    return schedule.with_method(method)


@pytest.mark.parametrize("seconds, threads, interrupted, says", [
    (29.0, 1, False, "more --time-limit may close it"),
    (3.6, None, True, "more --time-limit may close it"),
    (3.6, 1, False, "ended after 3.6 s of its 30 s, at its deterministic limits (--threads 1)"),
    (3.6, None, False, "ended after 3.6 s of its 30 s, on its own: more --time-limit may not change it"),
])
def test_more_time_is_suggested_only_when_the_time_was_used(seconds, threads, interrupted, says):
    schedule = _schedule(seconds, threads, interrupted)
    text = explain_gap(schedule, Status.FEASIBLE, 1.0)
    assert text.startswith("open: ") and says in text
    assert ("may close it" in text) == (says.startswith("more"))


def test_a_proof_names_the_engine_that_made_it():
    schedule = _schedule(1.0, 1)
    assert "milp proved" in explain_gap(schedule, Status.OPTIMAL, schedule.makespan)


def test_least_overhead_of_a_schedule_without_a_lever_is_none():
    schedule = _schedule(1.0, 1)
    assert not schedule.uses_levers
    assert least_overhead_value(Status.OPTIMAL, schedule) == "none"
    assert least_overhead_value(Status.INFEASIBLE, schedule) == "none"


def test_least_overhead_of_a_schedule_with_a_lever_says_what_was_proven():
    problem = make_problem(devices=2, microbatches=2, offload={"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}})
    schedule = schedule_from_orders(problem, serial_orders(problem, offload=True))
    assert schedule.uses_levers
    assert [least_overhead_value(s, schedule) for s in Status] == ["optimal", "feasible", "unknown", "unknown"]
