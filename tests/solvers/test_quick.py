"""The quick path (``ppsolve.solvers.quick``): when it is taken, and its search over microbatch orders.

The simulator times every order and the checker judges the result; the search's answer is compared with
its start (never longer) and with itself (the same seed gives the same schedule).
"""

from __future__ import annotations

import pytest

from ppsolve.checker import check
from ppsolve.problem import load_problem
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers.api import NoSolutionError, SolveOptions
from ppsolve.solvers.phases import model_ops, solve
from ppsolve.solvers.quick import (device_orders, falling_tail, first_answer, greedy_search, model_pays_off,
                                   moved_slots, nearby_slots, order_search, ordered_greedy, short_ends, slot_order)
from tests.helpers import ROOT, make_problem, one_f_one_b_orders

PER_MICROBATCH = ROOT / "instances" / "per-microbatch" / "example.json"


def _ops(problem) -> int:
    return model_ops(problem, offload=True)


@pytest.mark.parametrize("time_limit, devices, microbatches, objective, pays", [
    (1.0, 8, 32, "makespan", True),  # a second or more always builds the model
    (0.9, 2, 3, "makespan", True),  # 18 ops: the model is quick to build
    (0.9, 8, 32, "makespan", False),  # 768 ops
    (0.2, 2, 3, "makespan", False),
    (0.2, 8, 32, "memory", True),  # the quick path answers the makespan objective only
])
def test_when_the_model_pays_off(time_limit, devices, microbatches, objective, pays):
    problem = make_problem(devices=devices, microbatches=microbatches)
    options = SolveOptions(time_limit=time_limit, objective=objective)
    assert model_pays_off(options, _ops(problem)) is pays


def _start():
    problem = load_problem(PER_MICROBATCH).replace(capacity=None)
    return make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b")


def test_device_orders_time_back_to_the_schedule():
    start = _start()
    assert max(op.end for op in simulate(start.problem, device_orders(start))) == pytest.approx(start.makespan)


def test_order_search_shortens_a_per_microbatch_schedule_and_is_seeded():
    start = _start()
    found = order_search(start, seed=1, until=None, max_tries=200)
    assert found.tried == 200 and not found.by_clock
    assert check(found.best).ok and found.best.makespan < start.makespan
    assert found.kept > 0
    again = order_search(start, seed=1, until=None, max_tries=200)
    assert again.best.ops == found.best.ops


def test_order_search_keeps_every_capacity():
    problem = load_problem(PER_MICROBATCH)
    start = make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b")
    capped = problem.replace(capacity=tuple(start.peak_memory))  # exactly what data order needs
    start = make_schedule(capped, list(start.ops), "1f1b")
    found = order_search(start, seed=0, until=None, max_tries=200)
    assert check(found.best).ok and found.best.makespan <= start.makespan


def test_order_search_leaves_equal_microbatches_alone():
    problem = make_problem(devices=2, microbatches=4)
    start = make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b")
    found = order_search(start, seed=0, until=None, max_tries=50)
    assert found.best is start and found.tried == 0


def test_no_heuristic_no_schedule():
    problem = make_problem(devices=8, microbatches=32)
    with pytest.raises(NoSolutionError, match="no schedule found within the time limit"):
        solve(problem, SolveOptions(time_limit=0.3, warm_start="none"))


def test_short_ends_puts_the_cheapest_at_both_ends():
    problem = load_problem(PER_MICROBATCH)
    order = short_ends(problem)
    work = problem.microbatch_work
    assert sorted(order) == list(range(problem.microbatches))
    cheapest = sorted(range(problem.microbatches), key=lambda j: (work[j], j))
    assert {order[0], order[-1]} == set(cheapest[:2])
    assert max(work) == work[order[len(order) // 2 - 1]] or max(work) == work[order[len(order) // 2]]


def test_falling_tail_sorts_rising_then_the_costliest_k_falling():
    problem = load_problem(PER_MICROBATCH)
    work = problem.microbatch_work
    order = falling_tail(problem, 3)
    assert sorted(order) == list(range(problem.microbatches))
    costs = [work[j] for j in order]
    assert costs[:-3] == sorted(costs[:-3]) and costs[-3:] == sorted(costs[-3:], reverse=True)
    assert min(costs[-3:]) >= max(costs[:-3])


def test_the_list_scheduler_search_never_lengthens_and_repeats_itself():
    problem = load_problem(ROOT / "instances" / "per-microbatch" / "dynapipe-d8-m16-s0.8-k0.json")
    start = ordered_greedy(problem, lambda: False, [])[0]
    found = greedy_search(start, 0, None, 12)
    assert found.tried == 12 and found.best.makespan <= start.makespan
    assert sorted(found.best.method.params["microbatch_order"]) == list(range(problem.microbatches))
    assert check(found.best).ok
    again = greedy_search(start, 0, None, 12)
    assert again.best.ops == found.best.ops and again.kept == found.kept
    other = first_answer(problem, [])[0]  # not the list scheduler's: nothing to plan anew
    assert greedy_search(other, 0, None, 5) == (other, 0, 0, False)


def test_nearby_moves_keep_every_microbatch():
    import random

    rng, slots = random.Random(1), list(range(6))
    moved = [nearby_slots(slots, rng) for _ in range(100)]
    assert all(sorted(new) == slots for new in moved) and any(new != slots for new in moved)


def test_first_answer_and_the_ordered_list_schedules_pass_the_checker():
    problem = load_problem(PER_MICROBATCH)
    found = first_answer(problem, [])
    assert len(found) == 1 and check(found[0]).ok
    ordered = ordered_greedy(problem, lambda: False, [])
    assert [s.method.name for s in ordered] == ["greedy@" + name for name in (
        "short-ends", "falling-tail-4", "falling-tail-3", "falling-tail-6", "shortest-first", "longest-first")]
    assert all(check(s).ok for s in ordered)
    assert ordered_greedy(make_problem(devices=2, microbatches=4), lambda: False, []) == []  # equal microbatches


def test_a_move_changes_slots_but_keeps_every_microbatch():
    import random

    slots, work = list(range(8)), (5.0, 1.0, 7.0, 2.0, 9.0, 3.0, 8.0, 4.0)
    rng = random.Random(0)
    moved = [moved_slots(slots, work, rng) for _ in range(200)]
    assert all(sorted(new) == slots for new in moved)
    assert any(new[0] in (4, 6) or new[-1] in (4, 6) for new in moved if new != slots)  # a costliest one to an end
    start = _start()
    assert sorted(slot_order(start)) == list(range(start.problem.microbatches))


def test_a_full_solve_of_a_per_microbatch_problem_starts_from_the_quick_answer():
    """A solve long enough for the model runs the quick path first (its own 0.5 s), so it never ends above it."""
    problem = load_problem(ROOT / "instances" / "per-microbatch" / "dynapipe-d8-m32-s0.8-k0.json")
    short = solve(problem, SolveOptions(time_limit=0.5, threads=1))
    long = solve(problem, SolveOptions(time_limit=6, threads=1))
    assert check(long.schedule).ok
    assert long.schedule.makespan <= short.schedule.makespan + 1e-6
    assert long.warm_start.makespan <= short.schedule.makespan + 1e-6
