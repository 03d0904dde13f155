"""Exact answers for tiny problems, shared by the solver tests: a brute force over device orders, and
CP-SAT's proven optimum with the bound's own cut switched off."""

from __future__ import annotations

import itertools
from unittest import mock

from ppsolve.bounds import MakespanBound
from ppsolve.checker import check
from ppsolve.errors import DeadlockError
from ppsolve.ops import OpKind
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve


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




def proven_optimum(problem, time_limit: float = 10) -> float | None:
    """The makespan CP-SAT proves optimal (one thread; with offload, optimal among its grid of amounts,
    so at or above the true optimum), None when it proves nothing in time. The
    solver's cut (makespan >= the lower bound) is switched off, so a bound that were too high could
    not steer the search or stop it early: what this returns is a check on the bound."""
    with mock.patch("ppsolve.solvers.phases.makespan_lower_bound", lambda p: MakespanBound(0.0, (), 0.0)):
        result = solve(problem, SolveOptions(time_limit=time_limit, threads=1))
    span = result.schedule.makespan
    if result.status == "optimal":
        return span
    # with offload, CP-SAT proves its optimum on a grid of amounts (at or above the true optimum)
    grid = result.model_bound
    return span if grid is not None and span <= grid + 1e-9 else None
