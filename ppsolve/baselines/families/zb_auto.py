"""The zero-bubble heuristic behind ZB-H1 and ZB-H2 (linear placement, split backward).

This follows the heuristic of the zero-bubble paper's reference implementation
(Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024), written anew. Every
device keeps within one memory limit (d microbatches' activations for ZB-H1,
2d for ZB-H2). Orders are built microbatch by microbatch on the real costs and
p2p latency, timing each op as it is placed (each microbatch on its own costs):

* warm-up: microbatch 0 runs forward through every stage; each stage then takes
  as many extra forwards as fit in memory and in the time before microbatch 0's
  backward reaches it (stages taking strictly fewer the later they are), then
  microbatch 0's backward runs back;
* steady state, one microbatch at a time: each stage takes one more forward (a
  stage far ahead of the next one may skip it to let backwards through), then the
  backward of that microbatch runs back through every stage;
* a W is placed when memory needs it, when it fits in the wait for an input, or
  when the wait would exceed the largest idle time some device already has;
  the rest go at the end.

Three switches give eight variants (a bubble allowed before the first backward,
backwards prioritised, bubbles filled greedily); the fastest wins.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ppsolve.baselines.common import memory_deltas
from ppsolve.baselines.engines.placer import Placer
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS


@dataclass(frozen=True)
class ZbVariant:
    """The heuristic's three switches."""

    bubble_before_first_b: bool
    prioritize_b: bool
    fill_greedily: bool


VARIANTS = tuple(ZbVariant(*flags) for flags in itertools.product((True, False), repeat=3))


class _MemoryError(Exception):
    """A variant cannot keep within the limit."""


class _Slower(Exception):
    """A variant is already slower than the best one found."""


_F, _B, _W = OpKind.F, OpKind.B, OpKind.W


