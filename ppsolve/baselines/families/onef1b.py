"""GPipe and 1F1B on the linear placement (v = 1).

GPipe runs every forward, then every backward. 1F1B warms device i up with
``min(d - 1 - i, m)`` forwards, then alternates one forward and one backward,
then drains the backwards; each device holds at most ``d - i`` activations.
With split backward, W(s, j) runs right after B(s, j).
"""

from __future__ import annotations

import time

from ppsolve.baselines.common import Requirement, finish, with_w_after_b
from ppsolve.method_types import RunOptions
from ppsolve.ops import B, F, Op
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

LINEAR = Requirement(placements=("linear",))


def gpipe_orders(problem: Problem) -> list[list[Op]]:
    m = problem.microbatches
    return [with_w_after_b(problem, [F(i, j) for j in range(m)] + [B(i, j) for j in range(m)])
            for i in range(problem.devices)]


def onef1b_forward_backward(problem: Problem, device: int, in_flight: int | None = None) -> list[Op]:
    """Device ``device``'s 1F1B order of forwards and backwards (no W); with ``in_flight``, at most
    that many microbatches in flight on the device (at least one)."""
    d, m = problem.devices, problem.microbatches
    limit = d - device if in_flight is None else max(1, min(in_flight, d - device))
    warm = min(limit - 1, m)
    order = [F(device, j) for j in range(warm)]
    for k in range(m - warm):
        order += [F(device, warm + k), B(device, k)]
    return order + [B(device, j) for j in range(m - warm, m)]


def onef1b_orders(problem: Problem) -> list[list[Op]]:
    return [with_w_after_b(problem, onef1b_forward_backward(problem, i)) for i in range(problem.devices)]


def build_gpipe(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    return finish(problem, gpipe_orders(problem), "gpipe", options, started)


def build_1f1b(problem: Problem, options: RunOptions) -> Schedule:
    started = time.perf_counter()
    return finish(problem, onef1b_orders(problem), "1f1b", options, started)
