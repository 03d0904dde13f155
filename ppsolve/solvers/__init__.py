"""Exact solvers; importing this package registers them in the method registry (family "solver")."""

from __future__ import annotations

from ppsolve.methods import Method, RunOptions, register
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule


def _cpsat_why_not(problem: Problem) -> str | None:
    return None


def _cpsat_build(problem: Problem, options: RunOptions) -> Schedule:
    from ppsolve.solvers.cpsat import SolveOptions, solve

    result = solve(problem, SolveOptions(
        time_limit=options.time_limit if options.time_limit is not None else 60.0, threads=options.threads,
        seed=options.seed, quiet=options.quiet, ignore_capacity=options.ignore_capacity,
        warm_start=options.warm_start))
    return result.schedule


CPSAT = register(Method(
    name="cpsat", family="solver",
    description="OR-Tools CP-SAT model: optimal order, timing and selective offload; proves a lower bound",
    requirements="any problem (placement, backward mode, capacity, offload links)",
    why_not=_cpsat_why_not, build=_cpsat_build))
