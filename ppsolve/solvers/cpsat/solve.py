"""Entry point of the CP-SAT solver: ``solve(problem, SolveOptions) -> SolveResult``.

Steps: refuse an impossible capacity (exit 3 with the least capacity that
could work); take the best warm start; build the model (variables,
constraints, objective); search with a live progress line; turn the best
solution's per-device orders and offload choices into a timed schedule with
the runtime's own rules (``retime``/``simulate``), check it, and keep it only
if it passes. The answer is never worse than the warm start.

Phases of the ``makespan`` objective: (A) minimise the makespan; (B) at that
makespan, minimise the offloaded amount. The ``memory`` objective minimises
the largest peak (then the sum of peaks) under a makespan limit, absolute or
``<factor>x`` of the best makespan known (phase A is run first to know it).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from ortools.sat.python import cp_model

from ppsolve.bounds import makespan_lower_bound, min_capacity, require_feasible_capacity
from ppsolve.checker import check
from ppsolve.errors import InfeasibleError, InputError, PpsolveError
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import MethodInfo, Schedule, ScheduledOp, make_schedule
from ppsolve.simulator import retime
from ppsolve.solvers.cpsat import constraints, objective
from ppsolve.solvers.cpsat.progress import Progress
from ppsolve.solvers.cpsat.scaling import Scaling, build_scaling
from ppsolve.solvers.cpsat.variables import Variables, build_variables
from ppsolve.solvers.cpsat.warm_start import best_warm_start, fifo_relabel

OBJECTIVES = ("makespan", "memory")


class NoSolutionError(PpsolveError):
    """The time limit passed before any schedule was found."""

    exit_code = 4


@dataclass(frozen=True)
class SolveOptions:
    """How to solve. ``threads=1`` with a seed is deterministic (the limit is then CP-SAT's
    deterministic time, close to seconds); ``symmetry`` and ``offload`` exist for experiments."""

    time_limit: float = 60.0
    threads: int | None = None
    seed: int = 0
    objective: str = "makespan"
    makespan_limit: float | str | None = None
    warm_start: str = "auto"
    quiet: bool = True
    ignore_capacity: bool = False
    symmetry: bool = True
    offload: bool = True
    stream: TextIO | None = None


@dataclass
class SolveResult:
    schedule: Schedule
    status: str  # "optimal" or "feasible"
    lower_bound: float
    gap: float
    seconds: float
    interrupted: bool = False
    from_warm_start: bool = False
    warm_start: Schedule | None = None
    model_bound: float | None = None
    notes: list[str] = field(default_factory=list)


# ----- building -----

@dataclass
class _Model:
    model: cp_model.CpModel
    v: Variables
    peaks: list = field(default_factory=list)
    peak_upper: list = field(default_factory=list)


def _build(problem: Problem, scaling: Scaling, options: SolveOptions, upper: int | None,
           capacity_vars: bool = False) -> _Model:
    model = cp_model.CpModel()
    use_offload = options.offload and problem.can_offload
    v = build_variables(model, problem, scaling, use_offload, upper)
    constraints.precedences(v)
    constraints.device_no_overlap(v)
    constraints.transfers(v)
    peaks, uppers = [], []
    if capacity_vars:
        for d in range(problem.devices):
            need = sum(scaling.activation[s] for s in problem.stages_of_device[d]) * problem.microbatches
            cap = scaling.capacity[d]
            low = max(scaling.activation[s] for s in problem.stages_of_device[d])
            uppers.append(max(low, need if cap is None else min(need, cap)))
            peaks.append(model.new_int_var(low, uppers[-1], f"peak_{d}"))
        constraints.memory(v, peaks)
    else:
        constraints.memory(v, scaling.capacity)
    if options.symmetry:
        constraints.symmetry(v)
    lb = scaling.time(makespan_lower_bound(problem).value) if scaling.exact else 0
    constraints.makespan(v, min(lb, v.horizon), fifo=options.symmetry)
    return _Model(model, v, peaks, uppers)


# ----- hints and solutions -----

Values = dict  # var index -> value


def _hint_from_schedule(m: _Model, schedule: Schedule) -> None:
    v, sc = m.v, m.v.scaling
    values: dict[int, int] = {}

    def put(var, x):
        values[var.Index()] = x

    by_op = {op.op: op for op in schedule.ops}
    for op, start in v.start.items():
        s = sc.time(by_op[op].start)
        put(start, s)
        put(v.end[op], s + sc.duration[(op.kind, op.stage)])
    for (s, j), t in v.transfers.items():
        off = by_op.get(Op(OpKind.OFFLOAD, s, j))
        rel = by_op.get(Op(OpKind.RELOAD, s, j))
        put(t.chosen, int(off is not None))
        os_ = sc.time(off.start) if off else values[v.end[Op(OpKind.F, s, j)].Index()]
        rs = sc.time(rel.start) if rel else os_ + sc.duration[(OpKind.OFFLOAD, s)]
        put(t.off_start, os_)
        put(t.off_end, os_ + sc.duration[(OpKind.OFFLOAD, s)])
        put(t.rel_start, rs)
        put(t.rel_end, rs + sc.duration[(OpKind.RELOAD, s)])
    _hint_values(m, values)


def _hint_values(m: _Model, values: dict[int, int]) -> None:
    v = m.v
    for size, start, end in v.spans:
        if start.Index() in values and end.Index() in values:
            values[size.Index()] = max(0, values[end.Index()] - values[start.Index()])
    ends = [values[e.Index()] for e in v.end.values() if e.Index() in values]
    if ends:
        values[v.makespan.Index()] = max(ends)
    m.model.clear_hints()
    for var in _all_vars(m):
        if var.Index() in values:
            m.model.add_hint(var, values[var.Index()])


def _all_vars(m: _Model) -> list:
    v = m.v
    out = list(v.start.values()) + list(v.end.values())
    for t in v.transfers.values():
        out += [t.chosen, t.off_start, t.off_end, t.rel_start, t.rel_end]
    out += [size for size, _, _ in v.spans]
    out.append(v.makespan)
    return out


def _key_vars(m: _Model) -> list:
    """What fixes a solution: compute starts and the transfers."""
    v = m.v
    out = list(v.start.values())
    for t in v.transfers.values():
        out += [t.chosen, t.off_start, t.rel_start]
    return out


def _model_ops(m: _Model, values: dict[int, int]) -> list[ScheduledOp]:
    """The solution in user units (durations from the problem; amounts the full allowed share)."""
    v, sc, p = m.v, m.v.scaling, m.v.problem
    ops = []
    for op, start in v.start.items():
        t = sc.to_time(values[start.Index()])
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, p.placement[op.stage], t,
                               t + p.duration(op.kind, op.stage)))
    for (s, j), t in v.transfers.items():
        if values[t.chosen.Index()]:
            amount = p.max_offload(s)
            device = p.placement[s]
            for kind, start in ((OpKind.OFFLOAD, t.off_start), (OpKind.RELOAD, t.rel_start)):
                x = sc.to_time(values[start.Index()])
                ops.append(ScheduledOp(kind, s, j, device, x, x + p.duration(kind, s, amount), amount))
    return ops


def realise(problem: Problem, ops: list[ScheduledOp], name: str = "cpsat") -> Schedule | None:
    """The model's solution as a checked schedule, or None if the checker refuses it.

    Under contract v2 a solution of the model is a valid schedule and runs as
    planned; the runtime's re-timing of it (never later) is kept when shorter.
    """
    best = None
    for build in (lambda: ops, lambda: retime(problem, ops)):
        try:
            schedule = make_schedule(problem, build(), name)
        except PpsolveError:
            continue
        if check(schedule).ok and (best is None or schedule.makespan < best.makespan - 1e-9):
            best = schedule
    return best


class _Recorder(Progress):
    """Progress plus a copy of every incumbent's key values (newest last)."""

    def __init__(self, keys: list, **kwargs):
        super().__init__(**kwargs)
        self.keys = keys
        self.history: list[dict[int, int]] = []

    def on_solution_callback(self) -> None:
        self.history.append({var.Index(): self.Value(var) for var in self.keys})
        super().on_solution_callback()


