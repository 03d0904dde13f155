"""ppsolve: find, prove and run the best pipeline-parallel training schedule."""

from ppsolve.errors import DeadlockError, InfeasibleError, InputError, NotApplicableError, PpsolveError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem, load_problem, problem_from_dict
from ppsolve.schedule import MethodInfo, Schedule, ScheduledOp, load_schedule, make_schedule, schedule_from_dict
from ppsolve.simulator import retime, simulate

__version__ = "0.1.0"

__all__ = [
    "DeadlockError", "InfeasibleError", "InputError", "MethodInfo", "NotApplicableError", "Op", "OpKind",
    "PpsolveError", "Problem", "Schedule", "ScheduledOp", "load_problem", "load_schedule", "make_schedule",
    "problem_from_dict", "retime", "schedule_from_dict", "simulate", "__version__",
]
