"""The constraint families of the MILP, one function each (times in model units, big-M = H).

Notation: ``S(o)`` a start, ``E(o) = S(o) + dur(o)``, ``H`` the horizon, ``x[s,j]`` the
offload choice of (s, j) with amount ``a`` and OFFLOAD / RELOAD starts ``O``, ``L``
(each lasting ``a / bandwidth``); ``r[s,j]`` the recompute choice with the start of R;
``y[a,b]`` = 1 when compute op a runs before b on their device, ``z`` the same for two
transfers of a lane. A constraint on an op that is not chosen (a phantom R or transfer)
is relaxed by big-M. Times are integers when the model has no transfers (then "strictly
after t" is ">= t + 1" where needed), else continuous.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Callable, Sequence

import pulp

from ppsolve.dependencies import dependency_table
from ppsolve.ops import Op, OpKind
from ppsolve.solvers.milp.variables import Variables
from ppsolve.solvers.symmetry import identical_classes

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD


def _time(v: Variables, op: Op, at_end: bool):
    """(start or end expression, the choice it depends on or None); (None, None) when the model
    has no such op (a transfer or a recompute it does not decide)."""
    if op.kind.is_compute:
        if op not in v.start:
            return None, None
        chosen = v.recomputes[(op.stage, op.microbatch)].chosen if op.kind is _R else None
        return (v.end(op) if at_end else v.start[op]), chosen
    t = v.transfers.get((op.stage, op.microbatch))
    if t is None:
        return None, None
    if op.kind is _OFF:
        return (t.off_end if at_end else t.off), t.chosen
    return (t.rel_end if at_end else t.rel), t.chosen


def precedences(v: Variables) -> None:
    """SPEC rules 1-5 and 9, read from the one dependency table (``ppsolve.dependencies``).

    For every op o and each dependency (k, s', lag): S(o) >= E(k(s', j)) + lag, relaxed by
    (H + lag)(1 - c) when an optional op with choice c is involved (it holds only when chosen):
    S(F(s,j)) >= E(F(s-1,j)) + lat; S(B(s,j)) >= E(B(s+1,j)) + lat; S(W) >= E(B);
    if x[s,j]: O >= E(F(s,j)), L >= O + a / d2h, S(B(s,j)) >= L + a / h2d;
    if r[s,j]: S(R) >= E(F(s,j)), S(B(s,j)) >= E(R).
    """
    p, H = v.problem, v.horizon
    table = dependency_table(p)
    ops = list(v.start) + [Op(k, s, j) for (s, j) in v.transfers for k in (_OFF, _REL)]
    for op in ops:
        start, chosen = _time(v, op, at_end=False)
        for dep in table[(op.kind, op.stage)]:
            end, dep_chosen = _time(v, dep.op(op.microbatch), at_end=True)
            if end is None:
                continue  # an optional dependency on an op the model does not have
            lag = v.scaling.time(dep.lag_of(p, op.microbatch))
            x = chosen if chosen is not None else dep_chosen
            v.tick()
            if x is None:
                v.lp += start >= end + lag
            else:
                v.lp += start >= end + lag - (H + lag) * (1 - x)


def device_no_overlap(v: Variables) -> None:
    """SPEC rule 6, disjunctive: for each pair (a, b) of a device whose order is not implied,
    S(b) >= E(a) - M(a,b)(1 - y[a,b]) and S(a) >= E(b) - M(b,a) y[a,b], with M(a,b) the latest
    end of a less the earliest start of b (their windows, ``variables.windows``); relaxed by
    M(a,b) more for each of them that is a phantom R."""
    for (a, b), y in v.order.items():
        v.tick()
        absent = v.absent(a, b)
        v.lp += v.start[b] >= v.end(a) - v.big_m(a, b) * (1 - y) - v.big_m(a, b) * absent
        v.lp += v.start[a] >= v.end(b) - v.big_m(b, a) * y - v.big_m(b, a) * absent


def recompute_or_offload(v: Variables) -> None:
    """SPEC rule 10: r[s,j] + x[s,j] <= 1; and an amount only when offloaded: a <= most * x."""
    for key, t in v.transfers.items():
        v.lp += t.amount <= t.most * t.chosen
        rc = v.recomputes.get(key)
        if rc is not None:
            v.lp += rc.chosen + t.chosen <= 1


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
            v.lane_order[(a, b)] = z
            both_off = 2 - ta.chosen - tb.chosen
            v.lp += sb >= ea - H * (1 - z) - H * both_off
            v.lp += sa >= eb - H * z - H * both_off


# ----- memory -----

def memory(v: Variables, capacity: Sequence, check: Callable[[], None] = lambda: None) -> None:
    """SPEC's memory rule at every allocation instant (capacity per device: int, a peak variable,
    or None to skip the device).

    With r = activation - weight_hold (split) or activation (fused), h the weight hold, k the
    recompute checkpoint (keep) and a the offloaded amount, the memory of device d at an instant
    t is the sum over its (s, j) of
        act [S(F) <= t] - (act - k) [r and S(F) <= t < S(R)] - r [E(B) <= t] - h [E(W) <= t]
        - a [x and E(OFF) <= t < L]
    (releases count before allocations: an end at t no longer counts). It only grows at the
    start of an F, an R or a RELOAD, so it is bounded there (at an R only when r, at a RELOAD
    only when x: relaxed by big-M otherwise). Every indicator errs only towards more memory:
    - between compute ops of the device the order binaries are exact ([S(F_i) <= S(c)] =
      before(F_i, c), [E(B_i) <= S(c)] = before(B_i, c));
    - a release before a RELOAD (E(B_i), E(W_i), E(OFF_i) <= t) is a binary q with q = 1 =>
      the end is at or before t; q = 0 is always allowed;
    - a RELOAD against a compute allocation c shares ONE binary rho = 1 => L_i <= S(c), rho = 0
      => S(c) <= L_i, read by both checks: at c the reload counts as back when rho, at L_i the
      op c counts as started when not rho. At a tie one of the two checks sees both allocations
      (two RELOADs of a device share a lane: they never start together unless one moves 0);
    - what is away (recomputed, offloaded) is a continuous share at most each condition.
    """
    p, sc = v.problem, v.scaling
    for device, stages in enumerate(p.stages_of_device):
        cap = capacity[device]
        if cap is None:
            continue
        check()
        items = [(s, j) for s in stages for j in range(p.microbatches)]
        big = sum(sc.activation.total(s) for s in stages)
        for e in items:
            check()
            fe = Op(_F, *e)
            v.lp += _memory_at_compute(v, fe, items) <= cap
            rc = v.recomputes.get(e)
            if rc is not None:
                v.lp += _memory_at_compute(v, rc.op, items) <= cap + big * (1 - rc.chosen)
            te = v.transfers.get(e)
            if te is not None:
                v.lp += _memory_at_reload(v, e, items) <= cap + big * (1 - te.chosen)


def _parts(v: Variables, key) -> tuple[int, int]:
    """(r, h): the part of (s, j)'s activation released at E(B), and at E(W)."""
    hold = v.scaling.weight_hold.at(*key) if v.problem.split_backward else 0
    return v.scaling.activation.at(*key) - hold, hold


