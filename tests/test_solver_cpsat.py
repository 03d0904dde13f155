"""CP-SAT solver: hand-derived optima, brute force on tiny problems, offload choices, symmetry, determinism."""

from __future__ import annotations

import itertools

import pytest

from ppsolve.checker import check
from ppsolve.errors import DeadlockError, InfeasibleError, InputError
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.scaling import build_scaling
from tests.helpers import make_problem

FAST = SolveOptions(time_limit=10, threads=2)


def solved(problem, **changes):
    options = SolveOptions(**{**FAST.__dict__, **changes})
    result = solve(problem, options)
    report = check(result.schedule)
    assert report.ok, [v.render() for v in report.violations]
    return result


def test_two_devices_two_microbatches_unbounded():
    # F = B = W = 1, linear, 2 devices, 2 microbatches. Device 1 cannot start before F(0,0) ends (t = 1)
    # and has 2 x 3 = 6 units of work: makespan >= 7. 7 is reached: device 1 runs F B F B W W from t = 1.
    result = solved(make_problem(microbatches=2))
    assert result.status == "optimal"
    assert result.schedule.makespan == 7
    assert result.lower_bound == 7


def test_two_devices_cap_one_is_serial():
    # Capacity 1 (one activation) per device: F(0,1) must wait for B(0,0) to release memory, so
    # F(0,0) 0-1, F(1,0) 1-2, B(1,0) 2-3, B(0,0) 3-4, F(0,1) 4-5, F(1,1) 5-6, B(1,1) 6-7, B(0,1) 7-8,
    # W(0,1) 8-9 is a chain: the optimum is 9 (the W of microbatch 0 fit in the gaps).
    result = solved(make_problem(microbatches=2, memory_capacity=1))
    assert result.status == "optimal"
    assert result.schedule.makespan == 9
    assert max(result.schedule.peak_memory) <= 1


def test_fused_backward_optimum():
    # Fused: F = 1, B = 1 + 1 = 2. Device 1 starts at 1 and has 2 x (1 + 2) = 6 of work, then B(0,1)
    # (2 units) still follows the last B on device 1: makespan >= 1 + 6 + 2 = 9, and F F B B on device 1
    # with device 0 doing F F . . B B reaches it.
    result = solved(make_problem(microbatches=2, backward="fused"))
    assert result.status == "optimal"
    assert result.schedule.makespan == 9


def _device_orders(problem, device):
    """Every order of a device's compute ops that keeps each microbatch's own ops in dependency order."""
    ops = [op for op in problem.compute_ops() if problem.placement[op.stage] == device]
    rank = {OpKind.F: 0, OpKind.B: 1, OpKind.W: 2}
    for perm in itertools.permutations(ops):
        seen = {}
        ok = True
        for op in perm:
            key = (op.microbatch, op.stage)
            if seen.get(key, -1) > rank[op.kind]:
                ok = False
                break
            seen[key] = rank[op.kind]
            # F of a microbatch before B of it on the same stage (B after its F through the chain).
        if ok:
            yield list(perm)


def brute_force(problem):
    """The best makespan over all device orders, each timed as soon as possible (no offload)."""
    per_device = [list(_device_orders(problem, d)) for d in range(problem.devices)]
    best = None
    for combo in itertools.product(*per_device):
        try:
            ops = simulate(problem, [list(o) for o in combo])
        except DeadlockError:
            continue
        schedule = make_schedule(problem, ops, "brute")
        if best is not None and schedule.makespan >= best:
            continue
        if check(schedule).ok:
            best = schedule.makespan
    return best


BRUTE_CASES = [
    dict(microbatches=2),
    dict(microbatches=2, memory_capacity=1),
    dict(microbatches=2, time_forward=[1, 2], time_backward_input=[2, 1], time_backward_weight=[1, 3], time_p2p=1),
    dict(microbatches=2, memory_activation=[2, 1], memory_weight_hold=[1, 0], memory_capacity=[3, 1]),
    dict(microbatches=3, backward="fused", memory_capacity=2, time_forward=[1, 2], time_backward_input=1),
    dict(microbatches=3, backward="fused", time_p2p=2, time_forward=[2, 1], time_backward_input=[1, 2]),
]


@pytest.mark.parametrize("case", BRUTE_CASES)
def test_agrees_with_brute_force(case):
    problem = make_problem(**case)
    result = solved(problem)
    assert result.status == "optimal"
    assert result.schedule.makespan == pytest.approx(brute_force(problem))


