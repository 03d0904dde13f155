"""The admission bound: a memory cap on the device of stage 0 spaces out the forwards F(0, .),
and every device then waits for the microbatches that enter late.

Number the microbatches by the start of their F(0, .) (they are interchangeable, so this costs
nothing) and let t_k be the k-th of those starts. When F(0, j) starts, its device allocates
``act`` = the whole activation of stage 0 (only its checkpoint keep[0] when it is recomputed:
``ppsolve.bounds.held.forward_allocates``); each of the j microbatches that started before it still
holds ``kept`` = ``ppsolve.bounds.held.least_held`` of stage 0 (its share that cannot go to host
memory, or its checkpoint when recomputed; partial offloads move less) until its B(0, .) ends,
then ``weight_hold`` until its W(0, .) ends (an R between F and B only delays that B). So if ``a`` of them are still
active and ``h`` hold their W, ``activation + a * kept + h * hold <= cap``, and at least ``j - a``
B(0, .) and ``j - a - h`` W(0, .) have ended. The i-th earliest B(0, .) ends no sooner than
t_(i-1) plus the least time from the start of F(0, j) to the end of B(0, j) (one microbatch's
dependency chain), and likewise for W. Minimising over the (a, h) the cap allows gives a lower
bound on t_j, in order j = 0, 1, ... (:func:`admission_starts`; t_j >= t_(j-1) + F(0) too).

The microbatches numbered k and above (m - k of them) then bring their ops to a device no
sooner than t_k plus each op's head (the least time from F(0, j)'s start to the op's start).
For any set of those op kinds, the device needs ``(m - k) x`` their durations after the least of
their heads, and after the last of them ends, the least of their tails still follows
(:func:`admission_bound`; the largest over k and over the sets that keep the kinds with at
least a given head and at least a given tail).

Stages other than 0, on device 0 or elsewhere, are left out of the memory count: a relaxation,
so the bound stays valid for every placement.

Per-microbatch costs (contract version 4): the microbatch that starts k-th is not known, so the
starts count with the least of each figure over the microbatches (the least allocation, kept share,
weight hold, F(0) and time to B(0)'s and W(0)'s end, which only admits more (a, h) and earlier
ends), and the m - k microbatches that start last bring at least the m - k least works of the
chosen op kinds. ``heads`` and ``tails`` are then the least over the microbatches.
"""

from __future__ import annotations

import math

import numpy as np

from ppsolve.bounds.held import forward_allocates, least_held
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

MAX_BLOCKS = 32


def admission_starts(problem: Problem, heads: dict) -> list[float] | None:
    """Lower bounds on the sorted starts of F(0, .), or None when the cap cannot space them
    (no cap on stage 0's device, or all of its activation may go to host memory)."""
    device = problem.placement[0]
    cap = problem.capacity[device]
    every = range(problem.microbatches)
    act = min(forward_allocates(problem, 0, j) for j in every)
    kept = min(least_held(problem, 0, microbatch=j) for j in every)
    if cap is None or kept <= EPS:
        return None
    split = problem.split_backward
    hold = problem.weight_hold.low(0) if split else 0.0
    to_b_end = heads[(OpKind.B, 0)] + problem.durations[OpKind.B].low(0)
    to_w_end = heads[(OpKind.W, 0)] + problem.durations[OpKind.W].low(0) if split else to_b_end
    forward = problem.forward.low(0)
    starts: list[float] = []
    for j in range(problem.microbatches):
        # earlier microbatches whose B(0, .) has not ended: 0..most, taken in blocks
        most = min(j, math.floor((cap - act) / kept + EPS)) if cap - act >= -EPS else -1
        best = math.inf
        for lo, hi in _blocks(most + 1):
            room = max(0.0, cap - act - lo * kept)
            ended_b = j - hi  # at least, for every count of active ones in lo..hi
            ended_w = 0 if hold <= EPS else max(0, ended_b - math.floor(room / hold + EPS))
            when = max(starts[ended_b - 1] + to_b_end if ended_b else 0.0,
                       starts[ended_w - 1] + to_w_end if ended_w else 0.0)
            best = min(best, when)
        if best == math.inf:  # even one activation does not fit: min_capacity reports it
            return None
        starts.append(max(best, starts[-1] + forward if starts else 0.0))
    return starts


def _blocks(count: int) -> list[tuple[int, int]]:
    """``range(count)`` as at most ``MAX_BLOCKS`` consecutive blocks (lo, hi), inclusive: the bound of a
    block (the fewest B's and W's ended for any count in it) is at most each count's, so the work stays
    ``MAX_BLOCKS`` per microbatch however large the cap is beside an activation."""
    size = max(1, -(-count // MAX_BLOCKS))
    return [(lo, min(count, lo + size) - 1) for lo in range(0, count, size)]


def admission_bound(problem: Problem, device: int, starts: list[float] | None, heads: dict, tails: dict) -> float:
    """The makespan bound of ``device`` from the spaced starts of F(0, .) (0 without them)."""
    if starts is None:
        return 0.0
    kinds = [(kind, s) for s in problem.stages_of_device[device] for kind in problem.kinds if kind.is_compute]
    if not kinds:
        return 0.0
    m = problem.microbatches
    t = np.asarray(starts)
    k = np.arange(m)
    best = 0.0
    head_levels = sorted({heads[key] for key in kinds})
    tail_levels = sorted({tails[key] for key in kinds})
    for h in head_levels:
        for q in tail_levels:
            chosen = [key for key in kinds if heads[key] >= h - EPS and tails[key] >= q - EPS]
            if not chosen:
                continue
            if not problem.per_microbatch:
                work = sum(problem.duration(*key, 0) for key in chosen)
                # t_k + h + (m - k) * work + q, at its largest over k
                best = max(best, float(np.max(t - k * work)) + m * work + h + q)
                continue
            works = sorted(sum(problem.duration(*key, j) for key in chosen) for j in range(m))
            least = np.concatenate([[0.0], np.cumsum(works)])  # least[n]: the n least works
            best = max(best, float(np.max(t + least[m - k])) + h + q)
    return best
