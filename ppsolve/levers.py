"""The memory levers as data: what each one is, in one place.

A (stage, microbatch) keeps its activation, offloads part of it, or recomputes it: keep / offload(amount) /
recompute are the modes of one activation. A :class:`Lever` record says what a lever adds to a schedule
(its op kinds), how it changes memory, what it costs (the overhead the second solve phase minimises, and
the schedule metric that reports it) and which block of the problem file enables it. The schedule metrics,
the summaries, frontier's curves and the exporters iterate :data:`LEVERS` instead of naming offload and
recompute one by one.

A new lever is one more record here, its op kinds in ``ops.py``, its memory events in ``memory.py``, its
dependency rules in ``dependencies.py``, one constraint family per solver backend and the executor's
handler: see docs/solver.md ("Where a new lever goes").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem


@dataclass(frozen=True)
class Lever:
    """One way to hold less activation memory on a device."""

    name: str
    """The lever's name in curves, summaries and ``method.params`` (``offload``, ``recompute``)."""
    kinds: tuple[OpKind, ...]
    """The op kinds a schedule adds for each (stage, microbatch) that uses the lever."""
    config: str
    """The problem file's block (and the Problem attribute) that enables it; absent or null: not possible."""
    metric: str
    """The schedule metric that reports its use (``metrics.offloaded``, ``metrics.recomputed``)."""
    overhead: str
    """What the least-overhead phase minimises for it, in words."""
    memory_effect: str
    """How it changes a device's memory, in SPEC.md's terms."""
    available: Callable[[Problem], bool]
    """Whether ``problem`` lets a schedule use it somewhere (a block that saves nothing does not count)."""
    marker: OpKind
    """The op that marks one use: one (stage, microbatch) uses the lever when the schedule has this op."""

    shed_rank: int
    """When shedding removes the uses a schedule can do without, the levers are tried in this order (lowest
    first): a recompute costs compute time on the device itself, a transfer only link time."""
    size: Callable[[object], float]
    """What one use costs, read from its marker op (ScheduledOp-like): shedding tries the largest first."""

    def used_by(self, ops) -> set[tuple[int, int]]:
        """The (stage, microbatch) pairs whose activation uses this lever in ``ops``."""
        return {(op.stage, op.microbatch) for op in ops if op.kind is self.marker}

    def ops_of(self, stage: int, microbatch: int) -> tuple[Op, ...]:
        """The ops one use of the lever adds for (stage, microbatch)."""
        return tuple(Op(kind, stage, microbatch) for kind in self.kinds)


OFFLOAD = Lever(
    name="offload", kinds=(OpKind.OFFLOAD, OpKind.RELOAD), config="offload", metric="offloaded",
    overhead="the amount moved to host memory",
    memory_effect="-amount at the end of OFFLOAD(s,j), +amount at the start of RELOAD(s,j)",
    available=lambda problem: problem.can_offload, marker=OpKind.OFFLOAD, shed_rank=1, size=lambda op: op.amount)

RECOMPUTE = Lever(
    name="recompute", kinds=(OpKind.R,), config="recompute", metric="recomputed",
    overhead="the time of the R ops",
    memory_effect="F(s,j) allocates keep[s][j]; R(s,j) allocates activation - keep at its start",
    available=lambda problem: problem.can_recompute, marker=OpKind.R, shed_rank=0,
    size=lambda op: op.end - op.start)

LEVERS: tuple[Lever, ...] = (OFFLOAD, RECOMPUTE)
"""Every lever, in the order curves and summaries name them."""

def available_levers(problem: Problem) -> tuple[Lever, ...]:
    """The levers ``problem`` lets a schedule use."""
    return tuple(lever for lever in LEVERS if lever.available(problem))


def without_levers(problem: Problem, levers) -> Problem:
    """``problem`` with the blocks of these levers removed."""
    return problem.replace(**{lever.config: None for lever in levers})


def uses(ops) -> list[tuple[Lever, object]]:
    """Every use of a lever in ``ops`` as (lever, its marker op), in the levers' order."""
    return [(lever, op) for lever in LEVERS for op in ops if op.kind is lever.marker]
