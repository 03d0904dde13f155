"""The zero-bubble heuristic behind ZB-H1 and ZB-H2 (linear placement, split backward).

This follows the heuristic of the zero-bubble paper's reference implementation
(Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024), written anew. Every
device keeps within one memory limit (d microbatches' activations for ZB-H1,
2d for ZB-H2). Orders are built microbatch by microbatch on the real costs and
p2p latency, timing each op as it is placed:

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

from ppsolve.ops import B, F, W, Op
from ppsolve.problem import Problem


@dataclass(frozen=True)
class ZbVariant:
    """The heuristic's three switches."""

    bubble_before_first_b: bool
    prioritize_b: bool
    fill_greedily: bool


VARIANTS = tuple(ZbVariant(*flags) for flags in itertools.product((True, False), repeat=3))


class _MemoryError(Exception):
    """A variant cannot keep within the limit."""


class _Builder:
    """One variant's orders, timed as they are placed (exactly as the simulator times them)."""

    def __init__(self, problem: Problem, limit: float, variant: ZbVariant):
        S = problem.num_stages
        self.S, self.m, self.variant, self.limit = S, problem.microbatches, variant, limit
        self.cost = {"F": problem.forward, "B": problem.backward_input, "W": problem.backward_weight}
        self.delta = {"F": problem.activation,
                      "B": [-(a - h) for a, h in zip(problem.activation, problem.weight_hold)],
                      "W": [-h for h in problem.weight_hold]}
        self.comm = problem.p2p
        self.count = {k: [0] * S for k in "FBW"}
        self.ends = {k: [[] for _ in range(S)] for k in "FB"}
        self.mem = [0.0] * S
        self.end = [0.0] * S
        self.bubble = [0.0] * S
        self.orders: list[list[Op]] = [[] for _ in range(S)]

    def put(self, s: int, kind: str) -> None:
        j = self.count[kind][s]
        cost = self.cost[kind][s]
        finish = self.end[s] + cost
        if kind == "F" and s > 0:
            finish = max(finish, self.ends["F"][s - 1][j] + self.comm + cost)
        elif kind == "B" and s < self.S - 1:
            finish = max(finish, self.ends["B"][s + 1][j] + self.comm + cost)
        if self.count["F"][s] > 0:
            self.bubble[s] += finish - (self.end[s] + cost)
        self.end[s] = finish
        self.mem[s] += self.delta[kind][s]
        self.count[kind][s] += 1
        if kind != "W":
            self.ends[kind][s].append(finish)
        self.orders[s].append({"F": F, "B": B, "W": W}[kind](s, j))

    def pending_w(self, s: int) -> bool:
        return self.count["W"][s] < self.count["B"][s]

    def make_room(self, s: int, kind: str) -> None:
        while self.mem[s] + self.delta[kind][s] > self.limit + 1e-9:
            if not self.pending_w(s):
                raise _MemoryError
            self.put(s, "W")

    def fill_wait(self, s: int, arrival: float) -> None:
        """W's that fit before the input arrives; one more if the wait is long or greedy filling is on."""
        while self.pending_w(s) and self.end[s] + self.cost["W"][s] <= arrival:
            self.put(s, "W")
        if self.pending_w(s) and self.end[s] < arrival:
            if arrival - self.end[s] > max(self.bubble) - self.bubble[s] or self.variant.fill_greedily:
                self.put(s, "W")

    def warm_up(self) -> None:
        S, m, cF, cB = self.S, self.m, self.cost["F"], self.cost["B"]
        for s in range(S):
            self.put(s, "F")
        extra = [0] * S
        back = self.ends["F"][S - 1][0] + cB[S - 1]  # when microbatch 0's backward leaves the stage after
        for s in range(S - 2, -1, -1):
            mem, t = self.mem[s], self.end[s]
            while self.count["F"][s] + extra[s] < m and mem + self.delta["F"][s] <= self.limit + 1e-9:
                if self.variant.bubble_before_first_b:
                    if t + cF[s] > back + self.comm:
                        break
                elif t >= back + self.comm:
                    break
                mem += self.delta["F"][s]
                t += cF[s]
                extra[s] += 1
            back = max(t, back + self.comm) + cB[s]
        for s in range(1, S):  # later stages take strictly fewer (at most as many once all m are in)
            while 0 < extra[s] >= extra[s - 1] and self.count["F"][s] + extra[s] < m:
                extra[s] -= 1
            extra[s] = min(extra[s], extra[s - 1])
        for s in range(S):
            for _ in range(extra[s]):
                self.put(s, "F")
        for s in range(S - 1, -1, -1):
            self.put(s, "B")

    def wants_forward(self, s: int) -> bool:
        if self.count["F"][s] >= self.m:
            return False
        if not (self.variant.prioritize_b and s + 1 < self.S and self.count["F"][s] >= self.count["F"][s + 1] + 2):
            return True
        nxt = s + 1
        next_done = self.end[nxt] + self.cost["F"][nxt] + self.cost["B"][nxt] + self.comm
        if self.end[s] >= next_done:
            return False
        mem, w_cost, w = self.mem[s] + self.delta["F"][s], 0.0, self.count["W"][s]
        while mem > self.limit + 1e-9 and w < self.count["B"][s]:
            w_cost += self.cost["W"][s]
            mem += self.delta["W"][s]
            w += 1
        if self.end[s] + self.cost["F"][s] + w_cost <= next_done:
            return True
        return next_done - self.end[s] > max(self.bubble) - self.bubble[s]

    def steady(self, i: int) -> None:
        S = self.S
        want = [self.wants_forward(s) for s in range(S)]
        for s in range(S - 2, -1, -1):
            want[s] = want[s] and want[s + 1]
        for s in range(S):
            if not want[s]:
                continue
            self.make_room(s, "F")
            if s > 0:
                self.fill_wait(s, self.ends["F"][s - 1][self.count["F"][s]] + self.comm)
            self.put(s, "F")
        for s in range(S - 1, -1, -1):
            self.make_room(s, "B")
            if s + 1 < S:
                self.fill_wait(s, self.ends["B"][s + 1][i] + self.comm)
            if s == 0 and self.count["F"][s] == self.m:
                while self.pending_w(s):
                    self.put(s, "W")
            self.put(s, "B")

    def build(self) -> tuple[float, list[list[Op]]]:
        self.warm_up()
        for i in range(1, self.m):
            self.steady(i)
        for s in range(self.S):
            while self.pending_w(s):
                self.put(s, "W")
        return max(self.end), self.orders


def zb_auto_orders(problem: Problem, limit: float) -> list[list[Op]]:
    """The fastest variant's orders keeping every device within ``limit`` memory.

    Raises ValueError when no variant fits (the limit holds less than one microbatch per stage).
    """
    best = None
    for variant in VARIANTS:
        try:
            result = _Builder(problem, limit, variant).build()
        except _MemoryError:
            continue
        if best is None or result[0] < best[0]:
            best = result
    if best is None:
        raise ValueError(f"no order keeps within {limit:g} per device")
    return best[1]
