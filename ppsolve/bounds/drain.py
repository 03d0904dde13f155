"""The drain after a device's last forward, with the levers paid for: the recompute and reloads that
the microbatches still held then bring (used by ``ppsolve.bounds.analytic.drain_bound``).

Fix a device with cap C and a schedule of makespan T. Let t* be the end of the device's last F, and
look at the instant just before it (the F runs, so no B, W or R does; every F of the device has a
positive duration, else the figure is 0). Each (s, j) of the device is then in one of these states:

- done (B and W ended): holds nothing, brings nothing;
- waiting for its W alone: holds the weight hold h, brings W after t*;
- waiting for its B: brings B + W after t*, and holds either a - x, x <= share being the amount on
  host (offloaded, its RELOAD not started), or, recomputed with its R not started, keep, and then
  brings its R after t* too (an R that ran before the last F gives back the whole activation).

Those holdings fit C. After t* the device runs what they bring: V of B and W, and R of recompute, so
T - t* >= V + R; the last F's microbatch needs T - t* >= f, the least tail after an F; and every
amount X on host comes back at h2d on the device's link after t* and before its B, which starts at
least c (the least B + tail after B) before T: T - t* >= c + X / h2d (c <= f, so this holds with
X = 0 too). So the idle and recompute after the last F, T - t* - V, is at least
Z = max(f - V, R, c + X / h2d - V).

Where the device has one item (one stage whose microbatches are alike), :func:`least_drain` finds the
least Z exactly: it tries every count of microbatches in each state, with the least amount on host
that fits the cap (Z only grows with X). Elsewhere the least Z is a knapsack with several kinds of
items, and any weak-duality bound of it is valid. For
alpha, beta, gamma >= 0 summing to 1 and a price lambda >= 0 on memory,

    Z >= alpha f + gamma c - lambda C + sum over (s, j) of the least, over its states, of
         -(alpha + gamma) (work it brings) + beta (R it brings) + gamma x / h2d + lambda (memory held)

(a convex combination of the three terms of Z, plus lambda (held - C) <= 0; the sum separates over
the microbatches, and the state "waiting for B with x on host" is least at x = 0 or x = share).
:func:`least_drain` searches the multipliers (each pair tried is a valid bound; the largest is kept).

The existing idle bound counts a recomputed or offloaded microbatch as held for free; here it costs
its R or its reload, which binds where the last device of a pipeline may recompute or offload: it
must keep the round trip of its last microbatches busy with work it holds, and the cap lets it hold
few whole activations. Per-microbatch costs (contract version 4): each (s, j) is its own term with its
own figures; f and c are the least over them.
"""

from __future__ import annotations

import numpy as np

from ppsolve.bounds.prices import golden_max
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import EPS

_GOLDEN = 12  # golden-section steps on the weight of -V
_GOLDEN_LINK = 6  # and on the weight of the link term, with offload
_AT_ONCE = 4096  # meeting points x items evaluated in one array; past it, bisection
_EXACT_COUNTS = 2_000_000  # one item: every count of its states tried up to this many


def _states(problem: Problem, items: list[tuple[int, int]]) -> tuple[np.ndarray, ...]:
    """Per item: (work of W alone, its hold, work of B + W, activation, share, keep, R), arrays;
    keep and R are inf and 0 where the item cannot be recomputed."""
    split = problem.split_backward
    d = problem.duration
    w = np.array([d(OpKind.W, s, j) if split else 0.0 for s, j in items])
    hold = np.array([problem.weight_hold.at(s, j) if split else 0.0 for s, j in items])
    bw = np.array([d(OpKind.B, s, j) for s, j in items]) + w
    act = np.array([problem.activation.at(s, j) for s, j in items])
    share = np.array([problem.max_offload(s, j) if problem.can_offload else 0.0 for s, j in items])
    if problem.can_recompute:
        keep = np.array([problem.recompute.keep.at(s, j) for s, j in items])
        r = np.array([d(OpKind.R, s, j) for s, j in items])
    else:
        keep, r = np.full(len(items), np.inf), np.zeros(len(items))
    return w, hold, bw, act, share, keep, r


