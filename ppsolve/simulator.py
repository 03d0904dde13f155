"""Timing per-device action lists exactly as SPEC.md's runtime executes them.

One discrete-event engine serves two callers:

* :func:`simulate` times a *plan* (per-device orders of compute ops and transfers,
  plus how much each offload moves). Baselines and heuristics are written as
  plans. A lane serves transfers first-come-first-served, and a transfer is never
  started strictly inside a compute op of its device, so that the result
  re-times to itself.
* :func:`retime` re-times a timed schedule the way a runtime would: lists sorted
  by planned start, each transfer issued after the compute op just before it,
  lanes serving transfers in the order of their planned starts.

Rules applied (SPEC.md): a compute op starts when the previous compute op of its
device has ended and its inputs are there (F after F of the stage before plus
p2p latency, B of the last stage after its F, B after B of the stage after plus
latency and after its RELOAD, W after its B); OFFLOAD after its F, RELOAD after
its OFFLOAD; transfers wait for their anchor compute op and their lane.
"""

from __future__ import annotations

import heapq
from typing import Mapping, Sequence

from ppsolve.errors import DeadlockError, InputError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import ScheduledOp

Orders = Sequence[Sequence[Op]]
Amounts = Mapping[tuple[int, int], float]

_F, _B, _W, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.OFFLOAD, OpKind.RELOAD
_KIND_CODE = {_F: 0, _B: 1, _W: 2, _OFF: 3, _REL: 4}


def simulate(problem: Problem, orders: Orders, amounts: Amounts | None = None) -> list[ScheduledOp]:
    """Time a plan as soon as possible. ``orders[d]`` is device d's action list.

    ``amounts[(stage, microbatch)]`` is what an offload moves; missing entries
    move the most allowed (``fraction * activation``).
    Raises InputError for an incomplete or misplaced plan, DeadlockError for an
    order that can never finish.
    """
    engine = _Engine(problem, orders, amounts or {}, where="orders")
    return engine.run(dynamic_lanes=True, avoid_compute_interior=True)


def retime(problem: Problem, ops: Sequence[ScheduledOp]) -> list[ScheduledOp]:
    """Re-time a timed schedule as SPEC.md's runtime would execute it."""
    ordered = sorted(range(len(ops)), key=lambda i: (ops[i].start, ops[i].kind.is_compute, i))
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    for i in ordered:
        orders[ops[i].device].append(ops[i].op)
    amounts = {(op.stage, op.microbatch): op.amount for op in ops if op.kind is _OFF}
    for op in ops:
        if op.kind is _REL:
            amounts.setdefault((op.stage, op.microbatch), op.amount)
    engine = _Engine(problem, orders, amounts, where="schedule.ops", devices_from_ops=True)
    lane_orders: dict[int, list[Op]] = {}
    transfers = sorted((op for op in ops if op.kind.is_transfer), key=lambda o: (o.start, o.device, o.end))
    for op in transfers:
        lane_orders.setdefault(problem.lane(op.device, op.kind), []).append(op.op)
    engine.fix_lane_orders(lane_orders)
    return engine.run(dynamic_lanes=False, avoid_compute_interior=False)


