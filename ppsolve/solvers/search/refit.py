"""Refits: a schedule's compute orders with their levers (keep, offload, recompute) fitted again.

A window decides the lever of a (stage, microbatch) only where it frees both its F and its B. On the
first devices of a long pipeline under a tight cap these lie further apart than a window reaches (505
to 2 286 ms on the 13B-like problem at 11 GiB), so the neighbourhood search keeps the levers it starts
with, and a device that recomputes most of its activations stays as busy as its recomputes make it.
A refit keeps each device's order of F, B and W, drops every R and transfer, and fits the levers
again with both (:func:`~ppsolve.solvers.warm_start.plans.fit_by_both`): recomputes until each cap
raised by a share of a largest activation holds, then offload for the rest. That trades a few
recomputes of the busiest devices for transfers. The refitted schedule is often longer than the one it
came from (it is timed as a plan, not as the search left it); the search goes on from it
(:mod:`ppsolve.solvers.search.lns`), which needs the time of a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.solvers.warm_start.plans import fit_by_both, schedule_orders


@dataclass(frozen=True)
class RefitVariant:
    """How :func:`refit` fits the levers: the share of a largest activation each cap is raised by for
    the recomputes, how many forwards back a forward waits for an offload, and which recomputes it
    prefers (``ppsolve.baselines.families.recompute.PREFER``)."""

    share: float = 0.25
    gap: int = 2
    prefer: str = "longest"


def refittable(schedule: Schedule) -> bool:
    """Whether a refit may change ``schedule``'s levers: a capped problem that may both recompute and
    offload, and a schedule that recomputes something."""
    p = schedule.problem
    return (p.can_recompute and p.can_offload and any(c is not None for c in p.capacity)
            and schedule.recomputed > 0)


def refit(schedule: Schedule, variant: RefitVariant = RefitVariant()) -> Schedule | None:
    """``schedule``'s compute orders with the levers fitted again (module docstring), timed and checked;
    None when they do not fit or the result recomputes no less than ``schedule``."""
    p = schedule.problem
    orders = [[op for op in actions if op.kind.is_compute and op.kind is not OpKind.R]
              for actions in schedule_orders(schedule)]
    try:
        plan = fit_by_both(p, orders, variant.share, gap=variant.gap, prefer=variant.prefer)
        fitted = make_schedule(p, plan.time(p), schedule.method.name)
    except PpsolveError:
        return None
    if fitted.recomputed >= schedule.recomputed or not check(fitted).ok:
        return None
    return fitted
