"""The schedule a solver backend starts from: the best applicable baseline, else simple orders.

A warm start must pass the checker and respect the capacity; among those the
shortest wins. Candidates are tried one after another (the baselines, then our
plans, serial first) until a deadline, and the rest are skipped: a warm start
that cannot finish in its share of the time is cut short (once one exists).
Baselines come from ``ppsolve.baselines.METHODS``; plans of our own (their orders made by
:mod:`ppsolve.baselines.plans`) are always tried as well:

* serial: microbatches one after another (F down the stages, B and W back),
  valid for every placement; one microbatch in flight, so its peak is the
  least capacity without offload (or with offload, moving every offloadable
  activation right after its F).
* the list scheduler (the greedy baseline's engine) under other orders of kinds
  (forwards first, W first; with several chunks, a held microbatch's later chunks first).
* 1F1B limited to k in flight (linear placement): device i warms up with
  min(k, d - i) - 1 forwards, then alternates F and B (W right after B).
  k = d is 1F1B; smaller k trades speed for memory (peak k activations): the
  largest k that fits and the one below it.
* with offload: the list scheduler's orders made without a cap, and 1F1B limited to
  a k above what fits, each offloading on the devices over the cap.
* with recompute (contract version 3): 1F1B (W right after B, or deferred), every
  published order that applies, built without the cap, 1F1B limited to k in flight for
  k above what fits (at most ``RECOMPUTE_KS`` of them), and the list scheduler's orders
  made without a cap, each recomputing on every device over its cap just enough
  microbatches, chosen from its memory curve in two ways (the fewest recomputes; the
  recomputes best hidden in waits) by :func:`ppsolve.baselines.recompute.fit_by_recompute`.
  They are made without offload, and the other plans and baselines do not use the
  recompute block, so with both levers the warm start tries the candidates of each lever
  alone: when its share of the time lets it try them all, it is at most the better of the
  warm starts with offload only and with recompute only (tests/test_solver_warm_start.py
  checks it on random problems and caps).
"""

from __future__ import annotations

import math
import time
from dataclasses import fields
from typing import Callable, Iterator

from ppsolve import baselines
from ppsolve.baselines.plans import (fitting_k, limited_1f1b_orders, list_plan, serial_orders, w_right_after_b,
                                     with_offload)
from ppsolve.baselines.portfolio import applicable_baselines, built_baselines
from ppsolve.baselines.recompute import PREFER, fit_by_recompute
from ppsolve.checker import check
from ppsolve.errors import InputError, PpsolveError
from ppsolve.method_types import RunOptions
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate


