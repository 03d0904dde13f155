"""ZB-H1 and ZB-H2, the zero-bubble schedules (linear placement, split backward).

Both come from the zero-bubble heuristic (:mod:`ppsolve.baselines.families.zb_auto`) on
the real costs and p2p latency. They differ only in the memory limit every
device keeps within, as in the reference implementation: the activations of d
microbatches for ZB-H1 (the busiest device of 1F1B), of 2d for ZB-H2 (of the
largest activation, when microbatches differ).
"""

from __future__ import annotations

import time

from ppsolve.baselines.common import Requirement, finish, largest, with_w_deferred
from ppsolve.baselines.families.onef1b import onef1b_forward_backward
from ppsolve.baselines.families.zb_auto import zb_auto_orders
from ppsolve.errors import InfeasibleError
from ppsolve.method_types import RunOptions
from ppsolve.ops import Op
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

LINEAR_SPLIT = Requirement(placements=("linear",), backward=("split",))


def _build(name: str, microbatches) -> callable:
    def build(problem: Problem, options: RunOptions) -> Schedule:
        started = time.perf_counter()
        n = microbatches(problem.devices)
        limit = n * largest(problem.activation)
        try:
            orders = zb_auto_orders(problem, limit)
        except ValueError as err:
            raise InfeasibleError(f"{name}: {err}") from None
        return finish(problem, orders, name, options, started,
                      params={"microbatches_in_flight": n, "memory_limit": limit})
    build.__name__ = f"build_{name.replace('-', '_')}"
    return build


build_zb_h1 = _build("zb-h1", lambda d: d)
build_zb_h2 = _build("zb-h2", lambda d: 2 * d)


def zb_h1_handcrafted_orders(problem: Problem) -> list[list[Op]]:
    """The zero-bubble paper's handcrafted ZB-H1 (its Figure 3): 1F1B's forwards and backwards, with
    device i running W(j) after B(j + i), so its last i W's fill the cool-down."""
    return [with_w_deferred(problem, onef1b_forward_backward(problem, i), i) for i in range(problem.devices)]


def build_zb_h1_handcrafted(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    return finish(problem, zb_h1_handcrafted_orders(problem), "zb-h1-handcrafted", options, started)
