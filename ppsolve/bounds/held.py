"""What one activation must hold on its device whatever lever a schedule picks (contract v3):
kept whole, partly or wholly offloaded (any amount up to its share), or recomputed (then not
offloaded, rule 10). Every memory bound counts these least figures."""

from __future__ import annotations

from ppsolve.problem import Problem


def least_held(problem: Problem, stage: int, offload: bool = True, recompute: bool = True) -> float:
    """The least memory (s, j) holds on its device all through [start of F(s, j), end of B(s, j)):
    its activation less the offloadable share, or, when it may be recomputed, its checkpoint
    keep[s] (the rest is back from R(s, j)'s start); ``offload``/``recompute`` False: without
    that lever."""
    held = problem.activation[stage] - (problem.max_offload(stage) if offload else 0.0)
    return min(held, problem.recompute.keep[stage]) if recompute and problem.recompute is not None else held


def forward_allocates(problem: Problem, stage: int) -> float:
    """The least memory F(s, j) allocates at its start: its activation, or keep[s] when recomputed."""
    return problem.recompute.keep[stage] if problem.recompute is not None else problem.activation[stage]
