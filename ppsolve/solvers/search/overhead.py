"""The least overhead at a makespan, one window at a time: the OVERHEAD phase of problems whose
whole model is too large to lower it (``ppsolve.solvers.phases``).

Each window (:func:`ppsolve.solvers.search.window.make_window`, fixed times) frees the ops of one device
(with its host link) over a time range around an op it recomputes or offloads; the backend places
them again minimising the window's overhead (recompute time, then offloaded amount:
``Phase.OVERHEAD`` with ``PhaseTask.window``). Every free op stays between the fixed ops around it,
so the composed schedule, re-timed as the runtime runs it, is no longer than the incumbent; it is
kept when it checks and its overhead is lower.
"""

from __future__ import annotations

import random
import time

from ppsolve.checker import check
from ppsolve.errors import PpsolveError
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.solvers.api import Backend, Phase, PhaseTask, SolveOptions
from ppsolve.solvers.budget import Budget, Limit
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import Scaling
from ppsolve.solvers.search.window import Incumbent, compose, make_window, on_model_grid
from ppsolve.tolerance import slack

WINDOW_OPS = 60  # compute ops of its device a window frees


def overhead_key(schedule: Schedule) -> tuple[float, float]:
    """What the OVERHEAD phase minimises, in the user's units: (recompute time, offloaded amount)."""
    return round(schedule.recompute_time, 9), round(schedule.offloaded, 9)


def _draw(inc: Incumbent, rng: random.Random) -> tuple[tuple[int, ...], float, float] | None:
    """One device and a time range of about ``WINDOW_OPS`` of its compute ops around one of its levers."""
    levers = [op for op in inc.schedule.ops if op.kind.name in ("R", "OFFLOAD")]
    if not levers:
        return None
    centre = levers[rng.randrange(len(levers))]
    ops = inc.compute[centre.device]
    width = WINDOW_OPS / max(1, len(ops)) * inc.makespan
    t0 = max(0.0, centre.start - width * rng.uniform(0.3, 0.7))
    return (centre.device,), t0, min(inc.makespan, t0 + width)


def lower_overhead(problem, scaling: Scaling, options: SolveOptions, budget: Budget, progress: Progress,
                   backend: Backend, start: Schedule, limit: Limit) -> tuple[Schedule, int, int, bool]:
    """(best schedule, windows solved, windows that lowered the overhead, whether Ctrl-C ended it)
    until ``limit``."""
    rng = random.Random(options.seed)
    on_grid = on_model_grid(problem, scaling, start)  # amounts a window reads exactly (if that is no longer)
    best, inc = start, Incumbent(on_grid if on_grid.makespan <= start.makespan + slack(start.makespan) else start)
    windows = better = 0
    interrupted = False
    deterministic = limit.deterministic is not None
    spent = 0.0
    while time.monotonic() < limit.until - 0.05 and (not deterministic or spent < limit.deterministic):
        pick = _draw(inc, rng)
        if pick is None:
            break
        window = make_window(inc, *pick, options.offload, False, options.recompute)
        if window is None or not window.choosable:
            spent += 0.05
            continue
        knobs = options.settings.lns  # as long as a window of the makespan's search
        det = knobs.window_seconds if deterministic else None
        guard = knobs.window_guard if deterministic else 1.0
        task = PhaseTask(problem, scaling, Phase.OVERHEAD, options, budget,
                         Limit(min(limit.until, time.monotonic() + knobs.window_seconds * guard), det),
                         progress, window=window)
        try:
            answer = backend.run_phase(task)
        except KeyboardInterrupt:  # while building: the best so far stands
            interrupted = True
            break
        windows += 1
        spent += answer.work + 0.05
        if answer.interrupted or not answer.status.solved or not answer.solutions:
            if answer.interrupted:
                interrupted = True
                break
            continue
        try:
            trial = make_schedule(problem, compose(inc, [(window, answer.solutions[-1])]), start.method.name)
        except PpsolveError:
            continue
        if (trial.makespan <= best.makespan + slack(best.makespan)
                and overhead_key(trial) < overhead_key(best) and check(trial).ok):
            best, inc, better = Schedule(problem, start.method, trial.ops), Incumbent(trial), better + 1
            progress.update(scaling.overhead(scaling.time(best.recompute_time),
                                             scaling.memory(best.offloaded, up=False)))
    return best, windows, better, interrupted
