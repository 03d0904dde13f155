"""The CP-SAT model of ppsolve: optimal schedules with selective offload, with proven bounds.

Modules: ``scaling`` (all integer scaling), ``variables``, ``constraints`` (one
function per family), ``objective``, ``warm_start``, ``progress`` and ``solve``
(the entry point).
"""

from ppsolve.solvers.cpsat.solve import NoSolutionError, SolveOptions, SolveResult, realise, solve

__all__ = ["NoSolutionError", "SolveOptions", "SolveResult", "realise", "solve"]
