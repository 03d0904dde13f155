"""Lower bounds on the makespan and on the memory a problem needs.

``analytic`` combines the per-device bounds into :func:`makespan_lower_bound` and :func:`min_capacity`;
``sequence``, ``admission``, ``idle``, ``first_backward``, ``held`` and ``recompute`` each hold one argument
it uses.
The split bound, which proves smaller problems with CP-SAT, lives with the solver
(``ppsolve.solvers.cpsat.split_bound``) so that this package never imports the solvers.
"""

from ppsolve.bounds.analytic import (MakespanBound, capacity_shortfalls, makespan_lower_bound, min_capacity,
                                     require_feasible_capacity)
from ppsolve.bounds.chains import critical_path, heads_and_tails

__all__ = ["MakespanBound", "capacity_shortfalls", "critical_path", "heads_and_tails", "makespan_lower_bound",
           "min_capacity", "require_feasible_capacity"]
