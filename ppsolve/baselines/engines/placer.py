"""Timing ops one at a time as a heuristic places them, by the one dependency table.

The self-timing heuristics (the zero-bubble ones, the building-block search) decide
each next op from the times of those already placed. :class:`Placer` gives them
those times as the simulator would: an op starts once its device is free and every
op it waits for (:func:`ppsolve.dependencies.dependency_table`, same microbatch)
has ended plus its lag, each op on its own microbatch's duration and lags. Each (kind, stage)
takes its microbatches in index order.
Only compute ops without recompute are placed: the optional dependencies (on a
RELOAD or an R) never hold.
"""

from __future__ import annotations

from ppsolve.dependencies import dependency_table
from ppsolve.ops import OpKind
from ppsolve.problem import Problem

KINDS = (OpKind.F, OpKind.B, OpKind.W)


class Placer:
    """Per device, when it is free; per (kind, stage), when each placed microbatch ends."""

    def __init__(self, problem: Problem, kinds: tuple[OpKind, ...] = KINDS):
        S, m = problem.num_stages, problem.microbatches
        self.free = [0.0] * problem.devices
        self.ends: dict[tuple[OpKind, int], list[float]] = {(kind, s): [] for kind in kinds for s in range(S)}
        # per (kind, stage): its ends, (ends, lag of each microbatch) of each op it waits for, its device and
        # the duration of each microbatch
        self._slot = {key: (self.ends[key],
                            tuple((self.ends[(dep.kind, dep.stage)], tuple(dep.lag_of(problem, j) for j in range(m)))
                                  for dep in deps if not dep.optional),
                            problem.placement[key[1]], problem.durations[key[0]].row(key[1]))
                      for key, deps in dependency_table(problem, kinds).items()}

    def placed(self, kind: OpKind, stage: int) -> int:
        """How many microbatches of (kind, stage) are placed."""
        return len(self.ends[(kind, stage)])

    def ready(self, kind: OpKind, stage: int, microbatch: int) -> float | None:
        """When every op that (kind, stage, microbatch) waits for has ended plus its lag (0.0: none);
        None while one of them is not placed."""
        at = 0.0
        for ends, lag in self._slot[(kind, stage)][1]:
            if microbatch >= len(ends):
                return None
            t = ends[microbatch] + lag[microbatch]
            if t > at:
                at = t
        return at

    def put(self, kind: OpKind, stage: int) -> float | None:
        """Place the next microbatch of (kind, stage) on its device: its end, or None (nothing placed)
        while an op it waits for is not placed."""
        ends, inputs, device, duration = self._slot[(kind, stage)]
        j = len(ends)
        start = self.free[device]
        for before, lag in inputs:
            if j >= len(before):
                return None
            t = before[j] + lag[j]
            if t > start:
                start = t
        end = self.free[device] = start + duration[j]
        ends.append(end)
        return end