SYMMETRY_CASES = [
    dict(devices=3, microbatches=4, memory_capacity=2),
    dict(devices=2, microbatches=4, time_forward=[1, 3], time_backward_input=[2, 1], memory_capacity=[2, 1]),
    dict(devices=2, microbatches=3, chunks=2, placement="vshape", memory_capacity=2, time_p2p=1),
    dict(devices=2, microbatches=3, memory_capacity=1,
         offload={"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}}),
]


@pytest.mark.parametrize("case", SYMMETRY_CASES)
def test_symmetry_breaking_loses_nothing(case):
    problem = make_problem(**case)
    with_sym = solved(problem, symmetry=True, warm_start="none")
    without = solved(problem, symmetry=False, warm_start="none", time_limit=20)
    assert with_sym.status == without.status == "optimal"
    assert with_sym.schedule.makespan == pytest.approx(without.schedule.makespan)


OFFLOAD = {"fraction": 1, "bandwidth": {"d2h": 4, "h2d": 4}}


def test_offload_chosen_when_it_helps():
    # 3 devices at capacity 1 activation: without offload device 0 holds one microbatch at a time
    # (a chain per microbatch); moving activations to host (0.25 each way) lets several be in flight.
    problem = make_problem(devices=3, microbatches=4, memory_capacity=1, offload=OFFLOAD)
    with_off = solved(problem)
    without = solved(problem, offload=False)
    assert with_off.schedule.makespan < without.schedule.makespan
    assert with_off.schedule.offloaded > 0
    assert with_off.status == "optimal"


def test_offload_not_chosen_when_useless():
    # Unbounded memory: offloading can only add transfers, so the solver moves nothing.
    problem = make_problem(devices=3, microbatches=4, offload=OFFLOAD)
    result = solved(problem)
    assert result.schedule.offloaded == 0
    # And with a cap that 1F1B already meets, nothing needs to move either.
    capped = solved(make_problem(devices=3, microbatches=4, memory_capacity=3, offload=OFFLOAD))
    assert capped.schedule.offloaded == 0


def test_infeasible_capacity_names_least_capacity():
    with pytest.raises(InfeasibleError, match="at least 2"):
        solve(make_problem(chunks=2, placement="vshape", memory_capacity=1.5), FAST)


def test_decimal_inputs_scale_exactly():
    # Halving every time halves the optimum; the scaled model stays exact.
    base = solved(make_problem(microbatches=3, memory_capacity=2))
    half = make_problem(microbatches=3, memory_capacity=0.5, memory_activation=0.25,
                        time_forward=0.5, time_backward_input=0.5, time_backward_weight=0.5)
    assert build_scaling(half).exact
    result = solved(half)
    assert result.status == "optimal"
    assert result.schedule.makespan == pytest.approx(base.schedule.makespan / 2)


def test_deterministic_with_one_thread():
    problem = make_problem(devices=3, microbatches=5, memory_capacity=2, offload=OFFLOAD)
    runs = [solve(problem, SolveOptions(time_limit=2, threads=1, seed=7)).schedule.to_dict() for _ in range(2)]
    for run in runs:
        run["method"].pop("seconds")
    assert runs[0] == runs[1]


def test_memory_objective_under_makespan_limit():
    # 3 devices, 4 microbatches, F = B = W = 1. At the fastest makespan (14 = 2 + 12, device 2's
    # head plus load) device 0 must hold 3 activations (1F1B's warm-up); one activation per device
    # forces microbatches one at a time. A looser limit never needs more memory.
    problem = make_problem(devices=3, microbatches=4)
    fastest = solved(problem).schedule.makespan
    assert fastest == 14
    tight = solved(problem, objective="memory", makespan_limit=fastest)
    assert tight.schedule.makespan <= fastest
    assert max(tight.schedule.peak_memory) == 3
    loose = solved(problem, objective="memory", makespan_limit="1.5x")
    assert max(loose.schedule.peak_memory) <= max(tight.schedule.peak_memory)
    assert loose.schedule.makespan <= 1.5 * fastest + 1e-9
    free = solved(problem, objective="memory")
    assert free.schedule.peak_memory == [1, 1, 1] and free.status == "optimal"
    with pytest.raises(InputError):
        solve(problem, SolveOptions(objective="memory", makespan_limit="fast", time_limit=2))


def test_never_worse_than_warm_start():
    problem = make_problem(devices=4, microbatches=8, memory_capacity=2)
    result = solved(problem, time_limit=3)
    assert result.warm_start is not None
    assert result.schedule.makespan <= result.warm_start.makespan


def test_fifo_relabel_keeps_times_and_validity():
    from ppsolve.solvers.warm_start import fifo_relabel

    problem = make_problem(devices=2, microbatches=3, memory_capacity=2)
    # Microbatches run in the order 2, 0, 1: a valid schedule that breaks FIFO.
    orders = [[], []]
    for j in (2, 0, 1):
        orders[0].append(Op(OpKind.F, 0, j))
        orders[1] += [Op(OpKind.F, 1, j), Op(OpKind.B, 1, j), Op(OpKind.W, 1, j)]
        orders[0] += [Op(OpKind.B, 0, j), Op(OpKind.W, 0, j)]
    schedule = make_schedule(problem, simulate(problem, orders), "shuffled")
    relabelled = fifo_relabel(schedule)
    assert check(relabelled).ok
    assert sorted((o.kind, o.stage, o.start) for o in relabelled.ops) == \
        sorted((o.kind, o.stage, o.start) for o in schedule.ops)
    f0 = sorted((o.start, o.microbatch) for o in relabelled.ops if o.kind is OpKind.F and o.stage == 0)
    assert [j for _, j in f0] == [0, 1, 2]
