"""Both backends on per-microbatch costs (contract version 4): the order of microbatches is a decision.

Judged by the simulator and checker (every solution is realised and checked) and, on tiny problems, by a
brute force over device orders (``tests.solvers.cases.brute_force``) that shares nothing with the models.
"""

from __future__ import annotations

import itertools
import time

import pytest

from ppsolve.checker import check
from ppsolve.ops import Op, OpKind
from ppsolve.problem import load_problem
from ppsolve.schedule import make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.api import Phase, PhaseTask, Status
from ppsolve.solvers.backends import load_backend
from ppsolve.solvers.budget import Budget, Limit
from ppsolve.solvers.phases import realise
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import build_scaling
from ppsolve.solvers.search import lns
from ppsolve.solvers.search.overhead import lower_overhead, overhead_key
from ppsolve.solvers.shed import shed_levers
from ppsolve.solvers.symmetry import identical_classes
from ppsolve.solvers.warm_start import fifo_relabel
from ppsolve.solvers.warm_start.plans import serial_orders
from tests.helpers import ROOT, make_problem, schedule_from_orders
from tests.solvers.cases import brute_force

SOLVERS = ("cpsat", "milp")
EXAMPLE = ROOT / "instances" / "per-microbatch" / "example.json"


def fused(forward: list[int], activation: list[int], cap=None, stages: int = 2):
    """A linear fused problem of ``stages`` devices whose microbatch j has F = forward[j] and B = 2F on every
    stage and holds activation[j]."""
    rows = lambda values: [list(values) for _ in range(stages)]  # noqa: E731
    return make_problem(devices=stages, microbatches=len(forward), backward="fused", time_forward=rows(forward),
                        time_backward_input=rows([2 * f for f in forward]), time_backward_weight=0,
                        memory_activation=rows(activation), memory_capacity=cap)


def model_optimum(problem, solver: str, seconds: float = 20.0, **options):
    """The MAKESPAN phase of ``solver`` alone (no warm start, no analytic bound): (status, best checked schedule)."""
    budget = Budget(seconds, False)
    task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, SolveOptions(solver=solver, threads=1, **options),
                     budget, budget.search(0.9), Progress(budget, solver, True, None))
    answer = load_backend(solver).run_phase(task)
    schedules = [s for s in (realise(problem, ops, solver) for ops in answer.solutions) if s is not None]
    return answer.status, min(schedules, key=lambda s: s.makespan, default=None)


def data_order_optimum(problem):
    """The brute force restricted to microbatches in index order on every stage (F and B each)."""
    def in_order(schedule):
        by_op = {op.op: op for op in schedule.ops}
        for s in range(problem.num_stages):
            for kind in problem.kinds:
                starts = [by_op[Op(kind, s, j)].start for j in range(problem.microbatches)]
                if starts != sorted(starts):
                    return False
        return True
    from tests.solvers import cases
    best = None
    per_device = [list(cases.device_orders(problem, d)) for d in range(problem.devices)]
    for combo in itertools.product(*per_device):
        try:
            schedule = schedule_from_orders(problem, [list(o) for o in combo], "data order")
        except Exception:  # a deadlocked combination
            continue
        if in_order(schedule) and check(schedule).ok and (best is None or schedule.makespan < best):
            best = schedule.makespan
    return best


# ----- classes of identical microbatches -----

def test_classes_group_identical_columns_only():
    problem = fused([2, 1, 2, 3, 1], [1, 1, 1, 1, 2])
    assert identical_classes(problem) == ((0, 2), (1,), (3,), (4,))
    uniform = make_problem(microbatches=4)
    assert identical_classes(uniform) == ((0, 1, 2, 3),)


def test_scaling_keeps_per_stage_costs_compact_and_reads_per_op():
    problem = fused([2, 1, 3], [1, 2, 2], cap=3)
    sc = build_scaling(problem)
    for s, j in itertools.product(range(problem.num_stages), range(problem.microbatches)):
        for kind in problem.kinds:
            assert sc.duration(kind, s, j) == round(problem.duration(kind, s, j) * sc.time_scale)
        assert sc.activation.at(s, j) == round(problem.activation.at(s, j) * sc.memory_scale)
    assert not build_scaling(make_problem()).activation.per_microbatch


def test_fifo_relabel_exchanges_names_within_a_class_only():
    problem = fused([1, 2, 1], [1, 1, 1])  # microbatches 0 and 2 are identical, 1 differs
    orders = [[Op(OpKind.F, d, j) for j in (2, 1, 0)] + [Op(OpKind.B, d, j) for j in (2, 1, 0)]
              for d in range(problem.devices)]
    schedule = schedule_from_orders(problem, orders)
    relabelled = fifo_relabel(schedule)
    assert check(relabelled).ok and relabelled.makespan == schedule.makespan
    firsts = sorted((op.start, op.microbatch) for op in relabelled.ops if op.kind is OpKind.F and op.stage == 0)
    assert [j for _, j in firsts] == [0, 1, 2]  # 2 and 0 swapped names; 1 kept its slot
    moved = {op.op: op.start for op in relabelled.ops}
    assert moved[Op(OpKind.F, 0, 1)] == {op.op: op.start for op in schedule.ops}[Op(OpKind.F, 0, 1)]


# ----- the models -----

