"""All integer scaling of times and memory of the solver models (CP-SAT and MILP), in one place.

CP-SAT works on integers. Every time the model uses (compute durations, recompute
durations, the p2p latencies, transfer durations ``max_offload(s, j) / bandwidth``) is
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

from ppsolve.costs import Grid
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
    """Integer versions of every figure the model uses, per (stage, microbatch); ``to_time`` maps back.

    Per-op figures are :class:`~ppsolve.costs.Grid` tables of ints in the form of the problem's (one value
    a stage when the cost does not vary, so a uniform problem costs what it did): read them per op
    (``duration(kind, s, j)``, ``activation.at(s, j)``).
    """

    time_scale: int
    memory_scale: int
    exact: bool
    durations: dict  # kind -> Grid of ints, kind in F/B/W/R/OFFLOAD/RELOAD (transfers: full allowed amount)
    p2p: tuple[int, ...]  # the p2p latency of each microbatch
    activation: Grid
    weight_hold: Grid
    offload_amount: Grid  # scaled max_offload(s, j); 0 where a stage cannot offload
    capacity: tuple[int | None, ...]
    keep: Grid | None = None  # scaled recompute.keep (rounded up); None without a recompute block
    overhead_weight: int = 1  # > the most that can be offloaded in one iteration (model units)

    def duration(self, kind: OpKind, stage: int, microbatch: int) -> int:
        """The model duration of ``kind`` of (stage, microbatch) (a transfer: moving the whole allowed amount)."""
        return self.durations[kind].at(stage, microbatch)

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


def _distinct(grid: Grid) -> set[float]:
    """The values of a grid (each once: a per-stage grid costs S, not S * m)."""
    if grid.per_microbatch:
        return {v for s in range(grid.stages) for v in grid.row(s)}
    return {grid.at(s, 0) for s in range(grid.stages)}


def _table(field: str, like: list[Grid], value) -> Grid:
    """A grid of ``value(s, j)``, per stage unless one of the grids ``like`` is per microbatch."""
    stages, m = like[0].stages, like[0].microbatches
    if any(g.per_microbatch for g in like):
        return Grid(field, m, rows=tuple(tuple(value(s, j) for j in range(m)) for s in range(stages)))
    return Grid(field, m, per_stage=tuple(value(s, 0) for s in range(stages)))


def build_scaling(problem: Problem) -> Scaling:
    S = problem.num_stages
    kinds = list(problem.kinds) + ([OpKind.R] if problem.recompute is not None else [])
    act = problem.activation
    fraction = problem.offload.fraction if problem.offload is not None else (0.0,) * S
    amounts = _table("offload amount", [act], lambda s, j: fraction[s] * act.at(s, j))
    times = {v for k in kinds for v in _distinct(problem.durations[k])} | set(problem.p2p_times)
    if problem.offload is not None:
        for k in (OpKind.OFFLOAD, OpKind.RELOAD):
            times |= {problem.duration(k, 0, amount=a) for a in _distinct(amounts) if a > 0}
    caps = [c for c in problem.capacity if c is not None]
    keep = problem.recompute.keep if problem.recompute is not None else None
    grids = [act, problem.weight_hold, amounts] + ([keep] if keep is not None else [])
    memory = set(caps).union(*(_distinct(g) for g in grids))
    tscale, texact = _scale_for(times)
    mscale, mexact = _scale_for(memory)

    def up(x: float, scale: int) -> int:
        return _rounded(x * scale, True, MODEL_EPS)

    def down(x: float, scale: int) -> int:
        return _rounded(x * scale, False, MODEL_EPS)

    durations = {k: problem.durations[k].map(f"model {k.value}", lambda x: up(x, tscale)) for k in kinds}
    if problem.offload is not None:
        for k in (OpKind.OFFLOAD, OpKind.RELOAD):
            durations[k] = _table(f"model {k.value}", [act], lambda s, j, k=k: 0 if amounts.at(s, j) <= 0 else max(
                1, up(problem.duration(k, s, j, amount=amounts.at(s, j)), tscale)))
    activation = act.map("model activation", lambda a: up(a, mscale))
    hold = problem.weight_hold.combine("model weight hold", activation, lambda h, a: min(up(h, mscale), a))
    # Offloading moves less than it could when rounding, so memory stays conservative.
    offload_amount = amounts.combine("model offload amount", activation, lambda x, a: min(down(x, mscale), a))
    return Scaling(
        keep=None if keep is None else keep.combine("model keep", activation, lambda k, a: min(up(k, mscale), a)),
        overhead_weight=1 + sum(offload_amount.total(s) for s in range(S)),
        time_scale=tscale, memory_scale=mscale, exact=texact and mexact, durations=durations,
        p2p=tuple(up(x, tscale) for x in problem.p2p_times),
        activation=activation, weight_hold=hold, offload_amount=offload_amount,
        capacity=tuple(None if c is None else down(c, mscale) for c in problem.capacity),
    )


def trivial_horizon(problem: Problem, scaling: Scaling) -> int:
    """A makespan no optimal schedule exceeds (model units): everything one after another."""
    S = problem.num_stages
    kinds = list(problem.kinds) + [k for k in (OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD) if k in scaling.durations]
    total = sum(scaling.durations[k].total(s) for k in kinds for s in range(S))
    crossings = sum(1 for s in range(S - 1) if problem.placement[s] != problem.placement[s + 1])
    total += 2 * crossings * sum(scaling.p2p)
    return max(1, total)


def peak_ranges(problem: Problem, scaling: Scaling) -> list[tuple[int, int]]:
    """Per device, (least, most) its peak can be (model units): at least its largest activation,
    at most every activation of every microbatch (or its capacity)."""
    out = []
    act = scaling.activation
    for d, stages in enumerate(problem.stages_of_device):
        need = sum(act.total(s) for s in stages)
        cap = scaling.capacity[d]
        low = max((act.high(s) for s in stages), default=0)  # 0: a device without a stage
        out.append((low, max(low, need if cap is None else min(need, cap))))
    return out