def _saving(v: Variables, key) -> int:
    """What a recomputed activation of (s, j) leaves off its device between F and R (model units)."""
    return v.scaling.activation.at(*key) - v.scaling.keep.at(*key)


def _constant(x) -> int | None:
    return x if isinstance(x, int) else None


def _tag(op: Op) -> str:
    return f"{op.kind.value}{op.stage}_{op.microbatch}"


def _reloaded_by(v: Variables, k, c: Op):
    """rho: 1 when RELOAD(k) starts at or before compute op c starts, else 0 (c starts at or
    before it); a constant where the order is implied. Shared by the checks at c and at L_k."""
    fk, bk = Op(_F, *k), Op(_B, *k)
    if c == fk:
        return 0
    if _constant(v.before(c, fk)) == 1:
        return 0
    if _constant(v.before(bk, c)) == 1:
        return 1
    key = ("rho", k, c)
    if key not in v._cache:
        t, H = v.transfers[k], v.horizon
        rel = Op(_REL, *k)
        rho = v.indicator(f"rho_{k[0]}_{k[1]}_{_tag(c)}", lambda start, end: int(start[rel] <= start[c]))
        relax = H * (1 - t.chosen) + H * v.absent(c)
        v.lp += t.rel <= v.start[c] + H * (1 - rho) + relax
        v.lp += v.start[c] <= t.rel + H * rho + relax
        v._cache[key] = rho
    return v._cache[key]


