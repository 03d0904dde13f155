"""The MILP backend: ``run_phase(task) -> PhaseAnswer`` on PuLP with HiGHS (CBC when highspy is missing).

Builds the model with PuLP (``variables``, ``constraints``, ``objective``), gives
HiGHS the task's schedule as a starting solution (every variable's value derived
from its times) and searches in HiGHS' own child process (``highs_process``: OR-Tools
and highspy cannot share a process): improving solutions and the dual bound reach
the progress line as they come, and Ctrl-C or the clock stop the search.
Limits: the wall clock; in deterministic mode (one thread) also a work limit, a
count of HiGHS' interrupt checks (times the model's nonzeros) derived from the
deterministic budget, since a wall-clock stop is not reproducible. CBC (through PuLP) has no callbacks: one
final solution, a wall-clock limit only.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from importlib import metadata

import pulp

from ppsolve import tolerance
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.solvers.api import Phase, PhaseAnswer, PhaseTask, Status, search_in_thread
from ppsolve.solvers.milp import constraints, highs_process, objective
from ppsolve.solvers.milp.variables import Variables, build_variables
from ppsolve.solvers.scaling import peak_ranges, trivial_horizon

# HiGHS reads its clock between root cut rounds and overran its limit by up to ~20 % on the bundled
# problems: it gets this share of the search's wall time.
HIGHS_TIME_SHARE = 0.85
# Deterministic mode: HiGHS has no work limit of its own; its interrupt checks (between nodes, and in
# the root's cut loop) are counted instead, each weighted by the model's nonzeros (a node's LP costs
# about that much more on a larger model). Its presolve and sub-MIP heuristics (RINS, RENS) run for
# seconds without a check, so that mode turns them off. Sized so that a solve uses most of its time
# limit, as CP-SAT's rate is: on 16 small models with recompute (250-4800 columns, 1 700-33 000
# nonzeros; a 2-core machine shared with other work) one wall second held 0.4e6 to 3.7e6 checks x
# nonzeros, median about 2e6 (checks alone: 12 to 980 a second); the rate is that median. Then
# `--threads 1 --time-limit 20` ends instances/vshape-uneven-4x8 at 13.6 s and three random 2-4 x 4-8
# problems with recompute at 8.5 s, 4.3 s (proven) and by the wall clock at 15.9 s (load 5.5 on the
# 2-core machine; the file then says the run may not be reproducible). Measured with
# HIGHS_WORK_PER_SECOND set out of reach and the worker's interrupt callback logging its count and
# running time (see docs/solver.md).
HIGHS_WORK_PER_SECOND = 2e6
EPS = tolerance.MODEL_EPS
# Continuous models (transfers of any amount): the search stops at this absolute gap (model units),
# so "optimal" holds to within it (as EPS for the integral models' bounds); HiGHS' feasibility
# tolerances are tightened so that a solution's rows hold to ~1e-9, and its values snap to fractions
# (``_snap``) before the checker sees them.
CONTINUOUS_GAP = EPS
FEASIBILITY_TOLERANCE = tolerance.EPS
SNAP_DENOMINATOR = 10**4
SNAP_TOLERANCE = tolerance.EPS  # relative: never more than the checker allows
MIN_AMOUNT = tolerance.EPS  # a transfer moving less (relative to its most) is left out of the schedule


def cbc(**kwargs):
    """PuLP's bundled CBC with ``kwargs`` (the fallback when highspy is missing)."""
    with warnings.catch_warnings():  # PuLP 3 deprecates the bundled CBC for PuLP 4; it still ships it
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**kwargs)


def why_not() -> str | None:
    if highs_process.available() or cbc(msg=False).available():
        return None
    return "neither HiGHS (pip install highspy) nor CBC is available to PuLP"


def engine() -> str:
    """What searches (recorded in the schedule file)."""
    if highs_process.available():
        return f"HiGHS {metadata.version('highspy')} (in a child process)"
    return f"CBC through PuLP {pulp.__version__}"


