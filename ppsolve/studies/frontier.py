"""The memory/time frontier: the solver's makespan at each memory capacity, baselines as points.

For each capacity from the least feasible to unbounded, the solver runs on the
problem with that capacity on every device. A schedule found at a smaller
capacity is also feasible at a larger one, so the *monotone* makespan at a
capacity is the best found at it or below; the *raw* makespan is what the
solver returned at that capacity. Both are recorded.

Each curve is named by the memory levers its solver runs may use: ``no-lever``,
``offload``, ``recompute``, ``offload+recompute``. The problem's own curve uses
every lever it has; the comparison curves take them away one at a time, the
recompute block first, then the offload link: a problem with both draws three
curves (offload and recompute, offload only, no lever), which show what each
lever buys at each capacity.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from ppsolve.bounds import min_capacity
from ppsolve.errors import InputError, NotApplicableError, PpsolveError
from ppsolve.jsonio import write_text_atomic
from ppsolve.levers import available_levers, without_levers
from ppsolve.methods import SKIPPED, Method, RunOptions, all_methods, get_method, run_and_check
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.solvers import DEFAULT_SOLVER
from ppsolve.tolerance import EPS

DEFAULT_POINTS = 7
# Curve names, in drawing order (the richest last); what each lets the solver use.
CURVE_LABELS = {"no-lever": "no memory lever", "recompute": "recompute", "offload": "offload",
                "offload+recompute": "offload and recompute"}
LEGACY_CURVES = {"no-offload": "no-lever"}  # the name CSVs written before recompute use


@dataclass
class FrontierPoint:
    """One solver run at one capacity (None: unbounded), or one baseline's own schedule."""

    curve: str  # a key of CURVE_LABELS, or "baseline"
    method: str
    capacity: float | None
    status: str
    makespan: float | None = None  # raw: what this run returned
    best_makespan: float | None = None  # monotone: best at this capacity or any smaller one
    best_from: float | None = None  # the capacity whose schedule gives best_makespan
    peak_memory: float | None = None
    lower_bound: float | None = None
    seconds: float = 0.0
    valid: bool | None = None
    note: str = ""


@dataclass
class Frontier:
    problem: str
    solver: str
    time_limit: float | None
    points: list[FrontierPoint] = field(default_factory=list)
    units: tuple[str, str] = ("problem's time unit", "problem's memory unit")  # time, memory (Problem.units)

    def curve(self, name: str) -> list[FrontierPoint]:
        return [p for p in self.points if p.curve == name]

    @property
    def curves(self) -> list[str]:
        """The solver curves present, in drawing order."""
        return [name for name in CURVE_LABELS if self.curve(name)]


def curve_name(problem: Problem) -> str:
    """The levers ``problem`` lets a schedule use: ``offload+recompute``, ``offload``, ``recompute``
    or ``no-lever``."""
    return "+".join(lever.name for lever in available_levers(problem)) or "no-lever"


def lever_variants(problem: Problem) -> list[Problem]:
    """``problem``, then with fewer levers: with several, each one alone (offload only, then recompute only);
    then no lever (offload and recompute -> offload -> recompute -> no lever)."""
    levers = available_levers(problem)
    variants = [problem]
    if len(levers) > 1:
        variants += [without_levers(problem, [other for other in levers if other is not kept]) for kept in levers]
    if levers:
        variants.append(without_levers(problem, levers))
    return variants


def get_solver(name: str = DEFAULT_SOLVER) -> Method:
    """The solver method; a clear refusal when it is not installed."""
    try:
        method = get_method(name)
    except NotApplicableError:
        known = ", ".join(m.name for m in all_methods()) or "none"
        raise NotApplicableError(f"the frontier needs the solver method {name!r}, which is not registered "
                                 f"(registered methods: {known}); install ppsolve with its solvers") from None
    return method


def _sorted_caps(caps: Sequence[float | None]) -> list[float | None]:
    finite = sorted({c for c in caps if c is not None})
    return finite + ([None] if None in caps else [])


def auto_capacities(low: float, high: float, points: int = DEFAULT_POINTS) -> list[float | None]:
    """``points`` capacities evenly from ``low`` (least feasible) to ``high``, then unbounded."""
    if high <= low * (1 + EPS) or points < 2:
        return [low, None]
    step = (high - low) / (points - 1)
    caps = [low + i * step for i in range(points)]
    return [round(c, 6) if round(c, 6) >= low else c for c in caps] + [None]


def _run(solver: Method, problem: Problem, options: RunOptions) -> tuple[FrontierPoint, object | None]:
    outcome = run_and_check(solver, problem, options, record_bugs=True)
    point = FrontierPoint(curve="", method=solver.name, capacity=None, status=outcome.status,
                          seconds=outcome.seconds or 0.0, note=outcome.note, valid=outcome.valid)
    schedule = outcome.schedule
    if schedule is not None:
        point.makespan = schedule.makespan
        point.peak_memory = max(schedule.peak_memory, default=0.0)
        point.lower_bound = None if schedule.method.lower_bound is None else float(schedule.method.lower_bound)
    return point, schedule