def _ended_by(v: Variables, op: Op, at, at_op: Op, strict_tag: str):
    """q: a binary with q = 1 => ``op`` (B, W, or OFFLOAD) has ended at or before ``at`` (the start
    of ``at_op``); q = 0 is always allowed (the release is then not counted)."""
    key = ("ended", op, at_op)
    if key not in v._cache:
        end = _time(v, op, True)[0]
        q = v.indicator(f"q_{strict_tag}_{_tag(op)}_{_tag(at_op)}",
                        lambda start, ends: int(ends[op] <= start[at_op]))
        v.lp += end <= at + v.horizon * (1 - q)
        v._cache[key] = q
    return v._cache[key]


def _offloaded_share(v: Variables, k, at, at_op: Op, not_reloaded):
    """A share u <= a_k, most * [OFFLOAD(k) ended by at], most * ``not_reloaded``: what is on the host."""
    t = v.transfers[k]
    done = _ended_by(v, Op(_OFF, *k), at, at_op, "off")
    return v.fraction(f"u_{k[0]}_{k[1]}_{_tag(at_op)}", t.most,
                      [t.amount, t.most * done, t.most * not_reloaded])


def _memory_at_compute(v: Variables, c: Op, items) -> pulp.LpAffineExpression:
    """Memory at S(c), c an F or an R (see ``memory``)."""
    e = (c.stage, c.microbatch)
    terms = []
    for k in items:
        s = k[0]
        r, h = _parts(v, k)
        rk = v.recomputes.get(k)
        if k == e:  # c's own (s, j): allocated; a recomputed F keeps only its checkpoint until R
            terms.append(r + h)
            if c.kind is _F and rk is not None:
                terms.append(-_saving(v, k) * rk.chosen)
            continue
        fk = Op(_F, *k)
        started = v.before(fk, c)
        if _constant(started) == 0:
            continue  # everything of k comes after c
        terms.append(r * (started - v.before(Op(_B, *k), c)))
        if h:
            terms.append(h * (started - v.before(Op(_W, *k), c)))
        if rk is not None:
            not_yet = v.before(c, rk.op)
            if _constant(not_yet) != 0:
                w = v.fraction(f"w_{s}_{k[1]}_{_tag(c)}", 1, [rk.chosen, started, not_yet])
                terms.append(-_saving(v, k) * w)
        if k in v.transfers:
            back = _reloaded_by(v, k, c)
            if _constant(back) != 1:
                terms.append(-_offloaded_share(v, k, v.start[c], c, 1 - back))
    return pulp.lpSum(terms)