class _Engine:
    """Actions as parallel arrays, a dependency graph, and a time-ordered event loop.

    Ops are identified by an integer key ``(kind * S + stage) * m + microbatch`` so that
    building the graph does no hashing of Op tuples (the hot path of large plans).
    """

    def __init__(self, problem: Problem, orders: Orders, amounts: Amounts, where: str,
                 devices_from_ops: bool = False):
        self.problem = problem
        self.plan_anchors = not devices_from_ops  # a plan, not a timed schedule being re-timed
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
        self._add_edges(orders)

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
                partner = Op(_REL if kind is _OFF else _OFF, s, j)
                if self.index_of(partner) < 0:
                    raise InputError(where, f"{op} has no matching {partner.kind.value}")
                if problem.offload is None:
                    raise InputError(where, f"{op}: the problem has no offload link")
            else:
                compute += 1
        if compute != expected:
            missing = next(op for op in problem.compute_ops() if self.index_of(op) < 0)
            raise InputError(where, f"{expected - compute} compute ops are missing, first {missing}")

    def _edge(self, u: int, v: int, lag: float = 0.0) -> None:
        self.succ[u].append((v, lag))
        self.indeg[v] += 1

    def _add_edges(self, orders: Orders) -> None:
        problem, slot, S, M = self.problem, self.slot, self.S, self.M
        succ, indeg, ops = self.succ, self.indeg, self.ops
        last = S - 1
        # A compute op follows the compute op before it in its list; a transfer is issued
        # after it too. In a plan, a transfer skips zero-duration compute ops when looking
        # for that op: such an op starts when it ends, and the runtime, which puts a
        # transfer before a compute op of the same start, would issue the transfer earlier.
        duration, skip_instant = self.duration, self.plan_anchors
        i = 0
        for actions in orders:
            prev_compute = prev_anchor = -1
            for op in actions:
                kind = op[0]
                is_transfer = kind is _OFF or kind is _REL
                before = prev_anchor if (is_transfer and skip_instant) else prev_compute
                if before >= 0:
                    succ[before].append((i, 0.0))
                    indeg[i] += 1
                if not is_transfer:
                    prev_compute = i
                    if duration[i] > 0:
                        prev_anchor = i
                i += 1
        lat = [problem.latency(s, s + 1) for s in range(last)]
        f_base, b_base, off_base, rel_base = 0, S * M, 3 * S * M, 4 * S * M
        for i, (kind, s, j) in enumerate(ops):
            if kind is _F:
                if s > 0:
                    u = slot[f_base + (s - 1) * M + j]
                    succ[u].append((i, lat[s - 1]))
                    indeg[i] += 1
            elif kind is _B:
                if s == last:
                    u = slot[f_base + s * M + j]
                    succ[u].append((i, 0.0))
                else:
                    u = slot[b_base + (s + 1) * M + j]
                    succ[u].append((i, lat[s]))
                indeg[i] += 1
                reload = slot[rel_base + s * M + j]
                if reload >= 0:
                    succ[reload].append((i, 0.0))
                    indeg[i] += 1
            elif kind is _W:
                succ[slot[b_base + s * M + j]].append((i, 0.0))
                indeg[i] += 1
            elif kind is _OFF:
                succ[slot[f_base + s * M + j]].append((i, 0.0))
                indeg[i] += 1
            else:
                succ[slot[off_base + s * M + j]].append((i, 0.0))
                indeg[i] += 1

    def fix_lane_orders(self, lane_orders: Mapping[int, Sequence[Op]]) -> None:
        """Make each lane serve its transfers in the given order."""
        for ops in lane_orders.values():
            for before, after in zip(ops, ops[1:]):
                self._edge(self.index_of(before), self.index_of(after))

    def run(self, dynamic_lanes: bool, avoid_compute_interior: bool) -> list[ScheduledOp]:
        n = len(self.ops)
        ops, duration, lane, device, position = self.ops, self.duration, self.lane, self.device, self.position
        succ, indeg = self.succ, list(self.indeg)
        ready = [0.0] * n
        start = [0.0] * n
        end = [0.0] * n
        done = 0
        heap: list[tuple] = []
        lane_free: dict[int, float] = {}
        running = [(0.0, 0.0)] * self.problem.devices  # last compute op started on each device
        heappush, heappop = heapq.heappush, heapq.heappop
        for i in range(n):
            if indeg[i] == 0:
                heapq.heappush(heap, (0.0, lane[i] < 0, 0.0, device[i], position[i], i))
        while heap:
            t, is_compute, first_ready, dev, pos, i = heappop(heap)
            if not is_compute:
                if dynamic_lanes:
                    free = lane_free.get(lane[i], 0.0)
                    if free > t:
                        heappush(heap, (free, False, first_ready, dev, pos, i))
                        continue
                if avoid_compute_interior:
                    run_start, run_end = running[dev]
                    if run_start < t < run_end:
                        heappush(heap, (run_end, False, first_ready, dev, pos, i))
                        continue
                lane_free[lane[i]] = t + duration[i]
            else:
                running[dev] = (t, t + duration[i])
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
            if indeg[i] > 0 and self.ops[i].kind.is_compute and self.device[i] not in seen_devices:
                seen_devices.add(self.device[i])
                stuck.append(f"device {self.device[i]} waits at {self.ops[i]} (position {self.position[i]})")
        return "deadlock: the order can never finish: " + "; ".join(stuck[:6])
