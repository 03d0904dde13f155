"""Where OFFLOAD and RELOAD go in a device's order, and which actions wait for them.

Plans for :func:`ppsolve.simulator.simulate` (orders, amounts, waits):

* :func:`reference_plan` follows PipeOffload's offload pass. It plans on the timed
  schedule without offload. Each device's host link is cut into slots of one round
  trip ``L = d2h + h2d`` (of its largest offloaded activation), from the end of the
  device's first compute op (the n-th device of a shared link starts ``n * d2h`` later,
  so that one sends while the other receives). An activation is kept on the device
  when its F ends at most ``3 L`` before its B's start less one B; sends take the
  first slot at or after their F ends, in F order; receives take, from the end
  backwards, the last slot ending one B before their B starts, and must start after
  their send ended (the reference stops with an error there; here the activation
  stays on the device). In the order, an OFFLOAD goes before the first compute op
  that ends after its planned start, a RELOAD before the first compute op that starts
  at or after its planned start, and the first compute op that starts at or after a
  send's planned end waits for that OFFLOAD (the reference's "offload end" step,
  contract version 2).
* :func:`full_offload_plan` is PipeOffload's Figure 1 (1F1B with full offload) on any
  compute order: OFFLOAD right after its F, RELOAD overlapping the compute op before
  its B, every forward waiting for the offloads listed before it.
* :func:`capped_plan` is ppsolve's form for a tight memory cap: the same offloads,
  each RELOAD right before its B, each F and RELOAD waiting for the OFFLOADs listed
  before it. Every release listed before an allocation then happens before it, so a
  device never holds more than the largest running sum of its list.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

from ppsolve.baselines.common import over_capacity
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import ScheduledOp
from ppsolve.simulator import forwards_wait_for_offloads, simulate

_F, _B, _OFF, _REL = OpKind.F, OpKind.B, OpKind.OFFLOAD, OpKind.RELOAD

Orders = list[list[Op]]
Waits = dict[Op, list[Op]]


@dataclass(frozen=True)
class Plan:
    """Per-device action lists, offload amounts and explicit waits, ready for ``simulate``."""

    orders: Orders
    amounts: dict[tuple[int, int], float]
    waits: Waits
    policy: str

    @property
    def offloaded(self) -> int:
        return len(self.amounts)

    def time(self, problem: Problem):
        return simulate(problem, self.orders, self.amounts, self.waits)


class _Transfer(NamedTuple):
    op: Op
    start: float  # planned
    end: float


def reference_plan(problem: Problem, orders: Sequence[Sequence[Op]], stages: Iterable[int]) -> Plan:
    """PipeOffload's offload pass over compute orders (see the module docstring)."""
    timed = simulate(problem, orders)  # in list order
    chosen = set(stages)
    out, amounts, waits = [], {}, {}
    first = 0
    for device, order in enumerate(orders):
        mine = timed[first:first + len(order)]
        first += len(order)
        transfers = _plan_device(problem, device, order, mine, chosen)
        for t in transfers:
            if t.op.kind is _OFF:
                amounts[(t.op.stage, t.op.microbatch)] = problem.max_offload(t.op.stage, t.op.microbatch)
        actions, device_waits = _insert(order, mine, transfers)
        out.append(actions)
        waits.update(device_waits)
    return Plan(out, amounts, waits, "reference")


def _round_trip(problem: Problem, stage: int, microbatch: int) -> tuple[float, float]:
    amount = problem.max_offload(stage, microbatch)
    return problem.duration(_OFF, stage, amount=amount), problem.duration(_REL, stage, amount=amount)


def _next_slot(now: float, at_least: float, slot: float) -> float:
    """The first slot boundary ``now + n slot`` (n >= 0) at or after ``at_least``."""
    return now if now >= at_least else now + math.ceil((at_least - now) / slot - 1e-12) * slot


def _plan_device(problem: Problem, device: int, order: Sequence[Op], timed: Sequence[ScheduledOp],
                 chosen: set[int]) -> list[_Transfer]:
    """``timed``: the device's ops as timed without offload, in ``order``'s order."""
    f_end, b_timed = {}, {}  # of the chosen stages (what they may offload > 0), by (stage, microbatch), F's in order
    for op, t in zip(order, timed):
        if op.stage in chosen and problem.max_offload(op.stage, op.microbatch) > 0:
            if op.kind is _F:
                f_end[(op.stage, op.microbatch)] = t.end
            elif op.kind is _B:
                b_timed[(op.stage, op.microbatch)] = t
    if not f_end:
        return []
    trips = {key: _round_trip(problem, *key) for key in f_end}
    d2h = max(down for down, _ in trips.values())
    slot = max(down + up for down, up in trips.values())
    if slot <= 0:
        return []
    link = problem.offload.link_of_device[device]
    rank_on_link = sorted(dev for dev, lk in problem.offload.link_of_device.items() if lk == link).index(device)
    origin = timed[0].end + rank_on_link * d2h
    room = {}  # the latest end of a receive: one B before its B
    for key in f_end:
        b = b_timed[key]
        room[key] = b.start - (b.end - b.start)
    sends: dict[tuple[int, int], _Transfer] = {}
    now = origin
    for key, end in f_end.items():  # in F order, the first free slot at or after the F ends
        if room[key] - end <= 3 * slot:
            continue  # too short a stay on host: the activation stays on the device
        now = _next_slot(now, end, slot)
        sends[key] = _Transfer(Op(_OFF, *key), now, now + trips[key][0])
        now += slot
    now = _next_slot(now, max(t.end for t in timed), slot)
    receives = []
    backwards = [(op.stage, op.microbatch) for op in order if op.kind is _B and (op.stage, op.microbatch) in sends]
    for key in reversed(backwards):  # from the end backwards, the last free slot ending by its room
        if now > room[key]:
            now -= math.ceil((now - room[key]) / slot - 1e-12) * slot
        up = trips[key][1]
        if now - up <= sends[key].end:
            del sends[key]  # the reference stops here with an error; the activation stays on the device
            continue
        receives.append(_Transfer(Op(_REL, *key), now - up, now))
        now -= slot
    return list(sends.values()) + receives


