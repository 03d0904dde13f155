"""Time limits too short for a model: the heuristics, then a search over microbatch orders.

A solve with a time limit below ``QuickSettings.below`` seconds that cannot pay for building its model
(:func:`model_pays_off`) never imports a backend. In ``warm_start_share`` of the time limit it collects
candidates: on a per-microbatch problem the memory-aware list scheduler in a few microbatch orders
(:func:`ordered_greedy`: the cheapest at both ends, shortest first with a falling tail, sorted), a first
answer in milliseconds when there is none yet (1F1B, else the serial plan), then the warm start's
baselines and plans (``ppsolve.solvers.warm_start``). In the rest it improves the shortest: on a
per-microbatch problem the microbatches change slots, and a move that shortens the plan within every
capacity is kept. When the shortest is the list scheduler's, each move (two neighbours or any two swap,
one moves) plans anew with it (:func:`greedy_search`); then, keeping each device's op order, two swap,
one moves, or one of the costliest moves to the first or last slot, and the plan is timed by the
simulator (:func:`order_search`); both are seeded by ``SolveOptions.seed``. A schedule that recomputes
or offloads drops what its makespan does not need instead (``ppsolve.solvers.shed``). The answer is
checked like every solve's; its lower bound is the busiest device's compute (:func:`load_bound`).

Deterministic mode (``threads=1``): the number of candidates and of moves tried follow from the time
limit and the problem's size, never the clock; the clock is the guard (the result then says that it
may not be reproducible).
"""

from __future__ import annotations

import math
import random
import time
from typing import Callable, NamedTuple

from ppsolve.baselines import get_baseline
from ppsolve.baselines.microbatch_order import in_order, longest_first, shortest_first
from ppsolve.baselines.portfolio import applicable_baselines
from ppsolve.checker import check
from ppsolve.errors import InputError, PpsolveError
from ppsolve.method_types import RunOptions
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import MethodInfo, Schedule, make_schedule
from ppsolve.simulator import issue_order, simulate
from ppsolve.solvers.api import NoSolutionError, SolveOptions, SolveResult, Status, wait_for
from ppsolve.solvers.budget import Budget
from ppsolve.solvers.search.overhead import overhead_key
from ppsolve.solvers.shed import shed_levers
from ppsolve.solvers.warm_start import (acceptable, baseline_warm_starts, given_warm_start, own_warm_starts,
                                        shortest)
from ppsolve.tolerance import EPS, exceeds, slack

NAME = "quick"  # the schedule's method name
FIRST = "1f1b"  # the quickest baseline to build
GREEDY = "greedy"  # the baseline the quick path runs in other microbatch orders (it keeps the caps by itself)
SHORT_ENDS = "short-ends"
FALLING_TAILS = (4, 3, 6)  # the falling tails tried besides d - 1 (the d = 8 problems of instances/per-microbatch)


def load_bound(problem: Problem) -> float:
    """The quick path's lower bound: the busiest device's compute (the analytic bound's other arguments cost a
    good part of a short time limit: 0.1 s of CPU at d = 8, m = 32 per microbatch on the bench machine)."""
    return max(problem.device_load(d) for d in range(problem.devices))


def model_pays_off(options: SolveOptions, ops: int) -> bool:
    """Whether a solve of a model that places ``ops`` ops builds it (else the quick path answers)."""
    knobs = options.settings.quick
    if options.time_limit >= knobs.below or options.objective != "makespan":
        return True
    ops = min(ops, options.settings.phases.whole_model_ops)  # larger problems search windows of about that size
    return options.time_limit >= knobs.model_seconds + knobs.model_seconds_per_op * ops


def short_ends(problem: Problem) -> list[int]:
    """A microbatch order with the cheapest microbatches at both ends and the costliest in the middle: the
    pipeline fills behind the first microbatch and drains behind the last, so short ones there waste least
    (sorted by critical cost, every second one to the front, the others from the back)."""
    ranked = shortest_first(problem)
    return ranked[1::2] + ranked[0::2][::-1]


def falling_tail(problem: Problem, k: int) -> list[int]:
    """Shortest first, but the costliest ``k`` last in falling order: the pipeline fills behind the cheapest
    microbatches, and its drain ends behind cheaper ones than the costliest."""
    ranked = shortest_first(problem)
    return ranked[:-k] + ranked[-k:][::-1]


