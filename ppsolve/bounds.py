"""Lower bounds on the makespan and the least memory capacity that admits a schedule.

Every method reports its gap against :func:`makespan_lower_bound`, and an
infeasible capacity is explained with :func:`min_capacity`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppsolve.errors import InfeasibleError
from ppsolve.ops import OpKind
from ppsolve.problem import Problem


@dataclass(frozen=True)
class MakespanBound:
    """The bound and the figures it is the largest of."""

    value: float
    device_bounds: tuple[float, ...]
    critical_path: float
    memory_bounds: tuple[float, ...] = ()

    @property
    def binding(self) -> str:
        candidates = [(self.critical_path, "critical path of one microbatch")]
        candidates += [(b, f"load of device {d}") for d, b in enumerate(self.device_bounds)]
        candidates += [(b, f"memory cap of device {d}") for d, b in enumerate(self.memory_bounds)]
        return max(candidates, key=lambda c: c[0])[1]


def _forward_heads(problem: Problem) -> list[float]:
    """Earliest start of F(s, j) for each stage s: the F chain before it with latencies."""
    heads, t = [], 0.0
    for s in range(problem.num_stages):
        if s > 0:
            t += problem.forward[s - 1] + problem.latency(s - 1, s)
        heads.append(t)
    return heads


def _backward_tails(problem: Problem) -> list[float]:
    """Least time that must pass after B(s, j) ends: the B chain below s (and W of stage 0)."""
    b = [problem.duration(OpKind.B, s) for s in range(problem.num_stages)]
    w0 = problem.backward_weight[0] if problem.split_backward else 0.0
    tails, chain = [], 0.0
    for s in range(problem.num_stages):
        if s > 0:
            chain += b[s - 1] + problem.latency(s - 1, s)
        tails.append(chain + w0 if s > 0 else 0.0)
    return tails


def critical_path(problem: Problem) -> float:
    """One microbatch forward through every stage and backward to the first, with p2p latency."""
    last = problem.num_stages - 1
    heads, tails = _forward_heads(problem), _backward_tails(problem)
    end_b_last = heads[last] + problem.forward[last] + problem.duration(OpKind.B, last)
    tail = tails[last] if last > 0 else (problem.backward_weight[0] if problem.split_backward else 0.0)
    return end_b_last + tail


def device_bound(problem: Problem, device: int) -> float:
    """Head + load + tail of one device.

    Two valid bounds, the larger is kept: (a) the earliest start of any of its
    ops, plus all its compute, plus what must follow its last op (with split
    backward a W can be last, so nothing); (b) with split backward, the same
    for its F and B ops alone, after which the W of that B and the backward
    chain below it still have to run.
    """
    stages = problem.stages_of_device[device]
    if not stages:
        return 0.0
    heads, tails = _forward_heads(problem), _backward_tails(problem)
    head = min(heads[s] for s in stages)
    m = problem.microbatches
    load = problem.device_load(device)
    if not problem.split_backward:
        return head + load + min(tails[s] for s in stages)
    fb_load = m * sum(problem.forward[s] + problem.backward_input[s] for s in stages)
    after_last_b = min(max(problem.backward_weight[s], tails[s]) for s in stages)
    return max(head + load, head + fb_load + after_last_b)


def _lifetime(problem: Problem, stage: int) -> float:
    """Least time from F(s, j) starting to B(s, j) ending: the round trip to the last stage and back."""
    last = problem.num_stages - 1
    trip = sum(problem.forward[t] + problem.duration(OpKind.B, t) for t in range(stage, last + 1))
    return trip + 2 * sum(problem.latency(t, t + 1) for t in range(stage, last))


def memory_bound(problem: Problem, device: int) -> float:
    """A makespan bound from the memory cap of ``device`` (0 when it is unbounded).

    Microbatch j keeps at least ``activation[s] - max_offload(s)`` of stage s on
    the device over [start of F(s, j), end of B(s, j)), an interval of at least
    the round-trip time L_s. A cap C lets at most q = floor(C / kept) of these
    half-open intervals overlap. Intervals that overlap at most q at a time split
    into q chains of disjoint ones, so one chain holds ceil(m / q) of them:
    makespan >= (earliest F(s)) + ceil(m / q) * L_s + (what must follow B(s, j)).
    """
    cap = problem.capacity[device]
    if cap is None:
        return 0.0
    heads, tails = _forward_heads(problem), _backward_tails(problem)
    m, best = problem.microbatches, 0.0
    for s in problem.stages_of_device[device]:
        kept = problem.activation[s] - problem.max_offload(s)
        if kept <= 0:
            continue
        q = max(1, math.floor(cap / kept + 1e-9))
        if q >= m:
            continue
        after = max(tails[s], problem.backward_weight[s] if problem.split_backward else 0.0)
        best = max(best, heads[s] + math.ceil(m / q) * _lifetime(problem, s) + after)
    return best


def makespan_lower_bound(problem: Problem) -> MakespanBound:
    """No valid schedule of ``problem`` is shorter than ``.value``."""
    devices = tuple(device_bound(problem, d) for d in range(problem.devices))
    memory = tuple(memory_bound(problem, d) for d in range(problem.devices))
    path = critical_path(problem)
    return MakespanBound(max(max(devices), max(memory), path), devices, path, memory)


def min_capacity(problem: Problem, offload: bool = False) -> list[float]:
    """Per device, a least capacity for which some schedule exists.

    Without offload this is exact: while F(s, j) runs, every stage of the same
    device below s still holds microbatch j's activation (its B comes after
    B(s, j)); with one microbatch in flight and W right after B nothing else is
    held.

    With offload it is a lower bound (the least capacity can be higher): the
    stages below s may have moved their offloadable share to host before F(s, j)
    starts; but when stage s-1 is on the same device as s, the runtime starts
    F(s, j) of the first microbatch j to reach stage s the instant the compute op
    before it ends. That op is a forward of a stage t < s of this device (no B or
    W can run before any microbatch has reached stage s), and the activation it
    allocated cannot have left yet, so ``activation[s] + activation[t]`` is held.
    """
    need = []
    for stages in problem.stages_of_device:
        held, worst = 0.0, 0.0
        for index, s in enumerate(stages):
            worst = max(worst, held + problem.activation[s])
            if offload and index > 0 and stages[index - 1] == s - 1:
                earlier = min(problem.activation[t] for t in stages[:index])
                worst = max(worst, problem.activation[s] + earlier)
            kept = problem.activation[s] - (problem.max_offload(s) if offload else 0.0)
            held += kept
        need.append(worst)
    return need


def capacity_shortfalls(problem: Problem) -> list[tuple[int, float, float]]:
    """(device, least capacity that could work, capacity) for each device whose cap is too small."""
    need = min_capacity(problem, offload=problem.can_offload)
    return [(d, need[d], cap) for d, cap in enumerate(problem.capacity) if cap is not None and need[d] > cap + 1e-12]


def require_feasible_capacity(problem: Problem) -> None:
    """Raise InfeasibleError naming the least capacity that could work."""
    short = capacity_shortfalls(problem)
    if not short:
        return
    # One line however many devices: the first device that is short, and how many others are.
    device, need, cap = short[0]
    stages = ", ".join(str(s) for s in problem.stages_of_device[device])
    text = f"device {device} needs at least {need:g} (one microbatch on stages {stages}"
    text += f"; {min_capacity(problem, offload=False)[device]:g} without offload)" if problem.can_offload else ")"
    others = f"; {len(short) - 1} other device(s) too (ppsolve bound lists them)" if len(short) > 1 else ""
    raise InfeasibleError(f"infeasible memory capacity: {text}, capacity is {cap:g}{others}")
