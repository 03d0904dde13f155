"""The least-cost relaxation of a problem whose costs differ per microbatch.

:func:`least_costs` gives every microbatch of a stage the least value of each cost over the stage's
microbatches (durations, latency, activation, weight hold, checkpoint, recompute time). Its optimum
is at most the problem's: take any valid schedule of the problem and keep every start time. Shorter
ops and latencies end no later, so every ordering rule and the lanes still hold; every memory size
is no larger at every event (a checkpoint or a weight hold stays within its activation: the least
of each is at most the least activation), so every device stays under its cap; an offloaded amount
above the smaller share is cut to it, which leaves no more on the device, and its transfers only
end sooner. The makespan does not grow. So any lower bound of the relaxation, whose microbatches are
interchangeable again, is a lower bound of the problem: the arguments that need interchangeable
microbatches (the in-order bound, the split bound) are made on it.
"""

from __future__ import annotations

import dataclasses

from ppsolve.costs import Grid
from ppsolve.problem import Problem


def _least(grid: Grid) -> Grid:
    return Grid.of_stages(grid.field, [grid.low(s) for s in range(grid.stages)], grid.microbatches)


def least_costs(problem: Problem) -> Problem:
    """``problem`` with every cost of a stage at its least over the microbatches (module docstring)."""
    recompute = problem.recompute
    if recompute is not None:
        recompute = dataclasses.replace(recompute, keep=_least(recompute.keep), time=_least(recompute.time))
    return dataclasses.replace(
        problem, forward=_least(problem.forward), backward_input=_least(problem.backward_input),
        backward_weight=_least(problem.backward_weight), activation=_least(problem.activation),
        weight_hold=_least(problem.weight_hold), p2p_times=(min(problem.p2p_times),) * problem.microbatches,
        recompute=recompute, source=None)
