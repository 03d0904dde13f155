"""The one entry point of the solvers: ``solve(problem, SolveOptions) -> SolveResult``.

Steps: refuse an impossible capacity (exit 3 with the least capacity that
could work); below a second, when the time limit cannot pay for a model, answer
by the quick path instead (``ppsolve.solvers.quick``: heuristics and an order
search, no backend); take the best warm start within its share of the time; run the
phases on the chosen backend (imported only when chosen); turn each phase's
solutions into schedules with :func:`realise` (checked; the newest that passes
wins); keep the answer never worse than the warm start; report the status, the
proven bound and the gap.

Phases of the ``makespan`` objective: MAKESPAN (minimise C; on problems too
large for the whole model, or after it on mid-sized ones, by large-neighbourhood
search: ``ppsolve.solvers.search.lns``), then OVERHEAD (at that makespan, the least
recompute time, then the least offloaded amount; only when the best schedule
recomputes or offloads: on the whole model, or where the search ran on windows,
on windows of one device: ``ppsolve.solvers.search.overhead``), then a quick
pass that drops each recompute and offload the makespan does not need
(``ppsolve.solvers.shed``). The ``memory`` objective runs MAKESPAN first when it
needs the best makespan (a ``<factor>x`` limit), then MEMORY (least largest
peak, then least sum of peaks, with C at most the limit).

Claims: a backend whose offloaded amounts lie on a grid (CP-SAT: whole model
memory units) proves its optimum on that grid only, while the contract lets an
amount be any real in (0, share]; on a problem that can offload its proof is
then no proof (``continuous_amounts`` of the backend's record says otherwise), and only
the foundation's bound is reported.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ppsolve.bounds import makespan_lower_bound, min_capacity, require_feasible_capacity
from ppsolve.checker import check
from ppsolve.errors import InfeasibleError, InputError, PpsolveError
from ppsolve.limits import MAX_SCHEDULE_MAGNITUDE, check_seconds
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import MethodInfo, Schedule, ScheduledOp, make_schedule
from ppsolve.simulator import retime
from ppsolve.solvers.api import (OBJECTIVES, Backend, NoSolutionError, Phase, PhaseAnswer, PhaseTask,
                                 SolveOptions, SolveResult, Status, wait_for)
from ppsolve.solvers.backends import BACKENDS, backend_record, load_backend
from ppsolve.solvers.budget import Budget, Limit, TimeUp
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.quick import model_pays_off, quick_solve
from ppsolve.solvers.scaling import Scaling, build_scaling, trivial_horizon
from ppsolve.solvers.search.lns import LnsResult, as_runtime_runs, improve
from ppsolve.solvers.search.overhead import lower_overhead, overhead_key
from ppsolve.solvers.shed import shed_levers
from ppsolve.solvers.warm_start import best_warm_start, fifo_relabel, given_warm_start, shortest
from ppsolve.tolerance import EPS, MODEL_EPS, slack

def model_ops(problem: Problem, offload: bool, recompute: bool = True) -> int:
    """How many ops a model of the whole problem places (compute ops, and the transfers and R it may add)."""
    keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    n = len(keys) * len(problem.kinds)
    if offload and problem.can_offload:
        n += 2 * sum(1 for s, j in keys if problem.max_offload(s, j) > 0)
    if recompute and problem.can_recompute:
        n += sum(1 for s, j in keys if problem.recompute_saving(s, j) > 0)
    return n


def realise(problem: Problem, ops: list[ScheduledOp], name: str) -> Schedule | None:
    """A model solution as a checked schedule, or None if the checker refuses it.

    Under contract v2 a solution of a model is a valid schedule and runs as planned; the
    runtime's re-timing of it (never later) is kept when shorter.
    """
    best = None
    for build in (lambda: ops, lambda: retime(problem, ops)):
        try:
            schedule = make_schedule(problem, build(), name)
        except PpsolveError:
            continue
        if check(schedule).ok and (best is None or schedule.makespan < best.makespan - EPS):
            best = schedule
    return best


class Run:
    """The state of one solve: problem, options, budget, backend, progress, notes."""

    def __init__(self, problem: Problem, options: SolveOptions, budget: Budget, backend: Backend):
        self.problem = problem
        self.options = options
        self.budget = budget
        self.backend = backend
        self.record = backend_record(options.solver)  # the backend's capabilities
        self.scaling: Scaling = build_scaling(problem)
        self.progress = Progress(budget, options.solver, options.quiet, options.stream)
        self.notes: list[str] = []
        self.interrupted = False
        self.use_offload = options.offload and problem.can_offload
        self.use_recompute = options.recompute and problem.can_recompute
        # the backend's proof holds for the contract's continuous offloaded amounts
        self.amounts_exact = not self.use_offload or self.record.continuous_amounts
        self.model_bound: float | None = None  # the MAKESPAN phase's proven bound, user units
        self.lb = makespan_lower_bound(problem).value  # the foundation's bound, user units (computed once)
        self.warm: Schedule | None = None
        self.abandoned = False  # a thread (search or warm start) was left running
        self.ops = model_ops(problem, self.use_offload, self.use_recompute)
        self.windows = self.record.windows  # the backend solves windows (LNS)
        self.knobs = options.settings.phases
        self.whole_model = not self.windows or self.ops <= self.knobs.whole_model_ops
        self.lns: LnsResult | None = None  # what the large-neighbourhood search did, if it ran
        self.least_overhead: Status | None = None  # the OVERHEAD phase's status, if it ran
        self.grid_optimal = False  # the makespan model proved its optimum on its grid of amounts only

    def user_time(self, x: float) -> float:
        return round(x / self.scaling.time_scale, 9)

    def user_memory(self, x: float) -> float:
        return round(x / self.scaling.memory_scale, 9)

    def phase(self, phase: Phase, limit: Limit, hint: Schedule | None, horizon: int | None = None,
              makespan_cap: int | None = None, whole_shares: bool = False) -> PhaseAnswer:
        """Run one phase on the backend; building out of time gives UNKNOWN with a note. After Ctrl-C no
        phase runs (UNKNOWN, interrupted): the best so far is the answer."""
        if self.interrupted:
            return PhaseAnswer(Status.UNKNOWN, interrupted=True)
        cut = self.scaling.time(self.lb) if self.scaling.exact else 0
        task = PhaseTask(self.problem, self.scaling, phase, self.options, self.budget, limit, self.progress,
                         horizon, makespan_cap, hint, cut, whole_shares=whole_shares)
        try:
            answer = self.backend.run_phase(task)
        except TimeUp:
            what = f"the {phase.value} model could not be built within the time limit"
            if limit.deterministic is not None:
                self.not_reproducible(what)
            else:
                self.notes.append(what)
            answer = PhaseAnswer(Status.UNKNOWN)
        except KeyboardInterrupt:  # while building (a search stops itself and says interrupted)
            answer = PhaseAnswer(Status.UNKNOWN, interrupted=True)
        if answer.bound is not None and self.amounts_exact:
            self.progress.update(bound=answer.bound)  # a proof found without a callback (e.g. in presolve)
        self.progress.end_phase()
        if limit.deterministic is not None and (answer.by_clock or answer.abandoned):
            self.not_reproducible(f"the wall clock stopped the {phase.value} search before its deterministic limit")
        self.interrupted = self.interrupted or answer.interrupted
        self.abandoned = self.abandoned or answer.abandoned
        return answer

    def not_reproducible(self, what: str) -> None:
        """Deterministic mode: the wall clock (the time limit, the hard guard) decided something."""
        self.notes.append(f"{what}: this run may not be reproducible (--threads 1 is deterministic only "
                          "while the deterministic limits end each step)")
        self.progress.message(f"{what} (not reproducible)")

    def best_of(self, answer: PhaseAnswer, accept=lambda s: True) -> tuple[Schedule | None, bool]:
        """The newest solution that passes the checker (and ``accept``), and whether it is the last one."""
        for index, ops in enumerate(reversed(answer.solutions)):
            schedule = realise(self.problem, ops, self.options.solver)
            if schedule is not None and accept(schedule):
                if index > 0:
                    self.notes.append("the final model solution did not pass the checker; an earlier one was used")
                return schedule, index == 0
        return None, False


def _representable(schedule: Schedule, scaling: Scaling, offload: bool, recompute: bool = True) -> bool:
    """Whether the warm start is a solution of the model (so its makespan bounds the horizon): exact
    scaling, every time and offloaded amount on the model's grid, and only the levers it may use."""
    if not scaling.exact:
        return False
    on_grid = lambda x, scale: abs(x * scale - round(x * scale)) <= MODEL_EPS  # noqa: E731
    for op in schedule.ops:
        if op.kind.is_transfer and (not offload or not on_grid(op.amount, scaling.memory_scale)):
            return False
        if op.kind is OpKind.R and not recompute:
            return False
        if not (on_grid(op.start, scaling.time_scale) and on_grid(op.end, scaling.time_scale)):
            return False
    return True


