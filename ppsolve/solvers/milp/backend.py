"""The MILP backend: ``run_phase(task) -> PhaseAnswer`` on PuLP with HiGHS (CBC when highspy is missing).

Builds the model (``variables``, ``constraints``, ``objective``), gives HiGHS the
task's schedule as a starting solution (every variable's value derived from its
times), and searches in a worker thread: improving solutions and the dual bound
reach the progress line through HiGHS callbacks, and Ctrl-C interrupts HiGHS.
Limits: the wall clock; in deterministic mode (one thread) a node limit derived
from the deterministic budget, since a wall-clock stop is not reproducible.
With CBC there are no callbacks: one final solution, and no node limit.
"""

from __future__ import annotations

import functools
import math
import threading
import warnings
from dataclasses import dataclass, field

import pulp

from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.solvers.api import Phase, PhaseAnswer, PhaseTask, Status, search_in_thread
from ppsolve.solvers.milp import constraints, objective
from ppsolve.solvers.milp.variables import Variables, build_variables
from ppsolve.solvers.scaling import peak_ranges, trivial_horizon

NAME = "milp"
# HiGHS reads its clock between root cut rounds and overran its limit by up to ~20 % on the bundled
# problems: it gets this share of the search's wall time.
HIGHS_TIME_SHARE = 0.85
NODES_PER_DETERMINISTIC_SECOND = 10  # the node limit of a deterministic search (HiGHS has no work limit)
EPS = 1e-6


@functools.cache
def _highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return pulp.HiGHS().available()


def _cbc(**kwargs):
    with warnings.catch_warnings():  # PuLP 3 deprecates the bundled CBC for PuLP 4; it still ships it
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**kwargs)


def why_not() -> str | None:
    if _highs_available() or _cbc(msg=False).available():
        return None
    return "neither HiGHS (pip install highspy) nor CBC is available to PuLP"


