"""The constraint families of the MILP, one function each (times in model units, big-M = H).

Notation: ``S(o)`` a start, ``E(o) = S(o) + dur(o)``, ``H`` the horizon, ``x[s,j]`` the
offload choice of (s, j) with OFFLOAD / RELOAD starts ``O``, ``R``; ``y[a,b]`` = 1 when
compute op a runs before b on their device, ``z`` the same for two transfers of a lane.
All times are integers, so "strictly after t" is ">= t + 1".
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Callable, Sequence

import pulp

from ppsolve.dependencies import dependency_table
from ppsolve.ops import Op, OpKind
from ppsolve.solvers.milp.variables import Transfer, Variables

_F, _B, _W, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.OFFLOAD, OpKind.RELOAD


def _time(v: Variables, op: Op, at_end: bool):
    """(start or end expression, the offload choice it depends on or None); (None, None) when the
    model has no such op (a transfer or a recompute it does not decide)."""
    if op.kind.is_compute:
        if op not in v.start:
            return None, None
        return (v.end(op) if at_end else v.start[op]), None
    t = v.transfers.get((op.stage, op.microbatch))
    if t is None:
        return None, None
    start, dur = (t.off, t.d_off) if op.kind is _OFF else (t.rel, t.d_rel)
    return (start + dur if at_end else start), t.chosen


def precedences(v: Variables) -> None:
    """SPEC rules 1-5, read from the one dependency table (``ppsolve.dependencies``).

    For every op o and each dependency (k, s', lag): S(o) >= E(k(s', j)) + lag, relaxed by
    (H + lag)(1 - x[s,j]) when a transfer is involved (it holds only when the offload is chosen):
    S(F(s,j)) >= E(F(s-1,j)) + lat; S(B(s,j)) >= E(B(s+1,j)) + lat; S(W) >= E(B);
    if x[s,j]: O >= E(F(s,j)), R >= O + dur(OFF), S(B(s,j)) >= R + dur(REL).
    """
    p, H = v.problem, v.horizon
    table = dependency_table(p)
    ops = list(v.start) + [Op(k, s, j) for (s, j) in v.transfers for k in (_OFF, _REL)]
    for op in ops:
        start, chosen = _time(v, op, at_end=False)
        for dep in table[(op.kind, op.stage)]:
            end, dep_chosen = _time(v, dep.op(op.microbatch), at_end=True)
            if end is None:
                continue  # an optional dependency on a transfer the model does not have
            lag = v.scaling.time(dep.lag)
            x = chosen if chosen is not None else dep_chosen
            v.tick()
            if x is None:
                v.lp += start >= end + lag
            else:
                v.lp += start >= end + lag - (H + lag) * (1 - x)


def device_no_overlap(v: Variables) -> None:
    """SPEC rule 6, disjunctive: for each pair (a, b) of a device whose order is not implied,
    S(b) >= E(a) - M(a,b)(1 - y[a,b]) and S(a) >= E(b) - M(b,a) y[a,b], with M(a,b) the latest
    end of a less the earliest start of b (their windows, ``variables.windows``)."""
    for (a, b), y in v.order.items():
        v.tick()
        v.lp += v.start[b] >= v.end(a) - v.big_m(a, b) * (1 - y)
        v.lp += v.start[a] >= v.end(b) - v.big_m(b, a) * y


def transfers(v: Variables) -> None:
    """SPEC rule 7: two chosen transfers of one lane (per link and direction; one lane when not
    duplex) do not overlap: with z the order binary and u = 2 - x1 - x2 (0 when both are chosen),
    S2 >= E1 - H(1 - z) - H u and S1 >= E2 - H z - H u. An OFFLOAD and the RELOAD of the same
    (s, j) on one lane are ordered by rule 5 already."""
    p, H = v.problem, v.horizon
    lanes: dict = defaultdict(list)
    for (s, j), t in v.transfers.items():
        device = p.placement[s]
        lanes[p.lane(device, _OFF)].append((Op(_OFF, s, j), t))
        lanes[p.lane(device, _REL)].append((Op(_REL, s, j), t))
    for lane in lanes.values():
        for (a, ta), (b, tb) in combinations(lane, 2):
            if ta is tb:
                continue
            v.tick()
            sa, _ = _time(v, a, False)
            sb, _ = _time(v, b, False)
            ea, _ = _time(v, a, True)
            eb, _ = _time(v, b, True)
            z = v.binary(f"z_{a.kind.value}_{a.stage}_{a.microbatch}_{b.kind.value}_{b.stage}_{b.microbatch}")
            both_off = 2 - ta.chosen - tb.chosen
            v.lp += sb >= ea - H * (1 - z) - H * both_off
            v.lp += sa >= eb - H * z - H * both_off


def memory(v: Variables, capacity: Sequence, check: Callable[[], None] = lambda: None) -> None:
    """SPEC's memory rule at every allocation instant (capacity per device: int, a peak variable,
    or None to skip the device).

    Let r = activation - weight_hold (split) or activation (fused), h the weight hold, a the
    offload amount. Memory of device d at an instant t is the sum over its (s, j) of
        r [S(F) <= t < E(B)] + h [S(F) <= t < E(W)] - a [x and E(OFF) <= t < R]
    (releases count before allocations: an end at t no longer counts). It only grows at the
    start of an F or of a RELOAD, so it is bounded there:
    - at t = S(F_e): with compute order binaries, [S(F_i) <= t] = before(F_i, F_e) (1 for i = e)
      and [E(B_i) <= t] = before(B_i, F_e), both exact; the away term is a binary
      g <= x_i with g = 1 => E(OFF_i) <= t and R_i >= t + 1 (g never counts more than is away);
    - at t = R_e, enforced when x_e (relaxed by M(1 - x_e)): p >= [S(F_i) <= t] through
      p = 0 => S(F_i) >= t + 1; q <= [E(B_i) <= t] through q = 1 => E(B_i) <= t (same for W);
      and g as above. Every indicator errs only towards more memory.
    """
    p, sc, H = v.problem, v.scaling, v.horizon
    for device, stages in enumerate(p.stages_of_device):
        cap = capacity[device]
        if cap is None:
            continue
        check()
        items = [(s, j) for s in stages for j in range(p.microbatches)]
        big = sum(sc.activation[s] for s in stages) * p.microbatches
        for e in items:
            check()
            fe = Op(_F, *e)
            v.lp += _memory_at_forward(v, fe, items) <= cap
            te = v.transfers.get(e)
            if te is not None:
                v.lp += _memory_at_reload(v, e, te, items) <= cap + big * (1 - te.chosen)


def _parts(v: Variables, s: int) -> tuple[int, int]:
    """(r, h): the part of stage s's activation released at E(B), and at E(W)."""
    hold = v.scaling.weight_hold[s] if v.problem.split_backward else 0
    return v.scaling.activation[s] - hold, hold


