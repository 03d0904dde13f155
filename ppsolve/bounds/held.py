"""What one activation must hold on its device whatever lever a schedule picks (contract v3):
kept whole, partly or wholly offloaded (any amount up to its share), or recomputed (then not
offloaded, rule 10). Every memory bound counts these least figures, per (stage, microbatch)."""

from __future__ import annotations

from ppsolve.problem import Problem


def least_held(problem: Problem, stage: int, offload: bool = True, recompute: bool = True,
               microbatch: int | None = None) -> float:
    """The least memory (s, j) holds on its device all through [start of F(s, j), end of B(s, j)):
    its activation less the offloadable share, or, when it may be recomputed, its checkpoint
    keep[s][j] (the rest is back from R(s, j)'s start); ``offload``/``recompute`` False: without
    that lever. Without ``microbatch``: the stage's one value (per-stage problems only)."""
    held = _at(problem.activation, stage, microbatch) - (problem.max_offload(stage, microbatch) if offload else 0.0)
    if recompute and problem.recompute is not None:
        return min(held, _at(problem.recompute.keep, stage, microbatch))
    return held


def forward_allocates(problem: Problem, stage: int, microbatch: int | None = None) -> float:
    """The least memory F(s, j) allocates at its start: its activation, or keep[s][j] when recomputed."""
    grid = problem.recompute.keep if problem.recompute is not None else problem.activation
    return _at(grid, stage, microbatch)


def _at(grid, stage: int, microbatch: int | None) -> float:
    return grid[stage] if microbatch is None else grid.at(stage, microbatch)
