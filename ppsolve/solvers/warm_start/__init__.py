"""The schedule a solver backend starts from: the best applicable baseline, else simple orders.

A warm start must pass the checker and respect the capacity; among those the
shortest wins. Candidates are tried one after another (the baselines, then our
plans, serial first) until a deadline, and the rest are skipped: a warm start
that cannot finish in its share of the time is cut short (once one exists).
Baselines come from ``ppsolve.baselines.METHODS``; plans of our own (their orders made by
:mod:`ppsolve.solvers.warm_start.plans`) are always tried as well:

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
* with offload and a cap, selective offload (:mod:`ppsolve.baselines.engines.offload_fit`): the list
  scheduler's orders made with each cap raised by one to two activations, each device over its
  cap offloading just the share of each activation that fits it (plans with their amounts and waits).
* with recompute (contract version 3): 1F1B (W right after B, or deferred), every
  published order that applies, built without the cap, 1F1B limited to k in flight for
  k above what fits (at most ``plans.RECOMPUTE_KS`` of them), and the list scheduler's orders
  made without a cap, each recomputing on every device over its cap just enough
  microbatches, chosen from its memory curve in two ways (the fewest recomputes; the
  recomputes best hidden in waits) by :func:`ppsolve.baselines.families.recompute.fit_by_recompute`.
  They are made without offload, and the other plans and baselines do not use the
  recompute block, so with both levers the warm start tries the candidates of each lever
  alone: when its share of the time lets it try them all, it is at most the better of the
  warm starts with offload only and with recompute only (tests/solvers/test_solver_warm_start.py
  checks it on random problems and caps).
* with both levers and a cap, last (``PhaseSettings.mixed_plans``, on by default: docs/solver.md):
  1F1B and the published orders, made without the cap and with W right after B, recomputing
  just enough to fit each cap raised by a share of an activation and offloading the rest
  (:func:`ppsolve.solvers.warm_start.plans.fit_by_both`). Where recomputing all the excess
  makes the first device the bottleneck and the link cannot move it all, this beats both
  (llama13b-like v = 2, 8 x 32 at 15 GiB: 4015.10 against 4100.74 with recompute only). Such a
  plan is the warm start only where it is shorter than every other candidate (:func:`shortest`).

When microbatches differ (contract version 4) the baselines and plans above run in data
order; then every applicable baseline runs with its microbatches longest first and shortest
first, and the order search (``NAME@search``) of the fastest baseline found so far
(:mod:`ppsolve.baselines.microbatch_order`).
"""

from __future__ import annotations

import math
import time
from dataclasses import fields
from typing import Callable

import numpy as np

from ppsolve import baselines
from ppsolve.baselines.engines.offload_pass import Plan
from ppsolve.baselines.microbatch_order import base_name
from ppsolve.baselines.portfolio import applicable_baselines, ordered_baselines
from ppsolve.checker import check
from ppsolve.costs import Grid
from ppsolve.errors import InputError, PpsolveError
from ppsolve.method_types import RunOptions
from ppsolve.ops import OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from ppsolve.solvers.symmetry import identical_classes
from ppsolve.solvers.warm_start.plans import is_mixed_plan, own_plans
from ppsolve.tolerance import EPS


def acceptable(schedule: Schedule) -> bool:
    """Valid, executable and within every capacity (the checker covers all three)."""
    return check(schedule).ok


def own_warm_starts(problem: Problem, until: Callable[[], bool] = lambda: False,
                    at_least_one: bool = True, beat: float = math.inf,
                    out: list[Schedule] | None = None, mixed: bool = False) -> list[Schedule]:
    """Our own plans (with ``mixed``, those with both levers too), each as listed and, when it
    offloads, with every forward waiting for the offloads before it (contract v2), which lowers the
    peak of back-to-back forwards. Plans are
    made lazily and the loop stops once ``until()`` is true (after one plan with ``at_least_one``).
    A plan longer than ``beat`` or than a plan kept before it cannot win and is not checked
    (a check costs more than a simulation), nor is one whose orders a plan before it had.
    Schedules are appended to ``out`` as they are found."""
    out = [] if out is None else out
    kept = len(out)
    seen: set[tuple] = set()

    def may_skip() -> bool:  # a plan may be skipped once one of ours is kept, or when none is required
        return len(out) > kept or not at_least_one

    for name, make in own_plans(problem, mixed):
        if may_skip() and until():
            break
        try:
            made = make()
        except PpsolveError:
            continue
        orders, amounts = (made.orders, made.amounts) if isinstance(made, Plan) else (made, None)
        key = tuple(map(tuple, orders))
        if key in seen:
            continue
        seen.add(key)
        waits = made.waits if isinstance(made, Plan) else forwards_wait_for_offloads(orders)
        variants = ((name, waits),) if isinstance(made, Plan) else ((name, None), (f"{name}+wait", waits))
        for label, plan_waits in variants if waits else ((name, None),):
            try:
                ops = simulate(problem, orders, amounts, waits=plan_waits)
            except PpsolveError:
                continue
            if may_skip() and max(op.end for op in ops) > beat + EPS:
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


