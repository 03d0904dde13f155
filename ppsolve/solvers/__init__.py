"""Exact solvers behind one seam; importing this package registers each backend as a method
(family "solver") in the method registry, so ``bench`` and ``frontier`` compare them.

Layout: ``api`` (options, Status, phases, what a backend is asked and answers), ``solve``
(the one entry point and the phases), ``budget`` (the time limit), ``warm_start``,
``scaling`` (all integer scaling), ``progress``, ``lns`` and ``window`` (large-neighbourhood
search), ``block`` (the building-block model: measured, not used by ``solve``); one folder per
backend (``cpsat``, ``milp``), imported only when chosen.
"""

from __future__ import annotations

from ppsolve.methods import Method, RunOptions, register
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.solvers.api import NoSolutionError, SolveOptions, SolveResult, Status
from ppsolve.solvers.phases import BACKENDS, solve

__all__ = ["BACKENDS", "NoSolutionError", "SolveOptions", "SolveResult", "Status", "solve"]

DESCRIPTIONS = {
    "cpsat": "OR-Tools CP-SAT model: optimal order, timing and selective offload; proves a lower bound",
    "milp": "MILP (PuLP + HiGHS, CBC fallback): disjunctive order variables, selective offload; proves a lower bound",
}


def _why_not(name: str):
    def why_not(problem: Problem) -> str | None:
        from ppsolve.solvers.phases import load_backend
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
            solver=name, time_limit=options.time_limit if options.time_limit is not None else 60.0,
            threads=options.threads, seed=options.seed, quiet=options.quiet,
            ignore_capacity=options.ignore_capacity, warm_start=options.warm_start,
            also_start_from=options.also_start_from))
        return result.schedule
    return build


for _name in BACKENDS:
    register(Method(name=_name, family="solver", description=DESCRIPTIONS[_name],
                    requirements="any problem (placement, backward mode, capacity, offload links)",
                    why_not=_why_not(_name), build=_build(_name)))
