"""Objectives: makespan, then the least overhead at that makespan (recompute time, then offloaded
amount); or peak memory; or a window's longest path (large-neighbourhood search)."""

from __future__ import annotations

from ortools.sat.python import cp_model

from ppsolve.ops import Op, OpKind
from ppsolve.solvers.cpsat.variables import Variables


def minimise_makespan(v: Variables) -> None:
    """min C."""
    v.model.minimize(v.makespan)


def offloaded_amount(v: Variables) -> cp_model.LinearExpr:
    """sum of the offloaded amounts (model memory units; 0 where not offloaded)."""
    return sum(t.amount for t in v.transfers.values())


def recompute_time(v: Variables) -> cp_model.LinearExpr:
    """sum of r[s,j] * dur(R(s,j)) (model time units)."""
    return sum(v.scaling.duration(OpKind.R, s, j) * (1 if r.chosen is True else r.chosen)
               for (s, j), r in v.recompute.items())


def minimise_overhead(v: Variables, makespan_cap: int) -> None:
    """min ``Scaling.overhead(recompute time, offloaded amount)`` subject to C <= makespan_cap: no
    needless recompute, then no needless transfer (Phase.OVERHEAD)."""
    v.model.add(v.makespan <= makespan_cap)
    v.model.minimize(v.scaling.overhead(recompute_time(v), offloaded_amount(v)))


def minimise_peak(v: Variables, peaks: list[cp_model.IntVar], uppers: list[int], makespan_cap: int) -> cp_model.IntVar:
    """min (max_d P_d) * (sum of upper bounds + 1) + sum_d P_d subject to C <= makespan_cap.

    P_d (at most uppers[d]) is the capacity of device d's cumulative, hence at least its peak:
    the largest peak first, then the sum of peaks.
    """
    m = v.model
    m.add(v.makespan <= makespan_cap)
    worst = m.new_int_var(0, max(uppers), "max_peak")
    for p in peaks:
        m.add(worst >= p)
    weight = sum(uppers) + 1
    m.minimize(weight * worst + cp_model.LinearExpr.sum(peaks))
    return worst


def window_paths(v: Variables, tails: dict) -> list[cp_model.IntVar]:
    """A window (``ppsolve.solvers.search.window``): C >= E(o) + tail(o) for every free op o (an added
    transfer's only when it is chosen), so that C is the longest path through the window; min C.
    Returns the ends E(o) of the free compute ops, the second objective (:func:`minimise_flow`)."""
    ends = []
    for op, end in v.end.items():
        if op in tails and not isinstance(end, int):
            v.model.add(v.makespan >= end + tails[op])
            ends.append(end)
    for (s, j), t in v.transfers.items():
        for kind, end in ((OpKind.OFFLOAD, t.off_end), (OpKind.RELOAD, t.rel_end)):
            op = Op(kind, s, j)
            if op in tails and not isinstance(end, int):
                constraint = v.model.add(v.makespan >= end + tails[op])
                if t.present is not None:
                    constraint.only_enforce_if(t.present)
    v.model.minimize(v.makespan)
    return ends


def minimise_flow(v: Variables, ends: list[cp_model.IntVar], path: int) -> None:
    """A window's second step: the longest path through it at most ``path`` (the first step's
    least), every op as early as it can be (min the sum of the ends)."""
    v.model.add(v.makespan <= path)
    v.model.minimize(cp_model.LinearExpr.sum(ends))
