"""Schedules on the V-shape placement: ZB-V, V-Half, V-Min and DualPipeV.

Device i holds stages i and 2d-1-i. ZB-V, V-Half and V-Min follow the
reference implementation of the zero-bubble and controllable-memory papers:
ZB-V is the V-shape zero-bubble heuristic on the real costs within 2d stage
activations per device (:mod:`ppsolve.baselines.families.zbv_auto`); V-Half and V-Min
repeat a fixed building block and squeeze it (:mod:`ppsolve.baselines.families.vpattern`),
the order then timed on the real costs. With more than two chunks per device
(where those are not defined) they fall back to the list scheduler's order on
unit costs with d, ``(d + 2) // 2`` and ``(d + 4) // 3`` microbatches per device.

DualPipeV follows the eight phases of DeepSeek's DualPipeV order (warm-up
chunk-0 forwards, paired forwards, zero-bubble B-W-F, the F0-B1/F1-B0 main
loop, drain), run without F&B overlap: each pair runs as its forward, then its
backward. It needs m >= 2d.
"""

from __future__ import annotations

import time
from collections import deque

from ppsolve.baselines.common import Requirement, finish, largest
from ppsolve.baselines.engines.listsched import ListPolicy, list_orders
from ppsolve.baselines.families.vpattern import pattern_orders, v_half_block, v_min_block
from ppsolve.baselines.families.zbv_auto import zbv_orders
from ppsolve.method_types import RunOptions
from ppsolve.ops import B, F, W, Op
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

VSHAPE_SPLIT = Requirement(placements=("vshape",), backward=("split",))
VSHAPE = Requirement(placements=("vshape",))


def build_zb_v(problem: Problem, options: RunOptions) -> Schedule:
    """The ZB-V heuristic on the real costs, every device within 2d stage activations."""
    started = time.perf_counter()
    limit = 2 * problem.devices * largest(problem.activation)
    orders = zbv_orders(problem, limit)
    if orders is None:  # more than two chunks per device: the list scheduler's order on unit costs
        orders = budget_orders(problem, problem.devices)
    return finish(problem, orders, "zb-v", options, started,
                  params={"microbatches_in_flight": problem.devices, "memory_limit": limit})


def budget_orders(problem: Problem, microbatches: int) -> list[list[Op]]:
    """Zero-bubble order rules with ``microbatches`` in flight per device (unit counts)."""
    per = problem.chunks  # one unit per stage activation
    limit = tuple(float(microbatches * per) for _ in range(problem.devices))
    orders, _, _ = list_orders(problem, ListPolicy(limit=limit, unit=True))
    return orders


def _build_pattern(name: str, block) -> callable:
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        if problem.chunks != 2:  # the building block is defined for two chunks per device
            n = (problem.devices + 2) // 2 if name == "v-half" else (problem.devices + 4) // 3
            return finish(problem, budget_orders(problem, n), name, options, started,
                          params={"microbatches_in_flight": n})
        orders, peak = pattern_orders(problem, block(problem.devices))
        return finish(problem, orders, name, options, started, params={"stage_activations": peak})
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


build_v_half = _build_pattern("v-half", v_half_block)
build_v_min = _build_pattern("v-min", v_min_block)


def dualpipe_v_why_not(problem: Problem) -> str | None:
    reason = VSHAPE.why_not(problem)
    if reason is None and problem.chunks != 2:
        return f"needs 2 chunks per device (V-shape), the problem has {problem.chunks}"
    if reason is None and problem.microbatches < 2 * problem.devices:
        return f"needs at least 2d = {2 * problem.devices} microbatches, the problem has {problem.microbatches}"
    return reason


def dualpipe_v_orders(problem: Problem) -> list[list[Op]]:
    d, m, split = problem.devices, problem.microbatches, problem.split_backward
    orders = []
    for r in range(d):
        stage = (r, 2 * d - 1 - r)
        nf, nb = [0, 0], [0, 0]
        deferred: deque[Op] = deque()
        order: list[Op] = []

        def fwd(c):
            order.append(F(stage[c], nf[c]))
            nf[c] += 1

        def bwd(c, zb=False):
            s, j = stage[c], nb[c]
            nb[c] += 1
            order.append(B(s, j))
            if split:
                (deferred.append if zb else order.append)(W(s, j))

        def weight():
            if deferred:
                order.append(deferred.popleft())

        for _ in range(2 * (d - r - 1)):
            fwd(0)
        for _ in range(r + 1):
            fwd(0)
            fwd(1)
        for _ in range(d - r - 1):
            bwd(1, zb=True)
            weight()
            fwd(1)
        for _ in range(m - 2 * d + r + 1):
            fwd(0)
            bwd(1)
            fwd(1)
            bwd(0)
        for _ in range(d - r - 1):
            bwd(1)
            fwd(1)
            bwd(0)
        steps, zb = r + 1, False
        for i in range(steps):
            if i == steps // 2 and r % 2 == 1:
                zb = True
            bwd(1, zb)
            if i == steps // 2 and r % 2 == 0:
                zb = True
            bwd(0, zb)
        for _ in range(d - r - 1):
            weight()
            bwd(0, zb=True)
        while deferred:
            weight()
        orders.append(order)
    return orders


def build_dualpipe_v(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    return finish(problem, dualpipe_v_orders(problem), "dualpipe-v", options, started)
