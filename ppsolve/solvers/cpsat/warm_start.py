"""The starting schedule CP-SAT is hinted with: the best applicable baseline, else simple orders.

A warm start must pass the checker and respect the capacity; among those the
shortest wins. Baselines come from the method registry (family "baseline"),
so this works whether or not any baseline is installed; two simple plans of
our own are always tried as well:

* serial: microbatches one after another (F down the stages, B and W back),
  valid for every placement; one microbatch in flight, so its peak is the
  least capacity without offload (or with offload, moving every offloadable
  activation right after its F).
* 1F1B limited to k in flight (linear placement): device i warms up with
  min(k, d - i) - 1 forwards, then alternates F and B (W right after B).
  k = d is 1F1B; smaller k trades speed for memory (peak k activations).
"""

from __future__ import annotations

from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.methods import RunOptions, all_methods, get_method
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import simulate


def serial_orders(problem: Problem, offload: bool = False) -> list[list[Op]]:
    """Each device's share of one global order that runs microbatches one at a time."""
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    S = problem.num_stages
    for j in range(problem.microbatches):
        for s in range(S):
            device = problem.placement[s]
            orders[device].append(Op(OpKind.F, s, j))
            if offload and problem.max_offload(s) > 0:
                orders[device].append(Op(OpKind.OFFLOAD, s, j))
        for s in reversed(range(S)):
            device = problem.placement[s]
            if offload and problem.max_offload(s) > 0:
                orders[device].append(Op(OpKind.RELOAD, s, j))
            orders[device].append(Op(OpKind.B, s, j))
            if problem.split_backward:
                orders[device].append(Op(OpKind.W, s, j))
    return orders


def limited_1f1b_orders(problem: Problem, k: int) -> list[list[Op]]:
    """1F1B on a linear placement with at most ``k`` microbatches in flight per device."""
    d, m = problem.devices, problem.microbatches
    orders = []
    for i in range(d):
        warm = min(max(1, min(k, d - i)) - 1, m)
        order = [Op(OpKind.F, i, j) for j in range(warm)]
        nxt = warm
        for j in range(m):
            if nxt < m:
                order.append(Op(OpKind.F, i, nxt))
                nxt += 1
            order.append(Op(OpKind.B, i, j))
            if problem.split_backward:
                order.append(Op(OpKind.W, i, j))
        orders.append(order)
    return orders


def _own_plans(problem: Problem) -> list[tuple[str, list[list[Op]]]]:
    plans = [("serial", serial_orders(problem))]
    if problem.can_offload:
        plans.append(("serial+offload", serial_orders(problem, offload=True)))
    if problem.placement_name == "linear":
        plans += [(f"1f1b-k{k}", limited_1f1b_orders(problem, k)) for k in range(problem.devices, 1, -1)]
    return plans


def acceptable(schedule: Schedule) -> bool:
    """Valid, executable and within every capacity (the checker covers all three)."""
    return check(schedule).ok


def own_warm_starts(problem: Problem) -> list[Schedule]:
    out = []
    for name, orders in _own_plans(problem):
        try:
            schedule = make_schedule(problem, simulate(problem, orders), f"cpsat-warm:{name}")
        except PpsolveError:
            continue
        if acceptable(schedule):
            out.append(schedule)
    return out


def baseline_warm_starts(problem: Problem, choice: str, time_limit: float | None) -> list[Schedule]:
    """Schedules of the registered baselines that apply ('auto'), or of one named method."""
    if choice == "none":
        return []
    methods = [get_method(choice)] if choice != "auto" else all_methods("baseline")
    options = RunOptions(time_limit=time_limit, threads=1, seed=0, quiet=True, warm_start="none")
    out = []
    for method in methods:
        if method.why_not(problem) is not None:
            if choice != "auto":
                raise PpsolveError(f"warm start {method.name} does not apply: {method.why_not(problem)}")
            continue
        try:
            schedule = method.run(problem, options)
        except PpsolveError:
            if choice != "auto":
                raise
            continue
        if acceptable(schedule):
            out.append(schedule)
    return out


def best_warm_start(problem: Problem, choice: str = "auto", time_limit: float | None = None) -> Schedule | None:
    """The shortest acceptable schedule among the baselines (per ``choice``) and our own plans."""
    candidates = baseline_warm_starts(problem, choice, time_limit)
    if choice == "auto":
        candidates += own_warm_starts(problem)
    if not candidates:
        return None
    return min(candidates, key=lambda s: (s.makespan, s.offloaded, max(s.peak_memory, default=0.0)))
