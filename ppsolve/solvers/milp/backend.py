"""The MILP backend: ``run_phase(task) -> PhaseAnswer`` on PuLP with HiGHS (CBC when highspy is missing).

Builds the model with PuLP (``variables``, ``constraints``, ``objective``), gives
HiGHS the task's schedule as a starting solution (every variable's value derived
from its times) and searches in HiGHS' own child process (``highs_process``: OR-Tools
and highspy cannot share a process): improving solutions and the dual bound reach
the progress line as they come, and Ctrl-C or the clock stop the search.
Limits: the wall clock; in deterministic mode (one thread) also a work limit, a
count of HiGHS' interrupt checks derived from the deterministic budget, since a
wall-clock stop is not reproducible. CBC (through PuLP) has no callbacks: one
final solution, a wall-clock limit only.
"""

from __future__ import annotations

import math
import warnings
from importlib import metadata
from dataclasses import dataclass, field

import pulp

from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.solvers.api import Phase, PhaseAnswer, PhaseTask, Status, search_in_thread
from ppsolve.solvers.milp import constraints, highs_process, objective
from ppsolve.solvers.milp.variables import Variables, build_variables
from ppsolve.solvers.scaling import peak_ranges, trivial_horizon

NAME = "milp"
# HiGHS reads its clock between root cut rounds and overran its limit by up to ~20 % on the bundled
# problems: it gets this share of the search's wall time.
HIGHS_TIME_SHARE = 0.85
# Deterministic mode: HiGHS has no work limit of its own; its interrupt checks (between nodes, and in
# the root's cut loop) are counted instead. Its presolve and sub-MIP heuristics (RINS, RENS) run for
# seconds without a check, so that mode turns them off; then 45 to 400 checks took a CPU second on the
# bench machine, depending on the model, and wall time runs up to about twice CPU time there (see
# docs/solver.md).
HIGHS_CHECKS_PER_SECOND = 30
EPS = 1e-6


def _cbc(**kwargs):
    with warnings.catch_warnings():  # PuLP 3 deprecates the bundled CBC for PuLP 4; it still ships it
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**kwargs)


def why_not() -> str | None:
    if highs_process.available() or _cbc(msg=False).available():
        return None
    return "neither HiGHS (pip install highspy) nor CBC is available to PuLP"


def engine() -> str:
    """What searches (recorded in the schedule file)."""
    if highs_process.available():
        return f"HiGHS {metadata.version('highspy')} (in a child process)"
    return f"CBC through PuLP {pulp.__version__}"


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
    elif task.phase is Phase.OVERHEAD:
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
        o = sc.time(off.start) if off else _within(t.off, start[Op(OpKind.F, s, j)] + v.dur(Op(OpKind.F, s, j)))
        r = sc.time(rel.start) if rel else _within(t.rel, o + t.d_off)
        values[t.chosen.name], values[t.off.name], values[t.rel.name] = int(off is not None), o, r
        times[(s, j)] = (o, r, off is not None)
    ends = {op: start[op] + v.dur(op) for op in v.start}
    values[v.makespan.name] = max(ends.values())
    for var in v.lp.variables():
        if var.name in values:
            continue
        values[var.name] = _derived(var.name, values, start, ends, times, m)
    return values


def _within(var: pulp.LpVariable, x: int) -> int:
    """x moved into var's bounds (the times of a transfer that is not chosen are free otherwise)."""
    return min(max(x, var.lowBound), var.upBound)


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

def _highs_options(task: PhaseTask) -> dict:
    deterministic = task.limit.deterministic is not None
    threads = 1 if deterministic else task.options.threads
    options = {"mip_rel_gap": 0.0, "mip_abs_gap": 1 - EPS, "random_seed": task.options.seed}
    if threads:
        options["threads"] = threads
    if deterministic:  # work the interrupt checks do not see (see HIGHS_CHECKS_PER_SECOND)
        options["mip_heuristic_run_rins"] = options["mip_heuristic_run_rens"] = False
        options["presolve"] = "off"  # its probing ran for 4 to 15 s on a 6 000-column model
    return options


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
        if _finite(bound):
            self.task.progress.update(bound=self.m.primary(math.ceil(bound - EPS)))


