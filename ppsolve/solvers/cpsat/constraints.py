"""The constraint families of the CP-SAT model, one function each (times in model units).

Notation: for an op ``o``, ``S(o)`` is its start, ``E(o) = S(o) + dur(o)`` its end;
``lat(s)`` the p2p latency between stages s and s+1; ``x[s,j]`` the offload
choice of (stage s, microbatch j) with OFF/REL its optional transfer intervals.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ppsolve.bounds import heads_and_tails
from ppsolve.dependencies import dependency_table
from ppsolve.memory import memory_lags
from ppsolve.ops import Op, OpKind
from ppsolve.solvers.cpsat.variables import Variables
from ppsolve.solvers.symmetry import identical_classes, uniform

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD

NEXT_RELEASE = True  # the disjunctive memory precedence (``memory_precedences``)


def precedences(v: Variables) -> None:
    """SPEC rules 1-5, read from the one dependency table (``ppsolve.dependencies``).

    For every op o and each dependency (k, s', lag) of it: S(o) >= E(k(s', j)) + lag, where a
    transfer's start and end are those of its optional interval and the constraint is enforced
    only when the transfers involved are chosen. So, among others,
    S(F(s,j)) >= E(F(s-1,j)) + lat(s-1); S(B(s,j)) >= E(B(s+1,j)) + lat(s); S(W(s,j)) >= E(B(s,j));
    if x[s,j]: S(OFF) >= E(F(s,j)), S(REL) >= E(OFF), E(REL) <= S(B(s,j)); if r[s,j] (rule 9):
    S(R) >= E(F(s,j)), S(B(s,j)) >= E(R). Rule 10 (not both x and r) is here too.
    """
    p, m = v.problem, v.model
    table = dependency_table(p)
    ops = ([(op, None) for op in v.start] + [(op, t.present) for op, t in _transfer_ops(v)]
           + [(Op(_R, s, j), r.present) for (s, j), r in v.recompute.items()])
    for op, present in ops:
        j = op.microbatch
        start = _start(v, op)
        for dep in table[(op.kind, op.stage)]:
            earlier = dep.op(j)
            end, earlier_present = _end(v, earlier)
            if end is None or (isinstance(start, int) and isinstance(end, int)):
                continue  # a transfer the model does not have, or two fixed ops of a window
            lag = v.scaling.time(dep.lag_of(p, j))
            constraint = m.add(start >= end + lag)
            conditions = [x for x in (present, earlier_present) if x is not None]
            if conditions:
                constraint.only_enforce_if(conditions[0] if len(conditions) == 1 else conditions)
    for key, r in v.recompute.items():
        t = v.transfers.get(key)
        if t is not None:
            m.add_bool_or([lit.Not() for lit in (t.present, r.present) if lit is not None] or [False])


def _transfer_ops(v: Variables):
    for (s, j), t in v.transfers.items():
        yield Op(_OFF, s, j), t
        yield Op(_REL, s, j), t


def _start(v: Variables, op: Op):
    if op.kind is _R:
        return v.recompute[(op.stage, op.microbatch)].start
    if op.kind.is_compute:
        return v.start[op]
    t = v.transfers[(op.stage, op.microbatch)]
    return t.off_start if op.kind is _OFF else t.rel_start


def _end(v: Variables, op: Op):
    """(end variable, presence literal or None); (None, None) for an op the model lacks."""
    if op.kind is _R:
        r = v.recompute.get((op.stage, op.microbatch))
        return (None, None) if r is None else (r.end, r.present)
    if op.kind.is_compute:
        return v.end.get(op), None
    t = v.transfers.get((op.stage, op.microbatch))
    if t is None:
        return None, None
    return (t.off_end if op.kind is _OFF else t.rel_end), t.present


def device_no_overlap(v: Variables) -> None:
    """SPEC rule 6: the compute intervals of one device (R's optional) are pairwise disjoint (NoOverlap)."""
    per_device = defaultdict(list)
    for op, interval in v.interval.items():
        per_device[v.problem.placement[op.stage]].append(interval)
    for (s, _), r in v.recompute.items():
        if r.interval is not None:
            per_device[v.problem.placement[s]].append(r.interval)
    for intervals in per_device.values():
        v.model.add_no_overlap(intervals)


def transfers(v: Variables) -> None:
    """SPEC rule 7 for the chosen offloads (their order, rule 5, is in ``precedences``).

    Each link lane (per link and direction, or one per link when not duplex)
    is a NoOverlap over the optional transfer intervals of its devices.
    """
    p = v.problem
    lanes = defaultdict(list)
    for (s, j), t in v.transfers.items():
        device = p.placement[s]
        for kind, interval in ((OpKind.OFFLOAD, t.off), (OpKind.RELOAD, t.rel)):
            if interval is not None:  # None: fixed in a window, outside the free ops' reach
                lanes[p.lane(device, kind)].append(interval)
    for intervals in lanes.values():
        if len(intervals) > 1:
            v.model.add_no_overlap(intervals)


def memory(v: Variables, capacity: Sequence) -> None:
    """SPEC's memory rule as one cumulative per device (capacity: int, IntVar, or None to skip).

    With act the activation, hold the weight hold (split only), r = act - hold, k the recompute
    checkpoint (k_r = min(k, r), k_h = k - k_r), A = A_r + A_h the offloaded amount (A_r <= r and
    A_h <= hold its parts released at B's and at W's end; 0 when not offloaded):
      not recomputed   [S(F), E(B)) demand r - A_r,   [S(F), E(W)) demand hold - A_h
      recomputed       [S(F), E(B)) demand k_r,       [S(F), E(W)) demand k_h,
                       [S(R), E(B)) demand r - k_r,   [S(R), E(W)) demand hold - k_h
      offloaded        [S(F), E(OFF)) demand A,  [S(REL), E(B)) demand A_r,  [S(REL), E(W)) demand A_h
    Cumulative intervals are half-open: one ending at t and one starting at t
    never overlap, which is exactly "releases count before allocations".
    Over ``v.keys`` (every (stage, microbatch), or a window's); a transfer or R that is surely there
    (a window's) has no presence literal.
    """
    p, sc = v.problem, v.scaling
    intervals = defaultdict(list)
    demands = defaultdict(list)

    def add(device, start, end, demand, name, present=None):
        if isinstance(demand, int) and demand <= 0:
            return
        intervals[device].append(v.span(start, end, name, present))
        demands[device].append(demand)

    for s, j in v.keys:
        device = p.placement[s]
        if capacity[device] is None:
            continue
        hold = sc.weight_hold.at(s, j) if p.split_backward else 0
        r = sc.activation.at(s, j) - hold
        f, b = v.start[Op(_F, s, j)], v.end[Op(_B, s, j)]
        w = v.end[Op(_W, s, j)] if p.split_backward else None
        t = v.transfers.get((s, j))
        a_r, a_h = (t.amount_r, t.amount_h) if t is not None else (0, 0)
        rc = v.recompute.get((s, j))
        kept = None if rc is None else (rc.present.Not() if rc.present is not None else False)
        if kept is not False:
            add(device, f, b, r - a_r, f"mb_{s}_{j}", kept)
            if w is not None:
                add(device, f, w, hold - a_h, f"mw_{s}_{j}", kept)
        if rc is not None:
            k = sc.keep.at(s, j)
            k_r = min(k, r)
            k_h = k - k_r
            add(device, f, b, k_r, f"kb_{s}_{j}", rc.present)
            add(device, rc.start, b, r - k_r, f"rb_{s}_{j}", rc.present)
            if w is not None:
                add(device, f, w, k_h, f"kw_{s}_{j}", rc.present)
                add(device, rc.start, w, hold - k_h, f"rw_{s}_{j}", rc.present)
        if t is not None:
            add(device, f, t.off_end, t.amount, f"of_{s}_{j}", t.present)
            add(device, t.rel_start, b, a_r, f"lb_{s}_{j}", t.present)
            if w is not None:
                add(device, t.rel_start, w, a_h, f"lw_{s}_{j}", t.present)
    for device, items in intervals.items():
        v.model.add_cumulative(items, demands[device], capacity[device])


def symmetry(v: Variables) -> None:
    """Interchangeable microbatches in index order, where that provably loses nothing.

    Within each class of identical microbatches (``ppsolve.solvers.symmetry``; every microbatch when
    costs do not vary per microbatch), with members j < j' consecutive in the class:
    Without offload: E(k(s,j)) <= S(k(s,j')) for every stage s and kind k.
    Argument: the class's microbatches are identical, so take any valid schedule and, for
    each (stage, kind), hand the class's time slots to its microbatches in index order
    (the i-th earliest slot to the class's i-th microbatch). Slot times do not move, so device
    overlap and every memory event (which depends on the stage, the kind and the costs only)
    are unchanged. Each dependency (rules 1-4) says a slot of one kind starts
    after a slot of another kind ends (+ a latency, equal within the class); the
    original labelling is a matching where every such pair holds, so the i
    earliest dependent slots start after i distinct prerequisite slots end,
    hence after the i-th earliest end: the sorted matching holds too.

    With offload (or recompute) the transfer (or R) of (s, j) ties its F slot to its B slot, and
    sorting F and B slots separately can break that pairing; only the global
    relabelling of whole microbatches stays valid, which orders F(0, j) within each class.
    Microbatches of different costs are never ordered: their order is the model's decision.
    """
    p, m = v.problem, v.model
    kinds = p.kinds if not paired(v) else (_F,)
    stages = range(p.num_stages) if not paired(v) else (0,)
    for members in identical_classes(p):
        for s in stages:
            for kind in kinds:
                for j, k in zip(members, members[1:]):
                    m.add(v.end[Op(kind, s, j)] <= v.start[Op(kind, s, k)])


def paired(v: Variables) -> bool:
    """Whether a decision of the model ties a microbatch's F to its B (an offload or a recompute), so
    that the per-(stage, kind) slot argument of :func:`symmetry` and the cuts built on it fail."""
    return bool(v.transfers) or bool(v.recompute)


def memory_precedences(v: Variables, capacity: Sequence) -> None:
    """Redundant, with every microbatch identical and in index order (``symmetry``, no offload): what
    the cap implies (nothing when microbatches differ: they are not all in order).

    The lags :func:`ppsolve.memory.memory_lags` derives (F(s,j) after B(s,j-q), and after W(s,j-q')
    with a weight hold h), in model units. And with a = the activation, when q * a + h > cap (``NEXT_RELEASE``), B(s,j-q)'s end is not enough: W(s,j-q) or B(s,j-q+1)
    must have ended too (else its hold and q activations sit beside the new one), a disjunction.
    """
    p, sc, m = v.problem, v.scaling, v.model
    if not uniform(p):
        return
    for s in range(p.num_stages):
        cap = capacity[p.placement[s]]
        a = sc.activation.at(s, 0)  # every microbatch's
        if cap is None or a <= 0:
            continue
        hold = sc.weight_hold.at(s, 0) if p.split_backward else 0
        lags = memory_lags(cap, a, hold)
        q = lags[0][1]
        for kind, lag in lags:
            for j in range(lag, p.microbatches) if lag >= 1 else ():
                m.add(v.start[Op(_F, s, j)] >= v.end[Op(kind, s, j - lag)])
        if NEXT_RELEASE and hold > 0 and q >= 1 and q * a + hold > cap:
            # B(s,j-q) has ended; if neither W(s,j-q) nor B(s,j-q+1) had, the weight hold and q
            # activations would be held beside the new one: q * a + hold > cap
            for j in range(q, p.microbatches):
                first = m.new_bool_var(f"release_{s}_{j}")
                m.add(v.start[Op(_F, s, j)] >= v.end[Op(_W, s, j - q)]).only_enforce_if(first)
                m.add(v.start[Op(_F, s, j)] >= v.end[Op(_B, s, j - q + 1)]).only_enforce_if(~first)


def tail_cuts(v: Variables, fifo: bool = True) -> None:
    """Redundant: C >= E(o) + tail(o), the longest chain of one microbatch that must follow o.

    Tails are those of each class of identical microbatches (``ppsolve.solvers.symmetry``). With
    a class in index order (``symmetry``, no offload) its last microbatch's op of each (kind, stage)
    ends latest, so only its cut is needed. Transfers are left out of the chains (they only add
    waits), so the cut holds with offload too.
    """
    p, sc = v.problem, v.scaling
    for members in identical_classes(p):
        first = members[0]
        _, tails = heads_and_tails(p, lambda k, s: sc.duration(k, s, first), sc.time)
        last = members[-1:] if fifo and not paired(v) else members
        for (kind, s), tail in tails.items():
            if tail > 0:
                for j in last:
                    v.model.add(v.makespan >= v.end[Op(kind, s, j)] + int(tail))


def makespan(v: Variables, lower_bound: int, fifo: bool = True) -> None:
    """C >= E(o) for every op with no successor (W when split, B(0, j) when fused); C >= the bound.

    The bound is the foundation's makespan lower bound (device load and the
    critical path), scaled and rounded up: a redundant cut that lets CP-SAT
    prove optimality as soon as an incumbent reaches it.
    """
    p, m = v.problem, v.model
    for j in range(p.microbatches):
        if p.split_backward:
            for s in range(p.num_stages):
                m.add(v.makespan >= v.end[Op(_W, s, j)])
        else:
            m.add(v.makespan >= v.end[Op(_B, 0, j)])
    m.add(v.makespan >= lower_bound)
    # Redundant: every device's work fits between its earliest start and the makespan. Every op of a
    # device comes after some F(first, j) of its lowest stage; with each class in order (see symmetry) j is
    # the first microbatch of some class.
    leaders = [members[0] for members in identical_classes(p)] if fifo else []
    for device, stages in enumerate(p.stages_of_device):
        if not stages:  # a device without a stage (an explicit placement may leave one)
            continue
        first = min(stages)
        if not fifo or (paired(v) and first != 0):
            continue
        load = sum(v.scaling.durations[k].total(s) for s in stages for k in p.kinds)
        m.add(v.makespan >= earliest(v, [Op(_F, first, j) for j in leaders]) + load)


def earliest(v: Variables, ops: list[Op]):
    """The earliest start of ``ops``: the start itself for one op, else a new variable (their minimum)."""
    if len(ops) == 1:
        return v.start[ops[0]]
    low = v.model.new_int_var(0, v.horizon, f"earliest_{ops[0].kind.value}_{ops[0].stage}")
    v.model.add_min_equality(low, [v.start[op] for op in ops])
    return low
