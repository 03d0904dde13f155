"""Objectives of the MILP: makespan; the least offloaded amount at a makespan; the least peak."""

from __future__ import annotations

import pulp

from ppsolve.solvers.milp.variables import Variables


def minimise_makespan(v: Variables) -> None:
    """min C."""
    v.lp.setObjective(v.makespan)


def minimise_offload(v: Variables, makespan_cap: int) -> None:
    """min sum x[s,j] * amount(s) subject to C <= makespan_cap."""
    v.lp += v.makespan <= makespan_cap
    v.lp.setObjective(pulp.lpSum(t.amount * t.chosen for t in v.transfers.values()))


def minimise_peak(v: Variables, peaks: list, uppers: list[int], makespan_cap: int) -> int:
    """min (max_d P_d) * (sum of upper bounds + 1) + sum_d P_d subject to C <= makespan_cap, with
    P_d the bound of device d's memory constraints (hence at least its peak); returns the weight."""
    v.lp += v.makespan <= makespan_cap
    worst = v.integer("max_peak", 0, max(uppers))
    for p in peaks:
        v.lp += worst >= p
    weight = sum(uppers) + 1
    v.lp.setObjective(weight * worst + pulp.lpSum(peaks))
    return weight
