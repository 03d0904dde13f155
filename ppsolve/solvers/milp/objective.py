"""Objectives of the MILP: makespan; the least overhead (recompute time, then offloaded amount) at
a makespan; the least peak."""

from __future__ import annotations

import pulp

from ppsolve.solvers.milp.variables import Variables


def minimise_makespan(v: Variables) -> None:
    """min C."""
    v.lp.setObjective(v.makespan)


def minimise_overhead(v: Variables, makespan_cap: float) -> None:
    """min ``Scaling.overhead``(sum r[s,j] dur(R(s)), sum a[s,j]) subject to C <= makespan_cap: the
    least recompute time, then the least offloaded amount (model units)."""
    v.lp += v.makespan <= makespan_cap
    recompute = pulp.lpSum(v.dur(rc.op) * rc.chosen for rc in v.recomputes.values())
    offloaded = pulp.lpSum(t.amount for t in v.transfers.values())
    v.lp.setObjective(v.scaling.overhead(recompute, offloaded))


def minimise_peak(v: Variables, peaks: list, uppers: list[int], makespan_cap: float) -> int:
    """min (max_d P_d) * (sum of upper bounds + 1) + sum_d P_d subject to C <= makespan_cap, with
    P_d the bound of device d's memory constraints (hence at least its peak); returns the weight.

    With continuous amounts the peaks are continuous and that weight no longer makes the largest
    peak come first: the objective is then max_d P_d alone (weight 1)."""
    v.lp += v.makespan <= makespan_cap
    worst = v.number("max_peak", 0, max(uppers))
    for p in peaks:
        v.lp += worst >= p
    if v.continuous:
        v.lp.setObjective(worst + 0 * pulp.lpSum(peaks))
        return 1
    weight = sum(uppers) + 1
    v.lp.setObjective(weight * worst + pulp.lpSum(peaks))
    return weight