def ordered_warm_starts(problem: Problem, until: Callable[[], bool] = lambda: False,
                        out: list[Schedule] | None = None) -> list[Schedule]:
    """On a problem whose microbatches differ: each applicable baseline with its microbatches longest
    first and shortest first (one baseline at a time until ``until()``), then the order search of the
    baseline fastest among ``out``; appended to ``out``. Nothing on a problem whose microbatches cost
    the same (every order is data order there). The search is given no time limit (its count of
    builds is fixed by the problem's size), so the result does not depend on the clock."""
    out = [] if out is None else out
    if not problem.per_microbatch:
        return out
    options = RunOptions(threads=1, seed=0, quiet=True, warm_start="none")
    for method in baselines.METHODS:
        if method.why_not(problem) is not None:
            continue
        if until():
            return out
        out += [s for s in ordered_baselines(problem, options, ("longest-first", "shortest-first"), [method.name])
                if acceptable(s)]
    names = {m.name for m in baselines.METHODS}
    ranked = sorted((s for s in out if base_name(s.method.name) in names), key=lambda s: s.makespan)
    if ranked and not until():
        base = base_name(ranked[0].method.name)
        out += [s for s in ordered_baselines(problem, options, ("search",), [base]) if acceptable(s)]
    return out


def best_warm_start(problem: Problem, choice: str = "auto", time_limit: float | None = None,
                    deadline: float | None = None, sink: list[Schedule] | None = None,
                    max_tries: int | None = None, mixed: bool = False) -> Schedule | None:
    """The shortest acceptable schedule among the baselines (per ``choice``) and our own plans,
    trying candidates until ``deadline`` (``time.monotonic()``; None: all of them) or, with
    ``max_tries``, until that many acceptable schedules were found (a count that does not depend on
    the clock: methods that do not apply, refuse or break the caps are not counted, so a V-shape or
    a capped problem still reaches the methods made for it). ``sink``, when given, receives each
    candidate as soon as it exists (a caller that stops waiting keeps what was found). ``mixed``: our
    plans with both levers too (``PhaseSettings.mixed_plans``)."""
    candidates = sink if sink is not None else []

    def until() -> bool:  # asked before each candidate (a baseline method, or one plan of ours)
        if max_tries is not None and len(candidates) >= max_tries:
            return True
        return deadline is not None and time.monotonic() > deadline

    baseline_warm_starts(problem, choice, time_limit, until, out=candidates)
    if choice == "auto":  # then our plans, serial first (valid, cheap), then other microbatch orders
        own_warm_starts(problem, until, at_least_one=not candidates,
                        beat=min((c.makespan for c in candidates), default=math.inf), out=candidates, mixed=mixed)
        ordered_warm_starts(problem, until, out=candidates)
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
    """"forward[3] is 2 in it, 3 in the problem" (the first entry that differs, for per-stage tuples and
    grids; ``forward[3][5]`` for per-microbatch grids)."""
    if isinstance(theirs, Grid) and isinstance(ours, Grid) and theirs.array.shape == ours.array.shape:
        s, j = (int(x) for x in np.argwhere(theirs.array != ours.array)[0])
        index = f"[{s}][{j}]" if theirs.per_microbatch or ours.per_microbatch else f"[{s}]"
        return f"{name}{index} is {theirs.at(s, j)} in it, {ours.at(s, j)} in the problem"
    if isinstance(theirs, tuple) and isinstance(ours, tuple) and len(theirs) == len(ours):
        i = next(i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b)
        name, theirs, ours = f"{name}[{i}]", theirs[i], ours[i]
    return f"{name} is {theirs} in it, {ours} in the problem"


def shortest(candidates: list[Schedule]) -> Schedule | None:
    """The warm start among candidates: least makespan, then any other than a plan with both levers at once
    (``plans.mixed_plans``: they win only where they are shorter), then least offloaded, then least peak.

    Which of the plans of one makespan the search starts from decides where it ends, as its windows seldom
    change the levers of the first devices: on the 13B-like problem at 20 GiB fourteen plans tie, and the
    search reaches the optimum from the one with whole offloads first but not from the plan with both
    levers that offloads least (docs/solver.md, plans with both levers)."""
    return min(candidates, key=lambda s: (s.makespan, is_mixed_plan(s.method.name), s.offloaded,
                                          max(s.peak_memory, default=0.0)), default=None)


def fifo_relabel(schedule: Schedule) -> Schedule:
    """The same schedule with microbatches renamed to satisfy the model's symmetry breaking.

    Names are exchanged only within a class of identical microbatches (``ppsolve.solvers.symmetry``).
    Without transfers or recomputes each (stage, kind)'s slots of a class go to its microbatches in
    start order (the argument in ``constraints.symmetry`` shows this stays valid); with them (an
    offload or a recompute belongs to one (stage, microbatch)) whole microbatches of a class are
    renamed by the start of their F on stage 0. The result is checked; if it did not pass, the
    original is returned.
    """
    ops = list(schedule.ops)
    classes = identical_classes(schedule.problem)
    new = list(ops)
    if any(op.kind.is_transfer or op.kind is OpKind.R for op in ops):
        first = {op.microbatch: op.start for op in ops if op.kind is OpKind.F and op.stage == 0}
        rename = {}
        for members in classes:
            rename.update(zip(sorted(members, key=lambda j: (first[j], j)), members))
        new = [op._replace(microbatch=rename[op.microbatch]) for op in ops]
    else:
        of_class = {j: c for c, members in enumerate(classes) for j in members}
        groups: dict = {}
        for index, op in enumerate(ops):
            groups.setdefault((op.stage, op.kind, of_class[op.microbatch]), []).append(index)
        for (_, _, c), indices in groups.items():
            indices.sort(key=lambda i: (ops[i].start, ops[i].microbatch))
            for j, i in zip(classes[c], indices):
                new[i] = ops[i]._replace(microbatch=j)
    relabelled = Schedule(schedule.problem, schedule.method, tuple(new))
    return relabelled if acceptable(relabelled) else schedule
