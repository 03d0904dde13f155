"""Neighbourhoods of a timed schedule for the large-neighbourhood search (``ppsolve.solvers.search.lns``).

A :class:`Window` is a set of devices (whole host links, so that no lane of theirs carries an op
of another device) and a time range [t0, t1) of an incumbent, a valid schedule. Its *free* ops
are the ops of those devices that start in the range; every other op keeps its time. A model of
the window (``PhaseTask.window``) places the free ops again:

* each free op starts after the ops of its device (compute) or its lane (transfer) that start
  before t0 and ends before those that start at or after t1 (``low``, ``high``);
* a dependency on or of a fixed op is a constant bound (``fixed`` holds those ops, timed);
* memory: on each device of the window, every (stage, microbatch) whose activation is held at
  some time the free ops may take (``keys``), its fixed ops at their times;
* keep / offload / recompute: a (stage, microbatch) whose F and B are both free (and its R, when it
  has one) may gain or lose its transfers (with any amount) or its R (``choosable``).

A window may take a second range [a, b) after t1 on the same devices (``then``): its ops are free too,
each bounded by the fixed ops around its own range, so a microbatch whose F lies in the first range
and its B in the second may change its lever without freeing what lies between.

Whatever the model returns keeps every fixed op where it was, so the schedule it composes
(:func:`compose`) is valid when the model is; the runtime's re-timing then moves later ops
earlier (never later). Without transfers the ops after the window may keep their order
instead of their times (``orders``), which leaves the model more room.

The model minimises the longest path through the window (then the sum of the free ops' ends):
a free op's end plus its tail, the longest chain of fixed ops after it in the incumbent
(dependencies, device order and lane order, as re-timing follows them), an estimate of the
makespan after re-timing.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from ppsolve.checker import check
from ppsolve.dependencies import dependency_table, dependents_table, depth
from ppsolve.errors import PpsolveError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, ScheduledOp, make_schedule
from ppsolve.simulator import retime, simulate
from ppsolve.solvers.scaling import Scaling
from ppsolve.tolerance import slack

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD
_ALL_KINDS = (_F, _B, _W, _R, _OFF, _REL)
Key = tuple[int, int]  # (stage, microbatch)


@dataclass(frozen=True)
class Window:
    """What a model of one neighbourhood needs (times in the user's units)."""

    devices: tuple[int, ...]
    t0: float  # the earliest of its devices' t0 (make_window)
    t1: float
    free: tuple[ScheduledOp, ...]  # the free ops as the incumbent has them (the model's hint)
    fixed: dict[Op, ScheduledOp]  # the fixed ops the model refers to, at their times
    low: dict[Op, float]  # earliest start of each free op and of each transfer the model may add
    high: dict[Op, float]  # latest end of the same
    tails: dict[Op, float]  # longest path of fixed ops after each of those ends
    keys: tuple[Key, ...]  # (stage, microbatch) whose memory the model tracks
    choosable: frozenset[Key]  # offload (any amount) or recompute may be added or dropped
    current: float  # the longest path through the window (end + tail, the largest) as the incumbent has it
    flow: float  # the sum of the ends of its free compute ops, as the incumbent has them
    horizon: float  # the latest time in the model: the incumbent's makespan (twice it with ``orders``)
    moves: frozenset[Op]  # the ops the model may place (free ops, transfers it may add)
    reads: frozenset[Op]  # those and every fixed op whose time the model reads
    orders: bool  # the ops after the window keep their order, not their times (see make_window)
    time_slice: bool = False  # it frees every op of every device that starts in [t0, t1)

    @property
    def size(self) -> int:
        return len(self.free)

    def independent(self, other: "Window") -> bool:
        """Whether the two models can be solved on one incumbent and both placements applied.

        In general: neither moves an op the other reads. Two time slices with ``orders`` need only be
        disjoint in time. Each keeps its ops between the same ops of every device, so each device's
        memory, a matter of its order alone, is what each model checked. The composed orders have no
        cycle: every op of the earlier slice precedes every op of the later one and the ops between
        them, as in the incumbent. Each model read the other's ops at their old times, so its longest
        path is only an estimate; the re-timing and the check of the composed schedule decide.
        """
        if self.time_slice and other.time_slice and self.orders and other.orders:
            return self.t1 <= other.t0 or other.t1 <= self.t0
        return self.moves.isdisjoint(other.reads) and other.moves.isdisjoint(self.reads)

    def may_be_independent(self, inc: "Incumbent", devices, t0: float, t1: float) -> bool:
        """Whether a window of ``devices`` and [t0, t1) on ``inc`` (one t0 for all) could be independent
        of this one (:meth:`independent`), told before it is built: the time ranges, or the compute
        ops it would free against the ops this one reads."""
        if self.time_slice and self.orders and len(link_closed(inc.problem, devices)) == inc.problem.devices:
            return self.t1 <= t0 or t1 <= self.t0
        return self.reads.isdisjoint(inc.compute_between(devices, t0, t1))

    def measure(self, placed) -> tuple[float, float]:
        """(longest path through the window, sum of the ends of its compute ops) of a placement."""
        path = max((op.end + self.tails.get(op.op, 0.0) for op in placed), default=0.0)
        return path, sum(op.end for op in placed if op.kind.is_compute)


class Incumbent:
    """A valid schedule indexed for windows: each device's compute ops and each lane's transfers in
    start order, every op's tail, and each device's activations as spans in F-start order."""

    def __init__(self, schedule: Schedule):
        p = schedule.problem
        self.schedule = schedule
        self.problem = p
        self.makespan = schedule.makespan
        self.by_op: dict[Op, ScheduledOp] = {op.op: op for op in schedule.ops}
        self.compute: list[list[ScheduledOp]] = [[] for _ in range(p.devices)]
        self.lanes: dict[int, list[ScheduledOp]] = {}
        by_start = sorted(schedule.ops, key=lambda o: (o.start, o.end, depth(p, o.kind, o.stage)))
        for op in by_start:
            if op.kind.is_compute:
                self.compute[op.device].append(op)
            else:
                self.lanes.setdefault(p.lane(op.device, op.kind), []).append(op)
        self.compute_starts = [[op.start for op in ops] for ops in self.compute]
        self.lane_starts = {lane: [op.start for op in ops] for lane, ops in self.lanes.items()}
        self.after = dependents_table(p, _ALL_KINDS)
        self.before = dependency_table(p, _ALL_KINDS)
        self.tail = self._tails(by_start)
        self.critical_ops = [op for ops in self.compute for op in ops
                             if op.start + self.tail[op.op] >= self.makespan - slack(self.makespan)]
        spans: list[list[tuple[float, float, Key]]] = [[] for _ in range(p.devices)]
        last = _W if p.split_backward else _B  # the op that releases the last of an activation
        for op in schedule.ops:
            if op.kind is _F:
                end = self.by_op[Op(last, op.stage, op.microbatch)].end
                spans[op.device].append((op.start, end, (op.stage, op.microbatch)))
        for device_spans in spans:
            device_spans.sort()
        self.spans = spans
        self.span_starts = [[x[0] for x in s] for s in spans]

    def compute_between(self, devices, t0: float, t1: float) -> list[Op]:
        """The compute ops of ``devices`` (closed under host links, as a window's) that start in [t0, t1):
        what a window of them frees besides transfers."""
        out = []
        for d in link_closed(self.problem, devices):
            i0, i1 = starting_in(self.compute_starts[d], t0, t1)
            out += [op.op for op in self.compute[d][i0:i1]]
        return out

    @cached_property
    def critical_waits(self) -> list[ScheduledOp]:
        """The critical ops that their device sits idle before (what a window could close); computed
        when first asked for."""
        previous_end = {b.op: a.end for ops in self.compute for a, b in zip(ops, ops[1:])}
        return [op for op in self.critical_ops
                if op.start - previous_end.get(op.op, 0.0) > slack(self.makespan)]

    @cached_property
    def _wait_starts(self) -> list[list[float]]:
        """Each device's critical waits, their starts in order (``critical_waits`` keeps each device's
        start order)."""
        starts: list[list[float]] = [[] for _ in range(self.problem.devices)]
        for op in self.critical_waits:
            starts[op.device].append(op.start)
        return starts

    def waits_within(self, devices, t0: float, t1: float) -> bool:
        """Whether a critical op of one of ``devices`` that its device sits idle before starts in (t0, t1)."""
        return any(bisect_right(s, t0) < bisect_left(s, t1) for s in (self._wait_starts[d] for d in devices))

    def _tails(self, by_start: list[ScheduledOp]) -> dict[Op, float]:
        """For every op, the longest path from its start to the end of the schedule through its
        successors (dependencies with their lags, the next op of its device or lane); ``by_start``:
        the ops in start order."""
        nxt: dict[Op, Op] = {}
        for ops in list(self.compute) + list(self.lanes.values()):
            for a, b in zip(ops, ops[1:]):
                nxt[a.op] = b.op
        tail: dict[Op, float] = {}
        after = self.after
        for op in reversed(by_start):
            key = op.op
            best = 0.0
            for kind, stage, lag in after.get((op.kind, op.stage), ()):
                succ = Op(kind, stage, op.microbatch)
                if succ in tail:
                    best = max(best, lag + tail[succ])
            follow = nxt.get(key)
            if follow is not None:
                best = max(best, tail[follow])
            tail[key] = (op.end - op.start) + best
        return tail


def on_model_grid(problem: Problem, scaling: Scaling, schedule: Schedule) -> Schedule:
    """``schedule`` with each transfer's amount rounded up to the model's memory grid and re-timed, when
    some amount is off the grid and the result checks; else ``schedule``.

    A window model reads a fixed transfer's amount rounded down (its memory stays conservative), so a
    plan that offloads just enough to meet a cap (``fit_by_offload``: any amount) holds more than the
    cap in every window whose memory reaches that transfer, and those windows have no solution: from
    the shortest plan with both levers of the 13B-like v = 2 problem at 15 GiB, 526 of 527 windows in
    30 s. Rounded up, each transfer moves at most one memory unit more and takes that much longer."""
    ops, moved = [], False
    for op in schedule.ops:
        if op.kind.is_transfer:
            units = scaling.memory(op.amount, up=True)
            amount = min(units / scaling.memory_scale, problem.max_offload(op.stage, op.microbatch))
            if units != scaling.memory(op.amount, up=False) and amount != op.amount:  # an off-grid most stays
                op, moved = op._replace(amount=amount), True
        ops.append(op)
    if not moved:
        return schedule
    try:
        snapped = make_schedule(problem, retime(problem, ops), schedule.method.name)
    except PpsolveError:
        return schedule
    return snapped if check(snapped).ok else schedule


def starting_in(starts: list[float], t0: float, t1: float) -> tuple[int, int]:
    """The index range of the ops (``starts``: their starts, in order) that start in [t0, t1)."""
    return bisect_left(starts, t0), bisect_left(starts, t1)


def link_closed(problem: Problem, devices) -> tuple[int, ...]:
    """``devices`` with every device that shares a host link with one of them."""
    out = set(devices)
    if problem.offload is not None:
        for link in problem.offload.links:
            if out & set(link):
                out |= set(link)
    return tuple(sorted(out))


def make_window(inc: Incumbent, devices, t0: float | Mapping[int, float], t1: float, offload: bool,
                orders: bool = False, recompute: bool = True,
                then: tuple[float, float] | None = None) -> Window | None:
    """The window of ``devices`` (closed under host links) and [t0, t1), or None when it frees nothing.

    ``then`` (without ``orders``): a second range [a, b), a >= t1, whose ops of the same devices are
    free too (module docstring). The transfers the model may add take the device-to-host lanes' bounds
    of the first range and the host-to-device lanes' bounds of the second (one lane: the first's).

    ``t0`` may differ by device (a mapping device -> t0, covering ``devices``): a tail window frees
    the ops of every device near the end and those of the busiest devices from further back
    (``ppsolve.solvers.search.lns``). The lanes of a host link take the earliest t0 of its devices.

    ``orders`` (only for schedules without transfers): the ops after the window keep their order
    on each device, not their times; the model places its free ops with no deadline from them
    (they are taken to start at ``2 * makespan``) and :func:`compose` re-times the whole
    schedule from the device orders. Memory is then a matter of each device's order alone (every
    allocation and release is at a compute op of that device), so what the model keeps within
    the capacity stays within it.
    """
    p = inc.problem
    devices = link_closed(p, devices)
    late = 2 * inc.makespan if orders else inc.makespan  # where ops after the window are, for the model
    starts_at = _starts_at(p, devices, t0)
    free, bounds, lane_bounds, edges = _free_ops(inc, devices, starts_at, t1, orders)
    if then is not None:
        if orders or then[0] < t1:
            raise ValueError("a second range needs fixed times and must start at or after t1")
        more, more_bounds, more_lanes, more_edges = _free_ops(inc, devices, {d: then[0] for d in devices}, then[1],
                                                              False)
        free, edges = free + more, edges | more_edges
        bounds.merge(more_bounds)
        h2d = {p.lane(d, _REL) for d in devices} - {p.lane(d, _OFF) for d in devices}
        lane_bounds.update({lane: more_lanes[lane] for lane in h2d})
        t1 = then[1]
    if not free:
        return None
    choosable = _choosable(inc, free, bounds, lane_bounds, offload and p.can_offload, recompute and p.can_recompute)
    movable = set(bounds.low)  # free ops and the transfers the model may add
    memory_keys = _memory_keys(inc, devices, movable, bounds, t1, orders)
    fixed = _fixed(inc, movable, memory_keys, t1, orders, late)
    tails = _tails(inc, movable, bounds.next_fixed)
    window = Window(tuple(devices), min(starts_at[d] for d in devices), t1, tuple(free), fixed, bounds.low,
                    bounds.high, tails, tuple(memory_keys), frozenset(choosable), 0.0, 0.0, late, frozenset(movable),
                    frozenset(movable | set(fixed) | edges), orders,
                    len(devices) == p.devices and len(set(starts_at.values())) == 1 and not inc.lanes and then is None)
    current, flow = window.measure(free)
    return replace(window, current=current, flow=flow)


@dataclass
class _Bounds:
    """Each movable op's earliest start and latest end, and the first fixed op after the window on its
    device or lane (whose tail it inherits)."""

    low: dict[Op, float] = field(default_factory=dict)
    high: dict[Op, float] = field(default_factory=dict)
    next_fixed: dict[Op, Op] = field(default_factory=dict)

    def add(self, op: Op, lo: float, hi: float, nxt: Op | None) -> None:
        self.low[op], self.high[op] = lo, hi
        self.next_fixed.pop(op, None)
        if nxt is not None:
            self.next_fixed[op] = nxt

    def of(self, op: Op) -> tuple[float, float, Op | None]:
        return self.low[op], self.high[op], self.next_fixed.get(op)

    def merge(self, other: "_Bounds") -> None:
        self.low.update(other.low)
        self.high.update(other.high)
        self.next_fixed.update(other.next_fixed)


def _starts_at(p: Problem, devices, t0: float | Mapping[int, float]) -> dict[int, float]:
    """Each device's t0; a device the host links add takes the earliest t0 of its link."""
    starts_at = dict(t0) if isinstance(t0, Mapping) else {d: t0 for d in devices}
    for d in devices:
        if d not in starts_at:
            starts_at[d] = min(starts_at[e] for e in link_closed(p, (d,)) if e in starts_at)
    return starts_at


def _free_ops(inc: Incumbent, devices, starts_at: dict[int, float], t1: float, orders: bool):
    """The ops of the window's devices and lanes that start in it, with their bounds; each lane's
    (low, high, next fixed op), for the transfers the model may add; and the fixed ops just before and
    after the window on its devices and lanes."""
    p, H = inc.problem, inc.makespan
    free: list[ScheduledOp] = []
    bounds = _Bounds()
    lane_bounds: dict[int, tuple[float, float, Op | None]] = {}
    edges: set[Op] = set()

    def take(ops, starts, begin):
        i0, i1 = starting_in(starts, begin, t1)
        before = ops[i0 - 1].end if i0 > 0 else 0.0
        after = ops[i1] if i1 < len(ops) else None
        if i0 > 0:
            edges.add(ops[i0 - 1].op)
        if after is not None:
            edges.add(after.op)
        due = after.start if after is not None and not orders else H
        return ops[i0:i1], before, due, (after.op if after is not None else None)

    for d in devices:
        chosen, lo, hi, nxt = take(inc.compute[d], inc.compute_starts[d], starts_at[d])
        for op in chosen:
            free.append(op)
            bounds.add(op.op, lo, hi, nxt)
    lanes = sorted({p.lane(d, k) for d in devices for k in (_OFF, _REL)}) if p.offload is not None else []
    for lane in lanes:
        if lane in inc.lanes:
            begin = min(starts_at[d] for d in devices if p.lane(d, _OFF) == lane or p.lane(d, _REL) == lane)
            chosen, lo, hi, nxt = take(inc.lanes[lane], inc.lane_starts[lane], begin)
        else:
            chosen, lo, hi, nxt = [], 0.0, H, None
        lane_bounds[lane] = (lo, hi, nxt)
        for op in chosen:
            free.append(op)
            bounds.add(op.op, lo, hi, nxt)
    return free, bounds, lane_bounds, edges


def _choosable(inc: Incumbent, free: list[ScheduledOp], bounds: _Bounds, lane_bounds, can_offload: bool,
               can_recompute: bool) -> set[Key]:
    """The (stage, microbatch) whose F and B are both free, whose R is free if it has one, and that may
    gain or lose an offload or a recompute; their R and transfers join ``bounds`` (an R keeps its own
    bounds, a new one takes its B's; transfers their lane's)."""
    p, by_op = inc.problem, inc.by_op
    free_ops = {op.op for op in free}
    choosable: set[Key] = set()
    for op in free if can_offload or can_recompute else ():
        s, j = op.stage, op.microbatch
        if op.kind is not _F or Op(_B, s, j) not in free_ops:
            continue
        if Op(_R, s, j) in by_op and Op(_R, s, j) not in free_ops:
            continue
        off = by_op.get(Op(_OFF, s, j))
        offloadable = can_offload and p.max_offload(s, j) > 0
        if not (offloadable or (can_recompute and p.recompute_saving(s, j) > 0)):
            continue
        if off is not None and not (offloadable and off.op in free_ops and Op(_REL, s, j) in free_ops):
            continue
        recomputable = can_recompute and p.recompute_saving(s, j) > 0
        if Op(_R, s, j) in by_op and not recomputable:
            continue
        choosable.add((s, j))
        if recomputable and Op(_R, s, j) not in free_ops:
            bounds.add(Op(_R, s, j), *bounds.of(Op(_B, s, j)))
        if offloadable:
            for kind in (_OFF, _REL):
                bounds.add(Op(kind, s, j), *lane_bounds[p.lane(op.device, kind)])
    return choosable


def _memory_keys(inc: Incumbent, devices, movable: set[Op], bounds: _Bounds, t1: float, orders: bool) -> list[Key]:
    """The (stage, microbatch) on a capped device of the window whose activation is held at some time
    its movable ops may take, or that a movable op belongs to."""
    p = inc.problem
    keys: set[Key] = {(op.stage, op.microbatch) for op in movable}
    for d in devices:
        if p.capacity[d] is None:
            continue
        mine = [op for op in movable if p.placement[op.stage] == d]
        if not mine:
            continue
        lo, hi = min(bounds.low[op] for op in mine), (t1 if orders else max(bounds.high[op] for op in mine))
        spans = inc.spans[d]
        for start, end, key in spans[:bisect_left(inc.span_starts[d], hi)]:
            if end > lo:
                keys.add(key)
    return sorted(k for k in keys if p.capacity[p.placement[k[0]]] is not None)


def _fixed(inc: Incumbent, movable: set[Op], memory_keys: list[Key], t1: float, orders: bool,
           late: float) -> dict[Op, ScheduledOp]:
    """The fixed ops the model refers to, at their times (with ``orders``, those after the window at
    ``late``): the dependencies of the movable ops both ways, and every op of the memory keys."""
    p, by_op = inc.problem, inc.by_op
    fixed: dict[Op, ScheduledOp] = {}

    def need(op: Op) -> None:
        for one in ((Op(_OFF, op.stage, op.microbatch), Op(_REL, op.stage, op.microbatch)) if op.kind.is_transfer
                    else (op,)):  # a transfer comes with its partner: the model holds the pair
            if one not in movable and one in by_op:
                sop = by_op[one]
                fixed[one] = sop._replace(start=late, end=late) if orders and sop.start >= t1 else sop

    for op in movable:
        for dep in inc.before[(op.kind, op.stage)]:
            need(dep.op(op.microbatch))
        for kind, stage, _ in inc.after.get((op.kind, op.stage), ()):
            need(Op(kind, stage, op.microbatch))
    for s, j in memory_keys:
        for kind in p.kinds + ((_OFF, _REL) if p.offload is not None else ()) + ((_R,) if p.recompute else ()):
            need(Op(kind, s, j))
    return fixed


def _tails(inc: Incumbent, movable: set[Op], next_fixed: dict[Op, Op]) -> dict[Op, float]:
    """Each movable op's tail: the longest path of fixed ops after it (its successors', and that of
    the first fixed op after the window on its device or lane)."""
    by_op = inc.by_op
    tails: dict[Op, float] = {}
    for op in movable:
        best = 0.0
        for kind, stage, lag in inc.after.get((op.kind, op.stage), ()):
            succ = Op(kind, stage, op.microbatch)
            if succ not in movable and succ in by_op:
                best = max(best, lag + inc.tail[succ])
        if op in next_fixed:
            best = max(best, inc.tail[next_fixed[op]])
        tails[op] = best
    return tails


def compose(inc: Incumbent, placements: list[tuple[Window, list[ScheduledOp]]]) -> list[ScheduledOp]:
    """The incumbent with each window's free ops (and the transfers of its choosable keys) replaced
    by its placement, timed as the runtime would run it; the windows must be pairwise independent
    (:meth:`Window.independent`). Fixed times: the composed schedule re-timed (``retime``, never
    later); fixed orders: each device's order with the window's ops in their new order, simulated."""
    if not placements[0][0].orders:
        out_ops: set[Op] = set()
        placed_ops: list[ScheduledOp] = []
        for window, placed in placements:
            out_ops |= window.moves
            placed_ops += placed
        return retime(inc.problem, [op for op in inc.schedule.ops if op.op not in out_ops] + placed_ops)
    segment: dict[Op, int] = {}
    new: dict[tuple[int, int], list[ScheduledOp]] = {}
    for k, (window, placed) in enumerate(placements):
        for op in window.free:
            segment[op.op] = k
        for op in placed:
            new.setdefault((k, op.device), []).append(op)
    orders = []
    for d, ops in enumerate(inc.compute):
        order: list[Op] = []
        emitted = set()
        for op in ops:
            k = segment.get(op.op)
            if k is None:
                order.append(op.op)
            elif k not in emitted:
                emitted.add(k)
                order += [o.op for o in sorted(new.get((k, d), []), key=lambda o: o.start)]
        orders.append(order)
    return simulate(inc.problem, orders)
