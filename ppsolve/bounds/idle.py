"""The arithmetic of the idle bounds (see ``ppsolve.bounds.idle_bound``): how much work can be
waiting on a device under a memory budget, and the least of a convex piecewise-linear function.

Work under a budget is a knapsack: groups (one per stage) of items (weight = memory an op's
microbatch holds, value = the op's duration), at most ``count`` items per group. Any valid upper
bound on its optimum keeps the idle bounds valid; :func:`most_work` is exact for one group, and for
several groups of one item each while their counts are few enough to enumerate, and the linear
relaxation otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppsolve.tolerance import EPS

EXACT_CHOICES = 4096  # several one-item groups: enumerated exactly up to this many combinations


@dataclass(frozen=True)
class Group:
    """At most ``count`` items of one stage, each one of ``items`` as (weight, value)."""

    count: int
    items: tuple[tuple[float, float], ...]


def most_work(groups: list[Group], budget: float) -> float:
    """An upper bound on sum(value) over items whose weights sum to at most ``budget``."""
    budget = max(budget, 0.0)
    if len(groups) == 1 and len(groups[0].items) <= 2:
        return _one_group(groups[0], budget)
    if all(len(g.items) == 1 for g in groups):
        counts = [_usable(g, budget) for g in groups]
        if math.prod(c + 1 for c in counts[:-1]) <= EXACT_CHOICES:
            return _one_item_groups([(c, *g.items[0]) for c, g in zip(counts, groups)], budget)
    return min(lam * budget + rest for lam, rest in dual_lines(groups))


def _usable(group: Group, budget: float) -> int:
    """How many items of a one-item group the budget could hold at most."""
    w = group.items[0][0]
    return group.count if w <= 0 else min(group.count, math.floor(budget / w + EPS))


def _one_item_groups(items: list[tuple[int, float, float]], budget: float) -> float:
    """Exact for groups of one item each, as (count, weight, value): every count of all but the
    last group, the last filled up."""
    *rest, (c_last, w_last, v_last) = items
    best = 0.0

    def fill(i: int, left: float, value: float) -> None:
        nonlocal best
        if i == len(rest):
            x = c_last if w_last <= 0 else min(c_last, math.floor(left / w_last + EPS))
            best = max(best, value + max(0, x) * v_last)
            return
        count, w, v = rest[i]
        for x in range(count + 1):
            if x * w > left + EPS:
                break
            fill(i + 1, left - x * w, value + x * v)

    fill(0, budget, 0.0)
    return best


def _one_group(group: Group, budget: float) -> float:
    """Exact: as many as fit of a lone item; else try every count of the first item (up to
    EXACT_CHOICES; beyond, the linear relaxation), fill up with the second."""
    if len(group.items) == 1:
        w, v = group.items[0]
        return max(0, _usable(group, budget)) * max(0.0, v)
    if group.count > EXACT_CHOICES:
        return min(lam * budget + rest for lam, rest in dual_lines([group]))
    items = list(group.items) + [(0.0, 0.0)] * (2 - len(group.items))
    (w1, v1), (w2, v2) = items
    best = 0.0
    for x1 in range(group.count + 1):
        left = budget - x1 * w1
        if left < -EPS:
            break
        room = group.count - x1
        x2 = room if w2 <= 0 else min(room, math.floor(left / w2 + EPS))
        best = max(best, x1 * v1 + max(0, x2) * v2)
    return best


def dual_lines(groups: list[Group]) -> list[tuple[float, float]]:
    """Pairs (lam, rest) with optimum(budget) <= lam * budget + rest for every budget >= 0.

    Linear-programming duality: for any lam >= 0 the relaxation's optimum is at most
    lam * budget + sum over groups of count * max(0, max_i(value_i - lam * weight_i)).
    The pairs are taken at every breakpoint of that convex function of lam (an item's reduced
    value crossing 0, two items of a group crossing), so their least is the relaxation's optimum.
    """
    lams = {0.0}
    for g in groups:
        for i, (w, v) in enumerate(g.items):
            if w > 0:
                lams.add(v / w)
            for w2, v2 in g.items[i + 1:]:
                if abs(w - w2) > EPS and (v - v2) / (w - w2) > 0:
                    lams.add((v - v2) / (w - w2))
    out = []
    for lam in sorted(lams):
        rest = sum(g.count * max([0.0] + [v - lam * w for w, v in g.items]) for g in groups)
        out.append((lam, rest))
    return out


def least_starts(head: float, gap: float, size: float, spare: float, cap: float, rate: float,
                 count: int) -> list[float]:
    """Least start times of the first ops of a device that each hold memory until after the last
    of them (forwards before the first B; read backwards in time, the last B's after the last F).

    Op k (1-based) holds at least ``size`` from its start; the k ops together fit ``cap`` only
    once at least need_k = k * size - cap has left for host. Each op's share (at most ``spare``)
    may leave only after the op ends, over one lane at ``rate``, and frees memory when its
    transfer ends. So, with r_i >= L_i + gap the end of op i, by time t at most
    (i0 - 1) * spare + rate * (t - r_i0) has left, for every i0 < k, and
    L_k >= max(L_{k-1} + gap, max over i0 with (i0 - 1) * spare < need_k of
    L_i0 + gap + (need_k - (i0 - 1) * spare) / rate). The list stops at the first op that
    cannot start at all (need_k > (k - 1) * spare).
    """
    starts: list[float] = []
    best, covered = -math.inf, 0  # best: max over i0 <= covered of L_i0 - (i0 - 1) * spare / rate
    for k in range(1, count + 1):
        t = head if k == 1 else starts[-1] + gap
        need = k * size - cap
        if need > EPS:
            if spare <= 0 or rate <= 0 or need > (k - 1) * spare + EPS:
                break
            reach = min(k - 1, math.floor((need - EPS) / spare) + 1)
            while covered < reach:
                covered += 1
                best = max(best, starts[covered - 1] - (covered - 1) * spare / rate)
            t = max(t, best + gap + need / rate)
        starts.append(t)
    return starts
