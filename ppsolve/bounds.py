"""Lower bounds on the makespan and the least memory capacity that admits a schedule.

Every method reports its gap against :func:`makespan_lower_bound`, and an
infeasible capacity is explained with :func:`min_capacity`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ppsolve.dependencies import dependency_table, depth
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


Durations = Callable[[OpKind, int], float]


def _one_microbatch(problem: Problem, duration: Durations | None = None,
                    lag: Callable[[float], float] | None = None) -> tuple[list[tuple[OpKind, int]], dict, dict]:
    """The compute ops of one microbatch in dependency order, their durations and dependencies.

    Read from the one dependency table; transfers are left out (they only add waits, so every
    path below stays a lower bound). ``duration`` and ``lag`` map to other units (a solver
    model's); by default the problem's.
    """
    duration = duration or problem.duration
    lag = lag or (lambda x: x)
    table = dependency_table(problem, problem.kinds)
    order = sorted(table, key=lambda key: depth(problem, *key))
    durations = {key: duration(*key) for key in order}
    deps = {key: [(d.kind, d.stage, lag(d.lag)) for d in table[key] if not d.optional] for key in order}
    return order, durations, deps


def _longest_from(problem: Problem, source: tuple[OpKind, int] | None, duration: Durations | None = None,
                  lag: Callable[[float], float] | None = None) -> dict:
    """Earliest start of every compute op of one microbatch relative to the start of ``source``
    (None: from time 0, every op reachable); ops that do not follow ``source`` are absent."""
    order, duration, deps = _one_microbatch(problem, duration, lag)
    start: dict = {}
    for key in order:
        if key == source or (source is None and not deps[key]):
            start[key] = max([0.0] + [start[(k, s)] + duration[(k, s)] + lag
                                      for k, s, lag in deps[key] if (k, s) in start])
            continue
        reached = [start[(k, s)] + duration[(k, s)] + lag for k, s, lag in deps[key] if (k, s) in start]
        if reached:
            start[key] = max(reached)
    return start


def _tails(problem: Problem, duration: Durations | None = None, lag: Callable[[float], float] | None = None) -> dict:
    """For every compute op of one microbatch, the least time that must pass after it ends."""
    order, duration, deps = _one_microbatch(problem, duration, lag)
    tail = {key: 0.0 for key in order}
    for key in reversed(order):
        for k, s, lag in deps[key]:
            tail[(k, s)] = max(tail[(k, s)], lag + duration[key] + tail[key])
    return tail


def heads_and_tails(problem: Problem, duration: Durations | None = None,
                    lag: Callable[[float], float] | None = None) -> tuple[dict, dict]:
    """Per (kind, stage) of the compute ops of one microbatch: the earliest start from the
    microbatch's first op, and the least time that must pass after it ends (``duration`` and
    ``lag`` as in :func:`_one_microbatch`)."""
    return _longest_from(problem, None, duration, lag), _tails(problem, duration, lag)


@dataclass(frozen=True)
class _Chains:
    """Per stage: the earliest start of F(s, j) (the forward chain before it, latencies included)
    and the least time that must pass after B(s, j) ends (the backward chain below s, W included)."""

    heads: tuple[float, ...]
    tails: tuple[float, ...]


def _chains(problem: Problem) -> _Chains:
    heads, tails = _longest_from(problem, None), _tails(problem)
    S = range(problem.num_stages)
    return _Chains(tuple(heads[(OpKind.F, s)] for s in S), tuple(tails[(OpKind.B, s)] for s in S))


def critical_path(problem: Problem) -> float:
    """One microbatch forward through every stage and backward to the first, with p2p latency."""
    heads, tails = _longest_from(problem, None), _tails(problem)
    return max(heads[key] + problem.duration(*key) + tails[key] for key in heads)


def device_bound(problem: Problem, device: int, chains: _Chains) -> float:
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
    heads, tails = chains.heads, chains.tails
    head = min(heads[s] for s in stages)
    m = problem.microbatches
    load = problem.device_load(device)
    if not problem.split_backward:
        return head + load + min(tails[s] for s in stages)
    fb_load = m * sum(problem.forward[s] + problem.backward_input[s] for s in stages)
    after_last_b = min(tails[s] for s in stages)
    return max(head + load, head + fb_load + after_last_b)


def _lifetime(problem: Problem, stage: int) -> float:
    """Least time from F(s, j) starting to B(s, j) ending: the round trip to the last stage and back."""
    after = _longest_from(problem, (OpKind.F, stage))
    return after[(OpKind.B, stage)] + problem.duration(OpKind.B, stage)


def memory_bound(problem: Problem, device: int, chains: _Chains) -> float:
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
    heads, tails = chains.heads, chains.tails
    m, best = problem.microbatches, 0.0
    for s in problem.stages_of_device[device]:
        kept = problem.activation[s] - problem.max_offload(s)
        if kept <= 0:
            continue
        q = max(1, math.floor(cap / kept + 1e-9))
        if q >= m:
            continue
        best = max(best, heads[s] + math.ceil(m / q) * _lifetime(problem, s) + tails[s])
    return best


def makespan_lower_bound(problem: Problem) -> MakespanBound:
    """No valid schedule of ``problem`` is shorter than ``.value``."""
    chains = _chains(problem)  # one microbatch's chains, shared by every device's bounds
    devices = tuple(device_bound(problem, d, chains) for d in range(problem.devices))
    memory = tuple(memory_bound(problem, d, chains) for d in range(problem.devices))
    path = critical_path(problem)
    return MakespanBound(max(max(devices), max(memory), path), devices, path, memory)


def min_capacity(problem: Problem, offload: bool = False) -> list[float]:
    """Per device, the least capacity for which some schedule exists.

    While F(s, j) runs, every stage of the same device below s still holds
    microbatch j's activation (its B comes after B(s, j)), less what was offloaded:
    the need is ``activation[s]`` plus the kept share of the stages below. It is
    reached by one microbatch in flight with W right after B, each forward waiting
    for the offloads before it (contract v2), each reload after the B above it.
    """
    need = []
    for stages in problem.stages_of_device:
        held, worst = 0.0, 0.0
        for s in stages:
            worst = max(worst, held + problem.activation[s])
            held += problem.activation[s] - (problem.max_offload(s) if offload else 0.0)
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