def _offload_plans(problem: Problem) -> list[tuple[str, list[list[Op]]]]:
    """Plans that fit the cap only with offload, on the devices whose plan exceeds the cap:
    greedy orders made as if memory were unbounded, and (linear) 1F1B limited to k in flight."""
    if not problem.can_offload:
        return []
    plans = []
    free = problem.replace(capacity=None)
    all_devices = {d for d in range(problem.devices) if problem.capacity[d] is not None}
    for prefer in ("BFW", "FBW"):
        try:
            base = list_plan(free, prefer, problem.chunks > 1)
        except PpsolveError:
            continue
        for lead in (0, 1, 2):
            plans.append((f"greedy-{prefer}-nocap+offload-lead{lead}", with_offload(problem, base, lead, all_devices)))
    if problem.placement_name != "linear":
        return plans
    fit = fitting_k(problem)
    for k in sorted({problem.devices, (problem.devices + fit) // 2, fit + 1}, reverse=True):
        if k <= fit or k < 2:
            continue
        over = {d for d in range(problem.devices)
                if problem.capacity[d] is not None
                and min(k, problem.devices - d) * problem.activation[d] > problem.capacity[d] + 1e-12}
        if not over:
            continue
        for defer in ((False, True) if problem.split_backward else (False,)):
            base = limited_1f1b_orders(problem, k, defer)
            for lead in (0, 1, 2):
                name = f"1f1b-k{k}{'-deferw' if defer else ''}+offload-lead{lead}"
                plans.append((name, with_offload(problem, base, lead, over)))
    return plans


# 1F1B limited to k in flight with recompute: every k above what fits, up to this many values of k
RECOMPUTE_KS = 8


def spread(values, count: int) -> list:
    """At most ``count`` of ``values``, evenly spaced, the first and the last included, in their order."""
    values = list(values)
    if len(values) <= count:
        return values
    return [values[i] for i in sorted({round(i * (len(values) - 1) / (count - 1)) for i in range(count)})]


def schedule_orders(schedule: Schedule) -> list[list[Op]]:
    """Each device's ops of ``schedule`` in the order they start."""
    orders: list[list[Op]] = [[] for _ in range(schedule.problem.devices)]
    for op in sorted(schedule.ops, key=lambda o: (o.start, o.end)):
        orders[op.device].append(op.op)
    return orders


def _published_orders(problem: Problem) -> Iterator[tuple[str, list[list[Op]]]]:
    """(name, orders) of every published baseline that applies to ``problem`` (without recompute),
    built ignoring the cap, where the result breaks it and moves nothing to host."""
    options = RunOptions(ignore_capacity=True, threads=1, quiet=True, warm_start="none")
    for schedule in built_baselines(problem, options):
        if schedule.method.extra.get("capacity_broken") and not schedule.offloaded and not schedule.recomputed:
            yield schedule.method.name, schedule_orders(schedule)


def _recompute_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], list[list[Op]]]]]:
    """Plans that fit the cap by recomputing, made without offload (see the module docstring)."""
    if not problem.can_recompute or all(c is None for c in problem.capacity):
        return
    base = problem.replace(offload=None)

    def fitted(make) -> Iterator[tuple[str, Callable[[], list[list[Op]]]]]:
        for prefer in PREFER:
            yield f"-{prefer}", lambda prefer=prefer: fit_by_recompute(base, make(), prefer=prefer)[0]

    ks = spread(range(problem.devices, fitting_k(base), -1), RECOMPUTE_KS) if problem.placement_name == "linear" else []

    def onef1b(some_ks):
        for k in some_ks:
            for defer in ((False, True) if problem.split_backward else (False,)):
                for how, make in fitted(lambda k=k, defer=defer: limited_1f1b_orders(base, k, defer)):
                    yield f"1f1b-k{k}{'-deferw' if defer else ''}+recompute{how}", make

    yield from onef1b(ks[:1])
    for name, orders in _published_orders(base.replace(recompute=None)):
        for how, make in fitted(lambda orders=orders: orders):
            yield f"{name}+recompute{how}", make
        if problem.split_backward:  # what a W waits to run cannot be recomputed away: W right after B
            for how, make in fitted(lambda orders=orders: w_right_after_b(base, orders)):
                yield f"{name}-w-after-b+recompute{how}", make
    yield from onef1b(ks[1:])
    free = base.replace(capacity=None)
    for kinds in ("BFW", "FBW"):
        for how, make in fitted(lambda kinds=kinds: list_plan(free, kinds, problem.chunks > 1)):
            yield f"greedy-{kinds}-nocap+recompute{how}", make


def _own_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], list[list[Op]]]]]:
    """(name, make orders) of our own plans, lazily, cheapest and always valid first (serial)."""
    yield "serial", lambda: serial_orders(problem)
    for prefer in ("BFW", "FBW", "BWF"):
        for late in ((False, True) if problem.chunks > 1 else (False,)):
            yield (f"greedy-{prefer}{'-late' if late else ''}",
                   lambda prefer=prefer, late=late: list_plan(problem, prefer, late))
    if problem.can_offload:
        yield "serial+offload", lambda: serial_orders(problem, offload=True)
    if problem.placement_name == "linear":
        fit = fitting_k(problem)
        for k in sorted({min(fit, problem.devices), fit - 1}, reverse=True):
            if k >= 2:
                yield f"1f1b-k{k}", lambda k=k: limited_1f1b_orders(problem, k)
    yield from _recompute_plans(problem)
    for name, orders in _offload_plans(problem):
        yield name, lambda orders=orders: orders


