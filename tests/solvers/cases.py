"""Exact answers for tiny problems, shared by the solver and bound tests, none of them from ppsolve's
solvers: a brute force over device orders, and the optimum of an independent model."""

from __future__ import annotations

import itertools

from ppsolve.checker import check
from ppsolve.errors import DeadlockError
from ppsolve.ops import OpKind
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate


def device_orders(problem, device):
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
    per_device = [list(device_orders(problem, d)) for d in range(problem.devices)]
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




def proven_optimum(problem, time_limit: float = 30) -> float | None:
    """The optimum proven by a model that shares nothing with ppsolve's solvers but the problem and the
    dependency table (tests/solvers/test_solver_recompute.py): without offload its own CP-SAT
    formulation (discrete, no cuts), with offload a MILP over continuous times and amounts (CBC);
    None when not proven in ``time_limit`` seconds (a caller that needs the figure must say so)."""
    from tests.solvers.test_solver_recompute import discrete_optimum, independent_optimum

    if problem.can_offload:
        return independent_optimum(problem, time_limit)
    return discrete_optimum(problem, time_limit)
