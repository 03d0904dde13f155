"""Plans of our own: the orders the solvers' warm start tries besides the baselines.

Serial microbatches (valid for any placement), 1F1B limited to k in flight, the list
scheduler's orders under other kind preferences, and, on capped problems, the same and the
published orders with offloads or recomputes added where a device is over its cap, and with
both (:func:`fit_by_both`, :func:`fit_link_first`).
:func:`own_plans` lists them lazily, cheapest first; ``ppsolve.solvers.warm_start`` says
which it tries and keeps.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Callable, Iterator

from ppsolve.baselines.common import over_capacity, with_recompute, with_w_after_b
from ppsolve.baselines.engines.listsched import ListPolicy, list_orders
from ppsolve.baselines.engines.offload_fit import fit_by_offload, link_first, selective_offload_plans, with_amounts
from ppsolve.baselines.engines.offload_pass import Plan
from ppsolve.baselines.families.onef1b import onef1b_forward_backward
from ppsolve.baselines.families.recompute import PREFER, fit_by_recompute
from ppsolve.baselines.portfolio import built_baselines
from ppsolve.errors import InfeasibleError, NotApplicableError, PpsolveError
from ppsolve.method_types import RunOptions
from ppsolve.memory import memory_curves
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.simulator import simulate
from ppsolve.tolerance import exceeds


def serial_orders(problem: Problem, offload: bool = False) -> list[list[Op]]:
    """Each device's share of one global order that runs microbatches one at a time."""
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    S = problem.num_stages
    for j in range(problem.microbatches):
        for s in range(S):
            device = problem.placement[s]
            orders[device].append(Op(OpKind.F, s, j))
            if offload and problem.max_offload(s, j) > 0:
                orders[device].append(Op(OpKind.OFFLOAD, s, j))
        for s in reversed(range(S)):
            device = problem.placement[s]
            if offload and problem.max_offload(s, j) > 0:
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
    orders = []
    for i in range(problem.devices):
        forward_backward = onef1b_forward_backward(problem, i, k)
        if not (defer_w and problem.split_backward):
            orders.append(with_w_after_b(problem, forward_backward))
            continue
        order = []
        for op in forward_backward:
            if op.kind is OpKind.B and op.microbatch > 0:
                order.append(Op(OpKind.W, i, op.microbatch - 1))
            order.append(op)
        orders.append(order + [Op(OpKind.W, i, problem.microbatches - 1)])
    return orders


def fitting_k(problem: Problem) -> int:
    """The most microbatches in flight (1F1B limited to k, linear placement) whose activations fit
    every capacity without offload: device i holds min(k, d - i) of them (weight holds aside; the
    largest activation of its stage when microbatches differ)."""
    d = problem.devices
    for k in range(d, 1, -1):
        if not any(exceeds(min(k, d - i) * problem.activation.high(i), c)
               for i, c in enumerate(problem.capacity)):
            return k
    return 1