def acceptable(schedule: Schedule) -> bool:
    """Valid, executable and within every capacity (the checker covers all three)."""
    return check(schedule).ok


def own_warm_starts(problem: Problem, until: Callable[[], bool] = lambda: False,
                    at_least_one: bool = True, beat: float = math.inf,
                    out: list[Schedule] | None = None) -> list[Schedule]:
    """Our own plans, each as listed and, when it offloads, with every forward waiting for the
    offloads before it (contract v2), which lowers the peak of back-to-back forwards. Plans are
    made lazily and the loop stops once ``until()`` is true (after one plan with ``at_least_one``).
    A plan longer than ``beat`` or than a plan kept before it cannot win and is not checked
    (a check costs more than a simulation), nor is one whose orders a plan before it had.
    Schedules are appended to ``out`` as they are found."""
    out = [] if out is None else out
    kept = len(out)
    seen: set[tuple] = set()

    def may_skip() -> bool:  # a plan may be skipped once one of ours is kept, or when none is required
        return len(out) > kept or not at_least_one

    for name, make in _own_plans(problem):
        if may_skip() and until():
            break
        try:
            orders = make()
        except PpsolveError:
            continue
        key = tuple(map(tuple, orders))
        if key in seen:
            continue
        seen.add(key)
        waits = forwards_wait_for_offloads(orders)
        for label, plan_waits in ((name, None), (f"{name}+wait", waits)) if waits else ((name, None),):
            try:
                ops = simulate(problem, orders, waits=plan_waits)
            except PpsolveError:
                continue
            if may_skip() and max(op.end for op in ops) > beat + 1e-9:
                continue
            schedule = make_schedule(problem, ops, f"warm:{label}")
            if acceptable(schedule):
                out.append(schedule)
                beat = min(beat, schedule.makespan)
    return out


def baseline_warm_starts(problem: Problem, choice: str, time_limit: float | None,
                         until: Callable[[], bool] = lambda: False,
                         out: list[Schedule] | None = None) -> list[Schedule]:
    """Schedules of the baselines that apply ('auto', one at a time until ``until()``),
    or of one named baseline, appended to ``out`` as they are found."""
    out = [] if out is None else out
    if choice == "none":
        return out
    options = RunOptions(time_limit=time_limit, threads=1, seed=0, quiet=True, warm_start="none")
    if choice == "auto":
        for method in baselines.METHODS:
            if method.why_not(problem) is not None:
                continue
            if until():
                break
            out += [s for s in applicable_baselines(problem, options, [method.name]) if acceptable(s)]
        return out
    method = baselines.get_baseline(choice)
    reason = method.why_not(problem)
    if reason is not None:
        raise PpsolveError(f"warm start {method.name} does not apply: {reason}")
    schedule = method.run(problem, options)
    out += [schedule] if acceptable(schedule) else []
    return out


def best_warm_start(problem: Problem, choice: str = "auto", time_limit: float | None = None,
                    deadline: float | None = None, sink: list[Schedule] | None = None,
                    max_tries: int | None = None) -> Schedule | None:
    """The shortest acceptable schedule among the baselines (per ``choice``) and our own plans,
    trying candidates until ``deadline`` (``time.monotonic()``; None: all of them) or, with
    ``max_tries``, until that many acceptable schedules were found (a count that does not depend on
    the clock: methods that do not apply, refuse or break the caps are not counted, so a V-shape or
    a capped problem still reaches the methods made for it). ``sink``, when given, receives each
    candidate as soon as it exists (a caller that stops waiting keeps what was found)."""
    candidates = sink if sink is not None else []

    def until() -> bool:  # asked before each candidate (a baseline method, or one plan of ours)
        if max_tries is not None and len(candidates) >= max_tries:
            return True
        return deadline is not None and time.monotonic() > deadline

    baseline_warm_starts(problem, choice, time_limit, until, out=candidates)
    if choice == "auto":  # then our plans, serial first (valid, cheap)
        own_warm_starts(problem, until, at_least_one=not candidates,
                        beat=min((c.makespan for c in candidates), default=math.inf), out=candidates)
    return shortest(candidates)


