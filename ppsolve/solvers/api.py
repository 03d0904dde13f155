"""The solver-agnostic types: options, statuses, phases, the backend contract.

A backend (``ppsolve.solvers.cpsat.backend``, ``ppsolve.solvers.milp.backend``) is a
module that satisfies :class:`Backend`; its main function is
``run_phase(task: PhaseTask) -> PhaseAnswer``: build its model of the problem for
one phase (variables, constraints, objective, from the one dependency table and
the one :class:`~ppsolve.solvers.scaling.Scaling`), search within the task's
limit, and return its solutions as scheduled ops. :mod:`ppsolve.solvers.backends`
names them and imports one (only when chosen). Everything else (warm start,
the order of phases, the time budget, turning solutions into checked schedules,
progress) is in ``ppsolve.solvers.phases``.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, TextIO, runtime_checkable

from ppsolve.errors import PpsolveError
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.solvers.scaling import Scaling
from ppsolve.solvers.settings import Settings

if TYPE_CHECKING:
    from ppsolve.solvers.budget import Budget, Limit
    from ppsolve.solvers.progress import Progress
    from ppsolve.solvers.search.window import Window

OBJECTIVES = ("makespan", "memory")
DEFAULT_TIME_LIMIT = 60.0  # seconds for a whole solve when none is given
DEFAULT_SOLVER = "cpsat"  # the backend a solve uses when none is named (ppsolve.solvers.backends)


class NoSolutionError(PpsolveError):
    """The time limit passed before any schedule was found."""

    exit_code = 4


class Status(str, enum.Enum):
    """What a search established (a solve's result carries OPTIMAL or FEASIBLE).

    OPTIMAL: the best solution is proven optimal for the model. FEASIBLE: solutions, no proof.
    INFEASIBLE: the model has no solution (within the given horizon). UNKNOWN: the limit
    passed with no solution and no proof. The value is what schedule files and JSON output say.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def solved(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)


class Phase(enum.Enum):
    """MAKESPAN: min C. OVERHEAD: the least memory-lever overhead s.t. C <= cap: least total recompute
    time, then least offloaded amount, as one objective ``Scaling.overhead(recompute, offloaded)`` in
    model units. MEMORY: min max peak (then the sum of peaks) s.t. C <= cap (or no cap)."""

    MAKESPAN = "makespan"
    OVERHEAD = "overhead"
    MEMORY = "peak"


@dataclass(frozen=True)
class SolveOptions:
    """How to solve.

    ``time_limit`` is the whole run's wall clock (warm start and model building included), of which
    the caller keeps ``keep_after`` seconds for its own work after ``solve`` returns (the solve
    command: writing the file, comparing with the published schedules). ``threads=1`` with a
    ``seed`` is deterministic while the deterministic limits (derived from ``time_limit``) end each
    step; the wall clock stays the hard limit (see ``ppsolve.solvers.budget``).
    ``symmetry``, ``offload``, ``recompute`` and ``settings`` exist for experiments and tests.
    """

    solver: str = DEFAULT_SOLVER
    time_limit: float = DEFAULT_TIME_LIMIT
    threads: int | None = None
    seed: int = 0
    objective: str = "makespan"
    makespan_limit: float | str | None = None
    warm_start: str = "auto"
    warm_schedule: Schedule | None = None  # a schedule to start from instead (``--warm-start FILE``, kept in warm_start)
    also_start_from: tuple[Schedule, ...] = ()  # schedules tried beside the warm start (the frontier's single-lever answers)
    quiet: bool = True
    ignore_capacity: bool = False
    symmetry: bool = True
    offload: bool = True
    recompute: bool = True  # the problem's recompute block may be used (False: keep or offload only)
    stream: TextIO | None = None
    started: float | None = None  # time.monotonic() when the run began (the CLI: when the command began)
    keep_after: float = 0.0
    settings: Settings = Settings()  # the tuning knobs (ppsolve.solvers.settings); the defaults are measured

    @property
    def deterministic(self) -> bool:
        return self.threads == 1


@dataclass
class SolveResult:
    schedule: Schedule
    status: Status  # OPTIMAL or FEASIBLE (its value is the schedule file's method.status)
    lower_bound: float
    gap: float
    seconds: float
    interrupted: bool = False
    from_warm_start: bool = False
    warm_start: Schedule | None = None
    model_bound: float | None = None
    notes: list[str] = field(default_factory=list)
    abandoned: bool = False  # a search (or the warm start) was left running in a thread


@dataclass
class PhaseTask:
    """One phase for a backend. Times in model units (``scaling``).

    ``horizon``: a makespan known to be reachable (tightens the model; None: the trivial one).
    ``makespan_cap``: OVERHEAD and MEMORY phases keep C <= cap. ``hint``: a schedule to start from.
    ``budget.check()`` is called while building (raises ``TimeUp``); ``limit`` bounds the search.
    ``lower_bound``: a valid cut C >= lower_bound (computed once per solve).
    """

    problem: Problem
    scaling: Scaling
    phase: Phase
    options: SolveOptions
    budget: "Budget"
    limit: "Limit"
    progress: "Progress"
    horizon: int | None = None
    makespan_cap: int | None = None
    hint: Schedule | None = None
    lower_bound: int = 0  # the foundation's makespan bound in model units (0 when the scaling is inexact)
    window: "Window | None" = None  # a neighbourhood of an incumbent to re-solve (ppsolve.solvers.search.window)
    whole_shares: bool = False  # an offload moves its stage's whole share (a quick first step of OVERHEAD)


@dataclass
class PhaseAnswer:
    """Solutions as scheduled ops in the user's units, best last; ``bound`` on the phase's
    quantity (makespan, offloaded amount or largest peak) in model units, when the search proved one.
    ``abandoned``: the search was left running; ``by_clock``: the wall clock stopped it (in
    deterministic mode that means the run may not be reproducible)."""

    status: Status
    solutions: list[list[ScheduledOp]] = field(default_factory=list)
    bound: int | None = None
    interrupted: bool = False
    abandoned: bool = False
    by_clock: bool = False
    work: float = 0.0  # deterministic work done, in the budget's seconds (CP-SAT: deterministic time over its rate)


WORKER = "ppsolve-worker"  # the name of the threads below (a program can wait for them to end)
STOP_GRACE = 3.0  # seconds a search may take to end after Ctrl-C before it is abandoned


def _start_thread(work: Callable[[], Any]) -> tuple[dict, threading.Event]:
    """Start ``work()`` in a daemon thread: (its result, under "value" or "error" once it ended; the
    event set when it ends). An event, not thread.is_alive(): a join interrupted by Ctrl-C can make
    that lie (Python < 3.13)."""
    result: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # re-raised in the calling thread
            result["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name=WORKER).start()
    return result, done


def search_in_thread(search: Callable[[], Any], stop: Callable[[], None], until: float | None = None,
                     grace: float = 0.5) -> tuple[Any, bool, bool]:
    """Run ``search()`` in a worker thread so that Ctrl-C reaches Python: on Ctrl-C, or once the
    clock passes ``until`` (``time.monotonic()``), call ``stop()`` (the backend's way to end its
    search; after Ctrl-C at every turn until the search ends); a search still running ``grace``
    seconds after ``until``, or ``STOP_GRACE`` after Ctrl-C, is abandoned (it runs on, unobserved:
    HiGHS does not read its clock while it presolves or repairs a start solution).

    Returns (what ``search`` returned, or None; interrupted by Ctrl-C; abandoned).
    """
    result, done = _start_thread(search)
    interrupted = stopped = False
    interrupted_at = 0.0
    while not done.is_set():
        try:
            done.wait(0.1)
        except KeyboardInterrupt:
            interrupted, interrupted_at = True, time.monotonic()
        if interrupted and not done.is_set():
            # asked again at every turn: a stop that came before the search had started is lost
            # (CP-SAT's stop_search does nothing then), and the search would run to its limit
            stop()
            if time.monotonic() > interrupted_at + max(grace, STOP_GRACE):
                return None, True, True
        if until is not None and not done.is_set():
            now = time.monotonic()
            if now > until and not stopped:
                stopped = True
                stop()
            if now > until + grace:
                return None, interrupted, True
    if "error" in result and not interrupted:
        raise result["error"]
    return result.get("value"), interrupted, False


def wait_for(work: Callable[[], Any], give_up: Callable[[], bool]) -> tuple[Any, bool]:
    """Run ``work()`` in a daemon thread and wait until it returns or ``give_up()`` is true (checked
    every 50 ms). Python cannot stop a thread: one given up on runs on, unobserved, until the
    process ends. Returns (what ``work`` returned, or None when given up on; given up)."""
    result, done = _start_thread(work)
    while not done.wait(0.05):
        if give_up():
            return None, True
    if "error" in result:
        raise result["error"]
    return result.get("value"), False


@runtime_checkable
class Backend(Protocol):
    """What a solver backend module provides (``ppsolve.solvers.cpsat.backend`` is one); its name and
    capabilities are its record in :mod:`ppsolve.solvers.backends`."""

    def why_not(self) -> str | None:
        """None when the backend can run here, else why not (a missing package, ...)."""

    def engine(self) -> str:
        """The engine and its version, for the schedule's record."""

    def run_phase(self, task: PhaseTask) -> PhaseAnswer:
        """Build the phase's model, search within ``task.limit`` and answer."""
