"""The configuration programme of ``benchmarks/reports/device_configurations.py`` stays at or under the exact
optimum of tiny linear problems with levers, and rises above the device's compute where memory binds.

The optima come from the same independent models as ``tests/bounds/test_bound_levers.py``: the enumeration of
every device order and recompute choice (recompute), the MILP over continuous times and amounts (offload).
"""

from __future__ import annotations

import random

from benchmarks.reports.device_configurations import bound, device_figures
from ppsolve.bounds import min_capacity
from ppsolve.problem import problem_from_dict
from tests.bounds.test_bound_levers import _caps, draw_offload, draw_recompute
from tests.bounds.test_bound_per_microbatch import Tiny, TooMany, optimum
from tests.solvers.cases import proven_optimum


def _figure(problem, step: float = 0.5) -> float:
    return max(bound(device_figures(problem, s), problem.microbatches, step)[0] for s in range(problem.num_stages))


def test_the_configuration_figure_stays_under_the_exact_optimum_with_recompute():
    rng = random.Random(5)
    compared = above_compute = 0
    for _ in range(400):
        data = draw_recompute(rng)
        problem = problem_from_dict(data)
        if problem.chunks != 1 or problem.per_microbatch:
            continue
        caps = _caps(rng, min_capacity(problem, recompute=True), min_capacity(problem))
        data["memory"]["capacity"] = caps
        problem = problem_from_dict(data)
        try:
            best = optimum(Tiny(data), problem, caps)
        except TooMany:
            continue
        figure = _figure(problem)
        assert figure <= best + 1e-6, (data, figure, best)
        compared += 1
        above_compute += figure > max(problem.device_load(d) for d in range(problem.devices)) + 1e-6
        if compared == 40:
            break
    assert compared == 40
    assert above_compute >= 3, above_compute  # the memory rows bind on some


def test_the_configuration_figure_stays_under_the_proven_optimum_with_offload():
    rng = random.Random(23)
    compared = above_compute = 0
    for _ in range(12):
        data = draw_offload(rng)
        problem = problem_from_dict(data)
        if problem.chunks != 1:
            continue
        low = min_capacity(problem, offload=True, recompute=problem.can_recompute)
        problem = problem.replace(capacity=tuple(_caps(rng, low, min_capacity(problem))))
        best = proven_optimum(problem, time_limit=5)
        if best is None:
            continue
        figure = _figure(problem, step=0.25)
        assert figure <= best + 1e-6, (problem, figure, best)
        compared += 1
        above_compute += figure > max(problem.device_load(d) for d in range(problem.devices)) + 1e-6
        if compared == 5:
            break
    assert compared >= 4, compared
    assert above_compute >= 1, above_compute  # an offload row binds on some
