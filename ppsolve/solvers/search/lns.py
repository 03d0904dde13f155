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

Drain windows: at set shares of the search's time (``LnsSettings.drain_at``) one window frees every
device from about one microbatch's critical path before the end to the end, and gets a large share of
the time. Time slices of the ordinary size cannot rearrange the last microbatches of every device at
once, which is what the drain of a pipeline needs.

Refits (``LnsSettings.refit_*``): once the windows stall, the search goes on from its incumbent
with the levers fitted again (:mod:`ppsolve.solvers.search.refit`), which windows cannot change where
a microbatch's F and B lie far apart. The refitted schedule often starts longer than the best, which
is kept apart until the search from the refit overtakes it.

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
from ppsolve.solvers.search.refit import RefitVariant, refit, refittable
from ppsolve.solvers.search.window import Incumbent, Window, compose, make_window, on_model_grid
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
    drain_windows: int = 0  # of ``windows``, those over every device's end (LnsSettings.drain_at)
    drain_improved: int = 0
    refits: int = 0  # restarts from a refit of a schedule of the search (LnsSettings.refit_stall)
    refits_improved: int = 0  # times the search from a refit overtook the best schedule


def _flow(schedule: Schedule) -> float:
    return sum(op.end for op in schedule.ops)


def pick(inc: Incumbent, rng: random.Random, size: int,
          settings: LnsSettings = LnsSettings()) -> tuple[tuple[int, ...], float, float]:
    """Devices and time range of the next window, drawn again (up to ``settings.idle_draws`` draws in
    all) while its range holds no op of a longest path that its device sits idle before."""
    for _ in range(settings.idle_draws):
        devices, t0, t1 = draw(inc, rng, size, settings)
        if inc.waits_within(devices, t0, t1):
            break
    return devices, t0, t1


