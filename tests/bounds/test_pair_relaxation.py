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
    last = problem.num_stages - 1
    kept = [op for op in schedule.ops if op.stage in (0, last)]
    return make_schedule(end_pair(problem), [ScheduledOp(op.kind, 0 if op.stage == 0 else 1, op.microbatch,
                                                         0 if op.stage == 0 else 1, op.start, op.end, op.amount)
                                             for op in kept], "cut")


def assert_cut_is_valid(problem, schedule):
    assert check(schedule).ok
    cut = cut_to_pair(problem, schedule)
    report = check(cut)
    assert report.ok, report.violations[:3]
    assert cut.makespan <= schedule.makespan
    assert makespan_lower_bound(cut.problem).value <= cut.makespan + 1e-6


@pytest.mark.parametrize("method", ["1f1b-adapipe", "1f1b-recompute", "1f1b-offload"])
def test_published_plans_of_the_realistic_problem_cut_to_the_pair_stay_valid(method):
    problem = load_problem(REALISTIC)
    assert_cut_is_valid(problem, run_method(method, problem, RunOptions()))


@pytest.mark.parametrize("seed", [0, 1])  # 0 offloads on the first stage, 1 (a slower link) recomputes there
def test_solved_plans_with_levers_cut_to_the_pair_stay_valid(seed):
    # per-microbatch costs and latencies, a tight cap, recompute and offload: the solver's plan uses levers
    m, d = 4, 4
    forward = [[1 + (s + j + seed) % 3 for j in range(m)] for s in range(d)]
    backward = [[2 + (s * j + seed) % 2 for j in range(m)] for s in range(d)]
    p2p = [0.5 + 0.25 * ((j + seed) % 2) for j in range(m)]
    rate = (1, 0.25)[seed % 2]  # a slow link makes recompute the cheaper lever
    problem = make_problem(devices=d, microbatches=m, backward="split", time_forward=forward,
                           time_backward_input=backward, time_backward_weight=1, time_p2p=p2p,
                           memory_activation=2, memory_weight_hold=1, memory_capacity=4.5,
                           recompute={"keep": 0.5}, offload={"fraction": 1, "bandwidth": {"d2h": rate, "h2d": rate}})
    # the latency between the ends: the lesser of the forward and the backward chain through stages 1 and 2
    assert end_pair(problem).p2p_times == tuple(
        min(forward[1][j] + forward[2][j], backward[1][j] + backward[2][j]) + 3 * p2p[j] for j in range(m))
    result = solve(problem, SolveOptions(time_limit=3, threads=1, seed=seed))
    assert_cut_is_valid(problem, result.schedule)
    assert any(op.kind in (OpKind.R, OpKind.OFFLOAD) for op in cut_to_pair(problem, result.schedule).ops)


def test_the_pair_needs_a_linear_placement():
    problem = make_problem(devices=2, chunks=2, placement="interleaved", microbatches=2)
    with pytest.raises(InputError, match="linear placement"):
        end_pair(problem)