@dataclass
class _Run:
    status: int
    values: list[dict[int, int]]  # incumbents, best last
    bound: float | None
    interrupted: bool
    det_time: float


def _parameters(solver: cp_model.CpSolver, options: SolveOptions, limit: float) -> None:
    params = solver.parameters
    params.random_seed = options.seed
    params.catch_sigint_signal = False  # Ctrl-C reaches Python, which stops the search (see _search)
    limit = max(0.05, limit)
    if options.threads == 1:
        params.num_workers = 1
        params.max_deterministic_time = limit
        params.max_time_in_seconds = 2 * limit + 5
    else:
        params.num_workers = options.threads or 0
        params.max_time_in_seconds = limit


def _search(m: _Model, options: SolveOptions, limit: float, label: str,
            to_user: Callable[[float], float], t0: float, quantity: str) -> _Run:
    solver = cp_model.CpSolver()
    _parameters(solver, options, limit)
    recorder = _Recorder(_key_vars(m), label=label, to_user=to_user, quiet=options.quiet, stream=options.stream,
                         t0=t0, quantity=quantity)
    solver.best_bound_callback = recorder.on_bound
    result: dict = {}

    def work():
        try:
            result["status"] = solver.solve(m.model, recorder)
        except BaseException as exc:  # reported in the main thread
            result["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    interrupted = False
    thread.start()
    while thread.is_alive():
        try:
            thread.join(0.1)
        except KeyboardInterrupt:
            interrupted = True
            solver.stop_search()
    recorder.finish()
    if "error" in result and not interrupted:
        raise result["error"]
    status = result.get("status", cp_model.UNKNOWN)
    values = list(recorder.history)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values.append({var.Index(): solver.value(var) for var in _key_vars(m)})
    solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound = solver.best_objective_bound if solved else None
    det = solver.response_proto.deterministic_time if "status" in result else 0.0
    return _Run(status, values, bound, interrupted, det)


# ----- the entry point -----

def _representable(schedule: Schedule, scaling: Scaling, offload: bool) -> bool:
    """Whether the warm start is a solution of the model (so its makespan bounds the horizon)."""
    if not scaling.exact:
        return False
    for op in schedule.ops:
        if op.kind.is_transfer and (not offload or abs(op.amount - schedule.problem.max_offload(op.stage)) > 1e-9):
            return False
    return True


def _makespan_cap(options: SolveOptions, best_known: float | None) -> float | None:
    limit = options.makespan_limit
    if limit is None:
        return None
    if isinstance(limit, str):
        text = limit.strip().lower()
        try:
            if text.endswith("x"):
                if best_known is None:
                    raise NoSolutionError("no makespan is known to scale the makespan limit by")
                return float(text[:-1]) * best_known
            return float(text)
        except ValueError:
            raise InputError("makespan-limit", f"must be a number or '<factor>x' (e.g. 1.02x), got {limit!r}") from None
    return float(limit)


def _finish(problem: Problem, schedule: Schedule, status: str, lower: float, t0: float, options: SolveOptions,
            **extra) -> Schedule:
    params = {"time_limit": options.time_limit, "threads": options.threads, "seed": options.seed,
              "objective": options.objective, "warm_start": options.warm_start}
    if options.makespan_limit is not None:
        params["makespan_limit"] = options.makespan_limit
    info = MethodInfo("cpsat", params, status, round(lower, 9), time.monotonic() - t0, extra)
    return Schedule(problem, info, schedule.ops)


def solve(problem: Problem, options: SolveOptions | None = None) -> SolveResult:
    """Find an optimal (or the best found) schedule; see the module docstring."""
    options = options or SolveOptions()
    if options.objective not in OBJECTIVES:
        raise InputError("objective", f"must be one of {', '.join(OBJECTIVES)}, got {options.objective!r}")
    t0 = time.monotonic()
    if options.ignore_capacity:
        problem = problem.replace(capacity=None)
    require_feasible_capacity(problem)
    scaling = build_scaling(problem)
    lb = makespan_lower_bound(problem).value
    deadline = t0 + options.time_limit
    try:
        warm = best_warm_start(problem, options.warm_start, time_limit=max(1.0, 0.2 * options.time_limit))
    except KeyboardInterrupt:
        raise NoSolutionError("interrupted before any schedule was found") from None
    if warm is not None and options.symmetry:
        warm = fifo_relabel(warm)  # so that the hint satisfies the symmetry breaking
    use_offload = options.offload and problem.can_offload

    def left() -> float:
        return max(0.0, deadline - time.monotonic())

    to_time = lambda x: round(x / scaling.time_scale, 9)  # noqa: E731
    upper = scaling.time(warm.makespan) if warm is not None and _representable(warm, scaling, use_offload) else None
    phase_a_share = 0.85 if use_offload or options.objective == "memory" else 1.0
    budget_a = options.time_limit * (0.5 if options.objective == "memory" else phase_a_share)

    # Phase A: makespan.
    a = _build(problem, scaling, options, upper)
    objective.minimise_makespan(a.v)
    if warm is not None:
        _hint_from_schedule(a, warm)
    run_a = _search(a, options, min(budget_a, left()) if options.threads != 1 else budget_a,
                    "cpsat", to_time, t0, "makespan")
    notes: list[str] = []
    interrupted = run_a.interrupted
    if run_a.status == cp_model.INFEASIBLE:
        if warm is not None:
            notes.append("the model has no solution within the warm start's makespan; keeping the warm start")
        else:
            need = min_capacity(problem, offload=problem.can_offload)
            raise InfeasibleError("no schedule fits the memory capacity ("
                                  + ", ".join("unbounded" if c is None else f"{c:g}" for c in problem.capacity)
                                  + "); the least capacity that could work is "
                                  + ", ".join(f"{c:g}" for c in need)
                                  + (" with offload" if problem.can_offload else "")
                                  + (" (the solver model offloads whole shares only)" if problem.can_offload else ""))
    model_bound = None
    proven = run_a.status == cp_model.OPTIMAL and scaling.exact
    if run_a.bound is not None and scaling.exact:
        model_bound = to_time(run_a.bound)
    lower = max(lb, model_bound) if model_bound is not None else lb

    best: Schedule | None = None
    best_values = None
    for values in reversed(run_a.values):
        best = realise(problem, _model_ops(a, values))
        if best is not None:
            best_values = values
            break
    if run_a.values and best_values is not run_a.values[-1]:
        notes.append("the final model solution did not pass the checker; an earlier one was used")
        proven = False

    # Phase B: least offload at that makespan.
    if (options.objective == "makespan" and best is not None and best.offloaded > 0 and not interrupted
            and (left() > 0.2 or options.threads == 1)):
        cap = scaling.time(best.makespan)
        b = _build(problem, scaling, options, cap)
        objective.minimise_offload(b.v, cap)
        _hint_from_schedule(b, best)
        if options.threads == 1:
            budget_b = max(0.5, options.time_limit - budget_a)
        else:
            budget_b = min(left(), max(2.0, (1 - phase_a_share) * options.time_limit))
        run_b = _search(b, options, budget_b, "cpsat", lambda x: round(x / scaling.memory_scale, 9),
                        t0, "offloaded")
        interrupted = interrupted or run_b.interrupted
        for values in reversed(run_b.values):
            candidate = realise(problem, _model_ops(b, values))
            if candidate is not None and candidate.makespan <= best.makespan + 1e-9:
                if candidate.offloaded < best.offloaded - 1e-12:
                    best = candidate
                break

    extra: dict = {"model_makespan_bound": model_bound, "time_scale": scaling.time_scale,
                   "memory_scale": scaling.memory_scale, "exact_scaling": scaling.exact}

    if options.objective == "memory":
        best_known = min([s.makespan for s in (best, warm) if s is not None], default=None)
        cap_time = _makespan_cap(options, best_known)
        best_mem = _memory_phase(problem, scaling, options, cap_time, [s for s in (best, warm) if s is not None],
                                 left, extra, t0)
        interrupted = interrupted or extra.pop("_interrupted", False)
        if best_mem is None:
            if options.makespan_limit is not None:
                raise NoSolutionError(f"no schedule within makespan limit {cap_time:g} was found in time")
            raise NoSolutionError("no schedule was found within the time limit")
        mem_lower = extra.get("memory_lower_bound")
        status = "optimal" if (extra.pop("_proven", False) and mem_lower is not None
                               and max(best_mem.peak_memory) <= mem_lower + 1e-9) else "feasible"
        final = _finish(problem, best_mem, status, lb, t0, options, interrupted=interrupted, notes=notes, **extra)
        return SolveResult(final, status, lb, final.gap or 0.0, final.method.seconds, interrupted,
                           False, warm, model_bound, notes)

    from_warm = False
    if warm is not None and (best is None or warm.makespan < best.makespan - 1e-9):
        best, from_warm = warm, True
        notes.append(f"the warm start ({warm.method.name}) is better than any model solution found")
    if best is None:
        if interrupted:
            raise NoSolutionError("interrupted before any schedule was found")
        raise NoSolutionError(f"no schedule found within the time limit ({options.time_limit:g} s)")
    status = "optimal" if best.makespan <= lower + 1e-9 * max(1.0, lower) else "feasible"
    if status == "optimal" and not proven and best.makespan > lb + 1e-9:
        status = "feasible"
    final = _finish(problem, best, status, lower, t0, options, interrupted=interrupted, notes=notes,
                    warm_start=warm.method.name if warm is not None else None, **extra)
    return SolveResult(final, status, lower, final.gap or 0.0, final.method.seconds, interrupted, from_warm,
                       warm, model_bound, notes)


def _memory_phase(problem: Problem, scaling: Scaling, options: SolveOptions, cap_time: float | None,
                  known: list[Schedule], left: Callable[[], float], extra: dict, t0: float) -> Schedule | None:
    """Minimise the largest peak (then the sum) with the makespan at most ``cap_time``."""
    H = None if cap_time is None else int(cap_time * scaling.time_scale + 1e-6)
    m = _build(problem, scaling, options, H, capacity_vars=True)
    objective.minimise_peak(m.v, m.peaks, m.peak_upper, H if H is not None else m.v.horizon)
    fitting = [s for s in known if cap_time is None or s.makespan <= cap_time + 1e-9]
    start = min(fitting, key=lambda s: (max(s.peak_memory), sum(s.peak_memory)), default=None)
    if start is not None:
        _hint_from_schedule(m, start)
    budget = left() if options.threads != 1 else options.time_limit * 0.5
    run = _search(m, options, budget, "cpsat", lambda x: x, t0, "peak")
    extra["_interrupted"] = run.interrupted
    extra["_proven"] = run.status == cp_model.OPTIMAL and scaling.exact
    if run.bound is not None and scaling.exact:
        weight = sum(m.peak_upper) + 1
        extra["memory_lower_bound"] = round((int(run.bound) // weight) / scaling.memory_scale, 9)
    best = None
    for values in reversed(run.values):
        best = realise(problem, _model_ops(m, values))
        if best is not None and (cap_time is None or best.makespan <= cap_time + 1e-9):
            break
        best = None
    for s in fitting:
        if best is None or (max(s.peak_memory), sum(s.peak_memory)) < (max(best.peak_memory), sum(best.peak_memory)):
            best = s
    return best