def sweep(problem: Problem, solver: Method, capacities: Sequence[float | None], options: RunOptions,
          curve: str, on_point: Callable[[FrontierPoint], None] | None = None,
          known: dict[float | None, FrontierPoint] | None = None,
          starts: dict[float | None, list[Schedule]] | None = None) -> list[FrontierPoint]:
    """The solver at each capacity (same on every device), with the monotone repair.
    ``known`` holds runs already made (by capacity), which are not repeated. ``starts`` collects the
    valid schedules by capacity, and what it holds for a capacity is passed to the solver as
    schedules to start from (``RunOptions.also_start_from``)."""
    points = []
    best: tuple[float, float | None] | None = None  # (makespan, capacity it came from)
    for cap in _sorted_caps(capacities):
        if known and cap in known:
            point = known[cap]
        else:
            given = tuple(starts.get(cap, ())) if starts is not None else ()
            point, schedule = _run(solver, problem.replace(capacity=cap), replace(options, also_start_from=given))
            if starts is not None and schedule is not None and point.valid:
                starts.setdefault(cap, []).append(schedule)
        point.curve, point.capacity = curve, cap
        if point.valid and point.makespan is not None and (best is None or point.makespan < best[0]):
            best = (point.makespan, cap)
        if best is not None:
            point.best_makespan, point.best_from = best
        points.append(point)
        if on_point:
            on_point(point)
    return points


def baseline_points(problem: Problem, options: RunOptions, exclude: str) -> list[FrontierPoint]:
    """Every applicable non-solver method on the problem with unbounded memory: (peak, makespan)."""
    free = problem.replace(capacity=None)
    points = []
    for method in all_methods():
        if method.family == "solver" or method.name.lower() == exclude.lower():
            continue
        point, _ = _run(method, free, options)
        if point.status == SKIPPED:
            continue
        point.curve, point.capacity = "baseline", None
        points.append(point)
    return points


def least_capacity(problem: Problem) -> float:
    """The least capacity (on every device) that admits a schedule of ``problem``, with its levers (offload, recompute)."""
    return max(min_capacity(problem, offload=problem.can_offload, recompute=problem.can_recompute), default=0.0)


def compute_frontier(problem: Problem, capacities: Sequence[float | None] | None = None,
                     time_limit: float | None = 10.0, points: int = DEFAULT_POINTS, solver_name: str = DEFAULT_SOLVER,
                     compare: bool = True, baselines: bool = True, threads: int | None = None,
                     on_point: Callable[[FrontierPoint], None] | None = None) -> Frontier:
    """Sweep the solver over ``capacities`` (GiB, None in it: unbounded; None: auto, from the least feasible
    to the unbounded peak of the best schedule);
    with ``compare``, also on the problem with fewer levers (:func:`lever_variants`), each from its
    own least feasible capacity. Those run first, and at each capacity their answers are schedules
    the solve with every lever starts from: with more levers a point is never longer than with fewer
    (the solver never ends above a schedule it starts from)."""
    solver = get_solver(solver_name)
    reason = solver.why_not(problem)
    if reason is not None:
        raise NotApplicableError(f"the solver {solver.name} does not apply to this problem: {reason}")
    options = RunOptions(time_limit=time_limit, threads=threads, quiet=True)
    frontier = Frontier(problem=problem.name or "problem", solver=solver.name, time_limit=time_limit,
                        units=problem.units)
    low = least_capacity(problem)
    unbounded: FrontierPoint | None = None
    if capacities is None:
        unbounded, _ = _run(solver, problem.replace(capacity=None), options)
        if unbounded.makespan is None:
            raise PpsolveError(f"the solver found no schedule without a memory cap: {unbounded.note}")
        capacities = auto_capacities(low, max(unbounded.peak_memory, low), points)
    below = [c for c in capacities if c is not None and not c >= low - EPS]
    if below:
        levers = curve_name(problem)
        raise InputError("capacities", f"{below[0]:g} is below the least capacity that admits a schedule "
                                       f"({low:g}{'' if levers == 'no-lever' else ' with ' + levers})")
    known = {None: unbounded} if unbounded is not None else None
    starts: dict[float | None, list[Schedule]] = {}
    fewer = []
    for variant in reversed(lever_variants(problem)[1:]) if compare else []:
        least = least_capacity(variant)
        caps = _sorted_caps([least] + [c for c in capacities if c is None or c >= least])
        fewer += sweep(variant, solver, caps, options, curve_name(variant), on_point, starts=starts)
    frontier.points += sweep(problem, solver, capacities, options, curve_name(problem), on_point, known, starts)
    frontier.points += fewer
    if baselines:
        frontier.points += baseline_points(problem, options, exclude=solver.name)
    return frontier


# ----- CSV -----

COLUMNS = ["curve", "method", "capacity", "status", "makespan", "best_makespan", "best_from", "peak_memory",
           "lower_bound", "seconds", "valid", "note"]


def frontier_csv(frontier: Frontier) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for p in frontier.points:
        cells = []
        for key in COLUMNS:
            value = getattr(p, key)
            if value is None and (key == "capacity" or (key == "best_from" and p.best_makespan is not None)):
                cells.append("unbounded")
            elif value is None:
                cells.append("")
            elif isinstance(value, bool):
                cells.append("yes" if value else "no")
            elif isinstance(value, float):
                cells.append(f"{value:.6g}")
            else:
                cells.append(str(value))
        writer.writerow(cells)
    return buffer.getvalue()


def write_frontier_csv(frontier: Frontier, path: str | Path) -> None:
    write_text_atomic(path, frontier_csv(frontier))


def read_frontier_points(path: str | Path) -> list[FrontierPoint]:
    """The points of a CSV that :func:`frontier_csv` wrote (to draw it again without solving)."""
    points = []
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            values: dict = {}
            for key in COLUMNS:
                text = row[key]
                if key == "curve":
                    values[key] = LEGACY_CURVES.get(text, text)
                elif key in ("method", "status", "note"):
                    values[key] = text
                elif key == "valid":
                    values[key] = {"yes": True, "no": False}.get(text)
                elif text in ("", "unbounded"):
                    values[key] = None if key != "seconds" else 0.0
                else:
                    values[key] = float(text)
            points.append(FrontierPoint(**values))
    return points
