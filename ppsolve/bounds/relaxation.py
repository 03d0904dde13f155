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

:func:`end_pair` keeps the first and the last stage of a linear problem on two devices and makes the
stages between them a latency: microbatch j's is the least of its forward chain between them (their F
and the hops) and its backward chain (their B and the hops). Any schedule of the problem gives one of
the pair with the same makespan: keep those two stages' ops (with their R and transfers) where they
are. Each dependency between them spans at least that chain; the two devices' memory and host links
carry what they carried (a shared link, fewer transfers). So the pair's optimum is at most the
problem's, and at least every bound that reasons only about those two devices with the others as
delays: what the pair's search finds caps what such an argument can prove.
"""

from __future__ import annotations

import dataclasses

from ppsolve.costs import Grid
from ppsolve.errors import InputError
from ppsolve.ops import OpKind
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


def _ends(grid: Grid, last: int) -> Grid:
    if grid.per_microbatch:
        return Grid.of_rows(grid.field, [grid.row(0), grid.row(last)])
    return Grid.of_stages(grid.field, [grid.at(0, 0), grid.at(last, 0)], grid.microbatches)


def end_pair(problem: Problem) -> Problem:
    """The first and last stage of a linear problem alone on two devices, the stages between them a
    latency per microbatch (module docstring)."""
    if problem.placement_name != "linear" or problem.chunks != 1 or problem.devices < 3:
        raise InputError("problem.placement", "the pair relaxation needs a linear placement of 3 or more devices")
    last = problem.num_stages - 1  # also the number of hops from the first stage to the last

    def chain(kind: OpKind, j: int) -> float:
        return sum(problem.duration(kind, s, j) for s in range(1, last)) + last * problem.p2p_times[j]

    latency = tuple(min(chain(OpKind.F, j), chain(OpKind.B, j)) for j in range(problem.microbatches))
    offload = problem.offload
    if offload is not None:
        ends = {0: 0, problem.devices - 1: 1}
        links = tuple(tuple(ends[d] for d in link if d in ends) for link in offload.links)
        offload = dataclasses.replace(offload, fraction=(offload.fraction[0], offload.fraction[last]),
                                      links=tuple(link for link in links if link))
    recompute = problem.recompute
    if recompute is not None:
        recompute = dataclasses.replace(recompute, keep=_ends(recompute.keep, last), time=_ends(recompute.time, last))
    return dataclasses.replace(
        problem, devices=2, placement_spec="linear", forward=_ends(problem.forward, last),
        backward_input=_ends(problem.backward_input, last), backward_weight=_ends(problem.backward_weight, last),
        p2p_times=latency, activation=_ends(problem.activation, last), weight_hold=_ends(problem.weight_hold, last),
        capacity=(problem.capacity[0], problem.capacity[-1]), offload=offload, recompute=recompute,
        name=f"{problem.name or 'problem'}: first and last stage, the rest a latency",
        annotations={key: value for key, value in problem.annotations.items() if key == "x-units"}, source=None)
