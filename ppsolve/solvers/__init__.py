"""Exact solvers behind one seam; ``METHODS`` lists each backend as a method (family "solver")
for the method registry (:mod:`ppsolve.methods`), so ``bench`` and ``frontier`` compare them.

Layout: ``api`` (options, Status, phases, the backend contract, what a backend is asked and
answers), ``backends`` (the backends by name), ``phases`` (``solve``, the one entry point, and its
phases), ``budget`` (the time limit), ``scaling`` (all integer scaling), ``settings``,
``progress``, ``shed``, ``symmetry``, ``quick`` (time limits too short for a model);
``warm_start/`` (the schedule a backend starts from, and its own ``plans``); ``search/``
(large-neighbourhood search); one folder per backend (``cpsat``, ``milp``), imported only when
chosen.
"""

from __future__ import annotations

from ppsolve.method_types import Method, RunOptions
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.solvers.api import DEFAULT_SOLVER, DEFAULT_TIME_LIMIT, NoSolutionError, SolveOptions, SolveResult, Status
from ppsolve.solvers.backends import BACKENDS, load_backend
from ppsolve.solvers.phases import solve

__all__ = ["BACKENDS", "DEFAULT_SOLVER", "NoSolutionError", "SolveOptions", "SolveResult", "Status", "solve"]


def _why_not(name: str):
    def why_not(problem: Problem) -> str | None:
        from ppsolve.errors import NotApplicableError

        try:
            load_backend(name)
        except NotApplicableError as exc:
            return str(exc)
        return None
    return why_not


def _build(name: str):
    def build(problem: Problem, options: RunOptions) -> Schedule:
        result = solve(problem, SolveOptions(
            solver=name, time_limit=options.time_limit if options.time_limit is not None else DEFAULT_TIME_LIMIT,
            threads=options.threads, seed=options.seed, quiet=options.quiet,
            ignore_capacity=options.ignore_capacity, warm_start=options.warm_start,
            also_start_from=options.also_start_from))
        return result.schedule
    return build


METHODS: tuple[Method, ...] = tuple(
    Method(name=name, family="solver", description=record.description,
           requirements="any problem (placement, backward mode, capacity, offload links)",
           why_not=_why_not(name), build=_build(name))
    for name, record in BACKENDS.items())