def list_plan(problem: Problem, order: str = "BFW", late_first: bool = False) -> list[list[Op]]:
    """The list scheduler's orders (:mod:`ppsolve.baselines.engines.listsched`) within the capacity, without
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
            if op.kind is OpKind.B and problem.max_offload(op.stage, op.microbatch) > 0:
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
            if op.kind is OpKind.F and problem.max_offload(op.stage, op.microbatch) > 0:
                new.append(Op(OpKind.OFFLOAD, op.stage, op.microbatch))
        out.append(new)
    return out


def w_right_after_b(problem: Problem, orders: list[list[Op]]) -> list[list[Op]]:
    """``orders`` with each W moved right after its B (split backward)."""
    return [with_w_after_b(problem, [op for op in order if op.kind is not OpKind.W]) for order in orders]


def offload_plans(problem: Problem) -> list[tuple[str, list[list[Op]]]]:
    """Plans that fit the cap only with offload, on the devices whose plan exceeds the cap:
    greedy orders made as if memory were unbounded, and (linear) 1F1B limited to k in flight."""
    if not problem.can_offload:
        return []
    plans = []
    free = problem.replace(capacity=None)
    all_devices = {d for d in range(problem.devices) if problem.capacity[d] is not None}
    for prefer in ("BFW", "FBW"):
        try:
            base = list_plan(free, prefer, problem.chunks > 1)
        except PpsolveError:
            continue
        for lead in (0, 1, 2):
            plans.append((f"greedy-{prefer}-nocap+offload-lead{lead}", with_offload(problem, base, lead, all_devices)))
    if problem.placement_name != "linear":
        return plans
    fit = fitting_k(problem)
    for k in sorted({problem.devices, (problem.devices + fit) // 2, fit + 1}, reverse=True):
        if k <= fit or k < 2:
            continue
        over = {d for d in range(problem.devices)
                if problem.capacity[d] is not None
                and exceeds(min(k, problem.devices - d) * problem.activation.high(d), problem.capacity[d])}
        if not over:
            continue
        for defer in ((False, True) if problem.split_backward else (False,)):
            base = limited_1f1b_orders(problem, k, defer)
            for lead in (0, 1, 2):
                name = f"1f1b-k{k}{'-deferw' if defer else ''}+offload-lead{lead}"
                plans.append((name, with_offload(problem, base, lead, over)))
    return plans


def fit_by_both(problem: Problem, orders: list[list[Op]], share: float, gap: int = 2,
                prefer: str = "longest") -> Plan:
    """``orders`` (without levers) fitted to the caps with both levers: just enough recomputes
    (:func:`~ppsolve.baselines.families.recompute.fit_by_recompute`, ``prefer``) to fit each cap raised
    by ``share`` times its device's largest activation, then just enough offload
    (:func:`~ppsolve.baselines.engines.offload_fit.fit_by_offload`, forwards waiting ``gap`` back) of
    the pairs not recomputed to fit the caps; where the link cannot move that much by then, more
    pairs not offloaded are recomputed. InfeasibleError when that does not fit either.

    Recomputing costs compute time and offloading link time: each alone pays for the whole excess
    over the cap, which the recomputes of a device in front of a long pipeline make its bottleneck
    (llama13b-like, 8 x 32 at 15 GiB: 24 recomputes on device 0 alone against 12 and 18 offloads)."""
    raised = [None if cap is None else cap + share * max((problem.activation.high(s)
                                                          for s in problem.stages_of_device[d]), default=0.0)
              for d, cap in enumerate(problem.capacity)]
    recomputed, _ = fit_by_recompute(problem.replace(capacity=raised), orders, prefer=prefer)
    plan, _, stuck = fit_by_offload(problem, recomputed, gap=gap)
    if stuck:
        orders, _ = fit_by_recompute(problem, plan.orders, plan.waits, prefer, plan.amounts)
        plan = Plan(orders, plan.amounts, plan.waits, plan.policy)
    return plan


def fit_link_first(problem: Problem, orders: list[list[Op]], margin: float, gap: int = 8,
                   prefer: str = "longest") -> Plan:
    """``orders`` (without levers) fitted to the caps with whole offloads first: timed with just enough
    recomputes, the pairs of the devices that recompute there whose activation the link can move whole
    at once (:func:`~ppsolve.baselines.engines.offload_fit.link_first`, ``margin``) are offloaded, each
    forward waiting for the offloads of the forwards ``gap`` or more before it, and just enough of the
    others recomputed (``prefer``) to fit. Where the plan, timed anew, holds more than a cap even with
    every other pair recomputed, the offloaded pairs that hold memory at the first such instant are
    kept instead (up to ``LINK_FIRST_REPAIRS`` times). NotApplicableError when nothing needs a lever,
    InfeasibleError when the fit fails.

    A device in front of a long pipeline under a tight cap holds many microbatches through long round
    trips; :func:`fit_by_both` pays for them mostly with recomputes, while its host link stays idle. A
    whole activation on the host holds memory only while it moves, however long its round trip
    (llama13b-like, 8 x 32 at 11 GiB on 1F1B: device 0 recomputes 18 and offloads 14 whole, 4182.01,
    against 27 recomputes and 4390.24 with recompute alone and 4252.74 by :func:`fit_by_both`)."""
    _, timing = fit_by_recompute(problem.replace(offload=None), orders, prefer="longest")
    recomputing = {op.device for op in timing if op.kind is OpKind.R}
    if not recomputing:
        raise NotApplicableError("the orders fit their caps without a lever")
    timed = {op.op: op for op in timing if op.kind.is_compute}
    amounts = link_first(problem, timing, margin, recomputing)
    for _ in range(LINK_FIRST_REPAIRS):
        plan = with_amounts(problem, orders, amounts, timed, 1.0, gap)
        try:
            fitted, _ = fit_by_recompute(problem, plan.orders, plan.waits, prefer, plan.amounts)
            return Plan(fitted, plan.amounts, plan.waits, "link-first")
        except InfeasibleError:
            dropped = _held_over_cap(problem, plan)
            if not dropped:
                raise
            amounts = {pair: amount for pair, amount in amounts.items() if pair not in dropped}
    raise InfeasibleError("offloading whole activations first does not fit the caps")


def _held_over_cap(problem: Problem, plan: Plan) -> set[tuple[int, int]]:
    """The offloaded pairs of ``plan`` that hold memory (before their OFFLOAD ends or from their RELOAD's
    start) at the first instant a device is over its cap with every other pair recomputed."""
    others = {(op.stage, op.microbatch) for order in plan.orders for op in order
              if op.kind is OpKind.B and (op.stage, op.microbatch) not in plan.amounts}
    ops = simulate(problem, with_recompute(plan.orders, others), plan.amounts, plan.waits)
    at = {(op.kind, op.stage, op.microbatch): op for op in ops}
    last = OpKind.W if problem.split_backward else OpKind.B
    curves = memory_curves(problem, ops)
    held = set()
    for device, _, cap in over_capacity(problem, ops):
        t = next(t for t, level in curves[device] if exceeds(level, cap))
        held |= {pair for pair in plan.amounts if problem.placement[pair[0]] == device
                 and (at[(OpKind.F, *pair)].start <= t < at[(OpKind.OFFLOAD, *pair)].end
                      or at[(OpKind.RELOAD, *pair)].start <= t < at[(last, *pair)].end)}
    return held


def mixed_orders(problem: Problem) -> list[tuple[str, Callable[[], list[list[Op]]]]]:
    """(name, make orders) without levers that plans with both levers start from: 1F1B (linear) and
    every published order that applies, each built without the cap and with W right after B."""
    base = problem.replace(offload=None, recompute=None)
    orders: list[tuple[str, Callable[[], list[list[Op]]]]] = []
    if problem.placement_name == "linear":
        orders.append(("1f1b", lambda: limited_1f1b_orders(base, problem.devices)))
    for name, made in published_over_cap(base):
        orders.append((f"{name}-w-after-b", lambda made=made: w_right_after_b(base, made)))
    return orders


def both_levers(problem: Problem) -> bool:
    """Whether plans with both levers apply: a capped problem that may recompute and offload."""
    return problem.can_recompute and problem.can_offload and any(c is not None for c in problem.capacity)


def link_first_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], Plan]]]:
    """Plans with whole offloads first (:func:`fit_link_first`, each margin in ``LINK_FIRST_MARGINS``, gap
    in ``LINK_FIRST_GAPS`` and way to pick the recomputes) on the orders of :func:`mixed_orders`."""
    if not both_levers(problem):
        return
    for name, make in mixed_orders(problem):
        orders = cache(make)  # built once for all the variants
        for margin in LINK_FIRST_MARGINS:
            for gap in LINK_FIRST_GAPS:
                for prefer in PREFER:
                    yield (f"{name}+offload-whole-m{margin:g}-gap{gap}+recompute-{prefer}",
                           lambda orders=orders, a=(margin, gap, prefer): fit_link_first(problem, orders(), *a))


# link-first plans: the least round trip of an offloaded pair beyond its two transfers (a share of their
# sum), and how many forwards back a forward waits for an offload (on 1F1B of the 13B-like problems at 11
# and 15 GiB, 8 back was as short as 3, 4, 6 or never with a margin of 0.3 and the shortest with none;
# 2 back was longer on every long pipeline measured)
LINK_FIRST_MARGINS = (0.3, 0.0)
LINK_FIRST_GAPS = (8,)
LINK_FIRST_REPAIRS = 20


def mixed_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], Plan]]]:
    """Plans with both levers (:func:`fit_by_both`, each share in ``MIXED_SHARES`` and each way to pick
    the recomputes) on 1F1B (linear) and
    on every published order that applies, each built without the cap and with W right after B;
    nothing unless the problem is capped and may both recompute and offload."""
    if not both_levers(problem):
        return
    orders = mixed_orders(problem)
    for share in MIXED_SHARES:
        for name, make in orders:
            for prefer in PREFER:
                yield (mixed_plan_name(name, prefer, share),
                       lambda make=make, share=share, prefer=prefer: fit_by_both(problem, make(), share, prefer=prefer))


def mixed_plan_name(order: str, prefer: str, share: float) -> str:
    """The name of a plan of :func:`mixed_plans`: its order, how it picks the recomputes, its share."""
    return f"{order}+recompute-{prefer}+offload-{share:g}act"


_MIXED_NAME = re.compile(r"\+recompute-[a-z]+\+offload-[0-9.]+act$")


def is_mixed_plan(name: str) -> bool:
    """Whether ``name`` (a method's, ``warm:`` or not) is that of a plan of :func:`mixed_plans`."""
    return _MIXED_NAME.search(name) is not None


# mixed plans: the shares of a device's largest activation its cap is raised by for the recomputes
MIXED_SHARES = (0.25, 0.75, 1.5)

# 1F1B limited to k in flight with recompute: every k above what fits, up to this many values of k
RECOMPUTE_KS = 8


def spread(values, count: int) -> list:
    """At most ``count`` of ``values``, evenly spaced, the first and the last included, in their order."""
    values = list(values)
    if len(values) <= count:
        return values
    return [values[i] for i in sorted({round(i * (len(values) - 1) / (count - 1)) for i in range(count)})]


def schedule_orders(schedule: Schedule) -> list[list[Op]]:
    """Each device's ops of ``schedule`` in the order they start."""
    orders: list[list[Op]] = [[] for _ in range(schedule.problem.devices)]
    for op in sorted(schedule.ops, key=lambda o: (o.start, o.end)):
        orders[op.device].append(op.op)
    return orders


def published_over_cap(problem: Problem) -> Iterator[tuple[str, list[list[Op]]]]:
    """(name, orders) of every published baseline that applies to ``problem`` (without recompute),
    built ignoring the cap, where the result breaks it and moves nothing to host."""
    options = RunOptions(ignore_capacity=True, threads=1, quiet=True, warm_start="none")
    for schedule in built_baselines(problem, options):
        if schedule.method.extra.get("capacity_broken") and not schedule.offloaded and not schedule.recomputed:
            yield schedule.method.name, schedule_orders(schedule)


def recompute_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], list[list[Op]]]]]:
    """Plans that fit the cap by recomputing, made without offload (see ``ppsolve.solvers.warm_start``)."""
    if not problem.can_recompute or all(c is None for c in problem.capacity):
        return
    base = problem.replace(offload=None)

    def fitted(make) -> Iterator[tuple[str, Callable[[], list[list[Op]]]]]:
        for prefer in PREFER:
            yield f"-{prefer}", lambda prefer=prefer: fit_by_recompute(base, make(), prefer=prefer)[0]

    ks = spread(range(problem.devices, fitting_k(base), -1), RECOMPUTE_KS) if problem.placement_name == "linear" else []

    def onef1b(some_ks):
        for k in some_ks:
            for defer in ((False, True) if problem.split_backward else (False,)):
                for how, make in fitted(lambda k=k, defer=defer: limited_1f1b_orders(base, k, defer)):
                    yield f"1f1b-k{k}{'-deferw' if defer else ''}+recompute{how}", make

    yield from onef1b(ks[:1])
    for name, orders in published_over_cap(base.replace(recompute=None)):
        for how, make in fitted(lambda orders=orders: orders):
            yield f"{name}+recompute{how}", make
        if problem.split_backward:  # what a W waits to run cannot be recomputed away: W right after B
            for how, make in fitted(lambda orders=orders: w_right_after_b(base, orders)):
                yield f"{name}-w-after-b+recompute{how}", make
    yield from onef1b(ks[1:])
    free = base.replace(capacity=None)
    for kinds in ("BFW", "FBW"):
        for how, make in fitted(lambda kinds=kinds: list_plan(free, kinds, problem.chunks > 1)):
            yield f"greedy-{kinds}-nocap+recompute{how}", make


