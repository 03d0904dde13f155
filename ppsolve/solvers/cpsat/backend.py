"""The CP-SAT backend: ``run_phase(task) -> PhaseAnswer`` (see ``ppsolve.solvers.api``).

Builds the model (``variables``, ``constraints``, ``objective``), hints it with
the task's schedule, searches in a worker thread (so Ctrl-C stops the search
and the clock keeps the progress line moving), and returns every incumbent as
scheduled ops (best last). Limits: the wall clock, and in deterministic mode
CP-SAT's deterministic time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.solvers.api import Phase, PhaseAnswer, PhaseTask, Status, search_in_thread
from ppsolve.solvers.budget import Limit
from ppsolve.solvers.cpsat import constraints, objective
from ppsolve.solvers.cpsat.variables import SNAP, EmptyWindow, Variables, build_variables, build_window_variables
from ppsolve.solvers.scaling import peak_ranges

# Deterministic mode: CP-SAT's deterministic time per second of the budget's deterministic work. One
# unit took 3 to 8 CPU seconds with one worker on the bench machine (whole models, and window models of
# 130-160 ops), and wall time runs two to three times CPU time there (a shared 2-core machine), hence the
# low rate (see docs/solver.md). Sized so that a solve uses most of its limit: `--threads 1 --time-limit
# 30` ends instances/interleaved-offload-shared-8x16 at 24.9 s and linear-offload-shared-4x8 at 10.3 s
# on the 2-core machine when it is quiet (wall = CPU time); three times busier, the clock ends steps
# and the file says the run may not be reproducible.
DETERMINISTIC_PER_SECOND = 0.15
# A window is small: a stronger linear relaxation (level 2) proves its optimum sooner (docs/solver.md
# measures it with one worker). On some window models OR-Tools 9.15 aborts the process ("Check failed:
# threshold > 0" in its LP constraint manager; tests/solvers/test_cpsat_window_abort.py) in a
# full-problem worker that runs level 2. With two workers the only full-problem worker ("default_lp")
# sets level 1 itself, so level 2 reaches only the neighbourhood workers; with one worker, or three and
# more (whose "fixed", "quick_restart", ... workers inherit it), windows keep CP-SAT's level 1, and leave
# out its "max_lp" workers (level 2 of their own, from 8 workers on).
LEFT_OUT_WORKERS = ("max_lp", "max_lp_sym")
FLOW_SHARE = 0.1  # of a window's time left after its path is found: the second step (see _run_window)

_STATUS = {cp_model.OPTIMAL: Status.OPTIMAL, cp_model.FEASIBLE: Status.FEASIBLE,
           cp_model.INFEASIBLE: Status.INFEASIBLE}


def why_not() -> str | None:
    return None  # ortools is a dependency of ppsolve


def engine() -> str:
    """What searches (recorded in the schedule file)."""
    import ortools

    return f"OR-Tools CP-SAT {ortools.__version__}"


@dataclass
class _Model:
    model: cp_model.CpModel
    v: Variables
    peaks: list = field(default_factory=list)
    peak_upper: list = field(default_factory=list)
    weight: int = 1  # MEMORY: objective = weight * max peak + sum of peaks
    ends: list = field(default_factory=list)  # a window: its free compute ops' ends (the second step's objective)


def _build(task: PhaseTask) -> _Model:
    if task.window is not None:
        return _build_window(task)
    problem, scaling, options, budget = task.problem, task.scaling, task.options, task.budget
    model = cp_model.CpModel()
    use_offload = options.offload and problem.can_offload
    upper = task.makespan_cap if task.makespan_cap is not None else task.horizon
    v = build_variables(model, problem, scaling, use_offload, upper, budget.check, options.recompute,
                        task.whole_shares)
    add_order_constraints(v, budget.check)
    m = _Model(model, v)
    if task.phase is Phase.MEMORY:
        for d, (low, high) in enumerate(peak_ranges(problem, scaling)):
            m.peak_upper.append(high)
            m.peaks.append(model.new_int_var(low, high, f"peak_{d}"))
        constraints.memory(v, m.peaks)
    else:
        constraints.memory(v, scaling.capacity)
    budget.check()
    add_cuts(v, options.symmetry, task.phase is not Phase.MEMORY, task.lower_bound)
    if task.phase is Phase.MAKESPAN:
        objective.minimise_makespan(v)
    elif task.phase is Phase.OVERHEAD:
        objective.minimise_overhead(v, task.makespan_cap)
    else:
        cap = task.makespan_cap if task.makespan_cap is not None else v.horizon
        objective.minimise_peak(v, m.peaks, m.peak_upper, cap)
        m.weight = sum(m.peak_upper) + 1
    budget.check()
    if task.hint is not None:
        _hint_from_schedule(m, task.hint)
    return m


def add_order_constraints(v: Variables, check=lambda: None) -> None:
    """Dependencies, one compute op at a time per device, the host links' lanes."""
    check()
    constraints.precedences(v)
    check()
    constraints.device_no_overlap(v)
    constraints.transfers(v)
    check()