def draw(inc: Incumbent, rng: random.Random, size: int,
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


def pick_tail(inc: Incumbent, rng: random.Random, path: float, busiest: tuple[int, ...],
               settings: LnsSettings = LnsSettings()) -> dict[int, float]:
    """Each device's t0 of a tail window (which ends at the makespan): ``tail_span`` times ``path`` (one
    microbatch's critical path) before the end, ``tail_back`` times it more on the ``busiest`` devices,
    both shrunk alike when that frees more than ``tail_max_ops`` ops (``settings``)."""
    span, back = rng.uniform(*settings.tail_span) * path, rng.uniform(*settings.tail_back) * path
    H = inc.makespan
    for _ in range(60):  # 0.9 ** 60 < 0.002
        t0 = {d: H - span - (back if d in busiest else 0.0) for d in range(inc.problem.devices)}
        if compute_ops_from(inc, t0) <= settings.tail_max_ops:
            break
        span, back = 0.9 * span, 0.9 * back
    return t0


def drain_starts(inc: Incumbent, path: float, settings: LnsSettings = LnsSettings()) -> float | None:
    """Where a drain window starts on every device: ``drain_span`` times ``path`` (one microbatch's critical
    path) before the end; None when that frees more than ``drain_max_ops`` compute ops (``settings``)."""
    t0 = max(0.0, inc.makespan - settings.drain_span * path)
    return t0 if compute_ops_from(inc, dict.fromkeys(range(inc.problem.devices), t0)) <= settings.drain_max_ops else None


def compute_ops_from(inc: Incumbent, t0: dict[int, float]) -> int:
    """How many compute ops of the incumbent start at or after their device's ``t0``."""
    return sum(len(starts) - bisect_left(starts, t0[d]) for d, starts in enumerate(inc.compute_starts))


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
    search = Search(problem, scaling, options, budget, progress, backend, start, limit, offload)
    while search.result.best.makespan > lower_bound * (1 + EPS) and not search.out_of_time() and not search.result.interrupted:
        if not search.round():
            break  # re-timing and checking the round would run past the limit
    return search.result


class Search:
    """The state of one large-neighbourhood search (:func:`improve`): the incumbent, the window size,
    the work done and the random draws."""

    def __init__(self, problem: Problem, scaling: Scaling, options: SolveOptions, budget: Budget,
                 progress: Progress, backend: Backend, start: Schedule, limit: Limit, offload: bool):
        self.problem, self.scaling, self.options, self.budget = problem, scaling, options, budget
        self.progress, self.backend, self.limit, self.offload = progress, backend, limit, offload
        self.knobs = knobs = options.settings.lns
        self.rng = random.Random(options.seed)
        start = on_model_grid(problem, scaling, start)
        self.result = LnsResult(start)
        self.inc = Incumbent(start)
        self.size = knobs.start_size
        self.spent = 0.0  # work done, deterministic mode
        self.deterministic = limit.deterministic is not None
        self.batch = batch_size(len(start.ops), knobs)
        # wall seconds to apply a round (the last one's, once known)
        self.applying = knobs.round_seconds_per_op * len(start.ops)
        self.guard = knobs.window_guard if self.deterministic else 1.0  # a window's wall clock, in its own limits
        self.orders = knobs.orders and not (offload and problem.can_offload) and not any(
            op.kind.is_transfer for op in start.ops)
        # the tail windows' scale: one microbatch's critical path, then the longest path through the last
        # window measured (measure() in solve_round)
        self.path = self.microbatch_path = critical_path(problem)
        loads = [problem.device_load(d) for d in range(problem.devices)]
        self.busiest = tuple(d for d, load in enumerate(loads) if load >= max(loads) * (1 - EPS))
        self.total = limit.deterministic if self.deterministic else limit.until - time.monotonic()
        self.last_gain = self.clock()  # when the ordinary windows last shortened the schedule
        self.tail = False  # tail windows from the stall on (tail_stall)
        self.began = self.clock()
        self.drains = sorted(knobs.drain_at)  # the shares of the search's time at which drain windows are due
        self.refit_base: Schedule | None = None  # the schedule the last refit came from
        self.tried: dict[int, tuple[Schedule, int]] = {}  # id(schedule) -> (it, how many refit variants were tried on it)
        self.refits = offload and options.recompute and knobs.refit_stall > 0

    def clock(self) -> float:
        """The search's progress: its work in deterministic mode, else the wall clock."""
        return self.spent if self.deterministic else time.monotonic()

    def out_of_time(self) -> bool:
        if self.deterministic and self.spent >= self.limit.deterministic:
            return True
        if self.limit.until - time.monotonic() <= 0.05:
            self.result.by_clock = self.result.by_clock or self.deterministic
            return True
        return False

    def round(self) -> bool:
        """Pick a round's windows, solve them, and apply what they improve; False when applying it
        would run past the limit."""
        self.tail = self.tail or (self.orders and self.clock() - self.last_gain >= self.knobs.tail_stall * self.total)
        if self.refit_due():
            self.restart()
        drain = self.drain_window()
        if drain is not None:
            placements = self.solve_round([drain], self.knobs.drain_share * self.total, drain=True)
        else:
            placements = self.solve_round(self.pick_round())
        return not placements or self.apply(placements, drain is not None)

    def refit_due(self) -> bool:
        """Whether the windows have stalled (``LnsSettings.refit_stall``) with room left for a restart."""
        knobs, now = self.knobs, self.clock()
        return (self.refits and now - self.last_gain >= knobs.refit_stall * self.total
                and now - self.began <= (1 - knobs.refit_room) * self.total and refittable(self.inc.schedule))

    def restart(self) -> None:
        """Go on from a refit (``LnsSettings.refit_variants``, each tried once on a schedule): of the
        incumbent, the search's current line, which may be longer than its best; where every variant was
        tried on it (a refit's own schedule counts as tried: the windows must move it first), of the
        schedule the last refit came from; else of the best; else no more refits. A refit longer than
        its base by more than ``LnsSettings.refit_slack`` is not gone on from (counted as tried)."""
        variants = self.knobs.refit_variants
        self.last_gain = self.clock()  # the windows get refit_stall of the time from here
        for base in (self.inc.schedule, self.refit_base, self.result.best):
            done = len(variants) if base is None else self.tried.get(id(base), (base, 0))[1]
            if done < len(variants):
                break
        else:
            self.refits = False
            return
        self.tried[id(base)] = (base, done + 1)
        self.spent += self.knobs.refit_work
        fitted = refit(base, RefitVariant(*variants[done]))
        fitted = None if fitted is None else on_model_grid(self.problem, self.scaling, fitted)
        self.refit_base = base
        if fitted is None or fitted.makespan > base.makespan * (1 + self.knobs.refit_slack) + EPS:
            return
        self.tried[id(fitted)] = (fitted, len(variants))
        self.inc = Incumbent(fitted)
        self.result.refits += 1
        self.progress.detail(f"(refit {self.result.refits}: {fitted.makespan:g} from {base.makespan:g})")
        if fitted.makespan < self.result.best.makespan - EPS:
            self.result.best = fitted
            self.progress.update(incumbent=self.scaling.time(fitted.makespan, tolerance=1e-3))

    def drain_window(self) -> Window | None:
        """The drain window now due (``LnsSettings.drain_at``), if one is and it is small enough."""
        due = False
        while self.drains and self.clock() - self.began >= self.drains[0] * self.total:
            self.drains.pop(0)
            due = True
        t0 = drain_starts(self.inc, self.microbatch_path, self.knobs) if due else None
        if t0 is None:
            return None
        return make_window(self.inc, range(self.problem.devices), t0, self.inc.makespan, self.offload, self.orders,
                           self.options.recompute)

    def pick_round(self) -> list[Window]:
        """One tail window (after the stall), else up to ``batch`` pairwise independent windows."""
        inc, problem, knobs = self.inc, self.problem, self.knobs
        if self.tail:
            window = make_window(inc, range(problem.devices), pick_tail(inc, self.rng, self.path, self.busiest, knobs),
                                 inc.makespan, self.offload, self.orders, self.options.recompute)
            return [window] if window is not None else []
        windows: list[Window] = []
        for _ in range(knobs.picks_per_window * self.batch):
            if len(windows) == self.batch:
                break
            devices, t0, t1 = pick(inc, self.rng, self.size, knobs)
            if not all(w.may_be_independent(inc, devices, t0, t1) for w in windows):
                continue  # not worth building
            window = make_window(inc, devices, t0, t1, self.offload, self.orders, self.options.recompute)
            if window is not None and all(window.independent(w) for w in windows):
                windows.append(window)
        return windows

    def solve_round(self, windows: list[Window], seconds: float | None = None,
                    drain: bool = False) -> list[tuple[Window, list]]:
        """Solve each window within its limit (``seconds``, else the tail's or an ordinary window's);
        the placements that improve their window. ``drain``: the windows are drain windows."""
        knobs, result, limit = self.knobs, self.result, self.limit
        if seconds is None:
            seconds = knobs.tail_seconds if self.tail else knobs.window_seconds
        placements = []
        for window in windows:
            if self.out_of_time():
                break
            now = time.monotonic()
            det = max(0.05, min(seconds, limit.deterministic - self.spent)) if self.deterministic else None
            task = PhaseTask(self.problem, self.scaling, Phase.MAKESPAN, self.options, self.budget,
                             Limit(min(limit.until, now + seconds * self.guard), det), self.progress,
                             window=window)
            try:
                answer = self.backend.run_phase(task)
            except KeyboardInterrupt:
                result.interrupted = True
                break
            self.spent += answer.work + knobs.window_overhead
            result.by_clock = result.by_clock or (self.deterministic and (answer.by_clock or answer.abandoned))
            result.windows += 1
            result.tail_windows += self.tail and not drain
            result.drain_windows += drain
            result.sizes.append(window.size)
            self.progress.detail(f"({result.windows} windows of ~{window.size} ops, {result.improved} better)")
            result.interrupted = result.interrupted or answer.interrupted
            if not drain:
                self.resize(answer.status)
            if result.interrupted:
                break
            if not answer.status.solved:
                continue
            placed = answer.solutions[-1]
            self.path, flow = window.measure(placed)
            if self.path < window.current - EPS or (self.path <= window.current + EPS and flow < window.flow - EPS):
                placements.append((window, placed))
        return placements

    def resize(self, status: Status) -> None:
        """Count the window's outcome; grow the window size after an optimum, shrink it otherwise."""
        knobs = self.knobs
        if status is Status.OPTIMAL:
            self.result.optimal += 1
            self.size = self.size if self.tail else min(knobs.max_size, int(self.size * 1.2))
        elif status is Status.INFEASIBLE:
            self.result.infeasible += 1
        elif not self.tail:
            self.size = max(knobs.min_size, int(self.size * 0.8))

    def apply(self, placements: list[tuple[Window, list]], drain: bool = False) -> bool:
        """Compose the round's placements, re-time and check once; keep the result when better. False
        (nothing done) when that would run past the limit."""
        result, inc = self.result, self.inc
        if time.monotonic() + self.applying > self.limit.until:
            result.by_clock = result.by_clock or self.deterministic
            return False
        self.spent += self.knobs.round_seconds_per_op * len(inc.schedule.ops)
        began = time.monotonic()
        better = accept(self.problem, inc, placements)
        if better is not None:
            if better.makespan < inc.makespan - EPS and not self.tail:
                self.last_gain = self.clock()
            if inc.schedule is result.best or better.makespan < result.best.makespan - EPS:
                result.refits_improved += inc.schedule is not result.best  # a restart overtakes the best
                result.best = better
                self.progress.update(incumbent=self.scaling.time(better.makespan, tolerance=1e-3))
            self.inc = Incumbent(better)
            result.improved += 1
            result.tail_improved += self.tail and not drain
            result.drain_improved += drain
            self.progress.detail(f"({result.windows} windows of ~{self.size} ops, {result.improved} better)")
        self.applying = time.monotonic() - began
        return True


def accept(problem: Problem, inc: Incumbent, placements) -> Schedule | None:
    """The composed, re-timed schedule when it passes the checker and is better than the incumbent;
    if it is not, the same of the placements that shorten their window's longest path alone. A
    placement that only ends its window's ops earlier often delays the ops after the window (vsh2-d32:
    9 such windows together made the schedule's ends 585 later in sum), and took the round's
    shorter paths down with it."""
    better = composed(problem, inc, placements)
    if better is None:
        shorter = [(window, placed) for window, placed in placements
                   if window.measure(placed)[0] < window.current - EPS]
        if shorter and len(shorter) < len(placements):
            better = composed(problem, inc, shorter)
    return better


def composed(problem: Problem, inc: Incumbent, placements) -> Schedule | None:
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
