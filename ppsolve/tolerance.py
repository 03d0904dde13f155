"""The tolerances for comparing computed figures, named once.

Times and memory are sums of floats: two ways of computing one figure may differ in
the last bits, so comparisons allow a slack. ``EPS`` is that slack (absolute for
figures up to 1, relative beyond: :func:`slack`); the checker allows the same, so
what passes here passes there. ``MODEL_EPS`` is the looser slack of a figure that
went through the solvers' integer units (``ppsolve.solvers.scaling``) and back, or
through a re-timing of such a schedule.
"""

from __future__ import annotations

EPS = 1e-9
MODEL_EPS = 1e-6


def slack(scale: float) -> float:
    """What a figure of size ``scale`` may be off by: EPS, relative once ``scale`` exceeds 1."""
    return EPS * max(1.0, abs(scale))


def exceeds(level: float, capacity: float | None) -> bool:
    """Whether a memory ``level`` is over ``capacity`` (None: unbounded): the one "over capacity" test of
    ppsolve, with the slack of the capacity's size."""
    return capacity is not None and level > capacity + slack(capacity)
