"""Large-neighbourhood search: improve a valid schedule one window at a time, for problems whose
whole model does not fit the time limit.

Each round picks windows of the incumbent (:mod:`ppsolve.solvers.search.window`): a time range around
an op on a longest path, over every device or a block of devices around it. The backend places
the window's free ops again with the same model as a whole solve, built on those ops with every
other op fixed (``PhaseTask.window``). When that shortens the longest path through the window,
the schedule is composed, re-timed as the runtime would (:func:`ppsolve.simulator.retime`, which
moves ops earlier, never later) and kept if the checker passes it and it is shorter, or as long
with its ops ending earlier in sum (so that a later window can shorten it). Every incumbent is
a valid schedule.

A window is sized to hold about ``size`` free ops: the size grows while windows are solved to
optimality within their limit and shrinks when they are not. Re-timing and checking the whole
schedule cost more than a window on large problems, so a round solves several windows that do
not touch each other (:meth:`Window.independent`) and applies them together.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_left
from dataclasses import dataclass, field

from ppsolve.bounds import critical_path
from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import retime
from ppsolve.solvers.api import Backend, Phase, PhaseTask, SolveOptions, Status
from ppsolve.solvers.budget import Budget, Limit
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import Scaling
from ppsolve.solvers.search.window import Incumbent, compose, make_window
from ppsolve.solvers.settings import LnsSettings
from ppsolve.tolerance import EPS

@dataclass
class LnsResult:
    """The best schedule found (the start when nothing was better) and what the search did."""

    best: Schedule
    windows: int = 0
    improved: int = 0
    optimal: int = 0  # windows whose longest path was proven least (the first of their two steps)
    infeasible: int = 0  # windows without a solution (after rounding the fixed ops' times)
    interrupted: bool = False
    by_clock: bool = False  # deterministic mode: the wall clock, not the work limit, ended a window or the search
    sizes: list[int] = field(default_factory=list)
    tail_windows: int = 0  # of ``windows``, those over the end of the schedule (LnsSettings.tail_stall)
    tail_improved: int = 0


def _flow(schedule: Schedule) -> float:
    return sum(op.end for op in schedule.ops)


def _pick(inc: Incumbent, rng: random.Random, size: int,
          settings: LnsSettings = LnsSettings()) -> tuple[tuple[int, ...], float, float]:
    """Devices and time range of the next window, drawn again (up to ``settings.idle_draws`` draws in
    all) while its range holds no op of a longest path that its device sits idle before."""
    for _ in range(settings.idle_draws):
        devices, t0, t1 = _draw(inc, rng, size, settings)
        if inc.waits_within(devices, t0, t1):
            break
    return devices, t0, t1


def _draw(inc: Incumbent, rng: random.Random, size: int,
          settings: LnsSettings = LnsSettings()) -> tuple[tuple[int, ...], float, float]:
    """Devices and time range of a window around a random op on a longest path."""
    p = inc.problem
    centre = inc.critical_ops[rng.randrange(len(inc.critical_ops))]
    if p.devices <= settings.all_devices or rng.random() < 0.5:
        devices = tuple(range(p.devices))
    else:
        block = settings.block
        first = min(max(0, centre.device - block // 2), p.devices - block)
        devices = tuple(range(first, first + block))
    transfers = sum(len(ops) for ops in inc.lanes.values()) * len(devices) / p.devices
    count = sum(len(inc.compute[d]) for d in devices) + transfers  # ops of those devices, whole schedule
    width = size / max(count, 1.0) * inc.makespan
    t0 = max(0.0, centre.start - width * rng.uniform(0.2, 0.8))
    return devices, t0, min(inc.makespan, t0 + width)


def _pick_tail(inc: Incumbent, rng: random.Random, path: float, busiest: tuple[int, ...],
               settings: LnsSettings = LnsSettings()) -> dict[int, float]:
    """Each device's t0 of a tail window (which ends at the makespan): ``tail_span`` times ``path`` (one
    microbatch's critical path) before the end, ``tail_back`` times it more on the ``busiest`` devices,
    both shrunk alike when that frees more than ``tail_max_ops`` ops (``settings``)."""
    span, back = rng.uniform(*settings.tail_span) * path, rng.uniform(*settings.tail_back) * path
    H = inc.makespan
    for _ in range(60):  # 0.9 ** 60 < 0.002
        t0 = {d: H - span - (back if d in busiest else 0.0) for d in range(inc.problem.devices)}
        count = sum(len(starts) - bisect_left(starts, t0[d]) for d, starts in enumerate(inc.compute_starts))
        if count <= settings.tail_max_ops:
            break
        span, back = 0.9 * span, 0.9 * back
    return t0


def as_runtime_runs(problem: Problem, start: Schedule) -> Schedule:
    """``start`` re-timed as the runtime would run it, when that is shorter and checks; else ``start``
    (a plan's simulation is already as early as the runtime would run it: checked once is enough)."""
    timed = make_schedule(problem, retime(problem, start.ops), start.method.name)
    return timed if timed.makespan < start.makespan - EPS and check(timed).ok else start


def batch_size(ops: int, settings: LnsSettings = LnsSettings()) -> int:
    """Windows per round: one re-timing and one check of the whole schedule per round, so on large
    problems a round solves several independent windows."""
    return max(1, min(settings.max_batch, ops // settings.ops_per_window))


def improve(problem: Problem, scaling: Scaling, options: SolveOptions, budget: Budget, progress: Progress,
            backend: Backend, start: Schedule, limit: Limit, offload: bool, lower_bound: float) -> LnsResult:
    """Rounds of windows until ``limit`` (the wall clock; in deterministic mode also the work done,
    in seconds: the windows' searches, ``window_overhead`` per window and ``round_seconds_per_op``
    per op and round, of ``options.settings.lns``), the incumbent reaches ``lower_bound``, or Ctrl-C.

    A round picks up to :func:`batch_size` pairwise independent windows, solves each, applies
    every placement that shortens its window's longest path (or, as long, ends its ops earlier),
    re-times and checks the result once, and keeps it when it is better than the incumbent.
    """
    knobs = options.settings.lns
    rng = random.Random(options.seed)
    result = LnsResult(start)
    inc = Incumbent(start)
    size = knobs.start_size
    spent = 0.0  # work done, deterministic mode
    deterministic = limit.deterministic is not None
    batch = batch_size(len(start.ops), knobs)
    applying = knobs.round_seconds_per_op * len(start.ops)  # wall seconds to apply a round (the last one's, once known)
    guard = knobs.window_guard if deterministic else 1.0  # a window's wall clock, in its own time limits
    orders = knobs.orders and not (offload and problem.can_offload) and not any(op.kind.is_transfer for op in start.ops)

    path = critical_path(problem)
    loads = [problem.device_load(d) for d in range(problem.devices)]
    busiest = tuple(d for d, load in enumerate(loads) if load >= max(loads) * (1 - EPS))
    def clock() -> float:  # the search's progress: its work in deterministic mode, else the wall clock
        return spent if deterministic else time.monotonic()

    total = limit.deterministic if deterministic else limit.until - time.monotonic()
    last_gain = clock()  # when the ordinary windows last shortened the schedule
    tail = False  # tail windows from the stall on (tail_stall)

    def out_of_time() -> bool:
        if deterministic and spent >= limit.deterministic:
            return True
        if limit.until - time.monotonic() <= 0.05:
            result.by_clock = result.by_clock or deterministic
            return True
        return False

    while inc.makespan > lower_bound * (1 + EPS) and not out_of_time() and not result.interrupted:
        windows = []
        tail = tail or (orders and clock() - last_gain >= knobs.tail_stall * total)
        if tail:
            window = make_window(inc, range(problem.devices), _pick_tail(inc, rng, path, busiest, knobs), inc.makespan,
                                 offload, orders, options.recompute)
            windows = [window] if window is not None else []
        for _ in range(0 if tail else knobs.picks_per_window * batch):
            if len(windows) == batch:
                break
            devices, t0, t1 = _pick(inc, rng, size, knobs)
            if not all(w.may_be_independent(inc, devices, t0, t1) for w in windows):
                continue  # not worth building
            window = make_window(inc, devices, t0, t1, offload, orders, options.recompute)
            if window is not None and all(window.independent(w) for w in windows):
                windows.append(window)
        seconds = knobs.tail_seconds if tail else knobs.window_seconds
        placements = []
        for window in windows:
            if out_of_time():
                break
            now = time.monotonic()
            det = max(0.05, min(seconds, limit.deterministic - spent)) if deterministic else None
            task = PhaseTask(problem, scaling, Phase.MAKESPAN, options, budget,
                             Limit(min(limit.until, now + seconds * guard), det), progress,
                             window=window)
            try:
                answer = backend.run_phase(task)
            except KeyboardInterrupt:
                result.interrupted = True
                break
            spent += answer.work + knobs.window_overhead
            result.by_clock = result.by_clock or (deterministic and (answer.by_clock or answer.abandoned))
            result.windows += 1
            result.tail_windows += tail
            result.sizes.append(window.size)
            progress.detail(f"({result.windows} windows of ~{window.size} ops, {result.improved} better)")
            result.interrupted = result.interrupted or answer.interrupted
            if answer.status is Status.OPTIMAL:
                result.optimal += 1
                size = size if tail else min(knobs.max_size, int(size * 1.2))
            elif answer.status is Status.INFEASIBLE:
                result.infeasible += 1
            elif not tail:
                size = max(knobs.min_size, int(size * 0.8))
            if result.interrupted:
                break
            if not answer.status.solved:
                continue
            placed = answer.solutions[-1]
            path, flow = window.measure(placed)
            if path < window.current - EPS or (path <= window.current + EPS and flow < window.flow - EPS):
                placements.append((window, placed))
        if not placements:
            continue
        if time.monotonic() + applying > limit.until:
            result.by_clock = result.by_clock or deterministic
            break  # re-timing and checking it would run past the limit
        spent += knobs.round_seconds_per_op * len(inc.schedule.ops)
        began = time.monotonic()
        better = _accept(problem, inc, placements)
        if better is not None:
            if better.makespan < inc.makespan - EPS and not tail:
                last_gain = clock()
            inc = Incumbent(better)
            result.best = better
            result.improved += 1
            result.tail_improved += tail
            progress.update(incumbent=scaling.time(better.makespan, tolerance=1e-3))
            progress.detail(f"({result.windows} windows of ~{size} ops, {result.improved} better)")
        applying = time.monotonic() - began
    return result


def _accept(problem: Problem, inc: Incumbent, placements) -> Schedule | None:
    """The composed, re-timed schedule when it passes the checker and is better than the incumbent;
    if it is not, the same of the placements that shorten their window's longest path alone. A
    placement that only ends its window's ops earlier often delays the ops after the window (vsh2-d32:
    9 such windows together made the schedule's ends 585 later in sum), and took the round's
    shorter paths down with it."""
    better = _composed(problem, inc, placements)
    if better is None:
        shorter = [(window, placed) for window, placed in placements
                   if window.measure(placed)[0] < window.current - EPS]
        if shorter and len(shorter) < len(placements):
            better = _composed(problem, inc, shorter)
    return better


def _composed(problem: Problem, inc: Incumbent, placements) -> Schedule | None:
    """The composed, re-timed schedule when it passes the checker and is better than the incumbent."""
    try:
        candidate = make_schedule(problem, compose(inc, placements), inc.schedule.method.name)
    except PpsolveError:
        return None
    old = inc.schedule
    shorter = candidate.makespan < old.makespan - EPS
    if not shorter and (candidate.makespan > old.makespan + EPS or _flow(candidate) >= _flow(old) - EPS):
        return None
    return candidate if check(candidate).ok else None