def _parse_makespan_limit(limit: float | str) -> tuple[float, bool]:
    """(value, whether it is a factor of the best known makespan) of ``--makespan-limit``: a number, or
    '<factor>x'; each finite, > 0 and at most MAX_SCHEDULE_MAGNITUDE, else InputError."""
    text = limit.strip().lower() if isinstance(limit, str) else limit
    factor = isinstance(text, str) and text.endswith("x")
    try:
        value = float(text[:-1] if factor else text)
    except (TypeError, ValueError):
        raise InputError("makespan-limit", f"must be a number or '<factor>x' (e.g. 1.02x), got {limit!r}") from None
    if not 0 < value <= MAX_SCHEDULE_MAGNITUDE:
        raise InputError("makespan-limit", f"must be > 0 and at most {MAX_SCHEDULE_MAGNITUDE:g}, got {limit!r}")
    return value, factor


def _makespan_cap(options: SolveOptions, best_known: float | None) -> float | None:
    if options.makespan_limit is None:
        return None
    value, factor = _parse_makespan_limit(options.makespan_limit)
    if not factor:
        return value
    if best_known is None:
        raise NoSolutionError("no makespan is known to scale the makespan limit by")
    return value * best_known


def _warm_start(run: Run) -> Schedule | None:
    options, budget, problem = run.options, run.budget, run.problem
    found: list[Schedule] = []
    if options.warm_schedule is not None:  # the user's schedule, checked; nothing else is tried
        found.append(given_warm_start(problem, options.warm_schedule))
        cut = False
    else:
        deadline = budget.warm_start_deadline()
        # deterministic mode: a number of candidates fixed by the problem's size, the clock only as the guard
        tries = budget.warm_start_candidates(problem.num_stages * problem.microbatches * len(problem.kinds))
        _, cut = wait_for(lambda: best_warm_start(problem, options.warm_start, budget.baseline_seconds(),
                                                  None if budget.deterministic else deadline, sink=found,
                                                  max_tries=tries, mixed=run.knobs.mixed_plans),
                          lambda: time.monotonic() > budget.deadline - budget.reserve
                          or (time.monotonic() > deadline and bool(found)))
    for schedule in options.also_start_from:
        try:
            found.append(given_warm_start(problem, schedule))
        except InputError as exc:
            run.notes.append(f"a schedule to start from was left out: {exc}")
    found += _quick_start(run)
    warm = shortest(list(found))
    run.abandoned = run.abandoned or cut
    if cut and budget.deterministic:
        run.not_reproducible("the wall clock cut the warm start short")
    elif cut:
        run.notes.append("the warm start was cut short (a candidate ran past its share of the time)")
    if warm is not None and options.symmetry and run.whole_model and budget.left() > 0:  # a hint for the whole model
        # so that the hint satisfies the symmetry breaking (checked again: 3 s on 24 576 ops on a
        # loaded machine); given up after half the time left, which the search needs more
        began, left = time.monotonic(), budget.left()
        relabelled, late = wait_for(lambda: fifo_relabel(warm), lambda: time.monotonic() > began + 0.5 * left)
        warm = warm if late else relabelled
        run.abandoned = run.abandoned or late
        budget.note_check_seconds(time.monotonic() - began)
    run.warm = warm
    if warm is not None:
        run.progress.message(f"warm start {warm.method.name}: makespan {warm.makespan:g}")
    return warm