def least_drain(problem: Problem, items: list[tuple[int, int]], weight: int, f_tail: float, c: float) -> float:
    """A lower bound on the idle and recompute after the device's last F (module docstring), for its
    ``items`` (stage, microbatch), each standing for ``weight`` microbatches; 0 without a cap or levers."""
    device = problem.placement[items[0][0]] if items else None
    if device is None or problem.capacity[device] is None:
        return 0.0
    if not (problem.can_recompute or problem.can_offload):
        return 0.0
    if any(problem.duration(OpKind.F, s, j) <= 0 for s, j in items):
        return 0.0
    cap = problem.capacity[device]
    w, hold, bw, act, share, keep, r = _states(problem, items)
    rate = 1 / problem.offload.h2d if problem.can_offload else 0.0  # time per unit reloaded
    if len(items) == 1 and (weight + 1) ** 3 <= _EXACT_COUNTS:
        return _exact(weight, cap, f_tail, c, rate, *(float(v[0]) for v in (w, hold, bw, act, share, keep, r)))

    finite = np.isfinite(keep)
    memory = np.stack([np.zeros_like(act), hold, act, act - share, np.where(finite, keep, 0.0)])
    first, second = np.triu_indices(5, 1)  # every pair of states
    gaps = memory[first] - memory[second]

    def best_price(s: float, gamma: float) -> float:
        """The most over lambda at alpha = s - gamma, beta = 1 - s. In lambda the bound is concave and
        piecewise linear, its pieces meeting where some item's least state changes; its slope (-C plus
        the memory of the least states) falls, so the most is at the first meeting point after which
        the slope is no longer positive, found by bisection (any price tried is valid)."""
        base = np.stack([np.zeros_like(act), -s * w, -s * bw, -s * bw + gamma * rate * share,
                         np.where(finite, -s * bw + (1 - s) * r, np.inf)])

        def value(lam: float) -> float:
            least = (memory * lam + base).min(axis=0)
            return (s - gamma) * f_tail + gamma * c - lam * cap + weight * float(least.sum())

        def slope(lam: float) -> float:
            chosen = (memory * lam + base).argmin(axis=0)
            return weight * float(memory[chosen, np.arange(len(act))].sum()) - cap

        with np.errstate(divide="ignore", invalid="ignore"):
            lam = ((base[second] - base[first]) / gaps).ravel()
        lam = np.unique(np.concatenate([[0.0], lam[np.isfinite(lam) & (lam > 0)]]))
        if len(lam) * len(act) <= _AT_ONCE:  # few: every meeting point at once
            least = (memory[:, :, None] * lam + base[:, :, None]).min(axis=0).sum(axis=0)
            return float(np.max((s - gamma) * f_tail + gamma * c - lam * cap + weight * least))
        lo, hi = 0, len(lam) - 1  # the first meeting point whose next piece does not rise
        while lo < hi:
            mid = (lo + hi) // 2
            if slope((lam[mid] + lam[mid + 1]) / 2) > 0:
                lo = mid + 1
            else:
                hi = mid
        return max(value(lam[k]) for k in {max(0, lo - 1), lo, min(len(lam) - 1, lo + 1)})

    def best_gamma(s: float) -> float:
        if rate <= 0 or not share.any():
            return best_price(s, 0.0)
        return golden_max(lambda g: best_price(s, g), 0.0, s, _GOLDEN_LINK)

    return float(max(0.0, golden_max(best_gamma, 0.0, 1.0, _GOLDEN)))


def _exact(m: int, cap: float, f_tail: float, c: float, rate: float, w: float, hold: float, bw: float, act: float,
           share: float, keep: float, r: float) -> float:
    """The least Z over every count of the ``m`` alike microbatches waiting for B whole or partly on host
    (n_b), as checkpoints (n_r; none when ``keep`` is inf) and waiting for W alone (n_w)."""
    n = np.arange(m + 1, dtype=float)
    n_b, n_r, n_w = np.meshgrid(n, n if np.isfinite(keep) else n[:1], n, indexing="ij")
    held = n_b * act + n_r * (keep if np.isfinite(keep) else 0.0) + n_w * hold
    on_host = np.maximum(0.0, held - cap)  # the least amount on host that fits the cap
    fits = (n_b + n_r + n_w <= m) & (on_host <= n_b * share + EPS)
    work = (n_b + n_r) * bw + n_w * w
    z = np.maximum.reduce([f_tail - work, n_r * r, c + on_host * rate - work])
    return float(max(0.0, z[fits].min()))  # n = 0 everywhere always fits