def _away(v: Variables, t: Transfer, at, name: str, H: int):
    """A binary g <= [x and E(OFF) <= at < R] (the offloaded share is on the host at ``at``)."""
    g = v.binary(name)
    v.lp += g <= t.chosen
    v.lp += t.off + t.d_off <= at + H * (1 - g)
    v.lp += t.rel >= at + 1 - (H + 1) * (1 - g)
    return g


def _is_zero(x) -> bool:
    return isinstance(x, int) and x == 0


def _memory_at_forward(v: Variables, fe: Op, items) -> pulp.LpAffineExpression:
    H = v.horizon
    terms = []
    for s, j in items:
        fi = Op(_F, s, j)
        r, h = _parts(v, s)
        started = 1 if fi == fe else v.before(fi, fe)
        terms.append(r * (started - v.before(Op(_B, s, j), fe)))
        if h:
            terms.append(h * (started - v.before(Op(_W, s, j), fe)))
        t = v.transfers.get((s, j))
        if t is not None and fi != fe and not _is_zero(v.before(fi, fe)):
            terms.append(-t.amount * _away(v, t, v.start[fe], f"g_{s}_{j}_F{fe.stage}_{fe.microbatch}", H))
    return pulp.lpSum(terms)


def _memory_at_reload(v: Variables, e, te: Transfer, items) -> pulp.LpAffineExpression:
    H = v.horizon
    at = te.rel
    terms = []
    for s, j in items:
        r, h = _parts(v, s)
        if (s, j) == e:
            terms.append(r + h)  # its own reload has brought the whole activation back
            continue
        tag = f"{s}_{j}_R{e[0]}_{e[1]}"
        started = v.binary(f"p_{tag}")  # p = 0 => S(F_i) >= at + 1
        v.lp += v.start[Op(_F, s, j)] >= at + 1 - (H + 1) * started
        done_b = v.binary(f"qb_{tag}")  # q = 1 => E(B_i) <= at
        v.lp += v.end(Op(_B, s, j)) <= at + H * (1 - done_b)
        terms.append(r * (started - done_b))
        if h:
            done_w = v.binary(f"qw_{tag}")
            v.lp += v.end(Op(_W, s, j)) <= at + H * (1 - done_w)
            terms.append(h * (started - done_w))
        t = v.transfers.get((s, j))
        if t is not None:
            terms.append(-t.amount * _away(v, t, at, f"g_{tag}", H))
    return pulp.lpSum(terms)


def symmetry(v: Variables) -> None:
    """Microbatches in index order where that provably loses nothing (the argument is in
    ``ppsolve.solvers.cpsat.constraints.symmetry``): E(k(s,j)) <= S(k(s,j+1)) for every (stage, kind)
    without offload ("all"); only F of stage 0 with offload ("first")."""
    p = v.problem
    if v.symmetry == "none":
        return
    kinds = p.kinds if v.symmetry == "all" else (_F,)
    stages = range(p.num_stages) if v.symmetry == "all" else (0,)
    for s in stages:
        for kind in kinds:
            for j in range(p.microbatches - 1):
                v.lp += v.end(Op(kind, s, j)) <= v.start[Op(kind, s, j + 1)]


def makespan(v: Variables, lower_bound: int) -> None:
    """C >= E(o) for every op with no successor (W when split, B(0, j) when fused); C >= the
    foundation's bound; and per device, C >= S(F(first, 0)) + its load when FIFO orders its first
    stage (every op of the device comes after F(first, 0))."""
    p = v.problem
    for j in range(p.microbatches):
        if p.split_backward:
            for s in range(p.num_stages):
                v.lp += v.makespan >= v.end(Op(_W, s, j))
        else:
            v.lp += v.makespan >= v.end(Op(_B, 0, j))
    v.lp += v.makespan >= lower_bound
    for device, stages in enumerate(p.stages_of_device):
        first = min(stages)
        if v.symmetry == "none" or (v.symmetry == "first" and first != 0):
            continue
        load = sum(v.scaling.duration[(k, s)] for s in stages for k in p.kinds) * p.microbatches
        v.lp += v.makespan >= v.start[Op(_F, first, 0)] + load