def greedy_orders(problem: Problem) -> list[tuple[str, list[int]]]:
    """The microbatch orders :func:`ordered_greedy` runs, by name, likeliest best first: :func:`short_ends`, the
    falling tails of ``FALLING_TAILS`` and d - 1, shortest first, longest first."""
    tails = dict.fromkeys(k for k in (*FALLING_TAILS, problem.devices - 1) if 1 < k < problem.microbatches)
    return [(SHORT_ENDS, short_ends(problem)), *((f"falling-tail-{k}", falling_tail(problem, k)) for k in tails),
            ("shortest-first", shortest_first(problem)), ("longest-first", longest_first(problem))]


def first_answer(problem: Problem, out: list[Schedule]) -> list[Schedule]:
    """An answer in milliseconds, appended to ``out``: 1F1B in data order where it applies and fits, else the
    serial plan (which fits whenever any schedule does without levers)."""
    options = RunOptions(threads=1, seed=0, quiet=True, warm_start="none")
    found = [s for s in applicable_baselines(problem, options, [FIRST]) if acceptable(s)]
    out += found or own_warm_starts(problem, until=lambda: True)
    return out


def ordered_greedy(problem: Problem, until: Callable[[], bool], out: list[Schedule]) -> list[Schedule]:
    """On a per-microbatch problem, the memory-aware list scheduler (the ``greedy`` baseline) with its
    microbatches in the orders of :func:`greedy_orders` (one build each, until ``until()``), appended to
    ``out`` when they pass the checker."""
    greedy = get_baseline(GREEDY)
    if not problem.per_microbatch or greedy.why_not(problem) is not None:
        return out
    options = RunOptions(threads=1, seed=0, quiet=True, warm_start="none")
    for name, order in greedy_orders(problem):
        if until():
            break
        try:
            schedule = in_order(greedy, problem, order, options, f"{GREEDY}@{name}")
        except PpsolveError:
            continue
        if acceptable(schedule):
            out.append(schedule)
    return out


