"""The decision variables of the MILP: start times, disjunctive order binaries, offload choices.

Times are integers in the model units of ``ppsolve.solvers.scaling``. Every
compute op ``o`` has a start ``S(o)`` in its window ``[head(o), H - dur(o) - tail(o)]``
(``H`` the horizon, the warm start's makespan when known; head and tail from the
chains of one microbatch, :func:`windows`): the windows give each disjunction its
own big-M. Two compute ops of one device are ordered by a binary ``y`` unless the
order is implied (:func:`implied_before`); two transfers of one link lane by a
binary ``z``. Offload of (s, j) is a binary ``x`` with OFFLOAD and RELOAD starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable

import pulp

from ppsolve.bounds import heads_and_tails
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.solvers.scaling import Scaling

_F, _B, _W, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.OFFLOAD, OpKind.RELOAD
Key = tuple[int, int]  # (stage, microbatch)


def _path(a: Op, b: Op) -> bool:
    """Within one microbatch, whether b depends on a through rules 1-4 (durations are positive).

    F(s) -> F(s') for s < s'; F(s) -> every B and W (through F(S-1) and B(S-1));
    B(s) -> B(s') for s' < s; B(s) -> W(s') for s' <= s; W -> nothing.
    """
    if a.kind is _F:
        return b.kind is not _F or a.stage < b.stage
    if a.kind is _B:
        return (b.kind is _B and b.stage < a.stage) or (b.kind is _W and b.stage <= a.stage)
    return False


def implied_before(a: Op, b: Op, symmetry: str) -> bool:
    """Whether the constraints already force a to end before b starts (no order binary needed).

    ``symmetry``: "all" (every (stage, kind) in microbatch order), "first" (only F of stage 0,
    the offload case) or "none" (see ``constraints.symmetry``). For j(a) < j(b): under "all",
    a(j) ends before a(j') starts, so a precedes b when b is a's kind and stage or depends on
    it; under "first", F(0, j) precedes every op of a later microbatch.
    """
    if a.microbatch == b.microbatch:
        return _path(a, b)
    if a.microbatch > b.microbatch:
        return False
    if symmetry == "all":
        return (a.kind, a.stage) == (b.kind, b.stage) or _path(a, b)
    if symmetry == "first":
        return a.kind is _F and a.stage == 0
    return False


def _ordered(kind: OpKind, stage: int, symmetry: str) -> bool:
    """Whether ``constraints.symmetry`` orders the microbatches of (kind, stage)."""
    return symmetry == "all" or (symmetry == "first" and kind is _F and stage == 0)


def windows(problem: Problem, scaling: Scaling, symmetry: str) -> tuple[dict[Op, int], dict[Op, int]]:
    """(head, tail) of every compute op in model units: S(o) >= head(o), and C >= E(o) + tail(o).

    From one microbatch's chains (``ppsolve.bounds.heads_and_tails``), and where the symmetry
    breaking orders the microbatches of a (kind, stage): op j has j of them before it and
    m - 1 - j after it. Under "first" or "all" every op of microbatch j follows F(0, j).
    """
    heads, tails = heads_and_tails(problem, lambda k, s: scaling.duration[(k, s)], scaling.time)
    m, d_first = problem.microbatches, scaling.duration[(_F, 0)]
    head, tail = {}, {}
    for op in problem.compute_ops():
        key, j, dur = (op.kind, op.stage), op.microbatch, scaling.duration[(op.kind, op.stage)]
        h, t = int(heads[key]), int(tails[key])
        if symmetry != "none":
            h += j * d_first
        if _ordered(op.kind, op.stage, symmetry):
            h = max(h, int(heads[key]) + j * dur)
            t += (m - 1 - j) * dur
        head[op], tail[op] = h, t
    return head, tail


@dataclass
class Transfer:
    """The optional OFFLOAD and RELOAD of one (stage, microbatch), present iff ``chosen``."""

    chosen: pulp.LpVariable
    amount: int
    off: pulp.LpVariable  # start of OFFLOAD
    rel: pulp.LpVariable  # start of RELOAD
    d_off: int
    d_rel: int


@dataclass
class Variables:
    """Every variable, keyed by op; ``order[(a, b)]`` is 1 when a runs before b."""

    lp: pulp.LpProblem
    problem: Problem
    scaling: Scaling
    horizon: int
    symmetry: str
    start: dict[Op, pulp.LpVariable] = field(default_factory=dict)
    order: dict[tuple[Op, Op], pulp.LpVariable] = field(default_factory=dict)
    transfers: dict[Key, Transfer] = field(default_factory=dict)
    makespan: pulp.LpVariable | None = None
    head: dict[Op, int] = field(default_factory=dict)  # S(o) >= head(o)
    latest_end: dict[Op, int] = field(default_factory=dict)  # E(o) <= latest_end(o)
    binaries: int = 0
    check: Callable[[], None] = lambda: None  # the time budget's check (raises when time is up)
    _ticks: int = 0

    def tick(self) -> None:
        """Called once per constraint or variable added; checks the clock every 1000."""
        self._ticks += 1
        if self._ticks % 1000 == 0:
            self.check()

    def dur(self, op: Op) -> int:
        return self.scaling.duration[(op.kind, op.stage)]

    def end(self, op: Op):
        return self.start[op] + self.dur(op)

    def big_m(self, a: Op, b: Op) -> int:
        """The least M with E(a) - M <= S(b) in every solution: latest end of a less earliest start of b."""
        return max(0, self.latest_end[a] - self.head[b])

    def before(self, a: Op, b: Op):
        """1 when compute op a (same device as b) ends before b starts, else 0: a constant or y / 1 - y."""
        if (a, b) in self.order:
            return self.order[(a, b)]
        if (b, a) in self.order:
            return 1 - self.order[(b, a)]
        if implied_before(a, b, self.symmetry):
            return 1
        if implied_before(b, a, self.symmetry):
            return 0
        raise KeyError(f"no order between {a} and {b}")

    def integer(self, name: str, low: int, high: int) -> pulp.LpVariable:
        return self.lp.add_variable(name, low, high, cat=pulp.LpInteger)

    def binary(self, name: str) -> pulp.LpVariable:
        self.binaries += 1
        return self.lp.add_variable(name, cat=pulp.LpBinary)


def _name(op: Op) -> str:
    return f"{op.kind.value}_{op.stage}_{op.microbatch}"


def build_variables(lp: pulp.LpProblem, problem: Problem, scaling: Scaling, horizon: int, offload: bool,
                    symmetry: str, check=lambda: None) -> Variables:
    """Starts, order binaries (per device, pairs whose order is not implied), transfers, makespan.

    ``check`` is called now and then (the time budget raises from it).
    """
    v = Variables(lp, problem, scaling, horizon, symmetry, check=check)
    head, tail = windows(problem, scaling, symmetry)
    for op in problem.compute_ops():
        latest = max(0, horizon - v.dur(op) - tail[op])
        v.head[op] = min(head[op], latest)
        v.latest_end[op] = latest + v.dur(op)
        v.start[op] = v.integer(f"S_{_name(op)}", v.head[op], latest)
    per_device: dict[int, list[Op]] = {}
    for op in v.start:
        per_device.setdefault(problem.placement[op.stage], []).append(op)
    for device, ops in per_device.items():
        check()
        for a, b in combinations(ops, 2):
            if not (implied_before(a, b, symmetry) or implied_before(b, a, symmetry)):
                v.order[(a, b)] = v.binary(f"y_{_name(a)}_{_name(b)}")
                v.tick()
    if offload and problem.offload is not None:
        for s in range(problem.num_stages):
            amount = scaling.offload_amount[s]
            if amount <= 0 or problem.max_offload(s) <= 0:
                continue
            d_off, d_rel = scaling.duration[(_OFF, s)], scaling.duration[(_REL, s)]
            for j in range(problem.microbatches):
                v.transfers[(s, j)] = Transfer(
                    v.binary(f"x_{s}_{j}"), amount,
                    v.integer(f"O_{s}_{j}", 0, max(0, horizon - d_off)),
                    v.integer(f"R_{s}_{j}", 0, max(0, horizon - d_rel)), d_off, d_rel)
    v.makespan = v.integer("makespan", 0, horizon)
    return v