def add_cuts(v: Variables, symmetry: bool, capped: bool, lower_bound: int) -> None:
    """What loses no optimum (``symmetry``: microbatches in order; ``capped``: the cap's
    precedences, which need the cap, not a peak variable), the makespan with its cut at
    ``lower_bound`` (model units) and the tail cuts."""
    if symmetry:
        constraints.symmetry(v)
        if not constraints.paired(v) and capped:
            constraints.memory_precedences(v, v.scaling.capacity)
    constraints.makespan(v, min(lower_bound, v.horizon), fifo=symmetry)
    constraints.tail_cuts(v, fifo=symmetry)


def _build_window(task: PhaseTask) -> _Model:
    """The model of a window (``ppsolve.solvers.search.window``): the same constraint families on its free
    ops, the fixed ops it refers to as constants; minimise the longest path through it (Phase.OVERHEAD:
    its overhead)."""
    window, sc = task.window, task.scaling
    model = cp_model.CpModel()
    v = build_window_variables(model, task.problem, sc, window, task.budget.check)
    constraints.precedences(v)
    constraints.device_no_overlap(v)
    constraints.transfers(v)
    constraints.memory(v, sc.capacity)
    ends = objective.window_paths(v, {op: sc.time(t, up=True, tolerance=SNAP) for op, t in window.tails.items()})
    if task.phase is Phase.OVERHEAD:  # the free ops stay within their bounds: any placement is no longer
        model.minimize(sc.overhead(objective.recompute_time(v), objective.offloaded_amount(v)))
    m = _Model(model, v, ends=ends)
    _hint_window(m, window)
    return m


# ----- hints and solutions -----

def _hint_window(m: _Model, window) -> None:
    """The incumbent's placement of the free ops (transfers and R of choosable keys: as they are, or absent)."""
    v, sc = m.v, m.v.scaling
    at = {op.op: op for op in window.free}
    snap = lambda x: sc.time(x, up=True, tolerance=SNAP)  # noqa: E731
    for op, start in v.start.items():
        if not isinstance(start, int):
            m.model.add_hint(start, snap(at[op].start))
            m.model.add_hint(v.end[op], snap(at[op].start) + sc.duration(op.kind, op.stage, op.microbatch))
    for (s, j), r in v.recompute.items():
        sop = at.get(Op(OpKind.R, s, j))
        if r.present is not None:
            m.model.add_hint(r.chosen, int(sop is not None))
        if sop is not None and not isinstance(r.start, int):
            m.model.add_hint(r.start, snap(sop.start))
            m.model.add_hint(r.end, snap(sop.start) + sc.duration(OpKind.R, s, j))
    for (s, j), t in v.transfers.items():
        off, rel = at.get(Op(OpKind.OFFLOAD, s, j)), at.get(Op(OpKind.RELOAD, s, j))
        if t.present is not None:
            m.model.add_hint(t.chosen, int(off is not None))
            amount = min(sc.memory(off.amount, up=False), sc.offload_amount.at(s, j)) if off is not None else 0
            m.model.add_hint(t.amount, amount)
        for start, end, sop in ((t.off_start, t.off_end, off), (t.rel_start, t.rel_end, rel)):
            if isinstance(start, int) or sop is None:
                continue
            x = snap(sop.start)
            m.model.add_hint(start, x)
            m.model.add_hint(end, x + max(1, snap(sop.end - sop.start)))


