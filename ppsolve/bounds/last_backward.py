"""The tail after a device's last B, which only the W ops it holds can fill (used by
``ppsolve.bounds.analytic.last_backward_bound``).

Fix a device with cap C (split backward) and a schedule of makespan T. Let B(i*) be the B of the
device that starts last, i* = (s*, j*). Every F, R and other B of the device ends before B(i*) starts
(an F and an R precede their own B, which starts no later), so after B(i*) ends the device runs W
ops only, and T >= end(B(i*)) + b_tail(i*), the least chain after that B ends (the B of the earlier
stages, then the first stage's W).

A W that runs after B(i*) ends, other than W(i*), has its B ended before B(i*) started: its weight
hold is held from that end to its W's end, so throughout B(i*). During B(i*) the device also holds
the whole activation of i* (a RELOAD ends and an R runs before their B; nothing of a pair is on host
or dropped while its B runs; where some B of the device lasts 0, no instant is inside it, and the
figure is 0). Hence a(i*) + (the holds of those W) <= C, and the W work after B(i*)
is at most W(i*) + fill(C - a(i*)), the most W work of other pairs whose holds fit the room (a
knapsack, bounded by ``ppsolve.bounds.idle.most_work``). So the device idles at least
min over i of (b_tail(i) - W(i) - fill_i(C - a(i))) after B(i*) ends. Before its first B starts it
idles at least what the idle bound finds there (``ppsolve.bounds.analytic.idle_bound``: its head, and the
wait the cap forces on the forwards before that B; less the R that run then, which only add to the
device's time), and the two spans are disjoint (the first B starts no later than B(i*), which lasts
more than 0). With load the device's F, B and W time,

    T >= load + idle before the first B + min over i of (b_tail(i) - W(i) - fill_i(C - a(i))).

No lever lowers a weight hold or the activation a B runs with, so the figure holds with recompute
and offload. It binds where the last devices hold large weight holds under a tight cap: there,
deferring W into the drain (what zero-bubble plans do without a cap) is limited to a few W.
"""

from __future__ import annotations

import math

from ppsolve.bounds.idle import Group, most_work
from ppsolve.ops import OpKind
from ppsolve.problem import Problem


def least_last_tail(problem: Problem, items: list[tuple[int, int]], weight: int, b_tail: dict) -> float:
    """The least of b_tail(i) - W(i) - fill_i(C - a(i)) over the ``items`` (stage, microbatch) of a capped
    device of a split-backward problem, each standing for ``weight`` microbatches (module docstring)."""
    cap = problem.capacity[problem.placement[items[0][0]]]
    d = problem.duration
    if any(d(OpKind.B, *i) <= 0 for i in items):
        return 0.0  # a B of no length holds nothing at an instant (releases count first)
    w = {i: d(OpKind.W, *i) for i in items}
    hold = {i: problem.weight_hold.at(*i) for i in items}
    # pairs alike (same W and hold) form one kind of the knapsack
    counts: dict[tuple[float, float], int] = {}
    for i in items:
        counts[(w[i], hold[i])] = counts.get((w[i], hold[i]), 0) + weight
    least = math.inf
    for i in items:
        kinds = [Group(n - ((wk, hk) == (w[i], hold[i])), ((hk, wk),)) for (wk, hk), n in counts.items()]
        fill = most_work(kinds, cap - problem.activation.at(*i))
        least = min(least, b_tail[i] - w[i] - fill)
    return max(0.0, least)
