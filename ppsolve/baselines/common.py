"""What every baseline shares: applicability checks, the capacity rule and wrapping a plan.

A baseline builds per-device orders (and offload amounts); :func:`finish` times
them with the simulator, applies the capacity rule and wraps the result, so
every baseline output re-times to itself.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

from ppsolve.bounds import makespan_lower_bound
from ppsolve.errors import InfeasibleError
from ppsolve.memory import peak_memory
from ppsolve.method_types import RunOptions
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import simulate
from ppsolve.tolerance import EPS, exceeds

Orders = list[list[Op]]

# problems with at most this many compute ops are "small": methods may afford more candidates there
SMALL_OPS = 20000


@dataclass(frozen=True)
class Requirement:
    """What a method needs of a problem: placements, backward modes, an offload link, a recompute block."""

    placements: tuple[str, ...] = ()  # empty: any placement
    backward: tuple[str, ...] = ("split", "fused")
    offload: bool = False
    min_chunks: int = 1
    recompute: bool = False

    def text(self) -> str:
        where = "any placement" if not self.placements else "/".join(self.placements)
        how = " or ".join(self.backward)
        out = f"{where}, {how} backward"
        if self.offload:
            out += ", offload link"
        if self.recompute:
            out += ", recompute block"
        return out

    def why_not(self, problem: Problem) -> str | None:
        if self.placements and problem.placement_name not in self.placements:
            return (f"needs {' or '.join(self.placements)} placement, the problem's is "
                    f"{problem.placement_name} (v = {problem.chunks})")
        if problem.backward_mode not in self.backward:
            return f"needs {' or '.join(self.backward)} backward, the problem's is {problem.backward_mode}"
        if problem.chunks < self.min_chunks:
            return f"needs at least {self.min_chunks} chunks per device, the problem has {problem.chunks}"
        if self.offload and not problem.can_offload:
            return "needs an offload link (problem.offload with a fraction > 0), the problem has none"
        if self.recompute and not problem.can_recompute:
            return "needs a recompute block (problem.recompute with keep < activation on a stage), the problem has none"
        return None


def finish(problem: Problem, orders: Sequence[Sequence[Op]], name: str, options: RunOptions, started: float,
           amounts: Mapping[tuple[int, int], float] | None = None, params: dict | None = None,
           ops: list | None = None, waits: Mapping[Op, Sequence[Op]] | None = None) -> Schedule:
    """Time the orders, apply the capacity rule and wrap the schedule.

    ``waits``: explicit waits of the plan (see :func:`ppsolve.simulator.simulate`).
    ``ops``: the simulator's timing of these orders when the caller has it already.
    A schedule whose peak exceeds a device's capacity is refused with
    InfeasibleError ("NAME needs X on device D, capacity is C") unless
    ``options.ignore_capacity``, which records ``capacity_broken: true``.
    """
    if ops is None:
        ops = simulate(problem, orders, amounts, waits)
    over = over_capacity(problem, ops)
    extra = {}
    if over:
        if not options.ignore_capacity:
            d, need, cap = max(over, key=lambda o: o[1] - o[2])
            raise InfeasibleError(f"{name} needs {memory_text(need)} on device {d}, capacity is {memory_text(cap)} "
                                  "(--ignore-capacity builds it anyway)")
        extra["capacity_broken"] = True
        extra["capacity_broken_on"] = [d for d, _, _ in over]
    bound = lower_bound(problem)
    if not math.isfinite(bound):  # no schedule fits the cap (--ignore-capacity): the bound without it
        bound = lower_bound(problem.replace(capacity=None))
    return make_schedule(problem, ops, name, params=params or {}, status="heuristic", lower_bound=bound,
                         seconds=time.perf_counter() - started, **extra)


def lower_bound(problem: Problem) -> float:
    """:func:`ppsolve.bounds.makespan_lower_bound` of the problem's canonical form (its microbatches in one
    order: a renumbering has the same optimum, so the bound is valid for every order), remembered for the
    last few problems: a warm start builds many schedules of one problem (greedy asks twice a build, a
    microbatch-order search builds one per order), and the bound of a per-microbatch problem costs about
    as much as a list schedule of it (0.1 s of CPU at d = 8, m = 32)."""
    return _canonical_bound(problem.canonical)


@functools.lru_cache(maxsize=8)
def _canonical_bound(problem: Problem) -> float:
    return makespan_lower_bound(problem).value


def over_capacity(problem: Problem, ops: Sequence) -> list[tuple[int, float, float]]:
    """(device, peak, capacity) for each device whose peak exceeds its cap."""
    if all(cap is None for cap in problem.capacity):
        return []
    peaks = peak_memory(problem, ops)
    return [(d, peaks[d], cap) for d, cap in enumerate(problem.capacity) if exceeds(peaks[d], cap)]


def memory_deltas(problem: Problem) -> dict[OpKind, list[tuple[float, ...]]]:
    """Per kind, stage and microbatch (``delta[kind][s][j]``), how a device's memory changes with an F
    (at its start), a B and a W (at their ends)."""
    S, m = problem.num_stages, problem.microbatches

    def released(kind: OpKind, s: int) -> tuple[float, ...]:
        if not problem.per_microbatch:  # one value a stage
            return (-problem.released_by(kind, s, 0),) * m
        return tuple(-problem.released_by(kind, s, j) for j in range(m))

    return {OpKind.F: [problem.activation.row(s) for s in range(S)],
            OpKind.B: [released(OpKind.B, s) for s in range(S)], OpKind.W: [released(OpKind.W, s) for s in range(S)]}


def largest(grid) -> float:
    """The largest value of a cost over every stage and microbatch (one number, for a heuristic's limit)."""
    return max(grid.high(s) for s in range(grid.stages))


def most_offload(problem: Problem, stage: int) -> float:
    """The most of one activation of ``stage`` that may go to host memory, over its microbatches."""
    return max(problem.max_offload(stage, j) for j in range(problem.microbatches))


def smallest(grid) -> float:
    """The smallest value of a cost over every stage and microbatch."""
    return min(grid.low(s) for s in range(grid.stages))


def memory_text(x: float) -> str:
    """A memory figure with one decimal ("14.0"), or every digit it needs ("3.25")."""
    return f"{x:.1f}" if abs(round(x, 1) - x) < EPS else f"{x:g}"


def with_recompute(orders: Sequence[Sequence[Op]], recomputed) -> Orders:
    """Insert R(s,j) right before B(s,j) for each (stage, microbatch) in ``recomputed`` (Megatron's
    recompute: the forward reruns just before its backward needs it)."""
    chosen = set(recomputed)
    out: Orders = []
    for actions in orders:
        listed: list[Op] = []
        for op in actions:
            if op.kind is OpKind.B and (op.stage, op.microbatch) in chosen:
                listed.append(Op(OpKind.R, op.stage, op.microbatch))
            listed.append(op)
        out.append(listed)
    return out


def with_w_after_b(problem: Problem, order: list[Op]) -> list[Op]:
    """Insert W(s,j) right after each B(s,j) when the backward is split."""
    return with_w_deferred(problem, order, 0)


def with_w_deferred(problem: Problem, order: list[Op], delay: int) -> list[Op]:
    """Insert each W(s,j) after the ``delay``-th B that follows B(s,j) (the last ``delay`` W's at the
    end) when the backward is split: W(s,j) right after B(s,j+delay) in a 1F1B order."""
    if not problem.split_backward:
        return order
    out: list[Op] = []
    pending: deque[Op] = deque()
    for op in order:
        out.append(op)
        if op.kind is OpKind.B:
            pending.append(Op(OpKind.W, op.stage, op.microbatch))
            if len(pending) > delay:
                out.append(pending.popleft())
    out.extend(pending)
    return out