def _memory_at_reload(v: Variables, e, items) -> pulp.LpAffineExpression:
    """Memory at L_e, the start of RELOAD(e) (see ``memory``)."""
    rel_e = Op(_REL, *e)
    at = v.transfers[e].rel
    fe, be = Op(_F, *e), Op(_B, *e)
    terms = []
    for k in items:
        s = k[0]
        r, h = _parts(v, k)
        if k == e:
            terms.append(r + h)  # its own reload has brought the whole activation back
            continue
        fk, bk, wk = Op(_F, *k), Op(_B, *k), Op(_W, *k)
        started = 1 - _reloaded_by(v, e, fk)
        if _constant(started) == 0:
            continue
        terms.append(r * (started - _released(v, bk, at, rel_e, fe, be)))
        if h:
            terms.append(h * (started - _released(v, wk, at, rel_e, fe, be)))
        rk = v.recomputes.get(k)
        if rk is not None:
            not_yet = _reloaded_by(v, e, rk.op)
            if _constant(not_yet) != 0:
                w = v.fraction(f"w_{s}_{k[1]}_{_tag(rel_e)}", 1, [rk.chosen, started, not_yet])
                terms.append(-_saving(v, k) * w)
        if k in v.transfers:
            rel_k = Op(_REL, *k)
            z = v.lane_order.get((rel_e, rel_k))
            later = z if z is not None else 1 - v.lane_order[(rel_k, rel_e)]
            terms.append(-_offloaded_share(v, k, at, rel_e, later))
    return pulp.lpSum(terms)


def _released(v: Variables, op: Op, at, rel_e: Op, fe: Op, be: Op):
    """[E(op) <= L_e] for op a B or W of another (s, j): 1 when op is implied before F_e, 0 when
    B_e is implied before op, else an indicator q."""
    if _constant(v.before(op, fe)) == 1:
        return 1
    if _constant(v.before(be, op)) == 1:
        return 0
    return _ended_by(v, op, at, rel_e, "rel")


def symmetry(v: Variables) -> None:
    """The microbatches of each class of identical ones (``ppsolve.solvers.symmetry``) in index order,
    where that provably loses nothing (the argument is in ``ppsolve.solvers.cpsat.constraints.symmetry``):
    E(k(s,j)) <= S(k(s,j')) for j, j' consecutive in a class, for every (stage, kind) without offload
    and recompute ("all"); only F of stage 0 otherwise ("first": a microbatch's choices go with it
    when whole microbatches are relabelled). Microbatches of different costs are not ordered."""
    p = v.problem
    if v.symmetry == "none":
        return
    kinds = p.kinds if v.symmetry == "all" else (_F,)
    stages = range(p.num_stages) if v.symmetry == "all" else (0,)
    for members in identical_classes(p):
        for s in stages:
            for kind in kinds:
                for j, k in zip(members, members[1:]):
                    v.lp += v.end(Op(kind, s, j)) <= v.start[Op(kind, s, k)]


def makespan(v: Variables, lower_bound: int) -> None:
    """C >= E(o) for every op with no successor (W when split, B(0, j) when fused); C >= the
    foundation's bound; and per device, with its load the F, B and W of its stages and each R it
    chooses: C >= the earliest head of its ops + its load, and C >= S(F(first, 0)) + its load when
    FIFO orders its first stage (every op of the device comes after F(first, 0); so only when every
    microbatch is in one class of identical ones, ``ppsolve.solvers.symmetry``)."""
    p = v.problem
    leaders = [members[0] for members in identical_classes(p)]
    for j in range(p.microbatches):
        if p.split_backward:
            for s in range(p.num_stages):
                v.lp += v.makespan >= v.end(Op(_W, s, j))
        else:
            v.lp += v.makespan >= v.end(Op(_B, 0, j))
    v.lp += v.makespan >= lower_bound
    for device, stages in enumerate(p.stages_of_device):
        if not stages:  # a device without a stage (an explicit placement may leave one)
            continue
        first = min(stages)
        load = sum(v.scaling.durations[k].total(s) for s in stages for k in p.kinds)
        load += pulp.lpSum(v.dur(rc.op) * rc.chosen for (s, _), rc in v.recomputes.items() if s in stages)
        if v.recomputes:  # a class's first microbatch has its least heads (its later ones follow it)
            v.lp += v.makespan >= min(v.head[Op(k, s, j)] for s in stages for k in p.kinds for j in leaders) + load
        if v.symmetry == "none" or (v.symmetry == "first" and first != 0) or len(leaders) > 1:
            continue
        v.lp += v.makespan >= v.start[Op(_F, first, 0)] + load