@dataclass
class Model:
    """One phase's MILP: its variables and the rows the objective reads."""

    v: Variables
    peaks: list = field(default_factory=list)
    weight: int = 1  # MEMORY: objective = weight * max peak + sum of peaks
    schedule_peaks: list = field(default_factory=list)  # of the starting schedule (user units)

    def primary(self, value: float) -> float:
        """The phase's quantity from an objective value: integral (rounded towards the value) when the
        model's objective is, else the value itself."""
        if self.v.continuous:
            return value
        return int(value // self.weight) if self.weight > 1 else int(round(value))

    def bound(self, dual: float) -> float:
        """The phase's quantity that the search's dual bound proves (integral objectives round up)."""
        if self.v.continuous:
            return dual
        return self.primary(math.ceil(dual - EPS))


def _symmetry(task: PhaseTask, choices: bool) -> str:
    """"all" (every (stage, kind) in microbatch order) unless the model decides per (s, j) whether
    to offload or recompute ("first"), or symmetry breaking is off."""
    if not task.options.symmetry:
        return "none"
    return "first" if choices else "all"


def _levers(task: PhaseTask) -> tuple[bool, bool]:
    """(offload, recompute): which memory levers the model decides."""
    problem, scaling, options = task.problem, task.scaling, task.options
    offload = options.offload and problem.can_offload and any(
        scaling.offload_amount.high(s) > 0 for s in range(problem.num_stages))
    recompute = getattr(options, "recompute", True) and problem.can_recompute
    return offload, recompute


def build_model(task: PhaseTask) -> Model:
    """The phase's model: variables, every constraint family and the objective."""
    problem, scaling, budget = task.problem, task.scaling, task.budget
    offload, recompute = _levers(task)
    H = trivial_horizon(problem, scaling)
    for cap in (task.horizon, task.makespan_cap):
        if cap is not None:
            H = min(H, cap)
    lp = pulp.LpProblem(f"ppsolve_{task.phase.value}", pulp.LpMinimize)
    v = build_variables(lp, problem, scaling, H, offload, _symmetry(task, offload or recompute), budget.check,
                        recompute=recompute)
    budget.check()
    constraints.precedences(v)
    budget.check()
    constraints.device_no_overlap(v)
    budget.check()
    constraints.recompute_or_offload(v)
    constraints.transfers(v)
    m = Model(v)
    if task.phase is Phase.MEMORY:
        ranges = peak_ranges(problem, scaling)
        m.peaks = [v.number(f"peak_{d}", low, high) for d, (low, high) in enumerate(ranges)]
        constraints.memory(v, m.peaks, budget.check)
    elif any(c is not None for c in scaling.capacity):
        constraints.memory(v, scaling.capacity, budget.check)
    budget.check()
    constraints.symmetry(v)
    constraints.makespan(v, min(task.lower_bound, H))
    if task.phase is Phase.MAKESPAN:
        objective.minimise_makespan(v)
    elif task.phase is Phase.OVERHEAD:
        objective.minimise_overhead(v, task.makespan_cap)
    else:
        m.weight = objective.minimise_peak(v, m.peaks, [high for _, high in peak_ranges(problem, scaling)],
                                           task.makespan_cap if task.makespan_cap is not None else H)
    budget.check()
    return m


# ----- the starting solution -----

def start_values(m: Model, schedule: Schedule) -> dict[str, float]:
    """Every variable's value in ``schedule`` (model units), by variable name; {} when the schedule
    is not a solution of the model (an R or a transfer the model lacks, an amount above its most)."""
    v, sc = m.v, m.v.scaling
    by_op = {op.op: op for op in schedule.ops}
    if any((op.kind is OpKind.R and (op.stage, op.microbatch) not in v.recomputes)
           or (op.kind.is_transfer and (op.stage, op.microbatch) not in v.transfers) for op in by_op):
        return {}
    amount = {key: sc.memory_scale * by_op[Op(OpKind.OFFLOAD, *key)].amount
              for key in v.transfers if Op(OpKind.OFFLOAD, *key) in by_op}
    if any(a > v.transfers[key].most + tolerance.EPS for key, a in amount.items()):
        return {}
    start, end = _placed(v, by_op, amount)
    m.schedule_peaks = schedule.peak_memory
    values: dict[str, float] = {var.name: start[op] for op, var in v.start.items()}
    for (a, b), y in v.order.items():
        values[y.name] = int(start[a] < start[b])
    for (a, b), z in v.lane_order.items():
        values[z.name] = int(start[a] <= start[b])
    for key, rc in v.recomputes.items():
        values[rc.chosen.name] = int(rc.op in by_op)
    for key, t in v.transfers.items():
        values[t.chosen.name] = int(key in amount)
        values[t.amount.name] = amount.get(key, 0.0)
        values[t.off.name], values[t.rel.name] = start[Op(OpKind.OFFLOAD, *key)], start[Op(OpKind.RELOAD, *key)]
    values[v.makespan.name] = max(end[op] for op in end if _present(op, by_op))
    for name, indicator in v.indicators.items():
        values[name] = indicator(start, end)
    peaks = [sc.memory_scale * x for x in m.schedule_peaks]
    for d, var in enumerate(m.peaks):
        values[var.name] = peaks[d] if v.continuous else math.ceil(peaks[d] - EPS)
    if m.peaks:
        values["max_peak"] = max(values[var.name] for var in m.peaks)
    variables = {var.name: var for var in v.lp.variables()}
    for name, value in values.items():
        variables[name].varValue = value
    for name, uppers in v.shares.items():  # as far as its bounds allow: exactly what is away
        values[name] = max(0.0, min(_value(u) for u in uppers + [variables[name].upBound]))
    return values


def _value(x) -> float:
    return float(x) if isinstance(x, (int, float)) else float(x.value())


def _present(op: Op, by_op) -> bool:
    return op.kind in (OpKind.F, OpKind.B, OpKind.W) or op in by_op


def _placed(v: Variables, by_op: dict, amount: dict) -> tuple[dict, dict]:
    """(start, end) of every op the model has, in model units; a phantom R sits right after its F
    (within its bounds), a phantom transfer, moving nothing, there too."""
    sc = v.scaling

    def at(x: float) -> float:
        return sc.time_scale * x if v.continuous else sc.time(x)

    start, end = {}, {}
    for op, var in v.start.items():
        if op in by_op:
            start[op] = at(by_op[op].start)
        else:
            f = Op(OpKind.F, op.stage, op.microbatch)
            start[op] = min(max(at(by_op[f].end), var.lowBound), var.upBound)
        end[op] = start[op] + v.dur(op)
    for key, t in v.transfers.items():
        for kind, var, per in ((OpKind.OFFLOAD, t.off, t.off_per_unit), (OpKind.RELOAD, t.rel, t.rel_per_unit)):
            op = Op(kind, *key)
            if op in by_op:
                start[op] = at(by_op[op].start)
            else:
                start[op] = min(max(end[Op(OpKind.F, *key)], var.lowBound), var.upBound)
            end[op] = start[op] + per * amount.get(key, 0.0)
    return start, end


# ----- solving -----

def _highs_options(task: PhaseTask, continuous: bool) -> dict:
    deterministic = task.limit.deterministic is not None
    threads = 1 if deterministic else task.options.threads
    options = {"mip_rel_gap": 0.0, "mip_abs_gap": CONTINUOUS_GAP if continuous else 1 - EPS,
               "random_seed": task.options.seed}
    if continuous:
        options["mip_feasibility_tolerance"] = options["primal_feasibility_tolerance"] = FEASIBILITY_TOLERANCE
    if threads:
        options["threads"] = threads
    if deterministic:  # work the interrupt checks do not see (see HIGHS_WORK_PER_SECOND)
        options["mip_heuristic_run_rins"] = options["mip_heuristic_run_rens"] = False
        options["presolve"] = "off"  # its probing ran for 4 to 15 s on a 6 000-column model
    return options


class _Record:
    """Incumbents (variable values by name, best last) and what the progress line shows."""

    def __init__(self, task: PhaseTask, m: Model):
        self.task, self.m = task, m
        self.solutions: list[dict[str, float]] = []

    def solution(self, values: dict[str, float], value: float, bound: float) -> None:
        self.solutions.append(values)
        self.task.progress.update(self.m.primary(value))
        self.bound(bound)

    def bound(self, bound: float) -> None:
        if _finite(bound):
            self.task.progress.update(bound=self.m.bound(bound))


def _finite(x) -> bool:
    return x is not None and math.isfinite(x) and abs(x) < 1e15


def _ops(m: Model, values: dict[str, float]) -> list[ScheduledOp]:
    """A solution in user units: durations from the problem, the chosen R ops, and the chosen
    transfers with their amounts (one moving nothing is left out). Integral models' times are
    rounded; continuous values snap to a near fraction with a small denominator (a vertex of the
    model's LP sits on one; solver tolerances move it off by ~1e-9)."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    snap = _snap if v.continuous else round
    ops = []
    for op, var in v.start.items():
        if op.kind is OpKind.R and values[v.recomputes[(op.stage, op.microbatch)].chosen.name] < 0.5:
            continue
        t = sc.to_time(snap(values[var.name]))
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, p.placement[op.stage], t,
                               t + p.duration(op.kind, op.stage, op.microbatch)))
    for (s, j), tr in v.transfers.items():
        amount = min(p.max_offload(s, j), _snap(values[tr.amount.name]) / sc.memory_scale)
        if values[tr.chosen.name] > 0.5 and amount > MIN_AMOUNT * max(1.0, p.max_offload(s, j)):
            for kind, var in ((OpKind.OFFLOAD, tr.off), (OpKind.RELOAD, tr.rel)):
                x = sc.to_time(snap(values[var.name]))
                ops.append(ScheduledOp(kind, s, j, p.placement[s], x, x + p.duration(kind, s, j, amount=amount), amount))
    return ops


def _snap(x: float) -> float:
    """x, or the fraction with denominator up to SNAP_DENOMINATOR within SNAP_TOLERANCE of it."""
    f = Fraction(x).limit_denominator(SNAP_DENOMINATOR)
    return float(f) if abs(float(f) - x) <= SNAP_TOLERANCE * max(1.0, abs(x)) else x


def run_phase(task: PhaseTask) -> PhaseAnswer:
    m = build_model(task)
    start = start_values(m, task.hint) if task.hint is not None else {}
    record = _Record(task, m)
    if highs_process.available():
        return _run_highs(task, m, start, record)
    return _run_cbc(task, m, start, record)


def _run_highs(task: PhaseTask, m: Model, start: dict[str, float], record: _Record) -> PhaseAnswer:
    """HiGHS in its child process: a wall-clock stop, and in deterministic mode a work limit."""
    limit = task.limit
    arrays, names = highs_process.lp_arrays(m.v.lp)
    task.budget.check()
    work = None if limit.deterministic is None else \
        max(1, int(HIGHS_WORK_PER_SECOND * limit.deterministic / max(1, len(arrays["value"]))))
    request = {"lp": arrays, "options": _highs_options(task, m.v.continuous), "work_limit": work,
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
    bound = m.bound(outcome.bound) if _finite(outcome.bound) else None
    if proven and ops:
        state = Status.OPTIMAL
        # proven to HiGHS' tolerance: the integral models round the bound up past EPS, a continuous
        # one's dual bound sits at most CONTINUOUS_GAP below the objective (numerical noise, e.g.
        # 14.249999858 for 14.25): the objective is the bound, as the rounding makes it for the others
        bound = m.primary(outcome.objective) if bound is None or m.v.continuous else bound
    elif ops:
        state = Status.FEASIBLE
    elif outcome.status == "kInfeasible":
        state = Status.INFEASIBLE
    else:
        state = Status.UNKNOWN
    # the wall clock ended it (HiGHS' time limit, or our stop) rather than a proof or the work limit
    by_clock = not interrupted and (outcome.status == "kTimeLimit" or outcome.stopped_by == "stop")
    return PhaseAnswer(state, ops, bound, interrupted, False, by_clock)


def _run_cbc(task: PhaseTask, m: Model, start: dict[str, float], record: _Record) -> PhaseAnswer:
    """CBC through PuLP (when highspy is missing): one final solution, a wall-clock limit only.

    The CBC that PuLP bundles (2.10.3) now and then crashes on exit after a search that had a
    starting solution (PuLP then raises PulpSolverError): the search is run again without one."""
    lp, limit, options = m.v.lp, task.limit, task.options
    for var in lp.variables():
        if var.name in start:
            var.setInitialValue(start[var.name])

    def search(warm: bool):
        gap = CONTINUOUS_GAP if m.v.continuous else 1 - EPS
        solver = cbc(msg=False, timeLimit=max(1, math.floor(0.8 * limit.seconds())), threads=options.threads or 1,
                      warmStart=warm, gapRel=0.0, gapAbs=gap, options=[f"randomSeed {options.seed + 1}"])
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
