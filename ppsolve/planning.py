"""The library's entry point: ``ppsolve.solve(problem, time_limit=...)`` -> a checked :class:`Schedule`.

The command ``ppsolve solve`` calls :func:`solve_result` (the schedule with its status, bound and notes);
a program calls :func:`solve`. Both may run in a loop inside a training process: they install no signal
handler, leave no module state behind, and may run in several threads at once (each call has its own
budget, progress and search; ``threads=1`` with a ``seed`` gives the same schedule from every thread).
A time limit below a second that cannot pay for building a model is answered from the heuristics and a
search over microbatch orders, without importing a solver backend (``ppsolve.solvers.quick``); when no
heuristic has ended in time, it waits for the first (1F1B, else the serial plan) and its notes say so.
Ctrl-C reaches a search only in the main thread; a call in another thread runs to its time limit.
Work that does not stop at the limit is left to finish in a daemon thread named ``ppsolve-worker``
(``ppsolve.solvers.api.WORKER``): the heuristic a quick solve was making (with Python's collector paused
while it builds, as every schedule build is: ``ppsolve.gcpause``), or HiGHS while it presolves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

if TYPE_CHECKING:
    from ppsolve.solvers.api import SolveResult
    from ppsolve.solvers.settings import Settings

def solve(problem: Problem, *, time_limit: float | None = None, solver: str | None = None,
          threads: int | None = None, seed: int = 0, objective: str = "makespan",
          makespan_limit: float | str | None = None, warm_start: str | Schedule = "auto",
          ignore_capacity: bool = False, progress: TextIO | None = None,
          settings: "Settings | None" = None) -> Schedule:
    """The fastest schedule of ``problem`` found within ``time_limit`` seconds (None: the command's default,
    60 s), checked by the checker.

    ``solver``: ``cpsat`` or ``milp`` (None: ``ppsolve.solvers.DEFAULT_SOLVER``, cpsat). ``threads``: the search's workers (None: every core; 1 with a given
    ``seed`` is deterministic). ``objective``: ``makespan`` (then the least recompute and offload at that
    makespan) or ``memory`` (the least peak with the makespan at most ``makespan_limit``: a number, or
    ``"1.02x"`` of the best found). ``warm_start``: ``auto`` (the best applicable baseline), ``none``, a
    baseline's name, or a :class:`Schedule` of the same pipeline to go on from. ``ignore_capacity``: as if
    memory were unbounded. ``progress``: a stream for progress lines (None: silent).

    The schedule's ``method`` says how it was made: status (``optimal`` when it meets the proven bound),
    ``lower_bound``, seconds, and ``extra["notes"]``. Raises :class:`~ppsolve.errors.InputError` for bad
    options, :class:`~ppsolve.errors.InfeasibleError` when no schedule fits the capacity, and
    ``NoSolutionError`` (a :class:`~ppsolve.errors.PpsolveError`) when none was found in time.
    """
    return solve_result(problem, time_limit=time_limit, solver=solver, threads=threads, seed=seed,
                        objective=objective, makespan_limit=makespan_limit, warm_start=warm_start,
                        ignore_capacity=ignore_capacity, progress=progress, settings=settings).schedule


def solve_result(problem: Problem, *, time_limit: float | None = None, solver: str | None = None,
                 threads: int | None = None, seed: int = 0, objective: str = "makespan",
                 makespan_limit: float | str | None = None, warm_start: str | Schedule = "auto",
                 ignore_capacity: bool = False, progress: TextIO | None = None,
                 settings: "Settings | None" = None, started: float | None = None,
                 keep_after: float = 0.0) -> "SolveResult":
    """:func:`solve`, with the whole result (status, lower bound, gap, notes, whether it came from the warm
    start). ``started``: ``time.monotonic()`` when the time limit began (default: now); ``keep_after``:
    seconds of it kept for the caller's own work after the solve (the command's comparison)."""
    from ppsolve.solvers import SolveOptions
    from ppsolve.solvers import solve as run_solve
    from ppsolve.solvers.api import DEFAULT_SOLVER, DEFAULT_TIME_LIMIT
    from ppsolve.solvers.settings import Settings

    given = warm_start if isinstance(warm_start, Schedule) else None
    options = SolveOptions(
        solver=DEFAULT_SOLVER if solver is None else solver, time_limit=DEFAULT_TIME_LIMIT if time_limit is None else time_limit, threads=threads,
        seed=seed, objective=objective, makespan_limit=makespan_limit,
        warm_start="schedule" if given is not None else warm_start,
        warm_schedule=given, quiet=progress is None, ignore_capacity=ignore_capacity, stream=progress,
        started=started, keep_after=keep_after, settings=settings or Settings())
    return run_solve(problem, options)