def _quick_start(run: Run) -> list[Schedule]:
    """On a per-microbatch problem with the automatic warm start, the quick path's answer in
    ``QuickSettings.as_warm_start`` seconds (its microbatch orders and their search), so that a long
    solve never ends above what a short one answers; nothing for other problems."""
    options, problem = run.options, run.problem
    seconds = min(options.settings.quick.as_warm_start, 0.1 * options.time_limit)
    if not problem.per_microbatch or options.warm_start != "auto" or options.warm_schedule is not None \
            or seconds <= 0 or run.budget.left() < 2 * seconds:
        return []
    quick_options = replace(options, time_limit=seconds, also_start_from=(), started=None, keep_after=0.0)
    try:
        answer = quick_solve(problem, quick_options, Budget(seconds, options.deterministic,
                                                             settings=options.settings.budget))
    except PpsolveError:
        return []
    return [answer.schedule]


def _infeasible(problem: Problem) -> InfeasibleError:
    need = min_capacity(problem, offload=problem.can_offload)
    return InfeasibleError("no schedule fits the memory capacity ("
                           + ", ".join("unbounded" if c is None else f"{c:g}" for c in problem.capacity)
                           + "); the least capacity that could work is "
                           + ", ".join(f"{c:g}" for c in need)
                           + (" with offload" if problem.can_offload else ""))