def _transfer_ops(m: _Model, values: dict[int, int], keys) -> list[ScheduledOp]:
    """The chosen transfers of ``keys`` (variable amounts) as scheduled ops."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    ops = []
    for s, j in keys:
        t = v.transfers.get((s, j))
        if t is None or not values[t.chosen.Index()]:
            continue
        amount = min(values[t.amount.Index()] / sc.memory_scale, p.max_offload(s, j))
        for kind, start in ((OpKind.OFFLOAD, t.off_start), (OpKind.RELOAD, t.rel_start)):
            x = sc.to_time(values[start.Index()])
            ops.append(ScheduledOp(kind, s, j, p.placement[s], x, x + p.duration(kind, s, j, amount=amount), amount))
    return ops


def _recompute_ops(m: _Model, values: dict[int, int], keys) -> list[ScheduledOp]:
    """The R ops of ``keys`` that are there (chosen, or surely there with a variable start)."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    ops = []
    for s, j in keys:
        r = v.recompute.get((s, j))
        if r is None or isinstance(r.start, int) or (r.present is not None and not values[r.chosen.Index()]):
            continue
        x = sc.to_time(values[r.start.Index()])
        ops.append(ScheduledOp(OpKind.R, s, j, p.placement[s], x, x + p.duration(OpKind.R, s, j)))
    return ops


def _window_ops(m: _Model, window, values: dict[int, int]) -> list[ScheduledOp]:
    """A window's solution: its free ops, and the transfers and R of its choosable keys that are chosen."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    ops = []
    for sop in window.free:
        key = (sop.stage, sop.microbatch)
        if sop.kind is OpKind.R:
            continue  # below
        if sop.kind.is_compute:
            t = sc.to_time(values[v.start[sop.op].Index()])
            ops.append(sop._replace(start=t, end=t + p.duration(sop.kind, sop.stage, sop.microbatch)))
        elif key not in window.choosable:
            t = v.transfers[key]
            var = t.off_start if sop.kind is OpKind.OFFLOAD else t.rel_start
            x = sc.to_time(values[var.Index()])
            ops.append(sop._replace(start=x, end=x + p.duration(sop.kind, sop.stage, sop.microbatch, amount=sop.amount)))
    ops += _transfer_ops(m, values, sorted(window.choosable))
    ops += _recompute_ops(m, values, sorted(v.recompute))
    return ops


def _hint_from_schedule(m: _Model, schedule: Schedule) -> None:
    v, sc = m.v, m.v.scaling
    values: dict[int, int] = {}

    def put(var, x):
        if not isinstance(var, (int, bool)):
            values[var.Index()] = x

    by_op = {op.op: op for op in schedule.ops}
    for op, start in v.start.items():
        s = sc.time(by_op[op].start)
        put(start, s)
        put(v.end[op], s + sc.duration(op.kind, op.stage, op.microbatch))
    for (s, j), r in v.recompute.items():
        rop = by_op.get(Op(OpKind.R, s, j))
        put(r.chosen, int(rop is not None))
        x = sc.time(rop.start) if rop else values[v.end[Op(OpKind.F, s, j)].Index()]
        put(r.start, x)
        put(r.end, x + sc.duration(OpKind.R, s, j))
    split = v.problem.split_backward
    for (s, j), t in v.transfers.items():
        off = by_op.get(Op(OpKind.OFFLOAD, s, j))
        rel = by_op.get(Op(OpKind.RELOAD, s, j))
        put(t.chosen, int(off is not None))
        amount = min(sc.memory(off.amount, up=False), sc.offload_amount.at(s, j)) if off else 0
        a_r = min(amount, sc.activation.at(s, j) - (sc.weight_hold.at(s, j) if split else 0))
        put(t.amount, amount)
        put(t.amount_r, a_r)
        put(t.amount_h, amount - a_r)
        d_off = max(1, sc.time(off.end - off.start)) if off else 0
        d_rel = max(1, sc.time(rel.end - rel.start)) if rel else 0
        put(t.off_size, d_off)
        put(t.rel_size, d_rel)
        os_ = sc.time(off.start) if off else values[v.end[Op(OpKind.F, s, j)].Index()]
        rs = sc.time(rel.start) if rel else os_
        put(t.off_start, os_)
        put(t.off_end, os_ + d_off)
        put(t.rel_start, rs)
        put(t.rel_end, rs + d_rel)
    for size, start, end in v.spans:
        if start.Index() in values and end.Index() in values:
            values[size.Index()] = max(0, values[end.Index()] - values[start.Index()])
    ends = [values[e.Index()] for e in v.end.values() if e.Index() in values]
    if ends:
        values[v.makespan.Index()] = max(ends)
    _hint_values(m, _all_vars(m), values)


def _hint_values(m: _Model, variables: list, values: dict[int, int]) -> None:
    """Replace the model's hints by ``values`` (by variable index) of those of ``variables`` it has."""
    m.model.clear_hints()
    for var in variables:
        if not isinstance(var, (int, bool)) and var.Index() in values:
            m.model.add_hint(var, values[var.Index()])


