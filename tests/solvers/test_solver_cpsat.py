"""CP-SAT specifics: symmetry breaking, offload choices on a larger case, infeasibility, exact scaling,
the memory objective with a relative limit, FIFO relabelling (every backend: test_solver_backends.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from ppsolve.checker import check
from ppsolve.errors import InfeasibleError, InputError
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.scaling import build_scaling
from tests.helpers import make_problem
from tests.solvers.cases import brute_force, proven_optimum
from tests.bounds.test_bound_validity import small_problems

FAST = SolveOptions(time_limit=10, threads=2)


def solved(problem, **changes):
    options = SolveOptions(**{**FAST.__dict__, **changes})
    result = solve(problem, options)
    report = check(result.schedule)
    assert report.ok, [v.render() for v in report.violations]
    return result


def model_optimal(result) -> bool:
    """Optimal, or (offload: amounts on the model's grid) the model proved its makespan the least on its grid."""
    if result.status == "optimal":
        return True
    bound = result.model_bound
    return bound is not None and result.schedule.makespan <= bound + 1e-9


SYMMETRY_CASES = [
    dict(devices=3, microbatches=4, memory_capacity=2),
    dict(devices=2, microbatches=4, time_forward=[1, 3], time_backward_input=[2, 1], memory_capacity=[2, 1]),
    dict(devices=2, microbatches=3, chunks=2, placement="vshape", memory_capacity=2, time_p2p=1),
    dict(devices=2, microbatches=3, memory_capacity=1,
         offload={"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}}),
    # the cap's precedences (memory_precedences): B lag 2, W lag (5 - 2) // 1 + 1 = 4
    dict(devices=2, microbatches=5, memory_activation=2, memory_weight_hold=1, memory_capacity=5,
         time_backward_weight=3),
    dict(devices=2, microbatches=4, time_p2p=1, memory_activation=[2, 3], memory_weight_hold=[2, 1],
         memory_capacity=[6, 4], time_backward_weight=[2, 4]),
]


def assert_loses_nothing(problem, with_cut, without_cut) -> None:
    """A model with a cut (``with_cut``: a solve of it) finds the optimum. Without offload the judge is
    a model independent of ppsolve's (``tests.solvers.cases.proven_optimum``; ``without_cut`` is not run).
    With offload CP-SAT moves amounts on a grid and proves the least makespan on it only, and the
    independent MILP of any amount (CBC) proves none of these cases in minutes: the judge is the same
    model without the cut (``without_cut()``)."""
    assert model_optimal(with_cut)
    if not problem.can_offload:
        best = proven_optimum(problem)
        assert best is not None, "the independent model proved no optimum in time"
        assert with_cut.schedule.makespan == pytest.approx(best)
        return
    without = without_cut()
    assert model_optimal(without) and with_cut.schedule.makespan == pytest.approx(without.schedule.makespan)


@pytest.mark.parametrize("case", SYMMETRY_CASES)
def test_symmetry_breaking_loses_nothing(case):
    problem = make_problem(**case)
    assert_loses_nothing(problem, solved(problem, symmetry=True, warm_start="none"),
                         lambda: solved(problem, symmetry=False, warm_start="none", time_limit=20))


OFFLOAD = {"fraction": 1, "bandwidth": {"d2h": 4, "h2d": 4}}


def test_offload_chosen_when_it_helps():
    # 3 devices at capacity 1 activation: without offload device 0 holds one microbatch at a time
    # (a chain per microbatch); moving activations to host (0.25 each way) lets several be in flight.
    problem = make_problem(devices=3, microbatches=4, memory_capacity=1, offload=OFFLOAD)
    with_off = solved(problem)
    without = solved(problem, offload=False)
    assert with_off.schedule.makespan < without.schedule.makespan
    assert with_off.schedule.offloaded > 0
    assert model_optimal(with_off)


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


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(offload=False))
def test_the_model_with_its_redundant_cuts_finds_the_brute_force_optimum(problem):
    # symmetry, the cap's precedences and the bound's cut, against every device order timed
    best = brute_force(problem)
    assert best is not None  # the cap is at least the least that works
    result = solve(problem, SolveOptions(time_limit=10, threads=1))
    assert result.status == "optimal" and result.schedule.makespan == pytest.approx(best)


@pytest.mark.parametrize("case", [SYMMETRY_CASES[3],
                                  dict(devices=2, microbatches=3, chunks=2, placement="vshape", memory_capacity=2,
                                       time_p2p=1, offload={"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}})])
def test_tail_cuts_lose_nothing_with_offload(case, monkeypatch):
    # with offload the tail cut holds for every microbatch, not only the last in index order
    from ppsolve.solvers.cpsat import constraints

    problem = make_problem(**case)
    with_cuts = solved(problem, warm_start="none")

    def without():
        monkeypatch.setattr(constraints, "tail_cuts", lambda *a, **k: None)
        return solved(problem, warm_start="none", time_limit=20)

    assert_loses_nothing(problem, with_cuts, without)


# q * a + hold > cap: B(s, j - q) ending is not enough for F(s, j); W(s, j - q) or B(s, j - q + 1) must end too
NEXT_RELEASE_CASES = [
    dict(devices=3, microbatches=5, memory_weight_hold=0.5, memory_capacity=2, time_backward_weight=2),
    dict(devices=2, microbatches=6, time_p2p=1, memory_activation=[2, 1], memory_weight_hold=[1, 0.5],
         memory_capacity=[5, 3], time_forward=[1, 2], time_backward_weight=[3, 1]),
    dict(devices=3, microbatches=5, memory_weight_hold=0.25, memory_capacity=[3, 2, 1], time_forward=[1, 1, 2],
         time_backward_input=[1, 1, 2], time_backward_weight=[1, 2, 3]),
]


@pytest.mark.parametrize("case", NEXT_RELEASE_CASES)
def test_the_next_release_precedence_loses_nothing(case):
    problem = make_problem(**case)
    with_cut = solved(problem, warm_start="none")
    assert with_cut.status == "optimal"
    assert_loses_nothing(problem, with_cut, None)


def test_the_next_release_precedence_is_one_choice_per_forward_that_needs_it():
    from ortools.sat.python import cp_model

    from ppsolve.solvers.cpsat import constraints
    from ppsolve.solvers.cpsat.variables import build_variables

    problem = make_problem(**NEXT_RELEASE_CASES[2])  # q = 3, 2, 1 on the three devices
    sc = build_scaling(problem)
    model = cp_model.CpModel()
    v = build_variables(model, problem, sc, offload=False)
    before = len(model.proto.variables)
    constraints.memory_precedences(v, sc.capacity)
    assert len(model.proto.variables) - before == (5 - 3) + (5 - 2) + (5 - 1)
