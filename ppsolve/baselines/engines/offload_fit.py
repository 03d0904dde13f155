"""Offloading just enough of each activation to fit a cap: selective offload on any compute order.

PipeOffload's plans (:mod:`ppsolve.baselines.engines.offload_pass`) move every activation of the
chosen stages whole, so a device whose link cannot carry them all waits for it. Where a
cap binds by a few activations, a faster plan keeps most of each activation and moves a share:

* :func:`fit_by_offload` takes compute orders and raises, round by round, the amounts
  offloaded on each device over its cap. It times the plan, walks the memory curve of each
  such device and, at each instant still over the cap after this round's raises, raises the
  amounts of the pairs held there whose OFFLOAD (where it starts, else when its F ends) can
  move that much by then and whose RELOAD starts after it, the pair whose B is latest first
  (it covers the most instants after). An OFFLOAD goes right after its F; a RELOAD is issued
  after the last compute op that ends, in the previous round's timing, ``cover`` times its
  length before its B starts; a forward waits for the offloads of the forwards ``gap`` or
  more before it on its device (contract version 2), so back-to-back forwards do not wait for
  the offload just begun.
* :func:`selective_offload` fits the list scheduler's orders made with each device's cap raised
  by a few activations (more microbatches in flight, the excess offloaded);
  :func:`selective_offload_plans` lists them for the warm start.
* :func:`link_first` picks, on a timed plan, the pairs whose whole activation the host link can
  move at once: where a device holds many microbatches through long round trips, an activation on
  the host holds memory only while it moves, so the link's time is best spent on whole ones.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterator, Sequence

from ppsolve.baselines.common import over_capacity
from ppsolve.baselines.engines.listsched import ListPolicy, list_orders
from ppsolve.baselines.engines.offload_pass import Plan
from ppsolve.errors import InfeasibleError
from ppsolve.memory import memory_curves
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import ScheduledOp
from ppsolve.simulator import simulate
from ppsolve.tolerance import EPS, exceeds

_F, _B, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD

Pair = tuple[int, int]

# rounds of raises :func:`fit_by_offload` makes at most (each round raises at least one amount)
MAX_ROUNDS = 80
# the caps the warm start's orders are made under: each device's cap plus this many of its largest activations
RAISES = (1.5, 1.0, 2.0)
# a forward waits for the offloads of the forwards this many or more before it on its device
GAPS = (2, 1)


def with_amounts(problem: Problem, orders: Sequence[Sequence[Op]], amounts: dict[Pair, float],
                 timed: dict[Op, ScheduledOp], cover: float = 1.0, gap: int = 1) -> Plan:
    """``orders``' compute ops with an OFFLOAD right after each F of ``amounts`` and its RELOAD issued
    after the last compute op of its device that ends, in the timing ``timed`` (of the compute ops),
    ``cover`` times the reload's length before its B starts (right after its F at the earliest); each
    forward waits for the offloads of the forwards ``gap`` or more before it on its device."""
    out = []
    for order in orders:
        compute = [op for op in order if op.kind.is_compute]
        forward_at = {(op.stage, op.microbatch): k for k, op in enumerate(compute) if op.kind is _F}
        reload_before: dict[int, list[Op]] = {}
        for index, op in enumerate(compute):
            pair = (op.stage, op.microbatch)
            if op.kind is not _B or pair not in amounts:
                continue
            issue = timed[op].start - cover * problem.duration(_REL, op.stage, op.microbatch, amount=amounts[pair])
            at = index
            while at > forward_at[pair] + 1 and timed[compute[at - 1]].end > issue + EPS:
                at -= 1
            reload_before.setdefault(at, []).append(Op(_REL, *pair))
        actions: list[Op] = []
        for index, op in enumerate(compute):
            actions += reload_before.get(index, ())
            actions.append(op)
            if op.kind is _F and (op.stage, op.microbatch) in amounts:
                actions.append(Op(_OFF, op.stage, op.microbatch))
        out.append(actions)
    return Plan(out, dict(amounts), _waits(out, gap), "selective")


def _waits(orders: Sequence[Sequence[Op]], gap: int) -> dict[Op, list[Op]]:
    """Each forward waits for the last OFFLOAD of the forwards at least ``gap`` before it on its device
    (a lane serves offloads in list order, so that one covers those before it)."""
    waits: dict[Op, list[Op]] = {}
    for actions in orders:
        forwards = [op for op in actions if op.kind is _F]
        offloads = {(op.stage, op.microbatch) for op in actions if op.kind is _OFF}
        last = None
        for n, op in enumerate(forwards):
            if n >= gap:
                earlier = forwards[n - gap]
                if (earlier.stage, earlier.microbatch) in offloads:
                    last = Op(_OFF, earlier.stage, earlier.microbatch)
            if last is not None:
                waits[op] = [last]
    return waits


def fit_by_offload(problem: Problem, orders: Sequence[Sequence[Op]],
                   cover: float = 1.0, gap: int = 1) -> tuple[Plan, list[ScheduledOp], list[int]]:
    """``orders`` with just enough offloaded to fit every cap (see the module docstring): (plan, its
    timing, the devices still over their cap: empty when it fits). A device stays over when no pair
    held at an instant over its cap can offload more (weight holds, a stage that cannot offload)."""
    amounts: dict[Pair, float] = {}
    ops = simulate(problem, orders)
    for _ in range(MAX_ROUNDS):
        timed = {op.op: op for op in ops if op.kind.is_compute}
        plan = with_amounts(problem, orders, amounts, timed, cover, gap)
        ops = plan.time(problem)
        over = over_capacity(problem, ops)
        if not over:
            return plan, ops, []
        curves = memory_curves(problem, ops)
        stuck = []
        for device, _, cap in over:
            raises = _raises(problem, ops, curves[device], device, cap, amounts, cover)
            if not raises:
                stuck.append(device)
            for pair, more in raises.items():
                amounts[pair] = min(problem.max_offload(*pair), amounts.get(pair, 0.0) + more)
        if len(stuck) == len(over):
            return plan, ops, stuck
    return plan, ops, [device for device, _, _ in over]


def _raises(problem: Problem, ops: Sequence[ScheduledOp], curve, device: int, cap: float,
            amounts: dict[Pair, float], cover: float) -> dict[Pair, float]:
    """How much more to offload of which pairs of ``device`` (see :func:`fit_by_offload`): at each instant
    over the cap, pairs whose OFFLOAD (starting where it started, else when its F ends) would end by then
    and whose RELOAD (``cover`` times its length before its B at the latest) starts after it."""
    off, back = {}, {}  # pair -> when its offload may start; when its B starts
    for op in ops:
        if op.device != device:
            continue
        pair = (op.stage, op.microbatch)
        if op.kind is _F and problem.max_offload(*pair) > 0:
            off.setdefault(pair, op.end)
        elif op.kind is _OFF:
            off[pair] = op.start
        elif op.kind is _B:
            back[pair] = op.start
    reload_at = {(op.stage, op.microbatch): op.start
                 for op in ops if op.device == device and op.kind is _REL}
    recomputed = {(op.stage, op.microbatch) for op in ops if op.device == device and op.kind is _R}
    held = sorted((start, pair) for pair, start in off.items() if pair not in recomputed)
    raises: dict[Pair, float] = {}

    def kept_off(pair: Pair, amount: float) -> tuple[float, float]:  # (offload ends, reload starts) with amount
        up = problem.duration(_REL, pair[0], pair[1], amount=amount)
        down = problem.duration(_OFF, pair[0], pair[1], amount=amount)
        return off[pair] + down, min(reload_at.get(pair, back[pair]), back[pair] - cover * up)

    for t, level in curve:
        if not exceeds(level, cap):
            continue
        excess = level - cap
        for pair, more in raises.items():
            ends, starts = kept_off(pair, amounts.get(pair, 0.0) + more)
            if ends <= t < starts:
                excess -= more
        if excess <= EPS:
            continue
        room = []
        for start, pair in held:
            if start >= t:
                break
            if back[pair] <= t:
                continue
            now = amounts.get(pair, 0.0) + raises.get(pair, 0.0)
            by_t = (t - off[pair]) / problem.duration(_OFF, *pair, amount=1.0)  # moved by t (lengths are linear)
            left = min(problem.max_offload(*pair), by_t) - now
            left = min(left, excess)
            if left <= EPS:
                continue
            ends, starts = kept_off(pair, now + left)
            if ends <= t < starts:
                room.append((-back[pair], pair, left))
        for _, pair, left in sorted(room):
            if excess <= EPS:
                break
            more = min(left, excess)
            raises[pair] = raises.get(pair, 0.0) + more
            excess -= more
    return raises


def raised_orders(problem: Problem, raise_by: dict[int, float], prefer: str) -> list[list[Op]]:
    """The list scheduler's orders (kinds preferred in ``prefer``) with device d's cap raised by
    ``raise_by[d]``, without offload."""
    limit = tuple(None if cap is None else cap + raise_by.get(d, 0.0) for d, cap in enumerate(problem.capacity))
    orders, _, _ = list_orders(problem, ListPolicy(limit=limit, order=prefer, late_first=problem.chunks > 1))
    return orders


def selective_offload(problem: Problem, times: float, prefer: str, gap: int, cover: float = 1.0) -> Plan:
    """The list scheduler's orders (kinds preferred in ``prefer``) with each capped device's cap raised by
    ``times`` its largest activation, fitted by :func:`fit_by_offload`. A device the fit leaves over its
    cap gets its own cap back and the orders are made again. InfeasibleError when no raise is left
    (the orders are then the list scheduler's within the caps, which need no offload)."""
    largest = {d: max((problem.activation.high(s) for s in problem.stages_of_device[d]), default=0.0)
               for d in range(problem.devices) if problem.capacity[d] is not None}
    raise_by = {d: times * a for d, a in largest.items() if a > 0}
    while raise_by:
        plan, _, stuck = fit_by_offload(problem, raised_orders(problem, raise_by, prefer), cover, gap)
        if not stuck:
            if plan.amounts:
                return plan
            break
        if not any([raise_by.pop(d, 0) for d in stuck]):
            break
    raise InfeasibleError("no raised cap that offloading fits")


def selective_offload_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], Plan]]]:
    """(name, make plan) of :func:`selective_offload` for each forward gap in ``GAPS``, raise in ``RAISES``
    and kind preference, lazily (the likeliest fastest first); nothing without an offload link or a cap."""
    if not problem.can_offload or all(c is None for c in problem.capacity):
        return
    for gap in GAPS:
        for times in RAISES:
            for prefer in ("BFW", "FBW"):
                yield (f"greedy-{prefer}-cap+{times:g}act+offload-gap{gap}",
                       lambda a=(times, prefer, gap): selective_offload(problem, *a))