@dataclass
class _Model:
    v: Variables
    peaks: list = field(default_factory=list)
    weight: int = 1  # MEMORY: objective = weight * max peak + sum of peaks
    schedule_peaks: list = field(default_factory=list)  # of the starting schedule (user units)

    def primary(self, value: float) -> int:
        """The phase's quantity from an objective value (integral; rounded towards the value)."""
        return int(value // self.weight) if self.weight > 1 else int(round(value))


def _symmetry(task: PhaseTask, offload: bool) -> str:
    if not task.options.symmetry:
        return "none"
    return "first" if offload else "all"


def _build(task: PhaseTask) -> _Model:
    problem, scaling, options, budget = task.problem, task.scaling, task.options, task.budget
    offload = options.offload and problem.can_offload and any(a > 0 for a in scaling.offload_amount)
    H = trivial_horizon(problem, scaling)
    for cap in (task.horizon, task.makespan_cap):
        if cap is not None:
            H = min(H, cap)
    lp = pulp.LpProblem(f"ppsolve_{task.phase.value}", pulp.LpMinimize)
    v = build_variables(lp, problem, scaling, H, offload, _symmetry(task, offload), budget.check)
    budget.check()
    constraints.precedences(v)
    budget.check()
    constraints.device_no_overlap(v)
    budget.check()
    constraints.transfers(v)
    m = _Model(v)
    if task.phase is Phase.MEMORY:
        ranges = peak_ranges(problem, scaling)
        m.peaks = [v.integer(f"peak_{d}", low, high) for d, (low, high) in enumerate(ranges)]
        constraints.memory(v, m.peaks, budget.check)
    elif any(c is not None for c in scaling.capacity):
        constraints.memory(v, scaling.capacity, budget.check)
    budget.check()
    constraints.symmetry(v)
    constraints.makespan(v, min(task.lower_bound, H))
    if task.phase is Phase.MAKESPAN:
        objective.minimise_makespan(v)
    elif task.phase is Phase.OFFLOAD:
        objective.minimise_offload(v, task.makespan_cap)
    else:
        m.weight = objective.minimise_peak(v, m.peaks, [high for _, high in peak_ranges(problem, scaling)],
                                           task.makespan_cap if task.makespan_cap is not None else H)
    budget.check()
    return m


# ----- the starting solution -----

def _start_values(m: _Model, schedule: Schedule) -> dict[str, float]:
    """Every variable's value in ``schedule`` (model units), by variable name; {} when the schedule
    is not a solution of the model (a transfer the model lacks, a partial amount)."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    by_op = {op.op: op for op in schedule.ops}
    start = {op: sc.time(by_op[op].start) for op in v.start}
    m.schedule_peaks = schedule.peak_memory
    values: dict[str, float] = {var.name: start[op] for op, var in v.start.items()}
    for op in by_op:
        if op.kind.is_transfer and ((op.stage, op.microbatch) not in v.transfers
                                    or abs(by_op[op].amount - p.max_offload(op.stage)) > 1e-9):
            return {}
    for (a, b), y in v.order.items():
        values[y.name] = int(start[a] < start[b])
    times = {}  # transfer start times (chosen or not: a phantom sits right after its F)
    for (s, j), t in v.transfers.items():
        off, rel = by_op.get(Op(OpKind.OFFLOAD, s, j)), by_op.get(Op(OpKind.RELOAD, s, j))
        o = sc.time(off.start) if off else start[Op(OpKind.F, s, j)] + v.dur(Op(OpKind.F, s, j))
        r = sc.time(rel.start) if rel else o + t.d_off
        values[t.chosen.name], values[t.off.name], values[t.rel.name] = int(off is not None), o, r
        times[(s, j)] = (o, r, off is not None)
    ends = {op: start[op] + v.dur(op) for op in v.start}
    values[v.makespan.name] = max(ends.values())
    for var in v.lp.variables():
        if var.name in values:
            continue
        values[var.name] = _derived(var.name, values, start, ends, times, m)
    return values


def _derived(name: str, values, start, ends, times, m: _Model) -> float:
    """The value of a lane order, memory indicator or peak variable, from the schedule's times."""
    kind, *rest = name.split("_")
    if kind == "z":  # z_K_s_j_K_s_j: 1 when the first transfer starts first
        ka, sa, ja, kb, sb, jb = rest
        ta = times[(int(sa), int(ja))][0 if ka == "OFFLOAD" else 1]
        tb = times[(int(sb), int(jb))][0 if kb == "OFFLOAD" else 1]
        return int(ta <= tb)
    if kind in ("p", "qb", "qw", "g"):
        s, j, where, j_e = rest
        s, j = int(s), int(j)
        k_e, s_e = where[0], int(where[1:])
        at = start[Op(OpKind.F, s_e, int(j_e))] if k_e == "F" else times[(s_e, int(j_e))][1]
        if kind == "p":
            return int(start[Op(OpKind.F, s, j)] <= at)
        if kind in ("qb", "qw"):
            return int(ends[Op(OpKind.B if kind == "qb" else OpKind.W, s, j)] <= at)
        o, r, chosen = times[(s, j)]
        return int(chosen and o + m.v.transfers[(s, j)].d_off <= at < r)
    peaks = [m.v.scaling.memory_scale * x for x in m.schedule_peaks]
    if kind == "peak":
        return math.ceil(peaks[int(rest[0])] - EPS)
    return math.ceil(max(peaks) - EPS)  # max_peak


# ----- solving -----

class _HiGHS(pulp.HiGHS):
    """PuLP's HiGHS with a starting solution, callbacks for incumbents and bounds, and interruption."""

    def __init__(self, start: dict[str, float], on_solution, on_bound, stop: threading.Event, limit, **kwargs):
        super().__init__(**kwargs)
        self.limit = limit
        self.start = start
        self.on_solution = on_solution
        self.on_bound = on_bound
        self.stop = stop

    def callSolver(self, lp):
        import highspy

        h = lp.solverModel
        if self.start:
            solution = highspy.HighsSolution()
            solution.col_value = [float(self.start.get(var.name, 0.0)) for var in lp.variables()]
            h.setSolution(solution)
        names = [var.name for var in lp.variables()]

        def improving(event):
            out = event.data_out
            self.on_solution(dict(zip(names, out.mip_solution)), out.objective_function_value, out.mip_dual_bound)

        def interrupt(event):
            self.on_bound(event.data_out.mip_dual_bound)
            if self.stop.is_set():
                event.interrupt()

        h.cbMipImprovingSolution.subscribe(improving)
        h.cbMipInterrupt.subscribe(interrupt)
        # from now (handing the model over took time), with HiGHS' overrun kept inside the limit
        h.setOptionValue("time_limit", HIGHS_TIME_SHARE * self.limit.seconds())
        h.run()

    def findSolutionValues(self, lp):
        try:
            return super().findSolutionValues(lp)
        except KeyError:  # a status PuLP does not map (kSolutionLimit: the node limit); values are read
            found = lp.solverModel.getInfo().primal_solution_status == 2
            return (pulp.LpStatusNotSolved,
                    pulp.LpSolutionIntegerFeasible if found else pulp.LpSolutionNoSolutionFound)


def _solver(task: PhaseTask, m: _Model, start: dict[str, float], record, stop: threading.Event):
    limit, options = task.limit, task.options
    threads = 1 if limit.deterministic is not None else options.threads
    if _highs_available():
        params = {"mip_rel_gap": 0.0, "mip_abs_gap": 1 - EPS, "random_seed": options.seed}
        if limit.deterministic is not None:
            params["mip_max_nodes"] = max(1, int(NODES_PER_DETERMINISTIC_SECOND * limit.deterministic))
        return _HiGHS(start, record.solution, record.bound, stop, limit, msg=False,
                      threads=threads, **params)
    for var in m.v.lp.variables():
        if var.name in start:
            var.setInitialValue(start[var.name])
    return _cbc(msg=False, timeLimit=max(1, math.floor(limit.seconds())), threads=threads,
                             warmStart=bool(start), gapRel=0.0, gapAbs=1 - EPS,
                             options=[f"randomSeed {options.seed + 1}"])


class _Record:
    """Incumbents (variable values by name, best last) and what the progress line shows."""

    def __init__(self, task: PhaseTask, m: _Model):
        self.task, self.m = task, m
        self.solutions: list[dict[str, float]] = []

    def solution(self, values: dict[str, float], value: float, bound: float) -> None:
        self.solutions.append(values)
        self.task.progress.update(self.m.primary(value))
        self.bound(bound)

    def bound(self, bound: float) -> None:
        if math.isfinite(bound) and abs(bound) < 1e15:
            self.task.progress.update(bound=self.m.primary(math.ceil(bound - EPS)))


def _ops(m: _Model, values: dict[str, float]) -> list[ScheduledOp]:
    """A solution in user units (durations from the problem; amounts the full allowed share)."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    ops = []
    for op, var in v.start.items():
        t = sc.to_time(round(values[var.name]))
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, p.placement[op.stage], t,
                               t + p.duration(op.kind, op.stage)))
    for (s, j), tr in v.transfers.items():
        if values[tr.chosen.name] > 0.5:
            amount = p.max_offload(s)
            for kind, var in ((OpKind.OFFLOAD, tr.off), (OpKind.RELOAD, tr.rel)):
                x = sc.to_time(round(values[var.name]))
                ops.append(ScheduledOp(kind, s, j, p.placement[s], x, x + p.duration(kind, s, amount), amount))
    return ops



def run_phase(task: PhaseTask) -> PhaseAnswer:
    m = _build(task)
    start = _start_values(m, task.hint) if task.hint is not None else {}
    record = _Record(task, m)
    stop = threading.Event()
    solver = _solver(task, m, start, record, stop)
    status, interrupted, abandoned = search_in_thread(lambda: m.v.lp.solve(solver), stop.set,
                                                      task.limit.until, task.budget.reserve / 2)
    if abandoned:  # HiGHS is still busy: keep the incumbents its callbacks reported, touch nothing else
        solutions = [_ops(m, values) for values in record.solutions]
        return PhaseAnswer(Status.FEASIBLE if solutions else Status.UNKNOWN, solutions, None, interrupted, True)
    return _answer(m, record, status, interrupted)


def _answer(m: _Model, record: _Record, status, interrupted: bool) -> PhaseAnswer:
    """Status from HiGHS' own model status (PuLP reports a time-limited solution as optimal)."""
    lp = m.v.lp
    solutions = list(record.solutions)
    if lp.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        solutions.append({var.name: var.varValue for var in lp.variables()})
    highs = getattr(lp, "solverModel", None)
    if highs is not None:  # HiGHS
        import highspy

        proven = highs.getModelStatus() == highspy.HighsModelStatus.kOptimal
        dual = highs.getInfo().mip_dual_bound
        bound = m.primary(math.ceil(dual - EPS)) if math.isfinite(dual) and abs(dual) < 1e15 else None
        infeasible = highs.getModelStatus() == highspy.HighsModelStatus.kInfeasible
    else:  # CBC: PuLP's status is all there is
        proven = status == pulp.LpStatusOptimal and lp.sol_status == pulp.LpSolutionOptimal
        bound = m.primary(pulp.value(lp.objective)) if proven else None
        infeasible = status == pulp.LpStatusInfeasible
    if proven and solutions:
        state = Status.OPTIMAL
        bound = m.primary(pulp.value(lp.objective)) if bound is None else bound
    elif solutions:
        state = Status.FEASIBLE
    elif infeasible:
        state = Status.INFEASIBLE
    else:
        state = Status.UNKNOWN
    return PhaseAnswer(state, [_ops(m, values) for values in solutions], bound, interrupted)
