"""The pair relaxation (``ppsolve.bounds.relaxation.end_pair``): every valid schedule of a linear problem,
cut to its first and last stage, is a valid schedule of the pair with the same makespan (the checker
is the oracle), so the pair's optimum is at most the problem's."""

from __future__ import annotations

import pytest

from ppsolve.bounds.analytic import makespan_lower_bound
from ppsolve.bounds.relaxation import end_pair
from ppsolve.checker import check
from ppsolve.errors import InputError
from ppsolve.method_types import RunOptions
from ppsolve.methods import run_method
from ppsolve.ops import OpKind
from ppsolve.problem import load_problem
from ppsolve.schedule import ScheduledOp, make_schedule
from ppsolve.solvers import SolveOptions, solve
from tests.helpers import ROOT, make_problem

REALISTIC = ROOT / "instances" / "realistic" / "llama13b-like-8x32-cap11-decide.json"


def cut_to_pair(problem, schedule):
    """The ops of the first and last stage, on devices 0 and 1 of the pair, at their times."""
    side = {0: 0, problem.num_stages - 1: 1}  # stage -> the pair's stage and device
    return make_schedule(end_pair(problem), [ScheduledOp(op.kind, side[op.stage], op.microbatch, side[op.stage],
                                                         op.start, op.end, op.amount)
                                             for op in schedule.ops if op.stage in side], "cut")


def assert_cut_is_valid(problem, schedule):
    """Check the schedule and its cut; return the cut."""
    assert check(schedule).ok
    cut = cut_to_pair(problem, schedule)
    report = check(cut)
    assert report.ok, report.violations[:3]
    assert cut.makespan <= schedule.makespan
    assert makespan_lower_bound(cut.problem).value <= cut.makespan + 1e-6
    return cut


@pytest.mark.parametrize("method", ["1f1b-adapipe", "1f1b-recompute", "1f1b-offload"])
def test_published_plans_of_the_realistic_problem_cut_to_the_pair_stay_valid(method):
    problem = load_problem(REALISTIC)
    assert_cut_is_valid(problem, run_method(method, problem, RunOptions()))


def small_problem(seed: int, capacity: float | None = 4.5):
    """4 devices, 4 microbatches, costs and latencies per microbatch, recompute and offload allowed (the
    link slower for odd seeds)."""
    m, d = 4, 4
    rate = (1, 0.25)[seed % 2]
    return make_problem(devices=d, microbatches=m, backward="split",
                        time_forward=[[1 + (s + j + seed) % 3 for j in range(m)] for s in range(d)],
                        time_backward_input=[[2 + (s * j + seed) % 2 for j in range(m)] for s in range(d)],
                        time_backward_weight=1, time_p2p=[0.5 + 0.25 * ((j + seed) % 2) for j in range(m)],
                        memory_activation=2, memory_weight_hold=1, memory_capacity=capacity,
                        recompute={"keep": 0.5}, offload={"fraction": 1, "bandwidth": {"d2h": rate, "h2d": rate}})


def test_the_latency_is_the_lesser_chain_between_the_ends():
    problem = small_problem(0)
    forward, backward, p2p = problem.forward, problem.backward_input, problem.p2p_times
    assert end_pair(problem).p2p_times == tuple(
        min(forward.at(1, j) + forward.at(2, j), backward.at(1, j) + backward.at(2, j)) + 3 * p2p[j] for j in range(4))


@pytest.mark.parametrize("method, lever", [("1f1b-recompute", OpKind.R), ("1f1b-offload", OpKind.OFFLOAD)])
def test_plans_with_levers_on_the_first_stage_cut_to_the_pair_stay_valid(method, lever):
    problem = small_problem(1, capacity=None)
    cut = assert_cut_is_valid(problem, run_method(method, problem, RunOptions()))
    assert any(op.kind is lever and op.stage == 0 for op in cut.ops)


@pytest.mark.parametrize("seed", [0, 1])
def test_solved_plans_under_a_tight_cap_cut_to_the_pair_stay_valid(seed):
    problem = small_problem(seed)
    assert_cut_is_valid(problem, solve(problem, SolveOptions(time_limit=3, threads=1, seed=seed)).schedule)


def test_the_pair_needs_a_linear_placement():
    problem = make_problem(devices=2, chunks=2, placement="interleaved", microbatches=2)
    with pytest.raises(InputError, match="linear placement"):
        end_pair(problem)
