"""The decision variables of the MILP: start times, disjunctive order binaries, offload and
recompute choices.

Times are in the model units of ``ppsolve.solvers.scaling``: integers when every
duration is (no offload in the model), else continuous, since an offloaded amount is
any ``0 < a <= fraction x activation`` (a continuous variable) and its transfers last
``a / bandwidth``. Every compute op ``o`` has a start ``S(o)`` in its window
``[head(o), H - dur(o) - tail(o)]`` (``H`` the horizon, the warm start's makespan when
known; head and tail from the chains of one microbatch, :func:`windows`): the windows
give each disjunction its own big-M. Two compute ops of one device are ordered by a
binary ``y`` unless the order is implied (:func:`implied_before`); two transfers of one
link lane by a binary ``z``. Offload of (s, j) is a binary ``x`` with an amount ``a``
and OFFLOAD and RELOAD starts; recompute of (s, j) a binary ``r`` with an R start
(an R that is not chosen is a phantom: every constraint on it is relaxed).
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
from ppsolve.solvers.symmetry import class_positions, identical_classes

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD
Key = tuple[int, int]  # (stage, microbatch)


def _path(a: Op, b: Op) -> bool:
    """Within one microbatch, whether b depends on a through rules 1-4 and 9 (durations are
    positive; an R only when it is in the schedule).

    F(s) -> F(s') for s < s'; F(s) -> every B and W (through F(S-1) and B(S-1));
    B(s) -> B(s') for s' < s; B(s) -> W(s') for s' <= s; W -> nothing;
    F(s) -> R(s') for s <= s'; R(s) -> B(s') and W(s') for s' <= s.
    """
    if b.kind is _R:
        return a.kind is _F and a.stage <= b.stage
    if a.kind is _R:
        return b.kind in (_B, _W) and b.stage <= a.stage
    if a.kind is _F:
        return b.kind is not _F or a.stage < b.stage
    if a.kind is _B:
        return (b.kind is _B and b.stage < a.stage) or (b.kind is _W and b.stage <= a.stage)
    return False


def implied_before(a: Op, b: Op, symmetry: str, classes: tuple[int, ...]) -> bool:
    """Whether the constraints already force a to end before b starts (no order binary needed).

    ``symmetry``: "all" (every (stage, kind) in microbatch order), "first" (only F of stage 0,
    the offload case) or "none" (see ``constraints.symmetry``), among the microbatches of one class
    of identical ones (``classes[j]``: the class of microbatch j, ``ppsolve.solvers.symmetry``). For
    j(a) < j(b) of one class: under "all", a(j) ends before a(j') starts, so a precedes b when b is
    a's kind and stage or depends on it; under "first", F(0, j) precedes every op of a later microbatch.
    """
    if a.microbatch == b.microbatch:
        return _path(a, b)
    if a.microbatch > b.microbatch or classes[a.microbatch] != classes[b.microbatch]:
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

    From the chains of one microbatch of each class of identical ones (``ppsolve.bounds.heads_and_tails``,
    ``ppsolve.solvers.symmetry``), and where the symmetry breaking orders the class's microbatches of a
    (kind, stage): the class's i-th has i of them before it and n - 1 - i after it (n its size).
    Under "first" or "all" every op of a class's microbatch follows F(0) of the class's earlier ones.
    """
    chains = {}
    for c, members in enumerate(identical_classes(problem)):
        first = members[0]
        chains[c] = heads_and_tails(problem, lambda k, s: scaling.duration(k, s, first), scaling.time)
    head, tail = {}, {}
    for op, (c, rank, size) in zip(problem.compute_ops(), _positions(problem)):
        heads, tails = chains[c]
        key, dur = (op.kind, op.stage), scaling.duration(op.kind, op.stage, op.microbatch)
        h, t = int(heads[key]), int(tails[key])
        if symmetry != "none":
            h += rank * scaling.duration(_F, 0, op.microbatch)
        if _ordered(op.kind, op.stage, symmetry):
            h = max(h, int(heads[key]) + rank * dur)
            t += (size - 1 - rank) * dur
        head[op], tail[op] = h, t
    return head, tail


def _positions(problem: Problem) -> list[tuple[int, int, int]]:
    """(class, rank, size) of the microbatch of each op of ``problem.compute_ops()``, in that order."""
    positions = class_positions(problem)
    return [positions[op.microbatch] for op in problem.compute_ops()]


@dataclass
class Transfer:
    """The optional OFFLOAD and RELOAD of one (stage, microbatch), present iff ``chosen``, moving
    ``amount`` (continuous, at most ``most`` model memory units, 0 when not chosen); a transfer
    lasts ``amount * per_unit`` model time units."""

    chosen: pulp.LpVariable
    amount: pulp.LpVariable
    most: int
    off: pulp.LpVariable  # start of OFFLOAD
    rel: pulp.LpVariable  # start of RELOAD
    off_per_unit: float
    rel_per_unit: float

    @property
    def off_end(self):
        return self.off + self.off_per_unit * self.amount

    @property
    def rel_end(self):
        return self.rel + self.rel_per_unit * self.amount


@dataclass
class Recompute:
    """The optional R of one (stage, microbatch), present iff ``chosen``."""

    chosen: pulp.LpVariable
    op: Op


@dataclass
class Variables:
    """Every variable, keyed by op; ``order[(a, b)]`` is 1 when a runs before b."""

    lp: pulp.LpProblem
    problem: Problem
    scaling: Scaling
    horizon: int
    symmetry: str
    classes: tuple[int, ...]  # the class of identical microbatches of each microbatch
    continuous: bool = False  # times (and the makespan) are continuous variables
    start: dict[Op, pulp.LpVariable] = field(default_factory=dict)  # F, B, W, and every R the model may add
    order: dict[tuple[Op, Op], pulp.LpVariable] = field(default_factory=dict)
    transfers: dict[Key, Transfer] = field(default_factory=dict)
    recomputes: dict[Key, Recompute] = field(default_factory=dict)
    lane_order: dict[tuple[Op, Op], pulp.LpVariable] = field(default_factory=dict)  # z: 1 when the first starts first
    # how the memory indicators follow from a schedule (``backend.start_values``): a binary's value from
    # the op starts and ends (model units; phantoms placed too), a share's as the least of its upper bounds
    indicators: dict[str, Callable[[dict, dict], float]] = field(default_factory=dict)
    shares: dict[str, list] = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)
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
        return self.scaling.duration(op.kind, op.stage, op.microbatch)

    def end(self, op: Op):
        return self.start[op] + self.dur(op)

    def big_m(self, a: Op, b: Op) -> int:
        """The least M with E(a) - M <= S(b) in every solution: latest end of a less earliest start of b."""
        return max(0, self.latest_end[a] - self.head[b])

    def present(self, op: Op):
        """1 for F, B, W; the choice r for an R (a binary)."""
        return self.recomputes[(op.stage, op.microbatch)].chosen if op.kind is _R else 1

    def absent(self, *ops: Op):
        """How many of ``ops`` are phantoms (an R not chosen): an expression, 0 without R."""
        return pulp.lpSum(1 - self.present(op) for op in ops if op.kind is _R)

    def before(self, a: Op, b: Op):
        """1 when compute op a (same device as b) ends before b starts, else 0: a constant or y / 1 - y
        (meaningful when both are in the schedule)."""
        if (a, b) in self.order:
            return self.order[(a, b)]
        if (b, a) in self.order:
            return 1 - self.order[(b, a)]
        if implied_before(a, b, self.symmetry, self.classes):
            return 1
        if implied_before(b, a, self.symmetry, self.classes):
            return 0
        raise KeyError(f"no order between {a} and {b}")

    def integer(self, name: str, low: int, high: int) -> pulp.LpVariable:
        return self.lp.add_variable(name, low, high, cat=pulp.LpInteger)

    def time(self, name: str, low: float, high: float) -> pulp.LpVariable:
        """A time: integer, or continuous when the model has transfers of any amount."""
        return self.lp.add_variable(name, low, high, cat=pulp.LpContinuous if self.continuous else pulp.LpInteger)

    def number(self, name: str, low: float, high: float) -> pulp.LpVariable:
        """A memory figure (a peak): integer, or continuous when amounts are."""
        return self.time(name, low, high)

    def fraction(self, name: str, high: float, uppers: list) -> pulp.LpVariable:
        """A continuous share in [0, high] at most each of ``uppers`` (expressions or constants), which
        only lowers memory (the solver raises it as far as they allow)."""
        var = self.lp.add_variable(name, 0, high, cat=pulp.LpContinuous)
        for upper in uppers:
            self.lp += var <= upper
        self.shares[name] = list(uppers)
        return var

    def indicator(self, name: str, value: Callable[[dict, dict], float]) -> pulp.LpVariable:
        """A binary of the memory model, with how its value follows from (starts, ends) of a schedule."""
        self.indicators[name] = value
        return self.binary(name)

    def binary(self, name: str) -> pulp.LpVariable:
        self.binaries += 1
        return self.lp.add_variable(name, cat=pulp.LpBinary)


def _name(op: Op) -> str:
    return f"{op.kind.value}_{op.stage}_{op.microbatch}"


def build_variables(lp: pulp.LpProblem, problem: Problem, scaling: Scaling, horizon: int, offload: bool,
                    symmetry: str, check=lambda: None, recompute: bool = False) -> Variables:
    """Starts, recompute choices (with ``recompute``), order binaries (per device, pairs whose order
    is not implied), transfers (with ``offload``), makespan.

    ``check`` is called now and then (the time budget raises from it).
    """
    offload = offload and problem.offload is not None
    classes = tuple(c for c, _, _ in class_positions(problem))
    v = Variables(lp, problem, scaling, horizon, symmetry, classes, continuous=offload, check=check)
    head, tail = windows(problem, scaling, symmetry)
    for op in problem.compute_ops():
        latest = max(0, horizon - v.dur(op) - tail[op])
        v.head[op] = min(head[op], latest)
        v.latest_end[op] = latest + v.dur(op)
        v.start[op] = v.time(f"S_{_name(op)}", v.head[op], latest)
    if recompute:
        _recomputes(v)
    per_device: dict[int, list[Op]] = {}
    for op in v.start:
        per_device.setdefault(problem.placement[op.stage], []).append(op)
    for device, ops in per_device.items():
        check()
        for a, b in combinations(ops, 2):
            if not (implied_before(a, b, symmetry, classes) or implied_before(b, a, symmetry, classes)):
                v.order[(a, b)] = v.binary(f"y_{_name(a)}_{_name(b)}")
                v.tick()
    if offload:
        # model time units per model memory unit moved: (time_scale / memory_scale) / bandwidth
        ratio = scaling.time_scale / scaling.memory_scale
        per_off, per_rel = ratio / problem.offload.d2h, ratio / problem.offload.h2d
        for s in range(problem.num_stages):
            for j in range(problem.microbatches):
                most = scaling.offload_amount.at(s, j)
                if most <= 0 or problem.max_offload(s, j) <= 0:
                    continue
                v.transfers[(s, j)] = Transfer(
                    v.binary(f"x_{s}_{j}"), lp.add_variable(f"a_{s}_{j}", 0, most, cat=pulp.LpContinuous), most,
                    v.time(f"O_{s}_{j}", 0, horizon), v.time(f"L_{s}_{j}", 0, horizon), per_off, per_rel)
    v.makespan = v.time("makespan", 0, horizon)
    return v


def _recomputes(v: Variables) -> None:
    """A choice r and an R start for every (s, j) whose recompute saves memory and fits in its
    window: after F(s, j) ends, and ending before B(s, j) can start at the latest."""
    p, sc = v.problem, v.scaling
    for s in range(p.num_stages):
        for j in range(p.microbatches):
            if p.recompute_saving(s, j) <= 0 or sc.activation.at(s, j) - sc.keep.at(s, j) <= 0:
                continue
            op, f, b = Op(_R, s, j), Op(_F, s, j), Op(_B, s, j)
            head = v.head[f] + v.dur(f)
            latest = v.latest_end[b] - v.dur(b) - v.dur(op)
            if latest < head:
                continue
            v.head[op], v.latest_end[op] = head, latest + v.dur(op)
            v.start[op] = v.time(f"S_{_name(op)}", head, latest)
            v.recomputes[(s, j)] = Recompute(v.binary(f"r_{s}_{j}"), op)