class _Builder:
    """One variant's orders, timed as they are placed (by the placer: as the simulator times them)."""

    def __init__(self, problem: Problem, limit: float, variant: ZbVariant, give_up: float = float("inf")):
        S = problem.num_stages
        self.S, self.m, self.variant, self.limit, self.give_up = S, problem.microbatches, variant, limit, give_up
        self.cost = {kind: [problem.durations[kind].row(s) for s in range(S)] for kind in (_F, _B, _W)}
        self.delta = memory_deltas(problem)
        self.comm = max(problem.p2p_times)  # the heuristic's own estimates of when a backward comes back
        self.placer = Placer(problem)
        self.count = {kind: [0] * S for kind in (_F, _B, _W)}
        self.mem = [0.0] * S
        self.end = self.placer.free  # linear placement: stage s is device s
        self.bubble = [0.0] * S
        self.max_bubble = 0.0
        self.mattered: set[str] = set()  # the switches some decision depended on
        self.orders: list[list[tuple[OpKind, int]]] = [[] for _ in range(S)]

    def put(self, s: int, kind: OpKind) -> None:
        count = self.count[kind]
        j = count[s]
        free = self.end[s] + self.cost[kind][s][j]
        finish = self.placer.put(kind, s)
        if finish > free and self.count[_F][s] > 0:
            bubble = self.bubble[s] = self.bubble[s] + (finish - free)
            if bubble > self.max_bubble:
                self.max_bubble = bubble
        if finish > self.give_up:
            raise _Slower
        self.mem[s] += self.delta[kind][s][j]
        count[s] = j + 1
        self.orders[s].append((kind, j))

    def pending_w(self, s: int) -> bool:
        return self.count[_W][s] < self.count[_B][s]

    def next_of(self, table: dict, kind: OpKind, s: int) -> float:
        """``table``'s value (cost or memory delta) for the next microbatch of (kind, s)."""
        return table[kind][s][self.count[kind][s]]

    def make_room(self, s: int, kind: OpKind) -> None:
        while self.mem[s] + self.next_of(self.delta, kind, s) > self.limit + EPS:
            if not self.pending_w(s):
                raise _MemoryError
            self.put(s, _W)

    def fill_wait(self, s: int, arrival: float) -> None:
        """W's that fit before the input arrives; one more if the wait is long or greedy filling is on."""
        while self.pending_w(s) and self.end[s] + self.next_of(self.cost, _W, s) <= arrival:
            self.put(s, _W)
        if self.pending_w(s) and self.end[s] < arrival:
            if arrival - self.end[s] > self.max_bubble - self.bubble[s]:
                self.put(s, _W)
            else:
                self.mattered.add("fill_greedily")
                if self.variant.fill_greedily:
                    self.put(s, _W)

    def warm_up(self) -> None:
        S, m, cF, cB = self.S, self.m, self.cost[_F], self.cost[_B]
        for s in range(S):
            self.put(s, _F)
        extra = [0] * S
        back = self.placer.ends[(_F, S - 1)][0] + cB[S - 1][0]  # when microbatch 0's backward leaves the stage after
        for s in range(S - 2, -1, -1):
            mem, t = self.mem[s], self.end[s]
            while (j := self.count[_F][s] + extra[s]) < m and mem + self.delta[_F][s][j] <= self.limit + EPS:
                overrun, late = t + cF[s][j] > back + self.comm, t >= back + self.comm
                if overrun != late:
                    self.mattered.add("bubble_before_first_b")
                if overrun if self.variant.bubble_before_first_b else late:
                    break
                mem += self.delta[_F][s][j]
                t += cF[s][j]
                extra[s] += 1
            back = max(t, back + self.comm) + cB[s][0]
        for s in range(1, S):  # later stages take strictly fewer (at most as many once all m are in)
            while 0 < extra[s] >= extra[s - 1] and self.count[_F][s] + extra[s] < m:
                extra[s] -= 1
            extra[s] = min(extra[s], extra[s - 1])
        for s in range(S):
            for _ in range(extra[s]):
                self.put(s, _F)
        for s in range(S - 1, -1, -1):
            self.put(s, _B)

    def wants_forward(self, s: int) -> bool:
        if self.count[_F][s] >= self.m:
            return False
        if not (s + 1 < self.S and self.count[_F][s] >= self.count[_F][s + 1] + 2):
            return True
        if self._lets_backward_through(s):
            self.mattered.add("prioritize_b")
            return not self.variant.prioritize_b
        return True

    def _lets_backward_through(self, s: int) -> bool:
        """Whether a stage far ahead of the next one should skip its forward (prioritize_b)."""
        nxt = s + 1
        next_done = self.end[nxt] + self.next_of(self.cost, _F, nxt) + self.next_of(self.cost, _B, nxt) + self.comm
        if self.end[s] >= next_done:
            return True
        mem, w_cost, w = self.mem[s] + self.next_of(self.delta, _F, s), 0.0, self.count[_W][s]
        while mem > self.limit + EPS and w < self.count[_B][s]:
            w_cost += self.cost[_W][s][w]
            mem += self.delta[_W][s][w]
            w += 1
        if self.end[s] + self.next_of(self.cost, _F, s) + w_cost <= next_done:
            return False
        return next_done - self.end[s] <= self.max_bubble - self.bubble[s]

    def steady(self, i: int) -> None:
        S = self.S
        want = [self.wants_forward(s) for s in range(S)]
        for s in range(S - 2, -1, -1):
            want[s] = want[s] and want[s + 1]
        for s in range(S):
            if not want[s]:
                continue
            self.make_room(s, _F)
            if s > 0:
                self.fill_wait(s, self.placer.ready(_F, s, self.count[_F][s]))
            self.put(s, _F)
        for s in range(S - 1, -1, -1):
            self.make_room(s, _B)
            if s + 1 < S:
                self.fill_wait(s, self.placer.ready(_B, s, i))
            if s == 0 and self.count[_F][s] == self.m:
                while self.pending_w(s):
                    self.put(s, _W)
            self.put(s, _B)

    def build(self) -> tuple[float, list[list[tuple[OpKind, int]]]]:
        """The makespan and, per stage, the (kind, microbatch) of each op in order."""
        self.warm_up()
        for i in range(1, self.m):
            self.steady(i)
        for s in range(self.S):
            while self.pending_w(s):
                self.put(s, _W)
        return max(self.end), self.orders


def zb_auto_orders(problem: Problem, limit: float) -> list[list[Op]]:
    """The fastest variant's orders keeping every device within ``limit`` memory.

    Raises ValueError when no variant fits (the limit holds less than one microbatch per stage).
    """
    best = None
    seen: list[tuple[ZbVariant, set[str]]] = []
    for variant in VARIANTS:
        # a variant agreeing with one already run on every switch that run consulted repeats it
        if any(all(getattr(variant, f) == getattr(other, f) for f in used) for other, used in seen):
            continue
        builder = _Builder(problem, limit, variant, best[0] if best else float("inf"))
        try:
            result = builder.build()
        except (_MemoryError, _Slower):
            continue
        finally:
            seen.append((variant, builder.mattered))
        if best is None or result[0] < best[0]:
            best = result
    if best is None:
        raise ValueError(f"no order keeps within {limit:g} per device")
    return [[Op(kind, s, j) for kind, j in order] for s, order in enumerate(best[1])]