def own_plans(problem: Problem, mixed: bool = False) -> Iterator[tuple[str, Callable[[], list[list[Op]] | Plan]]]:
    """(name, make orders) of our own plans, lazily, cheapest and always valid first (serial); the last,
    selective offload (:mod:`ppsolve.baselines.engines.offload_fit`), whole offloads first
    (:func:`link_first_plans`) and, with ``mixed``, the plans with both levers (:func:`mixed_plans`), make
    a Plan with its amounts and waits."""
    yield "serial", lambda: serial_orders(problem)
    for prefer in ("BFW", "FBW", "BWF"):
        for late in ((False, True) if problem.chunks > 1 else (False,)):
            yield (f"greedy-{prefer}{'-late' if late else ''}",
                   lambda prefer=prefer, late=late: list_plan(problem, prefer, late))
    if problem.can_offload:
        yield "serial+offload", lambda: serial_orders(problem, offload=True)
    if problem.placement_name == "linear":
        fit = fitting_k(problem)
        for k in sorted({min(fit, problem.devices), fit - 1}, reverse=True):
            if k >= 2:
                yield f"1f1b-k{k}", lambda k=k: limited_1f1b_orders(problem, k)
    yield from recompute_plans(problem)
    for name, orders in offload_plans(problem):
        yield name, lambda orders=orders: orders
    yield from selective_offload_plans(problem)  # makes a Plan: orders, amounts and waits
    yield from link_first_plans(problem)
    if mixed:
        yield from mixed_plans(problem)