def _finite(x) -> bool:
    return x is not None and math.isfinite(x) and abs(x) < 1e15


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
    if highs_process.available():
        return _run_highs(task, m, start, record)
    return _run_cbc(task, m, start, record)


def _run_highs(task: PhaseTask, m: _Model, start: dict[str, float], record: _Record) -> PhaseAnswer:
    """HiGHS in its child process: a wall-clock stop, and in deterministic mode a work limit."""
    limit = task.limit
    arrays, names = highs_process.lp_arrays(m.v.lp)
    task.budget.check()
    work = None if limit.deterministic is None else max(1, int(HIGHS_CHECKS_PER_SECOND * limit.deterministic))
    request = {"lp": arrays, "options": _highs_options(task), "work_limit": work,
               "start": [float(start.get(name, 0.0)) for name in names] if start else None,
               "until": limit.until, "time_share": HIGHS_TIME_SHARE}
    run = highs_process.HighsRun(request, lambda values, value, bound: record.solution(dict(zip(names, values)),
                                                                                       value, bound),
                                 record.bound)
    stopped = []

    def stop() -> None:
        stopped.append(True)
        run.stop()

    outcome, interrupted, abandoned = search_in_thread(run.wait, stop, limit.until, task.budget.reserve / 2)
    if abandoned:  # no answer to the stop in time: end the worker, keep the incumbents it reported
        run.kill()
    solutions = list(record.solutions)
    if outcome is not None and outcome.values is not None:
        solutions.append(dict(zip(names, outcome.values)))
    ops = [_ops(m, values) for values in solutions]
    if outcome is None:
        return PhaseAnswer(Status.FEASIBLE if ops else Status.UNKNOWN, ops, None, interrupted, False, True)
    proven = outcome.status == "kOptimal"
    bound = m.primary(math.ceil(outcome.bound - EPS)) if _finite(outcome.bound) else None
    if proven and ops:
        state = Status.OPTIMAL
        bound = m.primary(outcome.objective) if bound is None else bound
    elif ops:
        state = Status.FEASIBLE
    elif outcome.status == "kInfeasible":
        state = Status.INFEASIBLE
    else:
        state = Status.UNKNOWN
    # the wall clock ended it (HiGHS' time limit, or our stop) rather than a proof or the work limit
    by_clock = not interrupted and (outcome.status == "kTimeLimit" or outcome.stopped_by == "stop")
    return PhaseAnswer(state, ops, bound, interrupted, False, by_clock)


def _run_cbc(task: PhaseTask, m: _Model, start: dict[str, float], record: _Record) -> PhaseAnswer:
    """CBC through PuLP (when highspy is missing): one final solution, a wall-clock limit only.

    The CBC that PuLP bundles (2.10.3) now and then crashes on exit after a search that had a
    starting solution (PuLP then raises PulpSolverError): the search is run again without one."""
    lp, limit, options = m.v.lp, task.limit, task.options
    for var in lp.variables():
        if var.name in start:
            var.setInitialValue(start[var.name])

    def search(warm: bool):
        solver = _cbc(msg=False, timeLimit=max(1, math.floor(0.8 * limit.seconds())), threads=options.threads or 1,
                      warmStart=warm, gapRel=0.0, gapAbs=1 - EPS, options=[f"randomSeed {options.seed + 1}"])
        return lp.solve(solver)

    for warm in ([True, False] if start else [False]):
        try:
            status, interrupted, _ = search_in_thread(lambda: search(warm), lambda: None, None)
            break
        except pulp.PulpSolverError:
            if not warm or limit.seconds() < 1:
                return PhaseAnswer(Status.UNKNOWN)
    solutions = list(record.solutions)
    if lp.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        solutions.append({var.name: var.varValue for var in lp.variables()})
    proven = status == pulp.LpStatusOptimal and lp.sol_status == pulp.LpSolutionOptimal
    ops = [_ops(m, values) for values in solutions]
    if proven and ops:
        return PhaseAnswer(Status.OPTIMAL, ops, m.primary(pulp.value(lp.objective)), interrupted)
    if ops:
        return PhaseAnswer(Status.FEASIBLE, ops, None, interrupted)
    return PhaseAnswer(Status.INFEASIBLE if status == pulp.LpStatusInfeasible else Status.UNKNOWN, [], None,
                       interrupted)
