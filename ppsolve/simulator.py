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

Data dependencies (rules 1-5 and 9) come from :mod:`ppsolve.dependencies`.
"""

from __future__ import annotations

import functools
import heapq
from bisect import bisect_right
from typing import Mapping, Sequence

import numpy as np

from ppsolve.dependencies import dependency_table, depth
from ppsolve.errors import DeadlockError, InputError
from ppsolve.ops import KIND_CODE, Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import ScheduledOp

Orders = Sequence[Sequence[Op]]
Amounts = Mapping[tuple[int, int], float]
Waits = Mapping[Op, Sequence[Op]]

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD
_KINDS = len(KIND_CODE)


def simulate(problem: Problem, orders: Orders, amounts: Amounts | None = None,
             waits: Waits | None = None) -> list[ScheduledOp]:
    """Time a plan as soon as possible. ``orders[d]`` is device d's action list.

    ``amounts[(stage, microbatch)]`` is what an offload moves; missing entries
    move the most allowed (``fraction * activation``). ``waits[op]`` lists ops
    of the same device whose end ``op`` waits for (contract version 2: a forward
    may wait for the offload that frees its memory).
    Returns the timed actions in the plan's order: device 0's list, then device 1's, ...
    Raises InputError for an incomplete or misplaced plan, DeadlockError for an
    order that can never finish.
    """
    engine = _Engine(problem, orders, amounts or {}, where="orders")
    engine.add_list_edges()
    if waits:
        engine.add_waits(waits)
    return engine.run(dynamic_lanes=True)


def forwards_wait_for_offloads(orders: Orders) -> dict[Op, list[Op]]:
    """Waits that hold each forward (and recompute) until the offloads listed before it on its device have ended.

    A device's offloads are ready in list order and its lane serves them first come, first
    served, so waiting for the last one listed covers the others. This is how an order says
    "free the memory before the next forward" (an R allocates too, so it waits the same way) (PipeOffload's runtime has an explicit step for it).
    """
    waits: dict[Op, list[Op]] = {}
    for actions in orders:
        last_offload = None
        for op in actions:
            if op.kind is _OFF:
                last_offload = op
            elif (op.kind is _F or op.kind is _R) and last_offload is not None:
                waits[op] = [last_offload]
    return waits


def retime(problem: Problem, ops: Sequence[ScheduledOp]) -> list[ScheduledOp]:
    """Re-time a timed schedule as SPEC.md's runtime (contract version 2) would execute it."""
    issued = issue_order(problem, ops)
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    for op in issued:
        orders[op.device].append(Op(op.kind, op.stage, op.microbatch))
    amounts = {(op.stage, op.microbatch): op.amount for op in ops if op.kind is _OFF}
    for op in ops:
        if op.kind is _REL:
            amounts.setdefault((op.stage, op.microbatch), op.amount)
    engine = _Engine(problem, orders, amounts, where="schedule.ops", devices_from_ops=True)
    engine.add_runtime_edges(_Timed(problem, issued))
    return engine.run(dynamic_lanes=False)


def issue_order(problem: Problem, ops: Sequence[ScheduledOp]) -> list[ScheduledOp]:
    """``ops`` (one device's, or all of them) in the order a runtime issues them.

    By planned start; at one instant an op of zero duration first (it ends
    there), then transfers before compute ops, then compute ops of zero duration
    that release memory (B, W) before those that allocate it (F, R), as the memory
    rules count an instant, unless the release depends on such an F or R at that
    instant; ties in dependency order (:func:`ppsolve.dependencies.depth`, then
    microbatch, then stage).
    """
    ops = list(ops)
    if not ops:
        return []
    timed = _Timed(problem, ops)
    depths = np.array([depth(problem, kind, s) for kind in KIND_CODE for s in range(problem.num_stages)])
    rank = np.lexsort((timed.stage, timed.microbatch, depths[timed.code * problem.num_stages + timed.stage],
                       _allocates_at_its_instant(timed), timed.code < KIND_CODE[_OFF], timed.end > timed.start,
                       timed.start))
    return [ops[i] for i in rank.tolist()]


def _allocates_at_its_instant(timed: "_Timed") -> np.ndarray:
    """1 for a compute op of zero duration that allocates (F, R), or that releases (B, W) what
    depends on an F or R of zero duration at the same instant (any F of its microbatch, or an R
    of its microbatch at its stage or a later one: B runs down the stages); else 0 (issued first)."""
    zero = timed.end <= timed.start
    forward = zero & (timed.code == KIND_CODE[_F])
    rerun = zero & (timed.code == KIND_CODE[_R])
    releasing = zero & ((timed.code == KIND_CODE[_B]) | (timed.code == KIND_CODE[_W]))
    out = (forward | rerun).astype(np.int64)
    if out.any() and releasing.any():
        forwards = set(zip(timed.start[forward].tolist(), timed.microbatch[forward].tolist()))
        reruns: dict[tuple[float, int], int] = {}
        for i in np.flatnonzero(rerun).tolist():
            key = (float(timed.start[i]), int(timed.microbatch[i]))
            reruns[key] = max(reruns.get(key, -1), int(timed.stage[i]))
        for i in np.flatnonzero(releasing).tolist():
            key = (float(timed.start[i]), int(timed.microbatch[i]))
            if key in forwards or reruns.get(key, -1) >= int(timed.stage[i]):
                out[i] = 1
    return out


def runtime_lane(problem: Problem, op: ScheduledOp) -> tuple:
    """The lane an action runs on: its device's compute lane, or a host-link lane (shared by the
    devices of the link, one for both directions on a half-duplex link)."""
    if op.kind.is_compute:
        return ("compute", op.device)
    return ("link", problem.lane(op.device, op.kind))


def device_waits(problem: Problem, issued: Sequence[ScheduledOp]) -> list[list[int]]:
    """Contract version 2's waits on other actions of the same device, for timed actions in issue order.

    ``issued`` holds the actions of one device or of several, sorted by :func:`issue_order`. The
    result has, for each of them, the indices (into ``issued``) of the actions of its own device
    it waits for besides its data and the action before it on its lane: on each other lane of
    its device, the last action (in lane order) whose planned end is at or before its planned
    start. Lane order keeps a lane's actions in sequence, so waiting for that one covers every
    earlier one, and this is exactly "every action of its own device whose planned end is at or
    before this action's planned start" (on its own lane the lane order already does it).
    Every index is smaller than the waiting action's: what ends by an action's start is issued
    before it. The simulator's re-timing and the executor both read this.
    """
    waits: list[list[int]] = [[] for _ in issued]
    for awaited, waiting in _Timed(problem, issued).device_waits():
        for u, v in zip(awaited.tolist(), waiting.tolist()):
            waits[v].append(u)
    return waits


class _Timed:
    """Timed actions as columns (numpy arrays), for the runtime's order and waits."""

    def __init__(self, problem: Problem, ops: Sequence[ScheduledOp]):
        kinds, stage, microbatch, device, start, end, _ = zip(*ops) if ops else ((),) * 7
        self.code = np.array([KIND_CODE[kind] for kind in kinds], dtype=np.int64)
        self.stage = np.array(stage, dtype=np.int64)
        self.microbatch = np.array(microbatch, dtype=np.int64)
        self.device = np.array(device, dtype=np.int64)
        self.start = np.array(start, dtype=float)
        self.end = np.array(end, dtype=float)
        self._problem, self._kinds = problem, kinds

    @functools.cached_property
    def lane(self) -> np.ndarray:
        """:func:`runtime_lane` as a number: the compute lane is 0, host-link lane l is l + 1."""
        lane = np.zeros(len(self.code), dtype=np.int64)
        for i in np.flatnonzero(self.code >= KIND_CODE[_OFF]).tolist():
            lane[i] = self._problem.lane(int(self.device[i]), self._kinds[i]) + 1
        return lane

    def lane_chains(self) -> tuple[np.ndarray, np.ndarray]:
        """(before, after): each action after the one before it on its lane (actions in issue order).
        A compute lane is its device's; a host-link lane is shared by the devices of the link."""
        key = np.where(self.lane == 0, -1 - self.device, self.lane)
        order = np.argsort(key, kind="stable")
        same = key[order[1:]] == key[order[:-1]]
        return order[:-1][same], order[1:][same]

    def device_waits(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """:func:`device_waits` as (awaited, waiting) index arrays, one pair per (device, lane),
        in the order the device's lanes first appear."""
        pairs = self.device * (self.lane.max(initial=0) + 1) + self.lane
        _, first = np.unique(pairs, return_index=True)
        out = []
        for at in np.sort(first).tolist():
            device, lane = self.device[at], self.lane[at]
            mine = self.device == device
            members = np.flatnonzero(mine & (self.lane == lane))
            others = np.flatnonzero(mine & (self.lane != lane))
            ends = self.end[members]
            if (ends[1:] >= ends[:-1]).all():
                last = np.searchsorted(ends, self.start[others], side="right") - 1
            else:  # not in lane order (an invalid schedule): the same binary search as bisect_right
                listed = ends.tolist()
                last = np.array([bisect_right(listed, t) - 1 for t in self.start[others].tolist()], dtype=np.int64)
            found = last >= 0
            out.append((members[last[found]], others[found]))
        return out


class _Engine:
    """Actions as parallel arrays, a dependency graph as edge arrays, and one pass that times them.

    Ops are identified by an integer key ``(kind * S + stage) * m + microbatch``. The
    graph is built with numpy, one array operation per rule rather than a Python step
    per op (plans of 10^5 ops are the hot path), and walked in Python.
    """

    def __init__(self, problem: Problem, orders: Orders, amounts: Amounts, where: str,
                 devices_from_ops: bool = False):
        self.problem = problem
        if len(orders) != problem.devices:
            raise InputError(where, f"must have one action list per device ({problem.devices}), got {len(orders)}")
        S, M = problem.num_stages, problem.microbatches
        self.S, self.M = S, M
        self.ops: list[Op] = [op for actions in orders for op in actions]
        n = len(self.ops)
        lengths = [len(actions) for actions in orders]
        kinds, stages, microbatches = zip(*self.ops) if n else ((), (), ())
        code = np.array([KIND_CODE[kind] for kind in kinds], dtype=np.int64)
        stage = np.array(stages, dtype=np.int64)
        mb = np.array(microbatches, dtype=np.int64)
        device = np.repeat(np.arange(problem.devices), lengths)
        index = np.arange(n)
        self.first_of_device = np.repeat(np.cumsum([0] + lengths[:-1]), lengths)
        self.code, self.stage, self.mb = code, stage, mb
        slot = self._slot = np.full(_KINDS * S * M, -1, dtype=np.int64)
        if n:
            key = (code * S + stage) * M + mb if _in_range(stage, mb, S, M) else None
            if key is not None:
                slot[key] = index
            if (key is None or (slot[key] != index).any()
                    or (not devices_from_ops and (np.asarray(problem.placement)[stage] != device).any())):
                _raise_first_misplaced(problem, orders, where, devices_from_ops)
        self.slot: list[int] = slot.tolist()
        self.device: list[int] = device.tolist()
        self.position: list[int] = (index - self.first_of_device).tolist()
        self._check_complete(where)
        durations = np.zeros((_KINDS, S, M))
        for kind in problem.kinds + ((_R,) if problem.recompute is not None else ()):
            durations[KIND_CODE[kind]] = problem.durations[kind].array
        duration = durations[code, stage, mb]
        amount = np.zeros(n)
        lane = np.full(n, -1, dtype=np.int64)
        transfers = np.flatnonzero(code >= KIND_CODE[_OFF])
        if len(transfers):
            ops = self.ops
            moved = np.array([amounts[key] if key in amounts else problem.max_offload(*key)
                              for key in (ops[i][1:] for i in transfers.tolist())], dtype=float)
            amount[transfers] = moved
            kind, on = code[transfers] - KIND_CODE[_OFF], device[transfers]
            duration[transfers] = moved / np.where(kind == 0, problem.offload.d2h, problem.offload.h2d)
            lanes = np.array([[problem.lane(d, k) for k in (_OFF, _REL)] for d in range(problem.devices)])
            lane[transfers] = lanes[on, kind]
        self.amount: list[float] = amount.tolist()
        self.lane: list[int] = lane.tolist()
        self.duration: list[float] = duration.tolist()
        self._edges: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._add_data_edges()

    def index_of(self, op: Op) -> int:
        """Position of ``op`` in the arrays, or -1."""
        return self.slot[(KIND_CODE[op.kind] * self.S + op.stage) * self.M + op.microbatch]

    def _check_complete(self, where: str) -> None:
        problem = self.problem
        code = self.code
        expected = self.S * self.M * len(problem.kinds)
        transfer = code >= KIND_CODE[_OFF]
        # the other transfer of the same (stage, microbatch): OFFLOAD <-> RELOAD
        partner = ((KIND_CODE[_OFF] + KIND_CODE[_REL] - code) * self.S + self.stage) * self.M + self.mb
        odd = transfer & (self._slot[np.where(transfer, partner, 0)] < 0)  # a transfer without its pair
        if problem.offload is None:
            odd |= transfer
        if not problem.split_backward:
            odd |= code == KIND_CODE[_W]
        recompute = code == KIND_CODE[_R]
        if problem.recompute is None:
            odd |= recompute
        # rule 10: a recomputed (stage, microbatch) has no transfers
        offload_of = ((KIND_CODE[_OFF] * self.S + self.stage) * self.M + self.mb)
        odd |= recompute & (self._slot[np.where(recompute, offload_of, 0)] >= 0)
        for i in np.flatnonzero(odd).tolist():  # the first in list order says what is wrong
            kind, s, j = op = self.ops[i]
            if kind is _W:
                raise InputError(where, f"{op}: fused backward has no W ops")
            if kind is _R and problem.recompute is None:
                raise InputError(where, f"{op}: the problem has no recompute block")
            if kind is _R:
                raise InputError(where, f"{op}: a recomputed activation is not also offloaded (rule 10)")
            if problem.offload is None:
                raise InputError(where, f"{op}: the problem has no offload link")
            partner_kind = _REL if kind is _OFF else _OFF
            raise InputError(where, f"{op} has no matching {partner_kind.value}")
        compute = int(((code < KIND_CODE[_OFF]) & ~recompute).sum())
        if compute != expected:
            missing = next(op for op in problem.compute_ops() if self.index_of(op) < 0)
            raise InputError(where, f"{expected - compute} compute ops are missing, first {missing}")

    def _add_edges(self, before, after) -> None:
        """Edges of lag 0: ``after[k]`` starts once ``before[k]`` has ended."""
        before, after = np.asarray(before, dtype=np.int64), np.asarray(after, dtype=np.int64)
        self._edges.append((before, after, np.zeros(len(before))))

    def _add_data_edges(self) -> None:
        """Rules 1-5 and 9, read from the dependency table (an optional dependency only when present)."""
        S, M = self.S, self.M
        table = dependency_table(self.problem)
        width = max(len(deps) for deps in table.values())
        # per rank k of a dependency and per kind code * S + stage: what it waits for (-1: nothing)
        waits_for = np.full((width, _KINDS * S), -1, dtype=np.int64)
        crosses = np.zeros((width, _KINDS * S), dtype=bool)
        optional = np.zeros((width, _KINDS * S), dtype=bool)
        for (kind, s), deps in table.items():
            for k, dep in enumerate(deps):
                at = KIND_CODE[kind] * S + s
                waits_for[k, at] = KIND_CODE[dep.kind] * S + dep.stage
                crosses[k, at], optional[k, at] = dep.crosses, dep.optional
        lag = crosses[:, :, None] * np.asarray(self.problem.p2p_times)[None, None, :]
        at = self.code * S + self.stage
        index = np.arange(len(self.ops))
        missing = []
        for k in range(width):
            target = waits_for[k, at]
            has = target >= 0
            u = np.where(has, self._slot[np.where(has, target, 0) * M + self.mb], -1)
            bad = has & (u < 0) & ~optional[k, at]
            if bad.any():
                missing.append((int(np.argmax(bad)), k))
            present = u >= 0
            self._edges.append((u[present], index[present], lag[k, at, self.mb][present]))
        if missing:
            i, k = min(missing)
            kind, s, j = self.ops[i]
            dep = table[(kind, s)][k]
            raise InputError("orders", f"{Op(kind, s, j)} waits for {dep.op(j)}, which is missing")

    def add_list_edges(self) -> None:
        """A plan: each compute op after the compute op before it in its list; each transfer is issued
        when the compute op before it in its list has ended."""
        n = len(self.ops)
        index = np.arange(n)
        last_compute = np.maximum.accumulate(np.where(self.code < KIND_CODE[_OFF], index, -1))
        before = np.concatenate(([-1], last_compute[:-1]))
        ok = before >= self.first_of_device
        self._edges.append((before[ok], index[ok], np.zeros(int(ok.sum()))))

    def add_waits(self, waits: Waits) -> None:
        """Explicit waits of a plan: ``op`` starts after each listed op of its device has ended."""
        before, after = [], []
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
                before.append(u)
                after.append(v)
        self._add_edges(before, after)

    def add_runtime_edges(self, issued: "_Timed") -> None:
        """Contract version 2's runtime for a timed schedule, given in issue order (the order the
        engine's lists were made in): each lane serves its actions in issue order, and each action
        waits for its :func:`device_waits`."""
        index = np.empty(len(issued.device), dtype=np.int64)  # issue position -> engine position
        index[np.argsort(issued.device, kind="stable")] = np.arange(len(index))
        self._add_edges(*(index[side] for side in issued.lane_chains()))
        for awaited, waiting in issued.device_waits():
            self._add_edges(index[awaited], index[waiting])

    def _successors(self) -> tuple[list[int], list[int], list[float], list[int]]:
        """The graph in compressed rows: op i's successors are ``target[first[i]:first[i + 1]]``
        (with their lags), and each op's count of predecessors."""
        n = len(self.ops)
        src = np.concatenate([e[0] for e in self._edges])
        dst = np.concatenate([e[1] for e in self._edges])
        lag = np.concatenate([e[2] for e in self._edges])
        by_source = np.argsort(src, kind="stable")
        first = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=n))))
        indeg = np.bincount(dst, minlength=n)
        return first.tolist(), dst[by_source].tolist(), lag[by_source].tolist(), indeg.tolist()

    def run(self, dynamic_lanes: bool) -> list[ScheduledOp]:
        """Time every op. ``dynamic_lanes``: transfers share their lane first come, first served
        (a plan); otherwise the graph already orders each lane (a re-timing).

        An op starts once every op it waits for has ended (plus the lag). Only a transfer of a
        plan may wait longer, for its lane: those go through an event queue in time order (at one
        instant transfers first, then by the time they became ready, device and position), and so
        do compute ops that end at the instant they start, which may make another transfer ready
        at that instant. Every other op starts when it is ready whatever the order it is taken in,
        so it is taken at once (before the queue's next event): the times are those of an event
        queue holding every op, at a fraction of the cost.
        """
        n = len(self.ops)
        first, target, lags, indeg = self._successors()
        duration, lane = self.duration, self.lane
        queued = [False] * n
        if dynamic_lanes and (self.code >= KIND_CODE[_OFF]).any():
            queued = [k >= 0 or t == 0 for k, t in zip(lane, duration)]
        ready = [0.0] * n
        end = [0.0] * n
        stack = [i for i in range(n) if indeg[i] == 0 and not queued[i]]
        # events (time, is compute, time it became ready, index): the index orders by device, then position
        heap = [(0.0, lane[i] < 0, 0.0, i) for i in range(n) if indeg[i] == 0 and queued[i]]
        heapq.heapify(heap)
        lane_free: dict[int, float] = {}
        heappush, heappop = heapq.heappush, heapq.heappop
        done = 0
        while stack or heap:
            if stack:
                i = stack.pop()
            else:
                t, is_compute, first_ready, i = heappop(heap)
                if not is_compute:
                    free = lane_free.get(lane[i], 0.0)
                    if free > t:
                        heappush(heap, (free, False, first_ready, i))
                        continue
                    lane_free[lane[i]] = t + duration[i]
                ready[i] = t
            finish = end[i] = ready[i] + duration[i]
            done += 1
            for k in range(first[i], first[i + 1]):
                v = target[k]
                t = finish + lags[k]
                if t > ready[v]:
                    ready[v] = t
                indeg[v] -= 1
                if indeg[v] == 0:
                    if queued[v]:
                        heappush(heap, (ready[v], lane[v] < 0, ready[v], v))
                    else:
                        stack.append(v)
        if done < n:
            raise DeadlockError(self._deadlock_message(indeg))
        new = functools.partial(tuple.__new__, ScheduledOp)
        kinds, stages, microbatches = zip(*self.ops) if self.ops else ((), (), ())
        return list(map(new, zip(kinds, stages, microbatches, self.device, ready, end, self.amount)))

    def _deadlock_message(self, indeg: list[int]) -> str:
        stuck = []
        seen_devices = set()
        for i in sorted(range(len(self.ops)), key=lambda i: (self.device[i], self.position[i])):
            if indeg[i] > 0 and self.device[i] not in seen_devices:
                seen_devices.add(self.device[i])
                stuck.append(f"device {self.device[i]} waits at {self.ops[i]} (position {self.position[i]})")
        return "deadlock: the order can never finish: " + "; ".join(stuck[:6])


def _in_range(stage: np.ndarray, microbatch: np.ndarray, S: int, M: int) -> bool:
    return bool(((stage >= 0) & (stage < S) & (microbatch >= 0) & (microbatch < M)).all())


def _raise_first_misplaced(problem: Problem, orders: Orders, where: str, devices_from_ops: bool) -> None:
    """The first op, in list order, that is out of range, listed twice or on the wrong device."""
    S, M = problem.num_stages, problem.microbatches
    seen: set[Op] = set()
    for device, actions in enumerate(orders):
        for position, op in enumerate(actions):
            kind, s, j = op
            if not (0 <= s < S and 0 <= j < M):
                raise InputError(where, f"{op} is out of range")
            if op in seen:
                raise InputError(f"{where}[{device}][{position}]", f"{op} appears twice")
            seen.add(op)
            if not devices_from_ops and problem.placement[s] != device:
                raise InputError(f"{where}[{device}][{position}]",
                                 f"{op} belongs to device {problem.placement[s]}, not {device}")
    raise AssertionError("no misplaced op found")  # the caller saw one