def _heuristics(problem: Problem, options: SolveOptions, budget: Budget,
                notes: list[str]) -> tuple[list[Schedule], bool]:
    """The candidates found in the heuristics' share of the time limit, and whether they were cut short:
    :func:`ordered_greedy`, :func:`first_answer` if none yet, then the warm start's baselines and plans
    (not its other microbatch orders, whose search cannot stop before its count of builds). They are made
    in a worker thread that starts none after the share, nor one that would end after the time kept for
    checking; the one it is making then is waited for until that time (the search gets what is left),
    and left to end unobserved after that, unless none has ended, when the first one is waited for."""
    knobs, T = options.settings.quick, budget.time_limit
    found: list[Schedule] = [given_warm_start(problem, s) for s in (options.warm_schedule,) if s is not None]
    cut = False
    if options.warm_schedule is None:
        guard = budget.deadline - budget.reserve
        tries = None
        if budget.deterministic:  # as many candidates as the share pays for; the clock is only the guard
            b = budget.knobs
            ops = problem.num_stages * problem.microbatches * len(problem.kinds)
            tries = max(1, int(b.deterministic_share * knobs.warm_start_share * T * b.warm_start_ops_per_second
                               // max(1, ops)))
        share_end = guard if budget.deterministic else budget.t0 + knobs.warm_start_share * T

        asked = [time.monotonic()]  # when until() was last asked

        def until() -> bool:
            """Asked before each candidate: no more after the share, nor (unless deterministic) one that would
            end after the guard if it took as long as the one before it."""
            now, took = time.monotonic(), time.monotonic() - asked[0]
            asked[0] = now
            late = not budget.deterministic and now + took > guard
            return (tries is not None and len(found) >= tries) or now > share_end or late

        def candidates() -> None:
            if options.warm_start == "auto":
                ordered_greedy(problem, until, found)  # per-microbatch problems: the likely best first
                if not found:
                    first_answer(problem, found)
            baseline_warm_starts(problem, options.warm_start, knobs.warm_start_share * T, until, out=found)
            if options.warm_start == "auto":
                own_warm_starts(problem, until, at_least_one=not found, out=found,
                                beat=min((s.makespan for s in found), default=math.inf))

        # no candidate starts after the share; the one being made may end until the guard (the search's
        # time); with nothing found by then, the first candidate is waited for
        _, cut = wait_for(candidates, lambda: time.monotonic() > guard and bool(found))
        if time.monotonic() > budget.deadline:
            notes.append(f"no heuristic ended within the time limit: the first one is the answer, "
                         f"{time.monotonic() - budget.deadline:.2f} s late")
    for schedule in options.also_start_from:
        try:
            found.append(given_warm_start(problem, schedule))
        except InputError as exc:
            notes.append(f"a schedule to start from was left out: {exc}")
    return found, cut


def device_orders(schedule: Schedule) -> list[list[Op]]:
    """Each device's ops in the order a runtime issues them."""
    orders: list[list[Op]] = [[] for _ in range(schedule.problem.devices)]
    for op in issue_order(schedule.problem, schedule.ops):
        orders[op.device].append(op.op)
    return orders


def _fits(problem: Problem, schedule: Schedule) -> bool:
    return not any(exceeds(peak, cap) for peak, cap in zip(schedule.peak_memory, problem.capacity))


class Searched(NamedTuple):
    best: Schedule
    tried: int  # moves tried
    kept: int  # moves that shortened it
    by_clock: bool  # the clock ended the search (not ``max_tries``)


def slot_order(schedule: Schedule) -> list[int]:
    """The microbatches in the order their forwards start on stage 0 (slot k runs microbatch ``[k]``)."""
    return [j for _, j in sorted((op.start, op.microbatch) for op in schedule.ops
                                 if op.kind is OpKind.F and op.stage == 0)]


def moved_slots(slots: list[int], work: tuple[float, ...], rng: random.Random) -> list[int]:
    """Another slot order: two microbatches swap slots, one moves to another slot, or one of the costliest
    quarter moves to the first or the last slot (where the pipeline fills and drains)."""
    new, m, kind = list(slots), len(slots), rng.randrange(3)
    if kind == 0:
        a, b = rng.sample(range(m), 2)
        new[a], new[b] = new[b], new[a]
    elif kind == 1:
        a, b = rng.sample(range(m), 2)
        new.insert(b, new.pop(a))
    else:
        costliest = sorted(range(m), key=lambda k: -work[slots[k]])[:max(1, m // 4)]
        new.insert(rng.choice((0, m - 1)), new.pop(rng.choice(costliest)))
    return new


def nearby_slots(slots: list[int], rng: random.Random) -> list[int]:
    """Another slot order near ``slots``: two neighbours swap, any two swap, or one moves to another slot (the
    moves that shorten the list scheduler's plans; a costliest one to an end seldom does)."""
    new, m, kind = list(slots), len(slots), rng.randrange(3)
    if kind == 0:
        a = rng.randrange(m - 1)
        new[a], new[a + 1] = new[a + 1], new[a]
    elif kind == 1:
        a, b = rng.sample(range(m), 2)
        new[a], new[b] = new[b], new[a]
    else:
        a, b = rng.sample(range(m), 2)
        new.insert(b, new.pop(a))
    return new


def order_search(start: Schedule, seed: int, until: float | None, max_tries: int | None) -> Searched:
    """``start`` in other microbatch orders where that shortens it (see the module doc): each device keeps
    its op order, and the microbatch of each slot (:func:`slot_order`) changes by one move of
    :func:`moved_slots`. Only for a per-microbatch schedule without recomputes or transfers (an offload or a
    recompute is of one microbatch); ``until`` (``time.monotonic()``) and ``max_tries`` end it. The best
    is not checked yet."""
    problem = start.problem
    work = problem.microbatch_work
    if not problem.per_microbatch or start.uses_levers or len(set(work)) < 2:
        return Searched(start, 0, 0, False)
    rng = random.Random(seed)
    orders, slots = device_orders(start), slot_order(start)
    best, tried, kept = start, 0, 0
    while max_tries is None or tried < max_tries:
        if until is not None and time.monotonic() >= until:
            return Searched(best, tried, kept, True)
        new = moved_slots(slots, work, rng)
        tried += 1
        rename = dict(zip(slots, new))  # the microbatch of slot k becomes new[k]
        if all(work[a] == work[b] for a, b in rename.items()):
            continue  # equal microbatches trade places: nothing changes
        trial = [[op._replace(microbatch=rename[op.microbatch]) for op in order] for order in orders]
        ops = simulate(problem, trial)
        if max(op.end for op in ops) >= best.makespan - EPS:
            continue
        schedule = make_schedule(problem, ops, start.method.name)
        if _fits(problem, schedule):
            best, orders, slots, kept = schedule, trial, new, kept + 1
    return Searched(best, tried, kept, False)


def greedy_search(start: Schedule, seed: int, until: float | None, max_tries: int | None) -> Searched:
    """``start``, a schedule of the list scheduler (:func:`ordered_greedy`), planned anew by it in other
    microbatch orders where that shortens it: its order changes by one move of :func:`nearby_slots` at a time,
    and a plan shorter within every capacity is kept. ``until`` (``time.monotonic()``) and ``max_tries`` end
    it; the best is not checked yet."""
    problem, order = start.problem, start.method.params.get("microbatch_order")
    work = problem.microbatch_work
    if not start.method.name.startswith(GREEDY + "@") or order is None or len(set(work)) < 2:
        return Searched(start, 0, 0, False)
    greedy = get_baseline(GREEDY)
    options = RunOptions(threads=1, seed=0, quiet=True, warm_start="none")
    rng = random.Random(seed)
    best, tried, kept = start, 0, 0
    while max_tries is None or tried < max_tries:
        if until is not None and time.monotonic() >= until:
            return Searched(best, tried, kept, True)
        new = nearby_slots(order, rng)
        tried += 1
        if all(work[a] == work[b] for a, b in zip(order, new)):
            continue  # equal microbatches trade places: nothing changes
        try:
            schedule = in_order(greedy, problem, new, options, start.method.name)
        except PpsolveError:
            continue
        if schedule.makespan < best.makespan - EPS and _fits(problem, schedule):
            best, order, kept = schedule, new, kept + 1
    return Searched(best, tried, kept, False)


def _improve(warm: Schedule, options: SolveOptions, budget: Budget, notes: list[str]) -> tuple[Schedule, int, int]:
    """The order search from ``warm``, or the levers it can do without dropped: (best, checked; moves tried, kept)."""
    until = budget.deadline - budget.reserve
    share = (1 - options.settings.quick.warm_start_share) * budget.time_limit
    if warm.uses_levers:
        tries = options.settings.phases.shed_tries if budget.deterministic else None
        shed = shed_levers(warm, until=None if budget.deterministic else until, max_tries=tries)
        if overhead_key(shed) < overhead_key(warm) and check(shed).ok:
            notes.append(f"dropped what the makespan does not need: recomputed {warm.recomputed} -> {shed.recomputed}, "
                         f"offloaded {warm.offloaded:g} -> {shed.offloaded:g}")
            return shed, 0, 0
        return warm, 0, 0
    knobs, ops = options.settings.quick, max(1, len(warm.ops))
    tries = lambda per_op_second: int(per_op_second * share // ops) if budget.deterministic else None  # noqa: E731
    replanned = greedy_search(warm, options.seed, until, tries(knobs.greedy_tries_per_op_second))
    searched = order_search(replanned.best, options.seed, until, tries(knobs.tries_per_op_second))
    tried, kept = replanned.tried + searched.tried, replanned.kept + searched.kept
    if budget.deterministic and (replanned.by_clock or searched.by_clock):
        notes.append("the wall clock ended the order search: this run may not be reproducible")
    if searched.best is not warm and check(searched.best).ok:
        notes.append(f"order search: {kept} of {tried} moves of microbatches shortened it "
                     f"({warm.makespan:g} -> {searched.best.makespan:g}; {replanned.kept} of {replanned.tried} "
                     "planned anew by the list scheduler)")
        return searched.best, tried, kept
    return warm, tried, kept


def quick_solve(problem: Problem, options: SolveOptions, budget: Budget) -> SolveResult:
    """The quick path (see the module doc): a checked schedule, or NoSolutionError."""
    T = budget.time_limit
    notes = [f"the time limit ({T:g} s) cannot pay for building the model: the best heuristic, then a search "
             "over microbatch orders"]
    interrupted = cut = False
    warm = best = None
    tried = kept = 0
    try:
        found, cut = _heuristics(problem, options, budget, notes)
        if cut:
            notes.append("the heuristics were cut short (a candidate ran past its share of the time)"
                         + (": this run may not be reproducible" if budget.deterministic else ""))
        warm = best = shortest(found)
        if warm is not None:
            best, tried, kept = _improve(warm, options, budget, notes)
    except KeyboardInterrupt:
        interrupted = True
    if best is None:
        raise NoSolutionError("interrupted before any schedule was found" if interrupted else
                              f"no schedule found within the time limit ({T:g} s)")
    lower = load_bound(problem)
    status = Status.OPTIMAL if best.makespan <= lower + slack(lower) else Status.FEASIBLE
    o = options
    params = {"solver": o.solver, "time_limit": o.time_limit, "threads": o.threads, "seed": o.seed,
              "objective": o.objective, "warm_start": o.warm_start}
    extra = {"interrupted": interrupted, "notes": notes, "warm_start": warm.method.name,
             "order_search": {"tried": tried, "kept": kept}}
    info = MethodInfo(NAME, params, status.value, round(lower, 9), budget.elapsed(), extra)
    final = Schedule(problem, info, best.ops)
    return SolveResult(final, status, lower, final.gap or 0.0, info.seconds, interrupted, best is warm, warm,
                       None, notes, cut)
