"""The idle before a device's first B when its forwards fit the cap only by sending activation to host,
counted per stage (used by ``ppsolve.bounds.analytic``'s idle figures).

Fix a device with cap C and a schedule; let t_B be the start of the device's first B (t_B >= EB, the
least B head of its stages). Before t_B the device runs forwards and recomputes only. Where no R of
the device is shorter than its F, split the forwards that run before t_B into Q, recomputed with their
R at or after t_B, and K, the others: T >= load + t_B - (F of K) (``ppsolve.bounds.analytic.idle_bound``:
the R of Q are at least the F of Q). Without recompute K is every forward before t_B.

Take for an item of K its event: its F's start, or its R's start when it is recomputed before t_B, and
let sigma be the last event. From its event on, an item of K holds its activation a less what of it is
on host (a recomputed one: none of it, rule 10), and it releases nothing before its B, after t_B. The
op that starts at sigma (an F, or an R at least as long as its F) ends by t_B, so sigma <= t_B - f, f
the least F of the device. An amount leaves for host only after its F ends, no sooner than e = H + f
(H the least F head of the device), over one device-to-host lane at rate d2h, and frees memory when its
transfer ends: by sigma at most d2h (sigma - e) has left. So at sigma

    sum over K of a  <=  C + d2h * max(0, t_B - H - 2 f).

And the n-th forward of a stage ends no sooner than the stage's least F head plus n of its least F.
Count K by stage, n_s forwards of stage s, each at the stage's least activation and largest F: K fits
at t_B only if t_B >= t(n) = max(EB, H_s + n_s f_s for each stage with n_s > 0, the time from which
sum n_s a_s fits the cap with the link's share). So t_B - (F of K) >= t(n) - V(n) for the n of the
schedule's K, V(n) = sum n_s F_s, and the least of t(n) - V(n) over every n bounds the idle before t_B
(``least_idle_before``, every n at once with numpy).

On a device of one stage ``ppsolve.bounds.idle.least_starts`` counts the same forwards (on no device of
a bundled linear problem does this figure rise above it); on a device of several stages with different
activations and forward times it adds what the mixed sizes force, which the figures that take every
forward at the least size and the longest F leave out (llama8b-like,
interleaved v = 2 at 21 GiB, device 6: 32.6 ms beyond its head; its stage 6 holds 3.375 GiB a
microbatch for a 31.86 ms F, its stage 14 2.25 GiB for 21.24 ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

# the most stage-count combinations counted for one device (33 ** 2 for two stages of 32 microbatches, 129 ** 2
# for two of 128: about 5 ms); beyond, no figure is made (counting every device of the d = 32, m = 256, v = 2
# scale problems, 257 ** 2 where the link keeps pace with the forwards, added 0.3 s to a 0.9 s bound and
# raised nothing)
MAX_COMBINATIONS = 50_000


@dataclass(frozen=True)
class StageForwards:
    """A stage's forwards on the device, as the argument counts them (module docstring)."""

    count: int  # forwards of the stage
    activation: float  # the least activation of one
    work: float  # the longest F
    gap: float  # the shortest F (the n-th ends no sooner than head + n gap)
    head: float  # the least F head


def stage_forwards(problem: Problem, items: list[tuple[int, int]], heads: dict, weight: int) -> list[StageForwards]:
    """A device's forwards by stage: its ``items`` (stage, microbatch), each standing for ``weight``
    microbatches, with ``heads`` their least F starts (``ppsolve.bounds.chains.Chains.f_head``)."""
    out = []
    for stage in sorted({s for s, _ in items}):
        mine = [i for i in items if i[0] == stage]
        forwards = [problem.duration(OpKind.F, *i) for i in mine]
        out.append(StageForwards(weight * len(mine), min(problem.activation.at(*i) for i in mine), max(forwards),
                                 min(forwards), min(heads[i] for i in mine)))
    return out


def least_idle_before(stages: list[StageForwards], cap: float, first_b: float, d2h: float) -> float | None:
    """The least over stage counts n of t(n) - V(n) (module docstring): a lower bound on t_B less the F
    work of K before it. None when there are more than ``MAX_COMBINATIONS`` combinations."""
    head = min(st.head for st in stages)
    link_from = head + 2 * min(st.gap for st in stages)  # what is on host by sigma left from here on
    sizes = [st.count + 1 for st in stages]
    # Only an n with t(n) - V(n) < first_b (the figure at n = 0) can be the least, and such an n has
    # sum n_s (a_s - d2h F_s) <= C + d2h max(0, first_b - link_from): where every term is positive, that
    # caps each count.
    slopes = [st.activation - d2h * st.work for st in stages]
    if all(slope > 0 for slope in slopes):
        room = cap + d2h * max(0.0, first_b - link_from)
        sizes = [min(size, math.floor(room / slope + EPS) + 1) for size, slope in zip(sizes, slopes)]
    if math.prod(sizes) > MAX_COMBINATIONS:
        return None
    counts = np.indices(sizes).reshape(len(stages), -1)  # one column per n
    held = np.array([st.activation for st in stages]) @ counts
    work = np.array([st.work for st in stages]) @ counts
    t = np.full(counts.shape[1], first_b)
    for n, st in zip(counts, stages):
        t = np.maximum(t, np.where(n > 0, st.head + n * st.gap, -np.inf))
    over = held > cap + EPS
    if d2h > 0:
        t = np.where(over, np.maximum(t, link_from + (held - cap) / d2h), t)
    else:
        t = np.where(over, np.inf, t)
    return float(np.min(t - work))  # n = 0 (no forward, t = first_b) is always there
