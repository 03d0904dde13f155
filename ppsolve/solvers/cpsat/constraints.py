"""The constraint families of the CP-SAT model, one function each (times in model units).

Notation: for an op ``o``, ``S(o)`` is its start, ``E(o) = S(o) + dur(o)`` its end;
``lat(s)`` the p2p latency between stages s and s+1; ``x[s,j]`` the offload
choice of (stage s, microbatch j) with OFF/REL its optional transfer intervals.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ppsolve.ops import Op, OpKind
from ppsolve.solvers.cpsat.variables import Variables

_F, _B, _W = OpKind.F, OpKind.B, OpKind.W


def precedences(v: Variables) -> None:
    """SPEC rules 1-4.

    S(F(s,j)) >= E(F(s-1,j)) + lat(s-1);  S(B(S-1,j)) >= E(F(S-1,j));
    S(B(s,j)) >= E(B(s+1,j)) + lat(s);    S(W(s,j)) >= E(B(s,j)).
    """
    p, m = v.problem, v.model
    last = p.num_stages - 1
    for j in range(p.microbatches):
        for s in range(p.num_stages):
            if s > 0:
                m.add(v.start[Op(_F, s, j)] >= v.end[Op(_F, s - 1, j)] + v.scaling.latency[s - 1])
            if s == last:
                m.add(v.start[Op(_B, s, j)] >= v.end[Op(_F, s, j)])
            else:
                m.add(v.start[Op(_B, s, j)] >= v.end[Op(_B, s + 1, j)] + v.scaling.latency[s])
            if p.split_backward:
                m.add(v.start[Op(_W, s, j)] >= v.end[Op(_B, s, j)])


def device_no_overlap(v: Variables) -> None:
    """SPEC rule 6: the compute intervals of one device are pairwise disjoint (NoOverlap)."""
    per_device = defaultdict(list)
    for op, interval in v.interval.items():
        per_device[v.problem.placement[op.stage]].append(interval)
    for intervals in per_device.values():
        v.model.add_no_overlap(intervals)


def transfers(v: Variables) -> None:
    """SPEC rule 5 and rule 7 for the chosen offloads.

    If x[s,j]: S(OFF) >= E(F(s,j)), S(REL) >= E(OFF), E(REL) <= S(B(s,j)).
    Each link lane (per link and direction, or one per link when not duplex)
    is a NoOverlap over the optional transfer intervals of its devices.
    """
    p, m = v.problem, v.model
    lanes = defaultdict(list)
    for (s, j), t in v.transfers.items():
        m.add(t.off_start >= v.end[Op(_F, s, j)]).only_enforce_if(t.chosen)
        m.add(t.rel_start >= t.off_end).only_enforce_if(t.chosen)
        m.add(t.rel_end <= v.start[Op(_B, s, j)]).only_enforce_if(t.chosen)
        device = p.placement[s]
        lanes[p.lane(device, OpKind.OFFLOAD)].append(t.off)
        lanes[p.lane(device, OpKind.RELOAD)].append(t.rel)
    for intervals in lanes.values():
        if len(intervals) > 1:
            m.add_no_overlap(intervals)


def transfer_anchoring(v: Variables) -> None:
    """Executability: a transfer never starts strictly inside a compute op of its device.

    SPEC's runtime issues a transfer after the compute op before it in the
    device's list has ended, so every schedule that re-times to itself has,
    for each transfer t and compute op c of its device, S(t) <= S(c) or
    S(t) >= E(c). In doubled time this is a NoOverlap: c becomes
    [2 S(c) + 1, 2 E(c)) and t the unit marker [2 S(t), 2 S(t) + 1), which meet
    exactly when S(c) < S(t) < E(c). Markers of one lane never coincide (the
    lane is busy), so there is one NoOverlap per device and lane direction.
    """
    if not v.transfers:
        return
    p, m = v.problem, v.model
    doubled = defaultdict(list)
    for op, start in v.start.items():
        dur = v.scaling.duration[(op.kind, op.stage)]
        if dur > 0:
            doubled[p.placement[op.stage]].append(
                m.new_interval_var(2 * start + 1, 2 * dur - 1, 2 * v.end[op], f"d_{op.kind.value}_{op.stage}_{op.microbatch}"))
    markers = defaultdict(list)
    for (s, j), t in v.transfers.items():
        device = p.placement[s]
        for kind, start in ((OpKind.OFFLOAD, t.off_start), (OpKind.RELOAD, t.rel_start)):
            group = (device, kind if p.offload.duplex else None)
            markers[group].append(m.new_optional_fixed_size_interval_var(2 * start, 1, t.chosen, f"k_{kind.value}_{s}_{j}"))
    for (device, _), items in markers.items():
        m.add_no_overlap(doubled[device] + items)


def memory(v: Variables, capacity: Sequence) -> None:
    """SPEC's memory rule as one cumulative per device (capacity: int, IntVar, or None to skip).

    With r = activation - weight_hold (split) or activation (fused), hold the
    weight hold (split only), a the offload amount, a_r = min(a, r), a_h = a - a_r:
      always       [S(F), E(B)) demand r - a_r,   [S(F), E(W)) demand hold - a_h
      not x[s,j]   [S(F), E(B)) demand a_r,       [S(F), E(W)) demand a_h
      x[s,j]       [S(F), E(OFF)) demand a,  [S(REL), E(B)) demand a_r,  [S(REL), E(W)) demand a_h
    Cumulative intervals are half-open: one ending at t and one starting at t
    never overlap, which is exactly "releases count before allocations".
    """
    p, sc = v.problem, v.scaling
    intervals = defaultdict(list)
    demands = defaultdict(list)

    def add(device, start, end, demand, name, present=None):
        if demand > 0:
            intervals[device].append(v.span(start, end, name, present))
            demands[device].append(demand)

    for s in range(p.num_stages):
        device = p.placement[s]
        if capacity[device] is None:
            continue
        hold = sc.weight_hold[s] if p.split_backward else 0
        r = sc.activation[s] - hold
        for j in range(p.microbatches):
            f, b = v.start[Op(_F, s, j)], v.end[Op(_B, s, j)]
            w = v.end[Op(_W, s, j)] if p.split_backward else None
            t = v.transfers.get((s, j))
            a = t.amount if t is not None else 0
            a_r = min(a, r)
            a_h = a - a_r
            add(device, f, b, r - a_r, f"mb_{s}_{j}")
            if w is not None:
                add(device, f, w, hold - a_h, f"mw_{s}_{j}")
            if t is not None:
                keep = t.chosen.Not()
                add(device, f, b, a_r, f"nb_{s}_{j}", keep)
                if w is not None:
                    add(device, f, w, a_h, f"nw_{s}_{j}", keep)
                add(device, f, t.off_end, a, f"of_{s}_{j}", t.chosen)
                add(device, t.rel_start, b, a_r, f"rb_{s}_{j}", t.chosen)
                if w is not None:
                    add(device, t.rel_start, w, a_h, f"rw_{s}_{j}", t.chosen)
    for device, items in intervals.items():
        v.model.add_cumulative(items, demands[device], capacity[device])


def symmetry(v: Variables) -> None:
    """Microbatches in index order, where that provably loses nothing.

    Without offload: E(k(s,j)) <= S(k(s,j+1)) for every stage s and kind k.
    Argument: microbatches are identical, so take any valid schedule and, for
    each (stage, kind), hand its time slots to microbatches in index order
    (the i-th earliest slot to microbatch i). Slot times do not move, so device
    overlap and every memory event (which depends on the stage and kind only)
    are unchanged. Each dependency (rules 1-4) says a slot of one kind starts
    after a slot of another kind ends (+ a latency fixed per stage pair); the
    original labelling is a matching where every such pair holds, so the i
    earliest dependent slots start after i distinct prerequisite slots end,
    hence after the i-th earliest end: the sorted matching holds too.

    With offload the transfer of (s, j) ties its F slot to its B slot, and
    sorting F and B slots separately can break that pairing; only the global
    relabelling of whole microbatches stays valid, which orders F(0, j).
    """
    p, m = v.problem, v.model
    kinds = p.kinds if not v.transfers else (_F,)
    stages = range(p.num_stages) if not v.transfers else (0,)
    for s in stages:
        for kind in kinds:
            for j in range(p.microbatches - 1):
                m.add(v.end[Op(kind, s, j)] <= v.start[Op(kind, s, j + 1)])


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
    # device comes after some F(first, j) of its lowest stage; with FIFO there (see symmetry) that is j = 0.
    for device, stages in enumerate(p.stages_of_device):
        first = min(stages)
        if not fifo or (v.transfers and first != 0):
            continue
        load = sum(v.scaling.duration[(k, s)] for s in stages for k in p.kinds) * p.microbatches
        m.add(v.makespan >= v.start[Op(_F, first, 0)] + load)


def runtime_tightness(v: Variables) -> None:
    """With offload: every op starts exactly when the runtime would start it (no voluntary waiting).

    SPEC's runtime starts each action as soon as its inputs, its device's
    previous compute op (or, for a transfer, the compute op before it) and its
    lane allow; it cannot hold an F back until an offload has freed memory. So
    in every schedule that re-times to itself each op starts at the end of one
    of the things it waits for. We require that: S(o) = element(idx_o, [0,
    its dependencies' ends (+ latency), the ends of the compute ops of its
    device, and for a transfer its own offload's end and the ends of its
    lane's transfers]). Every executable schedule satisfies it (the model stays
    a relaxation, its bound a proof), and a solution then re-times to itself,
    memory included. Without offload memory depends on the orders only, so
    this is not needed there.
    """
    if not v.transfers:
        return
    p, m = v.problem, v.model
    last = p.num_stages - 1
    device_ends = {d: [] for d in range(p.devices)}
    for op, end in v.end.items():
        device_ends[p.placement[op.stage]].append((op, end))
    lane_ends: dict[int, list] = {}

    def when_chosen(t, end, otherwise, name):
        # The end of an absent transfer is meaningless: stand in ``otherwise`` (var, offset) for it.
        proxy = m.new_int_var(0, v.horizon, f"pe_{name}")
        m.add(proxy == end).only_enforce_if(t.chosen)
        other = otherwise[1] if otherwise[0] is None else otherwise[0] + otherwise[1]
        m.add(proxy == other).only_enforce_if(t.chosen.Not())
        v.proxies.append((proxy, t.chosen, end, otherwise))
        return (proxy, 0)

    for (s, j), t in v.transfers.items():
        device = p.placement[s]
        lane_ends.setdefault(p.lane(device, OpKind.OFFLOAD), []).append(
            ((OpKind.OFFLOAD, s, j), when_chosen(t, t.off_end, (None, 0), f"off_{s}_{j}")))
        lane_ends.setdefault(p.lane(device, OpKind.RELOAD), []).append(
            ((OpKind.RELOAD, s, j), when_chosen(t, t.rel_end, (None, 0), f"rel_{s}_{j}")))

    def tie(start, choices, name, present=None):
        """choices: (var or None, offset) pairs; S = the chosen one's value."""
        exprs = [m.new_constant(off) if var is None else (var + off if off else var) for var, off in choices]
        index = m.new_int_var(0, len(choices) - 1, f"why_{name}")
        target = start
        if present is not None:
            # An absent transfer keeps its (unconstrained) start: link through a proxy.
            target = m.new_int_var(0, v.horizon, f"why_val_{name}")
            m.add(start == target).only_enforce_if(present)
        m.add_element(index, exprs, target)
        v.ties.append((index, choices, start, present, target))

    for op, start in v.start.items():
        k, s, j = op
        device = p.placement[s]
        deps = []
        if k is _F and s > 0:
            deps.append((v.end[Op(_F, s - 1, j)], v.scaling.latency[s - 1]))
        elif k is _B:
            deps.append((v.end[Op(_F, s, j)], 0) if s == last else (v.end[Op(_B, s + 1, j)], v.scaling.latency[s]))
            t = v.transfers.get((s, j))
            if t is not None:
                deps.append(when_chosen(t, t.rel_end, deps[0], f"b_{s}_{j}"))
        elif k is _W:
            deps.append((v.end[Op(_B, s, j)], 0))
        choices = ([(None, 0)] if (k is _F and s == 0) else []) + deps
        choices += [(e, 0) for o, e in device_ends[device] if o != op]
        tie(start, choices, f"{k.value}_{s}_{j}")
    for (s, j), t in v.transfers.items():
        device = p.placement[s]
        ends = [(e, 0) for _, e in device_ends[device]]
        off_lane = [e for key, e in lane_ends[p.lane(device, OpKind.OFFLOAD)] if key != (OpKind.OFFLOAD, s, j)]
        rel_lane = [e for key, e in lane_ends[p.lane(device, OpKind.RELOAD)] if key != (OpKind.RELOAD, s, j)]
        tie(t.off_start, ends + off_lane, f"off_{s}_{j}", t.chosen)
        tie(t.rel_start, [(t.off_end, 0)] + ends + rel_lane, f"rel_{s}_{j}", t.chosen)