def _insert(order: Sequence[Op], timed: Sequence[ScheduledOp], transfers: list[_Transfer]) -> tuple[list[Op], Waits]:
    """Put each transfer in the compute order at its planned time; the reference's "offload end" waits.
    ``timed``: the order's ops as timed without offload."""
    starts = [t.start for t in timed]
    ends = [t.end for t in timed]
    before: dict[int, list[tuple[float, int, Op]]] = {}
    waits: Waits = {}
    for t in transfers:
        if t.op.kind is _OFF:
            at = bisect_right(ends, t.start)  # first compute op ending after the send starts
            rank = 0
            waiter = bisect_left(starts, t.end)  # first compute op starting at or after the send ends
            if waiter < len(order):
                waits.setdefault(order[waiter], []).append(t.op)
        else:
            at = bisect_left(starts, t.start)  # first compute op starting at or after the receive starts
            rank = 1
        before.setdefault(at, []).append((t.start, rank, t.op))
    actions: list[Op] = []
    done = 0
    for k in sorted(before):  # the transfers that go before order[k], by planned start
        actions += order[done:k]
        actions += [op for _, _, op in sorted(before[k])]
        done = k
    actions += order[done:]
    return actions, waits


def full_offload_plan(problem: Problem, orders: Sequence[Sequence[Op]], stages: Iterable[int] | None = None) -> Plan:
    """PipeOffload's Figure 1 on any compute order: the activations of ``stages`` (default every stage
    but the last) to host right after their F, each RELOAD issued before the compute op that precedes
    its B (so that it overlaps that op); every forward waits for the offloads listed before it."""
    plan = _offload_all(problem, orders, stages, reload_lead=1)
    return Plan(plan.orders, plan.amounts, forwards_wait_for_offloads(plan.orders), "forwards wait for offloads")


def capped_plan(problem: Problem, orders: Sequence[Sequence[Op]], stages: Iterable[int] | None = None) -> Plan:
    """The same offloads with each RELOAD right before its B, and each F and RELOAD waiting for the
    OFFLOADs listed before it: a device then holds at most the largest running sum of its list."""
    plan = _offload_all(problem, orders, stages, reload_lead=0)
    waits: Waits = {}
    for actions in plan.orders:
        last_offload = None
        for op in actions:
            if op.kind is _OFF:
                last_offload = op
            elif op.kind in (_F, _REL) and last_offload is not None:
                waits[op] = [last_offload]
    return Plan(plan.orders, plan.amounts, waits, "capped")


def _offload_all(problem: Problem, orders: Sequence[Sequence[Op]], stages: Iterable[int] | None,
                 reload_lead: int) -> Plan:
    """OFFLOAD right after each F of ``stages`` (never the last stage); its RELOAD ``reload_lead``
    compute ops before its B."""
    last = problem.num_stages - 1
    chosen = set(range(last) if stages is None else stages) - {last}
    out, amounts = [], {}
    for order in orders:
        reload_at: dict[int, list[Op]] = {}
        for k, op in enumerate(order):
            if op.kind is _B and op.stage in chosen and problem.max_offload(op.stage, op.microbatch) > 0:
                reload_at.setdefault(max(0, k - reload_lead), []).append(Op(_REL, op.stage, op.microbatch))
        actions: list[Op] = []
        for k, op in enumerate(order):
            actions += reload_at.get(k, ())
            actions.append(op)
            if op.kind is _F and op.stage in chosen and problem.max_offload(op.stage, op.microbatch) > 0:
                amounts[(op.stage, op.microbatch)] = problem.max_offload(op.stage, op.microbatch)
                actions.append(Op(_OFF, op.stage, op.microbatch))
        out.append(actions)
    return Plan(out, amounts, {}, "")


def fitted(problem: Problem, plan: Plan, orders: Sequence[Sequence[Op]], stages: Iterable[int] | None = None):
    """Time ``plan``; where it breaks a device's cap, the first of :func:`full_offload_plan` and
    :func:`capped_plan` of the compute ``orders`` that keeps it (else the last). Returns (plan, timed ops)."""
    ops = plan.time(problem)
    for fallback in (full_offload_plan, capped_plan):
        if not over_capacity(problem, ops) or plan.policy == "capped":
            break
        plan = fallback(problem, orders, stages)
        ops = plan.time(problem)
    return plan, ops