def link_first(problem: Problem, timing: Sequence[ScheduledOp], margin: float = 0.0,
               devices: Collection[int] | None = None) -> dict[Pair, float]:
    """Pairs of ``devices`` (None: every capped device) to offload whole, chosen on ``timing`` (a plan's
    compute ops, timed), and their amounts.

    In the order their F ends, a pair is taken when its lane of the host link is free at that
    instant (the OFFLOAD starts right after its F: one that waits holds the whole activation
    meanwhile) and its B starts at least both transfers and ``margin`` times their sum after its F
    ends. Then, latest B first, each taken pair's RELOAD is placed as late as its lane allows,
    ending by its B; a pair whose RELOAD would start before its OFFLOAD ends is dropped. Lanes
    follow the links (shared by the devices of a link; one lane for both ways where a link is
    not duplex)."""
    if not problem.can_offload:
        return {}
    forward, backward = {}, {}
    for op in timing:
        if op.kind is _F:
            forward[(op.stage, op.microbatch)] = op
        elif op.kind is _B:
            backward[(op.stage, op.microbatch)] = op
    busy: dict[int, list[tuple[float, float]]] = {}  # lane -> (start, end) of the transfers placed on it
    taken = []
    for pair, f in sorted(forward.items(), key=lambda item: (item[1].end, item[0])):
        amount = problem.max_offload(*pair)
        if (amount <= 0 or pair not in backward or problem.capacity[f.device] is None
                or (devices is not None and f.device not in devices)):
            continue
        down = problem.duration(_OFF, *pair, amount=amount)
        up = problem.duration(_REL, *pair, amount=amount)
        lane = problem.lane(f.device, _OFF)
        if (backward[pair].start - f.end < (down + up) * (1 + margin) - EPS
                or not _free(busy.get(lane, []), f.end, f.end + down)):
            continue
        busy.setdefault(lane, []).append((f.end, f.end + down))
        taken.append((pair, f.device, amount, f.end + down, up))
    amounts = {}
    for pair, device, amount, offloaded, up in sorted(taken, key=lambda t: (-backward[t[0]].start, t[0])):
        lane = problem.lane(device, _REL)
        start = _latest(busy.get(lane, []), backward[pair].start, up)
        if start < offloaded - EPS:
            continue
        busy.setdefault(lane, []).append((start, start + up))
        amounts[pair] = amount
    return amounts


def _free(intervals: list[tuple[float, float]], start: float, end: float) -> bool:
    """Whether [start, end) meets none of ``intervals``."""
    return all(end <= a + EPS or start >= b - EPS for a, b in intervals)


def _latest(intervals: list[tuple[float, float]], end: float, length: float) -> float:
    """The latest start of a transfer of ``length`` ending by ``end`` that meets none of ``intervals``."""
    start = end - length
    for a, b in sorted(intervals, key=lambda i: -i[1]):
        if b <= start + EPS:
            break
        if a < start + length - EPS:  # overlaps: move before it
            start = min(start, a - length)
    return start