def _all_vars(m: _Model) -> list:
    v = m.v
    out = list(v.start.values()) + list(v.end.values())
    for t in v.transfers.values():
        out += [t.chosen, t.amount, t.amount_r, t.amount_h, t.off_size, t.rel_size,
                t.off_start, t.off_end, t.rel_start, t.rel_end]
    for r in v.recompute.values():
        out += [r.chosen, r.start, r.end]
    out += [size for size, _, _ in v.spans]
    out.append(v.makespan)
    return out


def _key_vars(m: _Model) -> list:
    """What fixes a solution: compute starts, the transfers and R (a window's fixed ints left out)."""
    v = m.v
    out = list(v.start.values())
    for t in v.transfers.values():
        out += [t.chosen, t.amount, t.off_start, t.rel_start]
    for r in v.recompute.values():
        out += [r.chosen, r.start]
    return [x for x in out if not isinstance(x, (int, bool))]


def _model_ops(m: _Model, values: dict[int, int]) -> list[ScheduledOp]:
    """A solution in user units (durations from the problem; transfers move their chosen amounts)."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    ops = []
    for op, start in v.start.items():
        t = sc.to_time(values[start.Index()])
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, p.placement[op.stage], t,
                               t + p.duration(op.kind, op.stage, op.microbatch)))
    ops += _transfer_ops(m, values, sorted(v.transfers))
    ops += _recompute_ops(m, values, sorted(v.recompute))
    return ops


# ----- searching -----

class _Recorder(cp_model.CpSolverSolutionCallback):
    """Keeps every incumbent's key values (newest last) and tells the progress line."""

    def __init__(self, keys: list, task: PhaseTask, weight: int):
        super().__init__()
        self.keys = keys
        self.task = task
        self.weight = weight
        self.history: list[dict[int, int]] = []
        # offloaded amounts on the model's grid: its bound holds on the grid only, so it is not shown
        self.bound_holds = not (task.options.offload and task.problem.can_offload)

    def primary(self, value: float) -> float:
        return value // self.weight if self.weight > 1 else value

    def on_solution_callback(self) -> None:
        self.history.append({var.Index(): self.Value(var) for var in self.keys})
        if self.task.window is None:  # a window's objective is no makespan: its driver reports
            bound = self.primary(self.BestObjectiveBound()) if self.bound_holds else None
            self.task.progress.update(self.primary(self.ObjectiveValue()), bound)

    def on_bound(self, bound: float) -> None:
        if self.task.window is None and self.bound_holds:
            self.task.progress.update(bound=self.primary(bound))


def _parameters(solver: cp_model.CpSolver, task: PhaseTask, limit: Limit) -> None:
    params = solver.parameters
    params.random_seed = task.options.seed
    params.catch_sigint_signal = False  # Ctrl-C reaches Python, which stops the search (see run_phase)
    params.max_time_in_seconds = limit.seconds()
    if limit.deterministic is not None:
        params.num_workers = 1
        params.max_deterministic_time = DETERMINISTIC_PER_SECOND * limit.deterministic
    else:
        params.num_workers = task.options.threads or 0
    if task.window is not None:
        set_window_parameters(params, params.num_workers)


def set_window_parameters(params, workers: int) -> None:
    """Set on CP-SAT's ``params`` those of a window's search with ``workers`` workers (0: one per core)."""
    if (workers or os.cpu_count() or 1) == 2:
        params.linearization_level = 2
    else:
        params.ignore_subsolvers.extend(LEFT_OUT_WORKERS)