# (forward, activation, cap) of fused 2-stage problems, B = 2F, and their optimum by the brute force over
# every device order (test_the_optimal_makespans_are_the_brute_force_s re-derives them; 2 to 7 s each)
TINY = [
    (([2, 1, 3], [1, 2, 2], 3), 25),  # the best schedule with microbatches in index order is 32
    (([1, 3, 1], [1, 2, 1], None), 21),
    (([3, 1, 1], [2, 1, 1], 3), 21),  # two identical microbatches: symmetry broken between them only
    (([1, 2, 4], [2, 1, 1], 3), 29),
    (([2, 2, 1], [1, 1, 2], 2), 24),
]


def split_problem():
    """Split backward, weight holds and p2p latencies per microbatch (brute force: 12.5)."""
    return make_problem(devices=2, microbatches=2, backward="split", time_forward=[[1, 2], [2, 1]],
                        time_backward_input=[[1, 2], [2, 2]], time_backward_weight=[[1, 1], [2, 1]],
                        time_p2p=[0.5, 1], memory_activation=[[2, 1], [1, 2]], memory_weight_hold=[[1, 0], [0, 1]],
                        memory_capacity=3)


@pytest.mark.slow
def test_the_optimal_makespans_are_the_brute_force_s():
    for (forward, activation, cap), optimum in TINY:
        assert brute_force(fused(forward, activation, cap)) == optimum
    assert brute_force(split_problem()) == 12.5


@pytest.mark.slow
def test_the_first_case_needs_an_order_other_than_the_data_order():
    """Symmetry breaking as if microbatches were identical (every (stage, kind) in index order) would cut
    off the optimum 25 of the first case: the best such schedule is 32."""
    (forward, activation, cap), optimum = TINY[0]
    assert data_order_optimum(fused(forward, activation, cap)) == 32 > optimum


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("case, optimum", TINY)
def test_claimed_optimum_equals_the_brute_force(solver, case, optimum):
    """With symmetry breaking on (as in a solve), the model proves the brute force's optimum."""
    status, best = model_optimum(fused(*case), solver)
    assert status is Status.OPTIMAL
    assert best is not None and check(best).ok
    assert best.makespan == pytest.approx(optimum)


@pytest.mark.parametrize("solver", SOLVERS)
def test_split_backward_with_per_microbatch_weight_hold_and_p2p(solver):
    status, best = model_optimum(split_problem(), solver)
    assert status is Status.OPTIMAL and check(best).ok
    assert best.makespan == pytest.approx(12.5)


@pytest.mark.parametrize("solver", SOLVERS)
def test_solve_the_per_microbatch_example(solver):
    """The whole solve (warm start, phases, overhead, shedding) on the bundled example: checked, and never
    worse than its warm start."""
    problem = load_problem(EXAMPLE)
    result = solve(problem, SolveOptions(solver=solver, time_limit=10, threads=1, seed=0))
    assert check(result.schedule).ok
    assert result.schedule.makespan <= result.warm_start.makespan + 1e-9
    assert result.schedule.makespan >= result.lower_bound - 1e-9


# ----- windows, the overhead phase by windows, shedding -----

GUARD = 600.0  # the wall clock only guards against a runaway; deterministic work limits each search


def _serial_with_offload(problem):
    """Microbatches one at a time, every activation that may go to host memory offloaded after its F and
    reloaded before its B."""
    orders = []
    for device_order in serial_orders(problem):
        orders.append([])
        for op in device_order:
            moves = problem.max_offload(op.stage, op.microbatch) > 0
            if moves and op.kind is OpKind.B:
                orders[-1].append(Op(OpKind.RELOAD, op.stage, op.microbatch))
            orders[-1].append(op)
            if moves and op.kind is OpKind.F:
                orders[-1].append(Op(OpKind.OFFLOAD, op.stage, op.microbatch))
    start = make_schedule(problem, simulate(problem, orders, waits=forwards_wait_for_offloads(orders)), "serial")
    assert check(start).ok and start.offloaded > 0
    return start


def test_overhead_windows_and_shedding_keep_the_makespan_and_lower_the_overhead():
    problem = load_problem(EXAMPLE)  # per-microbatch times, activations, holds and checkpoints; offload and recompute
    start = _serial_with_offload(problem)
    options = SolveOptions(time_limit=GUARD, threads=1)
    budget = Budget(GUARD, deterministic=True)
    lowered, windows, _, _ = lower_overhead(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"),
                                            load_backend("cpsat"), start, Limit(time.monotonic() + GUARD, 2.0))
    assert windows > 0 and check(lowered).ok
    assert lowered.makespan <= start.makespan + 1e-9 and overhead_key(lowered) <= overhead_key(start)
    shed = shed_levers(start)
    assert check(shed).ok and shed.makespan <= start.makespan + 1e-9
    assert shed.offloaded < start.offloaded  # serial holds one microbatch at a time: most offloads are not needed


def test_neighbourhoods_reorder_microbatches_of_different_costs():
    problem = load_problem(EXAMPLE)
    start = _serial_with_offload(problem)
    options = SolveOptions(time_limit=GUARD, threads=1)
    budget = Budget(GUARD, deterministic=True)
    result = lns.improve(problem, build_scaling(problem), options, budget, Progress(budget, "cpsat"),
                         load_backend("cpsat"), start, Limit(time.monotonic() + GUARD, 4.0), True, 0.0)
    assert check(result.best).ok and result.best.makespan < start.makespan
