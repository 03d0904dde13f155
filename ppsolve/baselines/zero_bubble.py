"""ZB-H1 and ZB-H2, the handcrafted zero-bubble schedules (linear, split backward).

Both keep 1F1B's shape but let W fill the time a device would otherwise idle.
They differ only in memory: ZB-H1 keeps 1F1B's ``d - i`` activations on device
i, ZB-H2 allows ``2(d - i) - 1`` so the warm-up bubble disappears too. The
order is the one these definitions give on uniform costs (the list scheduler
in unit mode); the simulator then times it on the real costs.
"""

from __future__ import annotations

import time

from ppsolve.baselines.common import Requirement, finish
from ppsolve.baselines.listsched import ListPolicy, list_orders
from ppsolve.methods import RunOptions
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

LINEAR_SPLIT = Requirement(placements=("linear",), backward=("split",))


def zb_orders(problem: Problem, in_flight) -> list:
    """Orders of a zero-bubble schedule keeping ``in_flight(i)`` activations on device i."""
    limit = tuple(float(in_flight(i)) for i in range(problem.devices))
    orders, _ = list_orders(problem, ListPolicy(limit=limit, unit=True))
    return orders


def build_zb_h1(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    d = problem.devices
    orders = zb_orders(problem, lambda i: d - i)
    return finish(problem, orders, "zb-h1", options, started, params={"in_flight": [d - i for i in range(d)]})


def build_zb_h2(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    d = problem.devices
    orders = zb_orders(problem, lambda i: 2 * (d - i) - 1)
    return finish(problem, orders, "zb-h2", options, started,
                  params={"in_flight": [2 * (d - i) - 1 for i in range(d)]})