def minimise_makespan(run: Run, warm: Schedule | None, share: float,
                       keep: float) -> tuple[Schedule | None, float, bool]:
    """Phase MAKESPAN: (best schedule, lower bound, proven). Skipped when the warm start already
    reaches the foundation's lower bound (HiGHS' presolve alone took seconds to see that)."""
    sc, lb = run.scaling, run.lb
    if warm is not None and warm.makespan <= lb + slack(lb):
        run.progress.message(f"the warm start reaches the lower bound {lb:g}: no makespan search needed")
        return warm, lb, True
    upper = (sc.time(warm.makespan) if warm is not None
             and _representable(warm, sc, run.use_offload, run.options.recompute) else None)
    run.progress.phase("makespan", "makespan", run.user_time, incumbent=warm.makespan if warm else None)
    answer = run.phase(Phase.MAKESPAN, run.budget.search(share, keep), warm, horizon=upper)
    if answer.status is Status.INFEASIBLE:
        if warm is None:
            raise _infeasible(run.problem)
        run.notes.append("the model has no solution within the warm start's makespan; keeping the warm start")
    model_bound = run.user_time(answer.bound) if answer.bound is not None and sc.exact else None
    run.model_bound = model_bound
    if not run.amounts_exact:  # its bound holds on the model's grid of amounts only
        lower = lb
        run.grid_optimal = answer.status is Status.OPTIMAL
    else:
        lower = max(lb, model_bound) if model_bound is not None else lb
    best, newest = run.best_of(answer)
    proven = answer.status is Status.OPTIMAL and sc.exact and newest and run.amounts_exact
    return best, lower, proven


