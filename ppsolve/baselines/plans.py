"""Simple orders of our own: candidates for the solvers' warm start (``ppsolve.solvers.warm_start``).

Serial microbatches (valid for any placement), 1F1B limited to k in flight, the list
scheduler's orders under other kind preferences, and the same with offloads added on
the devices over their cap.
"""

from __future__ import annotations

from ppsolve.baselines.common import with_w_after_b
from ppsolve.baselines.listsched import ListPolicy, list_orders
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem


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


def limited_1f1b_orders(problem: Problem, k: int, defer_w: bool = False) -> list[list[Op]]:
    """1F1B on a linear placement with at most ``k`` microbatches in flight per device.

    With ``defer_w`` (split backward) the W of a microbatch runs after the next F instead of
    right after its B (steady state F, W, B), which leaves room to reload before the B.
    """
    d, m = problem.devices, problem.microbatches
    defer_w = defer_w and problem.split_backward
    orders = []
    for i in range(d):
        warm = min(max(1, min(k, d - i)) - 1, m)
        order = [Op(OpKind.F, i, j) for j in range(warm)]
        nxt = warm
        for j in range(m):
            if nxt < m:
                order.append(Op(OpKind.F, i, nxt))
                nxt += 1
            if defer_w and j > 0:
                order.append(Op(OpKind.W, i, j - 1))
            order.append(Op(OpKind.B, i, j))
            if problem.split_backward and not defer_w:
                order.append(Op(OpKind.W, i, j))
        if defer_w:
            order.append(Op(OpKind.W, i, m - 1))
        orders.append(order)
    return orders


def fitting_k(problem: Problem) -> int:
    """The most microbatches in flight (1F1B limited to k, linear placement) whose activations fit
    every capacity without offload: device i holds min(k, d - i) of them (weight holds aside)."""
    d = problem.devices
    for k in range(d, 1, -1):
        if all(c is None or min(k, d - i) * problem.activation[i] <= c + 1e-12
               for i, c in enumerate(problem.capacity)):
            return k
    return 1


def list_plan(problem: Problem, order: str = "BFW", late_first: bool = False) -> list[list[Op]]:
    """The list scheduler's orders (:mod:`ppsolve.baselines.listsched`) within the capacity, without
    offload, preferring kinds in ``order`` (and, with ``late_first``, a held microbatch's later stages)."""
    orders, _, _ = list_orders(problem, ListPolicy(limit=tuple(problem.capacity), order=order,
                                                   late_first=late_first))
    return orders


def with_offload(problem: Problem, orders: list[list[Op]], lead: int, devices: set[int]) -> list[list[Op]]:
    """``orders`` with every activation of ``devices`` offloaded right after its F and reloaded
    up to ``lead`` compute ops before its B (lead 0: just before the B), never before an F (whose
    allocation would meet the reload's)."""
    out = []
    for device, order in enumerate(orders):
        if device not in devices:
            out.append(list(order))
            continue
        compute = [op for op in order if op.kind.is_compute]
        reload_before: dict[int, list[Op]] = {}
        for index, op in enumerate(compute):
            if op.kind is OpKind.B and problem.max_offload(op.stage) > 0:
                at = index
                moved = 0
                while moved < lead and at > 0 and compute[at - 1].kind is not OpKind.F:
                    at -= 1
                    moved += 1
                reload_before.setdefault(at, []).append(Op(OpKind.RELOAD, op.stage, op.microbatch))
        new = []
        for index, op in enumerate(compute):
            new += reload_before.get(index, [])
            new.append(op)
            if op.kind is OpKind.F and problem.max_offload(op.stage) > 0:
                new.append(Op(OpKind.OFFLOAD, op.stage, op.microbatch))
        out.append(new)
    return out


def w_right_after_b(problem: Problem, orders: list[list[Op]]) -> list[list[Op]]:
    """``orders`` with each W moved right after its B (split backward)."""
    return [with_w_after_b(problem, [op for op in order if op.kind is not OpKind.W]) for order in orders]