def given_warm_start(problem: Problem, schedule: Schedule) -> Schedule:
    """``schedule`` (a file the user gave) as the warm start of ``problem``: the same pipeline (any
    name and memory cap; an offload link or a recompute block the schedule does not use may differ:
    an offload-only or recompute-only answer starts a solve with both levers) and, with the
    problem's cap, every rule kept; else InputError naming the first difference or broken rule
    (field ``warm-start``)."""
    theirs = schedule.problem
    unused = {"offload": not any(op.kind.is_transfer for op in schedule.ops),
              "recompute": not any(op.kind is OpKind.R for op in schedule.ops)}
    for f in fields(Problem):
        if not f.compare or f.name in ("name", "capacity") or unused.get(f.name, False):
            continue
        ours, other = getattr(problem, f.name), getattr(theirs, f.name)
        if ours != other:
            raise InputError("warm-start", "the schedule is for another problem: " + _difference(f.name, other, ours))
    rebound = Schedule(problem, schedule.method, schedule.ops)
    report = check(rebound)
    if not report.ok:
        first = report.violations[0]
        more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
        raise InputError("warm-start",
                         f"the schedule breaks a rule on this problem: [{first.rule}] {first.message}{more}")
    return rebound


def _difference(name: str, theirs, ours) -> str:
    """"forward[3] is 2 in it, 3 in the problem" (the first entry that differs, for per-stage tuples)."""
    if isinstance(theirs, tuple) and isinstance(ours, tuple) and len(theirs) == len(ours):
        i = next(i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b)
        name, theirs, ours = f"{name}[{i}]", theirs[i], ours[i]
    return f"{name} is {theirs} in it, {ours} in the problem"


def shortest(candidates: list[Schedule]) -> Schedule | None:
    """The warm start among candidates: least makespan, then least offloaded, then least peak."""
    return min(candidates, key=lambda s: (s.makespan, s.offloaded, max(s.peak_memory, default=0.0)), default=None)


def fifo_relabel(schedule: Schedule) -> Schedule:
    """The same schedule with microbatches renamed to satisfy the model's symmetry breaking.

    Without transfers or recomputes each (stage, kind)'s slots go to microbatches in start
    order (the argument in ``constraints.symmetry`` shows this stays valid); with them (an
    offload or a recompute belongs to one (stage, microbatch)) whole microbatches are renamed
    by the start of their F on stage 0. The result is checked; if it did not pass, the
    original is returned.
    """
    ops = list(schedule.ops)
    if any(op.kind.is_transfer or op.kind is OpKind.R for op in ops):
        firsts = sorted((op.start, op.microbatch) for op in ops if op.kind is OpKind.F and op.stage == 0)
        rename = {j: rank for rank, (_, j) in enumerate(firsts)}
        new = [op._replace(microbatch=rename[op.microbatch]) for op in ops]
    else:
        groups: dict = {}
        for index, op in enumerate(ops):
            groups.setdefault((op.stage, op.kind), []).append(index)
        new = list(ops)
        for indices in groups.values():
            indices.sort(key=lambda i: (ops[i].start, ops[i].microbatch))
            for rank, i in enumerate(indices):
                new[i] = ops[i]._replace(microbatch=rank)
    relabelled = Schedule(schedule.problem, schedule.method, tuple(new))
    return relabelled if acceptable(relabelled) else schedule