def _overhead_progress(run: Run, best: Schedule, at: str) -> None:
    """The OVERHEAD phase's progress line: the recompute time (the objective's first part) where the
    problem can recompute, else the offloaded amount, in the user's units."""
    weight = run.scaling.overhead_weight
    if run.use_recompute:
        run.progress.phase("least overhead", "recompute time", lambda x: run.user_time(x // weight),
                           incumbent=best.recompute_time, at=at, gap=False)
    else:
        run.progress.phase("least overhead", "offloaded", lambda x: run.user_memory(x % weight),
                           incumbent=best.offloaded, at=at, gap=False)


def _least_overhead(run: Run, best: Schedule, share: float) -> Schedule:
    """Phase OVERHEAD: at the makespan of ``best``, the least recompute time, then the least offloaded amount."""
    sc = run.scaling
    if run.use_offload and run.record.whole_shares:
        # first with whole shares: a much smaller search that finds a good start for any amount
        _overhead_progress(run, best, f"(at makespan {best.makespan:g}, whole shares first)")
        limit = run.budget.search(share)
        part = run.knobs.whole_shares_first
        first = Limit(time.monotonic() + part * max(0.0, limit.until - time.monotonic()),
                      None if limit.deterministic is None else part * limit.deterministic)
        answer = run.phase(Phase.OVERHEAD, first, best, makespan_cap=sc.time(best.makespan), whole_shares=True)
        start, _ = run.best_of(answer, lambda s: s.makespan <= best.makespan + EPS)
        if start is not None and overhead_key(start) < overhead_key(best):
            best = start
    _overhead_progress(run, best, f"(at makespan {best.makespan:g})")
    answer = run.phase(Phase.OVERHEAD, run.budget.search(share), best, makespan_cap=sc.time(best.makespan))
    status = answer.status
    if status is Status.OPTIMAL and not (run.amounts_exact and sc.exact):
        status = Status.FEASIBLE  # least on the model's grid of amounts only
    run.least_overhead = status  # OPTIMAL: no schedule at this makespan has less overhead
    better, _ = run.best_of(answer, lambda s: s.makespan <= best.makespan + EPS)
    if better is not None and overhead_key(better) < overhead_key(best):
        return better
    return best


def _overhead_by_windows(run: Run, best: Schedule, share: float) -> Schedule:
    """Phase OVERHEAD on windows of one device (``ppsolve.solvers.search.overhead``)."""
    sc = run.scaling
    _overhead_progress(run, best, f"(at makespan {best.makespan:g}, windows)")
    lowered, windows, better, stopped = lower_overhead(run.problem, sc, run.options, run.budget, run.progress,
                                                       run.backend, best, run.budget.search(share))
    run.interrupted = run.interrupted or stopped
    run.progress.end_phase()
    run.least_overhead = Status.FEASIBLE
    if better:
        run.notes.append(f"least overhead by windows: {better} of {windows} lowered it (recomputed {best.recomputed} "
                         f"-> {lowered.recomputed}, offloaded {best.offloaded:g} -> {lowered.offloaded:g})")
    return lowered


def _shed(run: Run, best: Schedule) -> Schedule:
    """The recomputes and offloads ``best`` can do without at its makespan, dropped (``ppsolve.solvers.shed``)."""
    if run.budget.deterministic:  # a fixed number of tries, not the clock, so that the run is reproducible
        shed = shed_levers(best, max_tries=run.knobs.shed_tries)
    else:
        shed = shed_levers(best, until=time.monotonic() + max(0.0, run.budget.left()))
    if overhead_key(shed) >= overhead_key(best):
        return best
    run.notes.append(f"dropped what the makespan does not need: recomputed {best.recomputed} -> {shed.recomputed}, "
                     f"offloaded {best.offloaded:g} -> {shed.offloaded:g}")
    return shed


def least_overhead_value(status: Status, schedule: Schedule) -> str:
    """What the schedule file says of its overhead (``method.least_overhead``, written once the OVERHEAD phase
    ran): ``none`` when the schedule written recomputes and offloads nothing (nothing to lower), ``optimal``
    when no schedule at its makespan has less overhead (proven), ``feasible`` when the phase found schedules
    but no proof, ``unknown`` when it found none (its model may not reach the incumbent: not a proof)."""
    if not schedule.uses_levers:
        return "none"
    return {Status.OPTIMAL: "optimal", Status.FEASIBLE: "feasible"}.get(status, "unknown")


def _finish(run: Run, schedule: Schedule, status: Status, lower: float, **extra) -> Schedule:
    o = run.options
    params = {"solver": o.solver, "time_limit": o.time_limit, "threads": o.threads, "seed": o.seed,
              "objective": o.objective, "warm_start": o.warm_start}
    if o.makespan_limit is not None:
        params["makespan_limit"] = o.makespan_limit
    sc = run.scaling
    extra.update({"engine": run.backend.engine(), "interrupted": run.interrupted, "notes": run.notes,
                  "time_scale": sc.time_scale, "memory_scale": sc.memory_scale, "exact_scaling": sc.exact})
    if run.least_overhead is not None:
        extra["least_overhead"] = least_overhead_value(run.least_overhead, schedule)
    if run.lns is not None:
        extra["neighbourhoods"] = {"windows": run.lns.windows, "improved": run.lns.improved,
                                   "solved_to_optimality": run.lns.optimal, "tail_windows": run.lns.tail_windows,
                                   "tail_improved": run.lns.tail_improved, "drain_windows": run.lns.drain_windows,
                                   "drain_improved": run.lns.drain_improved, "refits": run.lns.refits,
                                   "refits_improved": run.lns.refits_improved}
    info = MethodInfo(o.solver, params, status.value, round(lower, 9), run.budget.elapsed(), extra)
    return Schedule(run.problem, info, schedule.ops)


def solve(problem: Problem, options: SolveOptions | None = None) -> SolveResult:
    """Find an optimal (or the best found) schedule; see the module docstring."""
    options = options or SolveOptions()
    budget = Budget(options.time_limit, options.deterministic, options.started, options.keep_after,
                    options.settings.budget)
    if options.objective not in OBJECTIVES:
        raise InputError("objective", f"must be one of {', '.join(OBJECTIVES)}, got {options.objective!r}")
    check_seconds(options.time_limit, "time-limit")
    if options.makespan_limit is not None:
        _parse_makespan_limit(options.makespan_limit)  # bad input is answered before any work
    # a limit too short for a model takes the quick path, which imports no backend (an unknown name is refused)
    quick = not model_pays_off(options, model_ops(problem, options.offload, options.recompute))
    backend = None if quick and options.solver in BACKENDS else load_backend(options.solver)
    if options.ignore_capacity:
        problem = problem.replace(capacity=None)
    if not options.recompute:  # keep or offload only: the problem as if it had no recompute block
        problem = problem.replace(recompute=None)
    require_feasible_capacity(problem)
    if backend is None:
        return quick_solve(problem, options, budget)
    run = Run(problem, options, budget, backend)
    try:
        warm = _warm_start(run)
        if options.objective == "memory":
            return _solve_memory(run, warm)
        return _solve_makespan(run, warm)
    except KeyboardInterrupt:  # outside a search (which stops itself): the warm start is the best so far
        run.interrupted = True
        warm = run.warm
        if warm is None or options.objective == "memory":
            raise NoSolutionError("interrupted before any schedule was found") from None
        run.notes.append("interrupted outside the search; the warm start is the best so far")
        final = _finish(run, warm, Status.FEASIBLE, run.lb, warm_start=warm.method.name)
        return SolveResult(final, Status.FEASIBLE, final.method.lower_bound, final.gap or 0.0, final.method.seconds,
                           True, True, warm, None, run.notes, run.abandoned)
    finally:
        run.progress.end_phase()


def large_neighbourhoods(run: Run, start: Schedule, share: float, keep: float) -> Schedule:
    """Phase MAKESPAN by large-neighbourhood search from ``start`` (``ppsolve.solvers.search.lns``), with
    ``share`` of the time limit and ``keep`` of it kept for later phases. The reserve shrinks
    (``Budget.lean_reserve``): every schedule the search keeps is checked, and so is every schedule of
    what may follow it (more windows, the OVERHEAD phase on windows, the shedding pass), so only
    writing one is left at the end."""
    run.progress.phase("neighbourhoods", "makespan", run.user_time, incumbent=start.makespan, bound=run.lb)
    began = time.monotonic()
    timed = as_runtime_runs(run.problem, start)
    run.budget.lean_reserve(time.monotonic() - began)  # a re-timing (and a check when shorter): about a check
    limit = run.budget.search(share, keep)
    result = improve(run.problem, run.scaling, run.options, run.budget, run.progress, run.backend, timed, limit,
                     run.use_offload, run.lb)
    run.progress.end_phase()
    run.interrupted = run.interrupted or result.interrupted
    run.lns = result
    if result.by_clock:
        run.not_reproducible("the wall clock ended the large-neighbourhood search before its deterministic limit")
    if result.best.makespan >= start.makespan - EPS:
        return start
    run.notes.append(f"large-neighbourhood search: {result.improved} better schedules in {result.windows} windows "
                     f"({start.makespan:g} -> {result.best.makespan:g})")
    return result.best


def _solve_makespan(run: Run, warm: Schedule | None) -> SolveResult:
    options = run.options
    levers = run.use_offload or run.use_recompute
    knobs = run.knobs
    share = knobs.share_makespan_before_offload if levers else knobs.share_makespan
    keep = knobs.share_offload if levers and (run.whole_model or run.windows) else 0.0
    lb = run.lb
    if not run.whole_model and warm is not None:
        best, lower, proven = large_neighbourhoods(run, warm, share, keep), lb, False
    else:
        # with per-microbatch costs at any size: the whole model's search over microbatch orders, with symmetry
        # broken only among identical ones, is weak (the per-microbatch example, 20 s: 487 whole, 398 whole then
        # windows)
        large = run.ops > knobs.lns_after_ops or run.problem.per_microbatch
        lns_after = run.windows and large and share * options.time_limit >= knobs.lns_min_seconds
        whole = share * knobs.whole_share if lns_after else share
        best, lower, proven = minimise_makespan(run, warm, whole, keep + share - whole)
        if lns_after and not proven and not run.interrupted:
            start = min((s for s in (best, warm) if s is not None), key=lambda s: s.makespan, default=None)
            if start is not None:
                best = large_neighbourhoods(run, start, share - whole, keep)
    if (best is not None and keep and run.windows and not proven and not best.uses_levers
            and not run.interrupted):
        # the time kept for the overhead phase, which a schedule without levers does not need: the search
        # goes on (it ended 45 s early on a 300 s solve of the 8B-like problem without recompute)
        best = large_neighbourhoods(run, best, keep, 0.0)
    if best is not None and best.uses_levers and not run.interrupted:
        if run.whole_model and run.lns is None:
            best = _least_overhead(run, best, knobs.share_offload)
        elif run.windows:  # too large for the whole model to lower it (the search ran on windows)
            best = _overhead_by_windows(run, best, knobs.share_offload)
    if best is not None and best.uses_levers and not run.interrupted \
            and run.least_overhead is not Status.OPTIMAL:
        best = _shed(run, best)
    from_warm = best is not None and best is warm
    if warm is not None and (best is None or warm.makespan < best.makespan - EPS):
        best, from_warm = warm, True
        run.notes.append(f"the warm start ({warm.method.name}) is better than any model solution found")
    if best is None:
        if run.interrupted:
            raise NoSolutionError("interrupted before any schedule was found")
        raise NoSolutionError(f"no schedule found within the time limit ({options.time_limit:g} s)")
    if best.makespan < lb - slack(lb):  # a valid schedule below a "lower bound": the bound is wrong
        run.notes.append(f"the analytic lower bound ({lb:g}) exceeds this valid schedule's makespan: it does not "
                         "hold for this problem (a bug, please report it); no bound and no optimality is claimed")
        lower, proven, lb = 0.0, False, 0.0
    status = Status.OPTIMAL if best.makespan <= lower + slack(lower) else Status.FEASIBLE
    if status is Status.OPTIMAL and not proven and best.makespan > lb + EPS:
        status = Status.FEASIBLE
    if status is Status.FEASIBLE and run.grid_optimal and best.makespan <= (run.model_bound or 0) + EPS:
        run.notes.append(f"optimal among schedules that offload multiples of {1 / run.scaling.memory_scale:g} "
                         "memory units; a finer amount might be faster, so the bound is the analytic one")
    final = _finish(run, best, status, lower, model_makespan_bound=run.model_bound,
                    warm_start=warm.method.name if warm is not None else None)
    return SolveResult(final, status, lower, final.gap or 0.0, final.method.seconds, run.interrupted, from_warm,
                       warm, run.model_bound, run.notes, run.abandoned)


def _solve_memory(run: Run, warm: Schedule | None) -> SolveResult:
    """The least largest peak (then the least sum) with the makespan at most the limit."""
    options, sc = run.options, run.scaling
    lb = run.lb
    known = [warm] if warm is not None else []
    needs_best = isinstance(options.makespan_limit, str) and options.makespan_limit.strip().lower().endswith("x")
    if needs_best:
        best, _, _ = minimise_makespan(run, warm, run.knobs.share_makespan_before_memory, run.knobs.share_memory)
        known += [best] if best is not None else []
    best_known = min([s.makespan for s in known], default=None)
    cap_time = _makespan_cap(options, best_known)
    # a cap beyond the trivial horizon (every op one after another) constrains nothing
    H = None if cap_time is None else min(int(cap_time * sc.time_scale + MODEL_EPS), trivial_horizon(run.problem, sc))
    fitting = [s for s in known if cap_time is None or s.makespan <= cap_time + EPS]
    start = min(fitting, key=lambda s: (max(s.peak_memory), sum(s.peak_memory)), default=None)
    run.progress.phase("least memory", "peak", run.user_memory,
                       incumbent=max(start.peak_memory) if start else None,
                       at="" if cap_time is None else f"(makespan <= {cap_time:g})")
    share = run.knobs.share_memory if needs_best else run.knobs.share_makespan
    answer = run.phase(Phase.MEMORY, run.budget.search(share), start, makespan_cap=H)
    best, _ = run.best_of(answer, lambda s: cap_time is None or s.makespan <= cap_time + EPS)
    for s in fitting:
        if best is None or (max(s.peak_memory), sum(s.peak_memory)) < (max(best.peak_memory), sum(best.peak_memory)):
            best = s
    if best is None:
        if options.makespan_limit is not None:
            raise NoSolutionError(f"no schedule within makespan limit {cap_time:g} was found in time")
        raise NoSolutionError("no schedule was found within the time limit")
    exact = sc.exact and run.amounts_exact  # a grid of amounts proves nothing about finer ones
    mem_lower = run.user_memory(answer.bound) if answer.bound is not None and exact else None
    proven = answer.status is Status.OPTIMAL and exact
    status = Status.OPTIMAL if proven and mem_lower is not None and max(best.peak_memory) <= mem_lower + EPS \
        else Status.FEASIBLE
    final = _finish(run, best, status, lb, memory_lower_bound=mem_lower)
    return SolveResult(final, status, lb, final.gap or 0.0, final.method.seconds, run.interrupted,
                       False, warm, None, run.notes, run.abandoned)
