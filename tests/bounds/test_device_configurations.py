"""The configuration programme of ``benchmarks/reports/device_configurations.py`` stays at or under the exact
optimum of tiny linear problems with levers, and rises above the device's compute where memory binds.

The optima come from the same independent models as ``tests/bounds/test_bound_levers.py``: the enumeration of
every device order and recompute choice (recompute), the MILP over continuous times and amounts (offload).
"""

from __future__ import annotations

import random

from benchmarks.reports.device_configurations import bound, device_figures
from tests.bounds.test_bound_levers import offload_cases, recompute_cases


def _figure(problem, step: float = 0.5) -> float:
    return max(bound(device_figures(problem, s), problem.microbatches, step)[0] for s in range(problem.num_stages))


def _above_compute(problem, figure: float) -> bool:
    return figure > max(problem.device_load(d) for d in range(problem.devices)) + 1e-6


def test_the_configuration_figure_stays_under_the_exact_optimum_with_recompute():
    compared = above_compute = 0
    linear = lambda problem: problem.chunks == 1 and not problem.per_microbatch  # noqa: E731
    for case in recompute_cases(random.Random(5), 400, where=linear):
        if case is None:
            continue
        problem, best = case
        figure = _figure(problem)
        assert figure <= best + 1e-6, (problem, figure, best)
        compared += 1
        above_compute += _above_compute(problem, figure)
        if compared == 40:
            break
    assert compared == 40
    assert above_compute >= 3, above_compute  # the memory rows bind on some


def test_the_configuration_figure_stays_under_the_proven_optimum_with_offload():
    compared = above_compute = 0
    for problem, best in offload_cases(random.Random(23), 12, seconds=5, where=lambda problem: problem.chunks == 1):
        if best is None:
            continue
        figure = _figure(problem, step=0.25)
        assert figure <= best + 1e-6, (problem, figure, best)
        compared += 1
        above_compute += _above_compute(problem, figure)
        if compared == 5:
            break
    assert compared >= 4, compared
    assert above_compute >= 1, above_compute  # an offload row binds on some
