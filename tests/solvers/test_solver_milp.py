"""The MILP backend's own behaviour: HiGHS next to OR-Tools in one process, its starting solution,
the CBC fallback's crash on exit, and the deterministic work limit."""

from __future__ import annotations

import sys

import pytest

from ppsolve.bounds import makespan_lower_bound
from ppsolve.checker import check
from ppsolve.ops import OpKind
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.api import Phase, PhaseTask
from ppsolve.solvers.budget import Budget
from ppsolve.solvers.milp import backend, highs_process  # imports PuLP without highspy (see its __init__)
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import build_scaling
from ppsolve.solvers.warm_start import best_warm_start, fifo_relabel
from tests.solvers.determinism import decided_by_the_clock, deterministic_options
from tests.helpers import make_problem


OFFLOAD = {"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}}


def test_highs_runs_after_cpsat_in_one_process():
    # OR-Tools bundles an older libhighs.so.1: once CP-SAT has run, `import highspy` fails in this
    # process (and the other way round). The bench ran CP-SAT first and the MILP fell back to CBC.
    problem = make_problem(devices=2, microbatches=3, memory_capacity=1, offload=OFFLOAD)
    first = solve(problem, SolveOptions(solver="cpsat", time_limit=20, threads=2))
    assert "ortools" in sys.modules
    milp = solve(problem, SolveOptions(solver="milp", time_limit=20, threads=2))
    assert milp.schedule.method.extra["engine"].startswith("HiGHS")
    assert milp.status == "optimal" and milp.schedule.makespan == first.schedule.makespan
    assert "highspy" not in sys.modules  # HiGHS ran in its child process
    again = solve(problem, SolveOptions(solver="cpsat", time_limit=20, threads=2))  # and CP-SAT still loads
    assert again.schedule.method.name == "cpsat" and again.schedule.makespan == first.schedule.makespan


def _task(problem, phase=Phase.MAKESPAN, makespan_cap=None):
    scaling = build_scaling(problem)
    budget = Budget(60, False)
    warm = fifo_relabel(best_warm_start(problem))
    horizon = scaling.time(warm.makespan) if phase is Phase.MAKESPAN else None
    cap = scaling.time(warm.makespan) if makespan_cap == "warm" else makespan_cap
    return PhaseTask(problem, scaling, phase, SolveOptions(solver="milp"), budget, budget.search(0.5),
                     Progress(budget, "milp", True, None), horizon, cap, warm,
                     scaling.time(makespan_lower_bound(problem).value))


START_CASES = {
    # slow transfers, no cap: the warm start offloads nothing, and a transfer that is not chosen
    # placed right after its F would end past the horizon (its variable's upper bound)
    "slow-transfers": (dict(devices=2, microbatches=3, offload={"fraction": 1, "bandwidth": {"d2h": 0.25, "h2d": 0.25}}),
                       Phase.MAKESPAN, None),
    "offload-shared": (dict(devices=3, microbatches=4, memory_capacity=1, offload={**OFFLOAD, "links": [[0, 1, 2]]}),
                       Phase.MAKESPAN, None),
    "least-offload": (dict(devices=2, microbatches=4, memory_capacity=1, offload=OFFLOAD), Phase.OVERHEAD, "warm"),
    "memory": (dict(devices=3, microbatches=4, memory_capacity=[3, 2, 2], memory_weight_hold=0.5), Phase.MEMORY, None),
    # the warm start recomputes (R ops: their choices, starts, and the memory shares they free)
    "recompute": (dict(devices=3, microbatches=4, memory_capacity=1.5, recompute={"keep": 0.25, "time": 1}),
                  Phase.MAKESPAN, None),
    "recompute-overhead": (dict(devices=3, microbatches=4, memory_capacity=1.5, recompute={"keep": 0.25},
                                offload={**OFFLOAD, "fraction": 0.5}), Phase.OVERHEAD, "warm"),
}


@pytest.mark.parametrize("name", list(START_CASES))
def test_starting_solution_is_a_solution_of_the_model(name):
    # HiGHS drops a starting solution that breaks a bound or a row (and PuLP's CBC refused one
    # outright: "initial value ... > upBound"); every value must sit in its bounds, every row hold.
    case, phase, cap = START_CASES[name]
    task = _task(make_problem(**case), phase, cap)
    m = backend.build_model(task)
    values = backend.start_values(m, task.hint)
    assert values
    if "recompute" in case:
        assert task.hint.recomputed and any(values[rc.chosen.name] for rc in m.v.recomputes.values())
    for var in m.v.lp.variables():
        var.varValue = values[var.name]
        assert var.valid(1e-9), (var.name, values[var.name], var.lowBound, var.upBound)
    broken = [c.name for c in m.v.lp.constraints() if not c.valid(1e-9)]
    assert not broken


@pytest.mark.slow
def test_cbc_crash_on_exit_is_retried_without_start(monkeypatch):
    # PuLP's bundled CBC 2.10.3 sometimes crashes on exit after a search with a starting solution
    # (PuLP raises PulpSolverError); the phase runs again without one instead of failing the solve.
    monkeypatch.setattr(highs_process, "available", lambda: False)
    calls = []
    real = backend.cbc

    def flaky(**kwargs):
        calls.append(kwargs.get("warmStart"))
        solver = real(**kwargs)
        if kwargs.get("warmStart"):
            def crash(lp, **_):
                raise backend.pulp.PulpSolverError("Pulp: Error while trying to execute")
            solver.actualSolve = crash
        return solver

    monkeypatch.setattr(backend, "cbc", flaky)
    result = solve(make_problem(devices=2, microbatches=3, memory_capacity=1, offload=OFFLOAD),
                   SolveOptions(solver="milp", time_limit=20, threads=1))
    assert True in calls and False in calls
    assert result.schedule.method.extra["engine"].startswith("CBC")
    assert result.status == "optimal"


def test_deterministic_search_ends_by_its_work_limit():
    # --threads 1: HiGHS stops after its work limit (interrupt checks x nonzeros), never by the wall clock
    problem = make_problem(devices=3, microbatches=4, memory_capacity=1,
                           offload={"fraction": 1, "bandwidth": {"d2h": 4, "h2d": 4}})
    runs = [solve(problem, deterministic_options("milp", seed=2)) for _ in range(2)]
    assert not any(decided_by_the_clock(r) for r in runs)
    first, second = ([(op.op, op.start) for op in r.schedule.ops] for r in runs)
    assert first == second


def test_partial_offload_amounts_reach_the_optimum():
    # Two devices, two microbatches, every op 2, activation 1, cap 1.5, 0.5 each way: moving whole
    # shares (2 time units each way) gives 18 at best; moving half of each of two activations (1 each
    # way) gives 15, and no less. At 15 the least offloaded total is 1: device 0 must hold both
    # microbatches at once (else it runs them one after the other: 18), so 0.5 of the first is away
    # when the second's F starts, and 0.5 of the second when the first's RELOAD starts.
    problem = make_problem(devices=2, microbatches=2, time_forward=2, time_backward_input=2, time_backward_weight=2,
                           memory_capacity=1.5, offload={"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}})
    result = solve(problem, SolveOptions(solver="milp", time_limit=30, threads=1))
    assert result.status == "optimal" and result.schedule.makespan == pytest.approx(15)
    amounts = [op.amount for op in result.schedule.ops if op.kind is OpKind.OFFLOAD]
    assert all(0 < a < 1 for a in amounts) and sum(amounts) == pytest.approx(1)
    assert check(result.schedule).ok


def test_least_peak_with_partial_amounts():
    # the memory objective on a continuous model (amounts of any size): the least peak is one
    # activation (a forward holds it when it starts), proven
    problem = make_problem(devices=2, microbatches=2, memory_capacity=1.5, offload=OFFLOAD)
    result = solve(problem, SolveOptions(solver="milp", time_limit=30, threads=1, objective="memory"))
    assert result.status == "optimal" and max(result.schedule.peak_memory) == pytest.approx(1)
