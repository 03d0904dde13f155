"""The one timing engine: per-device action lists timed as SPEC.md's runtime executes them.

Two callers:

* :func:`simulate` times a *plan*: per-device orders of compute ops and transfers,
  how much each offload moves, and optional explicit waits ("this forward waits
  for that offload"). Baselines, list schedulers and warm starts are written as
  plans. A compute op follows the compute op before it in its list; a transfer is
  issued when the compute op before it in its list has ended; link lanes serve
  transfers first-come-first-served.
* :func:`retime` re-times a timed schedule as the runtime of contract version 2
  would: each device issues its actions in the order of planned start, and an
  action starts once its data dependencies are met, the action before it on its
  lane has ended, and every action of its own device whose planned end is at or
  before its planned start has ended. Re-timing a valid schedule never makes it
  later and never raises a device's peak.

Data dependencies (rules 1-5) come from :mod:`ppsolve.dependencies`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from typing import Mapping, Sequence

from ppsolve.dependencies import dependency_table, depth
from ppsolve.errors import DeadlockError, InputError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import ScheduledOp

Orders = Sequence[Sequence[Op]]
Amounts = Mapping[tuple[int, int], float]
Waits = Mapping[Op, Sequence[Op]]

_F, _B, _W, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.OFFLOAD, OpKind.RELOAD
_KIND_CODE = {_F: 0, _B: 1, _W: 2, _OFF: 3, _REL: 4}


def simulate(problem: Problem, orders: Orders, amounts: Amounts | None = None,
             waits: Waits | None = None) -> list[ScheduledOp]:
    """Time a plan as soon as possible. ``orders[d]`` is device d's action list.

    ``amounts[(stage, microbatch)]`` is what an offload moves; missing entries
    move the most allowed (``fraction * activation``). ``waits[op]`` lists ops
    of the same device whose end ``op`` waits for (contract version 2: a forward
    may wait for the offload that frees its memory).
    Raises InputError for an incomplete or misplaced plan, DeadlockError for an
    order that can never finish.
    """
    engine = _Engine(problem, orders, amounts or {}, where="orders")
    engine.add_list_edges(orders)
    if waits:
        engine.add_waits(waits)
    return engine.run(dynamic_lanes=True)


def forwards_wait_for_offloads(orders: Orders) -> dict[Op, list[Op]]:
    """Waits that hold each forward until the offloads listed before it on its device have ended.

    A device's offloads are ready in list order and its lane serves them first come, first
    served, so waiting for the last one listed covers the others. This is how an order says
    "free the memory before the next forward" (PipeOffload's runtime has an explicit step for it).
    """
    waits: dict[Op, list[Op]] = {}
    for actions in orders:
        last_offload = None
        for op in actions:
            if op.kind is _OFF:
                last_offload = op
            elif op.kind is _F and last_offload is not None:
                waits[op] = [last_offload]
    return waits


def retime(problem: Problem, ops: Sequence[ScheduledOp]) -> list[ScheduledOp]:
    """Re-time a timed schedule as SPEC.md's runtime (contract version 2) would execute it."""
    issued = issue_order(problem, ops)
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    for op in issued:
        orders[op.device].append(op.op)
    amounts = {(op.stage, op.microbatch): op.amount for op in ops if op.kind is _OFF}
    for op in ops:
        if op.kind is _REL:
            amounts.setdefault((op.stage, op.microbatch), op.amount)
    engine = _Engine(problem, orders, amounts, where="schedule.ops", devices_from_ops=True)
    engine.add_runtime_edges(issued)
    return engine.run(dynamic_lanes=False)


def issue_key(problem: Problem, op: ScheduledOp) -> tuple:
    """The order in which a runtime issues the actions of a device.

    By planned start; at one instant an op of zero duration first (it ends
    there), then transfers before compute ops, and ties in dependency order.
    """
    return (op.start, op.end > op.start, op.kind.is_compute, depth(problem, op.kind, op.stage),
            op.microbatch, op.stage)


def issue_order(problem: Problem, ops: Sequence[ScheduledOp]) -> list[ScheduledOp]:
    """``ops`` (one device's, or all of them) in the order a runtime issues them (:func:`issue_key`)."""
    return sorted(ops, key=lambda op: issue_key(problem, op))


def runtime_lane(problem: Problem, op: ScheduledOp) -> tuple:
    """The lane an action runs on: its device's compute lane, or a host-link lane (shared by the
    devices of the link, one for both directions on a half-duplex link)."""
    if op.kind.is_compute:
        return ("compute", op.device)
    return ("link", problem.lane(op.device, op.kind))


def device_waits(problem: Problem, issued: Sequence[ScheduledOp]) -> list[list[int]]:
    """Contract version 2's waits on other actions of the same device, for timed actions in issue order.

    ``issued`` holds the actions of one device or of several, sorted by :func:`issue_key`. The
    result has, for each of them, the indices (into ``issued``) of the actions of its own device
    it waits for besides its data and the action before it on its lane: on each other lane of
    its device, the last action (in lane order) whose planned end is at or before its planned
    start. Lane order keeps a lane's actions in sequence, so waiting for that one covers every
    earlier one, and this is exactly "every action of its own device whose planned end is at or
    before this action's planned start" (on its own lane the lane order already does it).
    Every index is smaller than the waiting action's: what ends by an action's start is issued
    before it. The simulator's re-timing and the executor both read this.
    """
    # per device and lane: its actions in lane order, with their planned ends
    lanes: dict[tuple[int, tuple], tuple[list[float], list[int]]] = {}
    lane_of = []
    for i, op in enumerate(issued):
        lane = runtime_lane(problem, op)
        lane_of.append(lane)
        ends, members = lanes.setdefault((op.device, lane), ([], []))
        ends.append(op.end)
        members.append(i)
    by_device: dict[int, list[tuple]] = {}
    for device, lane in lanes:
        by_device.setdefault(device, []).append(lane)
    waits: list[list[int]] = []
    for v, op in enumerate(issued):
        mine = []
        for lane in by_device[op.device]:
            if lane == lane_of[v]:
                continue
            ends, members = lanes[(op.device, lane)]
            # planned ends along a lane are non-decreasing in a valid schedule
            at = bisect_right(ends, op.start) - 1
            if at >= 0:
                mine.append(members[at])
        waits.append(mine)
    return waits


class _Engine:
    """Actions as parallel arrays, a dependency graph, and a time-ordered event loop.

    Ops are identified by an integer key ``(kind * S + stage) * m + microbatch`` so that
    building the graph does no hashing of Op tuples (the hot path of large plans).
    """

    def __init__(self, problem: Problem, orders: Orders, amounts: Amounts, where: str,
                 devices_from_ops: bool = False):
        self.problem = problem
        if len(orders) != problem.devices:
            raise InputError(where, f"must have one action list per device ({problem.devices}), got {len(orders)}")
        S, M = problem.num_stages, problem.microbatches
        self.S, self.M = S, M
        slot = [-1] * (5 * S * M)
        self.slot = slot
        self.ops: list[Op] = []
        self.device: list[int] = []
        self.position: list[int] = []
        ops, dev_list, pos_list = self.ops, self.device, self.position
        placement = problem.placement
        code = _KIND_CODE
        for device, actions in enumerate(orders):
            for position, op in enumerate(actions):
                kind, s, j = op
                if not (0 <= s < S and 0 <= j < M):
                    raise InputError(where, f"{op} is out of range")
                key = (code[kind] * S + s) * M + j
                if slot[key] >= 0:
                    raise InputError(f"{where}[{device}][{position}]", f"{op} appears twice")
                if not devices_from_ops and placement[s] != device:
                    raise InputError(f"{where}[{device}][{position}]",
                                     f"{op} belongs to device {placement[s]}, not {device}")
                slot[key] = len(ops)
                ops.append(op)
                dev_list.append(device)
                pos_list.append(position)
        self._check_complete(where)
        n = len(ops)
        self.amount = [0.0] * n
        self.duration = [0.0] * n
        self.lane = [-1] * n
        table = {kind: [problem.duration(kind, s) for s in range(S)] for kind in problem.kinds}
        duration, amount_of, lane = self.duration, self.amount, self.lane
        for i, op in enumerate(ops):
            kind = op[0]
            if kind is _OFF or kind is _REL:
                amount = amounts.get((op.stage, op.microbatch), problem.max_offload(op.stage))
                amount_of[i] = amount
                duration[i] = problem.duration(kind, op.stage, amount)
                lane[i] = problem.lane(dev_list[i], kind)
            else:
                duration[i] = table[kind][op[1]]
        self.succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.indeg = [0] * n
        self._add_data_edges()

    def index_of(self, op: Op) -> int:
        """Position of ``op`` in the arrays, or -1."""
        return self.slot[(_KIND_CODE[op.kind] * self.S + op.stage) * self.M + op.microbatch]

    def _check_complete(self, where: str) -> None:
        problem = self.problem
        expected = self.S * self.M * len(problem.kinds)
        compute = 0
        for op in self.ops:
            kind, s, j = op
            if kind is _W and not problem.split_backward:
                raise InputError(where, f"{op}: fused backward has no W ops")
            if kind is _OFF or kind is _REL:
                if problem.offload is None:
                    raise InputError(where, f"{op}: the problem has no offload link")
                partner = Op(_REL if kind is _OFF else _OFF, s, j)
                if self.index_of(partner) < 0:
                    raise InputError(where, f"{op} has no matching {partner.kind.value}")
            else:
                compute += 1
        if compute != expected:
            missing = next(op for op in problem.compute_ops() if self.index_of(op) < 0)
            raise InputError(where, f"{expected - compute} compute ops are missing, first {missing}")

    def _edge(self, u: int, v: int, lag: float = 0.0) -> None:
        self.succ[u].append((v, lag))
        self.indeg[v] += 1

    def _add_data_edges(self) -> None:
        """Rules 1-5, read from the dependency table (an optional dependency only when present)."""
        S, M, slot = self.S, self.M, self.slot
        table = dependency_table(self.problem)
        code = _KIND_CODE
        succ, indeg = self.succ, self.indeg
        for i, (kind, s, j) in enumerate(self.ops):
            for dep in table[(kind, s)]:
                u = slot[(code[dep.kind] * S + dep.stage) * M + j]
                if u < 0:
                    if dep.optional:
                        continue
                    raise InputError("orders", f"{Op(kind, s, j)} waits for {dep.op(j)}, which is missing")
                succ[u].append((i, dep.lag))
                indeg[i] += 1

    def add_list_edges(self, orders: Orders) -> None:
        """A plan: each compute op after the compute op before it in its list; each transfer is issued
        when the compute op before it in its list has ended."""
        succ, indeg = self.succ, self.indeg
        i = 0
        for actions in orders:
            prev_compute = -1
            for op in actions:
                if prev_compute >= 0:
                    succ[prev_compute].append((i, 0.0))
                    indeg[i] += 1
                if op[0] is not _OFF and op[0] is not _REL:
                    prev_compute = i
                i += 1

    def add_waits(self, waits: Waits) -> None:
        """Explicit waits of a plan: ``op`` starts after each listed op of its device has ended."""
        for op, awaited in waits.items():
            v = self.index_of(op)
            if v < 0:
                raise InputError("waits", f"{op} is not in the plan")
            for other in awaited:
                u = self.index_of(other)
                if u < 0:
                    raise InputError("waits", f"{op} waits for {other}, which is not in the plan")
                if self.device[u] != self.device[v]:
                    raise InputError("waits", f"{op} waits for {other} of another device")
                self._edge(u, v)

    def add_runtime_edges(self, issued: Sequence[ScheduledOp]) -> None:
        """Contract version 2's runtime for a timed schedule, given in issue order: each lane serves
        its actions in issue order, and each action waits for its :func:`device_waits`."""
        index = [self.index_of(op.op) for op in issued]
        lanes: dict[tuple, int] = {}
        for i, op in zip(index, issued):
            lane = runtime_lane(self.problem, op)
            if lane in lanes:
                self._edge(lanes[lane], i)
            lanes[lane] = i
        for v, awaited in enumerate(device_waits(self.problem, issued)):
            for u in awaited:
                self._edge(index[u], index[v])

    def run(self, dynamic_lanes: bool) -> list[ScheduledOp]:
        n = len(self.ops)
        ops, duration, lane, device, position = self.ops, self.duration, self.lane, self.device, self.position
        succ, indeg = self.succ, list(self.indeg)
        ready = [0.0] * n
        start = [0.0] * n
        end = [0.0] * n
        done = 0
        heap: list[tuple] = []
        lane_free: dict[int, float] = {}
        heappush, heappop = heapq.heappush, heapq.heappop
        for i in range(n):
            if indeg[i] == 0:
                heappush(heap, (0.0, lane[i] < 0, 0.0, device[i], position[i], i))
        while heap:
            t, is_compute, first_ready, dev, pos, i = heappop(heap)
            if not is_compute and dynamic_lanes:
                free = lane_free.get(lane[i], 0.0)
                if free > t:
                    heappush(heap, (free, False, first_ready, dev, pos, i))
                    continue
                lane_free[lane[i]] = t + duration[i]
            start[i] = t
            finish = end[i] = t + duration[i]
            done += 1
            for v, lag in succ[i]:
                if finish + lag > ready[v]:
                    ready[v] = finish + lag
                indeg[v] -= 1
                if indeg[v] == 0:
                    heappush(heap, (ready[v], lane[v] < 0, ready[v], device[v], position[v], v))
        if done < n:
            raise DeadlockError(self._deadlock_message(indeg))
        new, amount = tuple.__new__, self.amount
        return [new(ScheduledOp, (op[0], op[1], op[2], device[i], start[i], end[i], amount[i]))
                for i, op in enumerate(ops)]

    def _deadlock_message(self, indeg: list[int]) -> str:
        stuck = []
        seen_devices = set()
        for i in sorted(range(len(self.ops)), key=lambda i: (self.device[i], self.position[i])):
            if indeg[i] > 0 and self.device[i] not in seen_devices:
                seen_devices.add(self.device[i])
                stuck.append(f"device {self.device[i]} waits at {self.ops[i]} (position {self.position[i]})")
        return "deadlock: the order can never finish: " + "; ".join(stuck[:6])
