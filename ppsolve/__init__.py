"""ppsolve: find, prove and run the best pipeline-parallel training schedule.

The library's calls: ``solve(problem, time_limit=...)`` (a checked schedule; ``solve_result`` with its
status and notes) and ``Planner`` (plans the next step in the background); ``load_problem`` and
``ppsolve.costmodel.problem_for_batch`` make problems, ``simulate`` and ``retime`` time orders.
"""

from ppsolve.errors import DeadlockError, InfeasibleError, InputError, NotApplicableError, PpsolveError
from ppsolve.ops import Op, OpKind
from ppsolve.planner import Planner
from ppsolve.planning import solve, solve_result
from ppsolve.problem import Problem, load_problem, problem_from_dict
from ppsolve.schedule import MethodInfo, Schedule, ScheduledOp, load_schedule, make_schedule, schedule_from_dict
from ppsolve.simulator import retime, simulate

__version__ = "0.1.0"

__all__ = [
    "DeadlockError", "InfeasibleError", "InputError", "MethodInfo", "NotApplicableError", "Op", "OpKind",
    "Planner", "PpsolveError", "Problem", "Schedule", "ScheduledOp", "load_problem", "load_schedule", "make_schedule",
    "problem_from_dict", "retime", "schedule_from_dict", "simulate", "solve", "solve_result",
    "__version__",
]
