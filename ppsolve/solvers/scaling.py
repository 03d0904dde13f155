"""All integer scaling of times and memory of the solver models (CP-SAT and MILP), in one place.

CP-SAT works on integers. Every time the model uses (compute durations, recompute
durations, the p2p latency, transfer durations ``max_offload(s) / bandwidth``) is
multiplied by one factor ``time_scale`` and every memory figure (activations, weight
holds, recompute checkpoints, offload amounts, capacities) by one factor ``memory_scale``.

Each factor is the least common multiple of the denominators of the values'
exact fractions (a value is read as a fraction when a denominator up to
``MAX_DENOMINATOR`` reproduces it to 1e-9 relative). For integer inputs the
factor is 1; for inputs with a few decimals it is a power of ten or so. The
model is then *exact*: its optimum and its bound hold for the real problem.

When no factor below ``MAX_SCALE`` makes everything integral, the scale is
chosen so that the largest value becomes about ``INEXACT_TARGET`` and values
are rounded conservatively (durations and memory use up, capacities down).
Such a model only yields feasible schedules; its bound is not a proof, so the
solver then reports the foundation's lower bound and never claims
optimality from it (``Scaling.exact`` is False).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.tolerance import MODEL_EPS, slack

MAX_DENOMINATOR = 10**6
MAX_SCALE = 10**6
MAX_SCALED = 2**40  # keep every scaled figure far inside CP-SAT's 64-bit domain
INEXACT_TARGET = 10**5


def _fraction(x: float) -> Fraction | None:
    f = Fraction(x).limit_denominator(MAX_DENOMINATOR)
    return f if abs(float(f) - x) <= slack(abs(x)) else None


def _scale_for(values: Iterable[float]) -> tuple[int, bool]:
    """(factor, exact) for a set of nonnegative values."""
    values = [v for v in values if v]
    if not values:
        return 1, True
    scale = 1
    for v in values:
        f = _fraction(v)
        if f is None:
            scale = 0
            break
        scale = scale * f.denominator // math.gcd(scale, f.denominator)
        if scale > MAX_SCALE:
            scale = 0
            break
    biggest = max(abs(v) for v in values)
    if scale and biggest * scale <= MAX_SCALED:
        return scale, True
    return max(1, int(INEXACT_TARGET / biggest)) if biggest < INEXACT_TARGET else 1, False


@dataclass(frozen=True)
class Scaling:
    """Integer versions of every figure the model uses; ``to_time`` maps back."""

    time_scale: int
    memory_scale: int
    exact: bool
    duration: dict  # (kind, stage) -> int, kind in F/B/W/R/OFFLOAD/RELOAD (transfers: full allowed amount)
    latency: tuple[int, ...]  # latency[s] between stage s and s+1
    activation: tuple[int, ...]
    weight_hold: tuple[int, ...]
    offload_amount: tuple[int, ...]  # scaled max_offload(s); 0 where a stage cannot offload
    capacity: tuple[int | None, ...]
    keep: tuple[int, ...] = ()  # scaled recompute.keep[s] (rounded up); empty without a recompute block
    overhead_weight: int = 1  # > the most that can be offloaded in one iteration (model units)

    def overhead(self, recompute: int, offloaded: int) -> int:
        """The OVERHEAD phase's one objective: recompute time first, then the offloaded amount."""
        return self.overhead_weight * recompute + offloaded

    def time(self, x: float, up: bool = True, tolerance: float = MODEL_EPS) -> int:
        """A time of the problem in model units (rounded up, or down, when more than ``tolerance``
        from an integer)."""
        return _rounded(x * self.time_scale, up, tolerance)

    def memory(self, x: float, up: bool = True) -> int:
        """A memory figure in model units (rounded up, or down, when inexact)."""
        return _rounded(x * self.memory_scale, up, MODEL_EPS)

    def to_time(self, t: int) -> float:
        return t / self.time_scale


def _rounded(y: float, up: bool, tolerance: float) -> int:
    r = round(y)
    if abs(y - r) <= tolerance:
        return int(r)
    return math.ceil(y) if up else math.floor(y)


def build_scaling(problem: Problem) -> Scaling:
    S = problem.num_stages
    kinds = list(problem.kinds) + ([OpKind.R] if problem.recompute is not None else [])
    amounts = [problem.max_offload(s) for s in range(S)]
    times = [problem.duration(k, s) for k in kinds for s in range(S)] + [problem.p2p]
    if problem.offload is not None:
        times += [problem.duration(OpKind.OFFLOAD, s, amount=a) for s, a in enumerate(amounts) if a > 0]
        times += [problem.duration(OpKind.RELOAD, s, amount=a) for s, a in enumerate(amounts) if a > 0]
    caps = [c for c in problem.capacity if c is not None]
    keep = list(problem.recompute.keep) if problem.recompute is not None else []
    memory = list(problem.activation) + list(problem.weight_hold) + keep + amounts + caps
    tscale, texact = _scale_for(times)
    mscale, mexact = _scale_for(memory)

    def up(x: float, scale: int) -> int:
        return _rounded(x * scale, True, MODEL_EPS)

    def down(x: float, scale: int) -> int:
        return _rounded(x * scale, False, MODEL_EPS)

    duration: dict = {}
    for s in range(S):
        for k in kinds:
            duration[(k, s)] = up(problem.duration(k, s), tscale)
        if amounts[s] > 0:
            for k in (OpKind.OFFLOAD, OpKind.RELOAD):
                duration[(k, s)] = max(1, up(problem.duration(k, s, amount=amounts[s]), tscale))
    activation = tuple(up(a, mscale) for a in problem.activation)
    hold = tuple(min(up(h, mscale), activation[s]) for s, h in enumerate(problem.weight_hold))
    # Offloading moves less than it could when rounding, so memory stays conservative.
    offload_amount = tuple(min(down(a, mscale), activation[s]) for s, a in enumerate(amounts))
    return Scaling(
        keep=tuple(min(up(k, mscale), activation[s]) for s, k in enumerate(keep)),
        overhead_weight=1 + problem.microbatches * sum(offload_amount),
        time_scale=tscale, memory_scale=mscale, exact=texact and mexact, duration=duration,
        latency=tuple(up(problem.latency(s, s + 1), tscale) for s in range(S - 1)),
        activation=activation, weight_hold=hold, offload_amount=offload_amount,
        capacity=tuple(None if c is None else down(c, mscale) for c in problem.capacity),
    )


def trivial_horizon(problem: Problem, scaling: Scaling) -> int:
    """A makespan no optimal schedule exceeds (model units): everything one after another."""
    S, m = problem.num_stages, problem.microbatches
    total = m * sum(scaling.duration[(k, s)] for s in range(S) for k in problem.kinds)
    total += m * sum(scaling.duration.get((k, s), 0) for s in range(S) for k in (OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD))
    total += 2 * m * sum(scaling.latency)
    return max(1, total)


def peak_ranges(problem: Problem, scaling: Scaling) -> list[tuple[int, int]]:
    """Per device, (least, most) its peak can be (model units): at least its largest activation,
    at most every activation of every microbatch (or its capacity)."""
    out = []
    for d, stages in enumerate(problem.stages_of_device):
        need = sum(scaling.activation[s] for s in stages) * problem.microbatches
        cap = scaling.capacity[d]
        low = max((scaling.activation[s] for s in stages), default=0)  # 0: a device without a stage
        out.append((low, max(low, need if cap is None else min(need, cap))))
    return out