@dataclass
class _Search:
    """One CP-SAT search of a model: its status, incumbents (key values, best last) and limits."""

    status: Status
    values: list[dict[int, int]]
    bound: int | None
    objective: int | None  # the best solution's objective value
    interrupted: bool
    abandoned: bool
    by_clock: bool
    work: float


def _search(m: _Model, task: PhaseTask, limit: Limit) -> _Search:
    solver = cp_model.CpSolver()
    _parameters(solver, task, limit)
    keys = _key_vars(m)
    recorder = _Recorder(keys, task, m.weight)
    solver.best_bound_callback = recorder.on_bound
    code, interrupted, abandoned = search_in_thread(lambda: solver.solve(m.model, recorder), solver.stop_search,
                                                    limit.until + task.budget.reserve / 2)
    status = _STATUS.get(cp_model.UNKNOWN if code is None else code, Status.UNKNOWN)
    values = list(recorder.history)
    bound = best = None
    if status.solved:
        values.append({var.Index(): solver.value(var) for var in keys})
        bound = int(recorder.primary(solver.best_objective_bound))
        best = int(solver.objective_value)
    # ended by the wall clock (its time limit, or our stop) rather than a proof or the deterministic limit
    proven = code in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
    by_clock = abandoned or (not proven and not interrupted and code is not None
                             and solver.deterministic_time < 0.99 * solver.parameters.max_deterministic_time)
    work = solver.deterministic_time / DETERMINISTIC_PER_SECOND if code is not None else 0.0  # no response: none
    return _Search(status, values, bound, best, interrupted, abandoned, by_clock, work)


def run_phase(task: PhaseTask) -> PhaseAnswer:
    try:
        m = _build(task)
    except EmptyWindow:  # a free op has no room between its bounds after rounding
        return PhaseAnswer(Status.INFEASIBLE)
    if task.window is not None and task.phase is Phase.MAKESPAN:
        return _run_window(m, task)
    r = _search(m, task, task.limit)
    if task.window is not None:  # a window's least overhead (ppsolve.solvers.search.overhead)
        return PhaseAnswer(r.status, [_window_ops(m, task.window, r.values[-1])] if r.values else [], r.bound,
                           r.interrupted, r.abandoned, by_clock=r.by_clock, work=r.work)
    return PhaseAnswer(r.status, [_model_ops(m, x) for x in r.values], r.bound, r.interrupted, r.abandoned,
                       by_clock=r.by_clock, work=r.work)


def _run_window(m: _Model, task: PhaseTask) -> PhaseAnswer:
    """A window in two steps: the least longest path through it (its status is the answer's: optimal
    when that is proven), then, at that path, the free ops as early as they can be, for
    ``FLOW_SHARE`` of the window's time left (wall clock; in deterministic mode of its deterministic
    work left): a placement that ends its ops earlier gives later windows room. One weighted
    objective did both at once, and CP-SAT then spent the window's time on the sum of the ends
    without proving the path, so windows stayed small (docs/solver.md)."""
    first = _search(m, task, task.limit)
    answer = PhaseAnswer(first.status, [], first.bound, first.interrupted, first.abandoned,
                         by_clock=first.by_clock, work=first.work)
    if not first.status.solved:
        return answer
    best = first.values[-1]
    limit, now = task.limit, time.monotonic()
    if limit.deterministic is None:
        second_limit = Limit(now + FLOW_SHARE * (limit.until - now)) if limit.until - now > 0.01 else None
    else:  # the clock only as the guard, so that the step is reproducible
        det = FLOW_SHARE * (limit.deterministic - first.work)
        second_limit = Limit(limit.until, det) if det > 0 and limit.until > now else None
    if second_limit is not None and not (first.interrupted or first.abandoned):
        objective.minimise_flow(m.v, m.ends, first.objective)
        _hint_values(m, _key_vars(m), best)
        second = _search(m, task, second_limit)
        answer.work += second.work
        answer.interrupted, answer.abandoned = second.interrupted, second.abandoned
        answer.by_clock = answer.by_clock or second.by_clock
        if second.status.solved:
            best = second.values[-1]
    answer.solutions = [_window_ops(m, task.window, best)]
    return answer
