"""What the bounds' weak-duality arguments share: the host link as they read it, and the golden-section
search over a price (every price tried gives a valid figure, so a search that misses the best one only
gives a weaker figure)."""

from __future__ import annotations

from collections.abc import Callable

from ppsolve.problem import Problem

PHI = (5 ** 0.5 - 1) / 2


def transfer_time(problem: Problem) -> float:
    """tau = 1/d2h + 1/h2d: the link time one unit of memory takes to leave and come back (0 without
    offload)."""
    return 1 / problem.offload.d2h + 1 / problem.offload.h2d if problem.can_offload else 0.0


def link_rate(problem: Problem) -> float:
    """The most a device can offload and reload per unit of time (0 without offload)."""
    if not problem.can_offload:
        return 0.0
    d2h, h2d = 1 / problem.offload.d2h, 1 / problem.offload.h2d
    return 1 / (max(d2h, h2d) if problem.offload.duplex else d2h + h2d)


def golden_max(f: Callable[[float], float], lo: float, hi: float, steps: int) -> float:
    """The largest value of ``f`` found by golden-section search over [lo, hi] (``f`` concave)."""
    a, b = lo, hi
    best = max(f(a), f(b))
    for _ in range(steps):
        x, y = b - PHI * (b - a), a + PHI * (b - a)
        fx, fy = f(x), f(y)
        best = max(best, fx, fy)
        a, b = (a, y) if fx >= fy else (x, b)
    return best


def golden_min(f: Callable[[float], float], lo: float, hi: float, steps: int) -> float:
    """The least value of ``f`` found by golden-section search over [lo, hi] (``f`` convex)."""
    return -golden_max(lambda v: -f(v), lo, hi, steps)
