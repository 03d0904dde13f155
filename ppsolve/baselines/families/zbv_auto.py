"""The V-shape zero-bubble heuristic behind ZB-V (and greedy's V-shape candidates).

This follows the ZB-V heuristic of the zero-bubble reference implementation
(Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024), written anew, on the
real costs and p2p latency. Device i holds stage i (chunk 0) and stage
2d-1-i (chunk 1); every device keeps within one memory limit (2d stage
activations for ZB-V). Ops are timed as they are placed, each microbatch on its own costs:

* warm-up: microbatch 0 runs forward through chunk 0; going back up from the
  last device, each device adds chunk-0 forwards (on it and every device
  before it) while memory allows and they fit before chunk 1's forward arrives,
  then takes chunk 1's forward; later devices then catch up, alternating chunks;
* steady state, 2m rounds: every device takes one backward (chunk 1's, the one
  coming from device 0, once its input is there; else chunk 0's), then one
  forward (chunk 1's when its input is there, else chunk 0's);
* a W is placed when memory needs it, when it fits in the wait for an input, or
  when the wait would exceed the largest idle time of any device (for the
  backward of chunk 0 and the forwards only if the variant says so).

Variants: two switches (fill the wait before a chunk-0 backward, before a
forward) and, as in the reference, a rerun that accepts each device's idle time
of the previous run while that lowers the largest one. The fastest order wins.
On large problems (over ``SMALL_OPS`` compute ops) a run stops, ending its
chain of reruns, once it is already slower than the fastest one found.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ppsolve.baselines.common import SMALL_OPS, largest, memory_deltas
from ppsolve.baselines.engines.placer import Placer
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

_F, _B, _W = OpKind.F, OpKind.B, OpKind.W
# rerun with the previous run's idle times accepted at most this often
_RERUNS = 6


class _Stuck(Exception):
    """A variant breaks the limit or an input is not there when its rules expect it."""


@dataclass(frozen=True)
class VRun:
    makespan: float
    max_bubble: float
    bubble: tuple[float, ...]
    orders: list[list[tuple[OpKind, int, int]]]  # (kind, stage, microbatch)


def _at(ends: list[float], j: int) -> float | None:
    """When microbatch ``j`` of a lane ends (None: not placed yet)."""
    return ends[j] if j < len(ends) else None


class _Builder:
    """One variant's orders on a V-shape, timed as they are placed (by the placer: as the simulator would).

    Lanes are (kind, lane) with lane 0 = the flow from device 0 up (chunk 0's
    forward, chunk 1's backward) and lane 1 = the flow back down.
    """

    def __init__(self, problem: Problem, limit: float, fill_b: bool, fill_f: bool,
                 approved: tuple[float, ...] | None, give_up: float = float("inf")):
        d = problem.devices
        self.d, self.m, self.limit = d, problem.microbatches, limit + EPS
        self.fill_b, self.fill_f, self.give_up = fill_b, fill_f, give_up
        self.approved = approved or (-1.0,) * d
        self.max_approved = max(self.approved)
        # stage of (kind, lane) on device i
        self.stage = [{_F: (i, 2 * d - 1 - i), _B: (2 * d - 1 - i, i), _W: (2 * d - 1 - i, i)} for i in range(d)]
        self.cost = {kind: [problem.durations[kind].row(s) for s in range(2 * d)] for kind in (_F, _B, _W)}
        self.delta = memory_deltas(problem)
        self.placer = Placer(problem)
        self.f_room = largest(problem.activation)
        self.comm = max(problem.p2p_times)  # the heuristic's own estimates of when an input arrives
        self.count = [{kind: [0, 0] for kind in (_F, _B, _W)} for _ in range(d)]
        self.mem = [0.0] * d
        self.cur = self.placer.free
        self.bubble = [0.0] * d
        self.most_bubble = 0.0
        self.mattered: set[str] = set()  # the switches some decision depended on
        # every long-wait decision: (device, wait, most_bubble, device's bubble, taken) (see repeats)
        self.decisions: list[tuple[int, float, float, float, bool]] = []
        self.pending: list[list[int]] = [[] for _ in range(d)]
        self.next_w = [0] * d
        self.orders: list[list[tuple[OpKind, int, int]]] = [[] for _ in range(d)]

    def ends(self, i: int, kind: OpKind, lane: int) -> list[float]:
        """When each placed microbatch of (kind, lane) on device i ends."""
        return self.placer.ends[(kind, self.stage[i][kind][lane])]

    def placed(self, i: int, kind: OpKind, lane: int, j: int) -> float | None:
        return _at(self.ends(i, kind, lane), j)

    def next_of(self, table: dict, i: int, kind: OpKind, lane: int) -> float:
        """``table``'s value (cost or memory delta) for the next microbatch of (kind, lane) on device i
        (the last microbatch's once all are placed)."""
        j = min(self.count[i][kind][lane], self.m - 1)
        return table[kind][self.stage[i][kind][lane]][j]

    def max_bubble(self, i: int) -> float:
        return max(self.most_bubble, self.max_approved - self.approved[i])

    def put(self, kind: OpKind, lane: int, i: int) -> None:
        counts = self.count[i]
        j = counts[kind][lane]
        if j >= self.m:
            raise _Stuck
        s = self.stage[i][kind][lane]
        free = self.cur[i] + self.cost[kind][s][j]
        finish = self.placer.put(kind, s)
        if finish is None:  # an input is not there yet
            raise _Stuck
        if kind is _B:
            self.pending[i].append(lane)
        if finish > free and counts[_F][0] > 0:
            bubble = self.bubble[i] = self.bubble[i] + (finish - free)
            if bubble > self.most_bubble:
                self.most_bubble = bubble
        if finish > self.give_up:
            raise _Stuck
        mem = self.mem[i] = self.mem[i] + self.delta[kind][s][j]
        if mem > self.limit:
            raise _Stuck
        counts[kind][lane] = j + 1
        self.orders[i].append((kind, s, j))

    def put_w(self, i: int) -> None:
        k = self.next_w[i]
        pending = self.pending[i]
        if k >= len(pending):
            raise _Stuck
        self.next_w[i] = k + 1
        self.put(_W, pending[k], i)

    def has_w(self, i: int) -> bool:
        return self.next_w[i] < len(self.pending[i])

    def fits(self, i: int, kind: OpKind, lane: int) -> bool:
        return self.mem[i] + self.next_of(self.delta, i, kind, lane) <= self.limit

    def room_for(self, i: int, kind: OpKind, lane: int) -> None:
        change, mem, limit = self.next_of(self.delta, i, kind, lane), self.mem, self.limit
        while mem[i] + change > limit:
            self.put_w(i)

    def fill_wait(self, i: int, arrival: float | None, switch: str | None) -> None:
        """W's that fit before the input arrives; one more when the wait is long (and ``switch`` is on)."""
        if arrival is None:
            return
        arrival += self.comm
        pending, next_w, cur = self.pending[i], self.next_w, self.cur
        w_cost, w_stage, w_count = self.cost[_W], self.stage[i][_W], self.count[i][_W]
        while next_w[i] < len(pending):
            lane = pending[next_w[i]]  # the next W's lane; its microbatch is that lane's W count
            if arrival < cur[i] + w_cost[w_stage[lane]][w_count[lane]]:
                break
            self.put_w(i)
        if next_w[i] < len(pending):
            wait, most, bubble = arrival - cur[i], self.most_bubble, self.bubble[i]
            long_wait = wait > max(most, self.max_approved - self.approved[i]) - bubble
            self.decisions.append((i, wait, most, bubble, long_wait))
            if long_wait:
                if switch:
                    self.mattered.add(switch)
                if switch is None or getattr(self, switch):
                    self.put_w(i)

    def repeats(self, approved: tuple[float, ...]) -> bool:
        """Whether a run with ``approved`` idle times would make this run again.

        ``approved`` enters only the long-wait test of :meth:`fill_wait`; while every such
        test comes out as it did here, the rerun places every op as this run did.
        """
        if not self.decisions:
            return True
        device, wait, most, bubble, taken = (np.array(column) for column in zip(*self.decisions))
        approved_ = np.array(approved)
        limit = np.maximum(most, approved_.max() - approved_[device]) - bubble
        return bool(((wait > limit) == taken).all())

    def warm_up(self) -> None:
        d, m = self.d, self.m
        for i in range(d):
            self.put(_F, 0, i)
        for i in range(d - 1, -1, -1):
            if i < d - 1:
                arrival = self.placed(i + 1, _F, 1, 0) + self.comm
                while (self.mem[i] + self.f_room * (2 + 2 * i) <= self.limit
                       and self.cur[i] + self.next_of(self.cost, i, _F, 0) <= arrival
                       and self.count[i][_F][0] < m - i):
                    for j in range(i + 1):
                        self.put(_F, 0, j)
            self.put(_F, 1, i)
        lane = 0
        for i in range(1, d):
            def behind() -> bool:
                here, there = self.count[i][_F], self.count[i - 1][_F]
                return here[0] + here[1] < there[0] + there[1] or here[1] <= there[1] < m
            idle_sweeps = 0
            while behind() and idle_sweeps < 2:
                # on uneven costs a device may run out of memory before catching up (the reference
                # would fail there): it then skips, and the steady state takes over
                idle_sweeps += 1
                for j in range(d - 1, i - 1, -1):
                    if self.count[j][_F][lane] < m and self.fits(j, _F, lane):
                        self.put(_F, lane, j)
                        idle_sweeps = 0
                lane = 1 - lane

    def steady(self) -> None:
        d, m, count, ends, mem, limit = self.d, self.m, self.count, self.ends, self.mem, self.limit
        for i in range(d):  # room for a B of lane 0 (a B frees memory: rarely needed)
            if mem[i] + self.next_of(self.delta, i, _B, 0) > limit:
                self.room_for(i, _B, 0)
        first, second = [], []
        for i in range(d):
            done0, done1 = count[i][_B]
            if done1 >= done0:
                second.append(i)
            elif i == d - 1 or done1 < len(ends(i + 1, _B, 1)) or done0 >= m:
                first.append(i)
            else:
                second.append(i)
        for i, lane in [(i, 1) for i in reversed(first)] + [(i, 0) for i in second]:
            src = i + 1 if lane == 1 else i - 1
            if 0 <= src < d:
                self.fill_wait(i, _at(ends(src, _B, lane), count[i][_B][lane]), None if lane == 1 else "fill_b")
            self.put(_B, lane, i)
        for i in range(d):
            f0, f1 = count[i][_F]
            if f1 >= m:
                continue
            if f1 >= f0:
                lane = 0
            elif i == d - 1 or f1 < len(ends(i + 1, _F, 1)):
                lane = 1
            elif f0 < m and (i == 0 or f0 < len(ends(i - 1, _F, 0))):
                lane = 0
            else:
                continue
            self.room_for(i, _F, lane)
            src = i + 1 if lane == 1 else i - 1
            if 0 <= src < d:
                self.fill_wait(i, _at(ends(src, _F, lane), count[i][_F][lane]), "fill_f")
            self.put(_F, lane, i)

    def build(self) -> VRun:
        self.warm_up()
        for _ in range(2 * self.m):
            self.steady()
        for i in range(self.d):
            while self.has_w(i):
                self.put_w(i)
        return VRun(max(self.cur), max(self.bubble), tuple(self.bubble), self.orders)


def zbv_runs(problem: Problem, limit: float) -> list[VRun]:
    """Every run the heuristic makes within ``limit`` per device (those that got stuck left out).

    Each pair of switches starts a chain of runs; a chain whose switches agree with
    an earlier chain's on every switch that chain consulted repeats it and is skipped.
    The heuristic is defined for a V-shape of two chunks per device: on any other placement there are none.
    """
    runs: list[VRun] = []
    if problem.chunks != 2 or problem.placement_name != "vshape" or not problem.split_backward:
        return runs
    chains: list[tuple[dict[str, bool], set[str]]] = []
    # past SMALL_OPS a run stops once it is slower than the fastest so far (ending its chain)
    prune = 3 * problem.num_stages * problem.microbatches > SMALL_OPS
    for fill_b, fill_f in itertools.product((True, False), repeat=2):
        switches = {"fill_b": fill_b, "fill_f": fill_f}
        if any(all(switches[k] == other[k] for k in used) for other, used in chains):
            continue
        consulted: set[str] = set()
        chains.append((switches, consulted))
        approved = None
        for attempt in range(_RERUNS):
            give_up = min((r.makespan for r in runs), default=float("inf")) if prune else float("inf")
            builder = _Builder(problem, limit, fill_b, fill_f, approved, give_up)
            try:
                run = builder.build()
            except _Stuck:
                break
            finally:
                consulted |= builder.mattered
            runs.append(run)
            if approved is not None and run.max_bubble >= max(approved):
                break
            approved = run.bubble
            if attempt + 1 < _RERUNS and builder.repeats(approved):
                # the rerun would place every op as this run did: kept unless a faster run prunes it,
                # and the chain ends either way
                if not prune or run.makespan <= min(r.makespan for r in runs):
                    runs.append(run)
                break
    return runs


def zbv_orders(problem: Problem, limit: float) -> list[list[Op]] | None:
    """The fastest order the heuristic finds within ``limit`` per device, or None."""
    runs = zbv_runs(problem, limit)
    if not runs:
        return None
    best = min(runs, key=lambda r: r.makespan)
    return [[Op(kind, s, j) for kind, s, j in order] for order in best.orders]
