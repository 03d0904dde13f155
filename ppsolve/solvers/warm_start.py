"""The schedule a solver backend starts from: the best applicable baseline, else simple orders.

A warm start must pass the checker and respect the capacity; among those the
shortest wins. Candidates are tried one after another (the baselines, then our
plans, serial first) until a deadline, and the rest are skipped: a warm start
that cannot finish in its share of the time is cut short (once one exists).
Baselines come from the method registry (family "baseline"),
so this works whether or not any baseline is installed; two simple plans of
our own are always tried as well:

* serial: microbatches one after another (F down the stages, B and W back),
  valid for every placement; one microbatch in flight, so its peak is the
  least capacity without offload (or with offload, moving every offloadable
  activation right after its F).
* 1F1B limited to k in flight (linear placement): device i warms up with
  min(k, d - i) - 1 forwards, then alternates F and B (W right after B).
  k = d is 1F1B; smaller k trades speed for memory (peak k activations).
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

from ppsolve.checker import check
from ppsolve.dependencies import dependency_table
from ppsolve.errors import DeadlockError, PpsolveError
from ppsolve.baselines.portfolio import applicable_baselines
from ppsolve.methods import RunOptions, all_methods, get_method
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate


def serial_orders(problem: Problem, offload: bool = False) -> list[list[Op]]:
    """Each device's share of one global order that runs microbatches one at a time."""
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    S = problem.num_stages
    for j in range(problem.microbatches):
        for s in range(S):
            device = problem.placement[s]
            orders[device].append(Op(OpKind.F, s, j))
            if offload and problem.max_offload(s) > 0:
                orders[device].append(Op(OpKind.OFFLOAD, s, j))
        for s in reversed(range(S)):
            device = problem.placement[s]
            if offload and problem.max_offload(s) > 0:
                orders[device].append(Op(OpKind.RELOAD, s, j))
            orders[device].append(Op(OpKind.B, s, j))
            if problem.split_backward:
                orders[device].append(Op(OpKind.W, s, j))
    return orders


def limited_1f1b_orders(problem: Problem, k: int, defer_w: bool = False) -> list[list[Op]]:
    """1F1B on a linear placement with at most ``k`` microbatches in flight per device.

    With ``defer_w`` (split backward) the W of a microbatch runs after the next F instead of
    right after its B (steady state F, W, B), which leaves room to reload before the B.
    """
    d, m = problem.devices, problem.microbatches
    defer_w = defer_w and problem.split_backward
    orders = []
    for i in range(d):
        warm = min(max(1, min(k, d - i)) - 1, m)
        order = [Op(OpKind.F, i, j) for j in range(warm)]
        nxt = warm
        for j in range(m):
            if nxt < m:
                order.append(Op(OpKind.F, i, nxt))
                nxt += 1
            if defer_w and j > 0:
                order.append(Op(OpKind.W, i, j - 1))
            order.append(Op(OpKind.B, i, j))
            if problem.split_backward and not defer_w:
                order.append(Op(OpKind.W, i, j))
        if defer_w:
            order.append(Op(OpKind.W, i, m - 1))
        orders.append(order)
    return orders


def with_offload(problem: Problem, orders: list[list[Op]], lead: int, devices: set[int]) -> list[list[Op]]:
    """``orders`` with every activation of ``devices`` offloaded right after its F and reloaded
    up to ``lead`` compute ops before its B (lead 0: just before the B), never before an F (whose
    allocation would meet the reload's)."""
    out = []
    for device, order in enumerate(orders):
        if device not in devices:
            out.append(list(order))
            continue
        compute = [op for op in order if op.kind.is_compute]
        reload_before: dict[int, list[Op]] = {}
        for index, op in enumerate(compute):
            if op.kind is OpKind.B and problem.max_offload(op.stage) > 0:
                at = index
                moved = 0
                while moved < lead and at > 0 and compute[at - 1].kind is not OpKind.F:
                    at -= 1
                    moved += 1
                reload_before.setdefault(at, []).append(Op(OpKind.RELOAD, op.stage, op.microbatch))
        new = []
        for index, op in enumerate(compute):
            new += reload_before.get(index, [])
            new.append(op)
            if op.kind is OpKind.F and problem.max_offload(op.stage) > 0:
                new.append(Op(OpKind.OFFLOAD, op.stage, op.microbatch))
        out.append(new)
    return out


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
            base = greedy_orders(free, prefer, problem.chunks > 1)
        except PpsolveError:
            continue
        for lead in (0, 1, 2):
            plans.append((f"greedy-{prefer}-nocap+offload-lead{lead}", with_offload(problem, base, lead, all_devices)))
    if problem.placement_name != "linear":
        return plans
    for k in range(problem.devices, 1, -1):
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


def _own_plans(problem: Problem) -> Iterator[tuple[str, Callable[[], list[list[Op]]]]]:
    """(name, make orders) of our own plans, lazily, cheapest and always valid first (serial)."""
    yield "serial", lambda: serial_orders(problem)
    for prefer in ("BFW", "FBW", "BWF"):
        for late in ((False, True) if problem.chunks > 1 else (False,)):
            yield (f"greedy-{prefer}{'-late' if late else ''}",
                   lambda prefer=prefer, late=late: greedy_orders(problem, prefer, late))
    if problem.can_offload:
        yield "serial+offload", lambda: serial_orders(problem, offload=True)
    if problem.placement_name == "linear":
        for k in range(problem.devices, 1, -1):
            yield f"1f1b-k{k}", lambda k=k: limited_1f1b_orders(problem, k)
    for name, orders in _offload_plans(problem):
        yield name, lambda orders=orders: orders


def acceptable(schedule: Schedule) -> bool:
    """Valid, executable and within every capacity (the checker covers all three)."""
    return check(schedule).ok


def own_warm_starts(problem: Problem, until: Callable[[], bool] = lambda: False,
                    at_least_one: bool = True) -> list[Schedule]:
    """Our own plans, each as listed and, when it offloads, with every forward waiting for the
    offloads before it (contract v2), which lowers the peak of back-to-back forwards. Plans are
    made lazily and the loop stops once ``until()`` is true (after one plan with ``at_least_one``)."""
    out: list[Schedule] = []
    for name, make in _own_plans(problem):
        if (out or not at_least_one) and until():
            break
        try:
            orders = make()
        except PpsolveError:
            continue
        waits = forwards_wait_for_offloads(orders)
        for label, plan_waits in ((name, None), (f"{name}+wait", waits)) if waits else ((name, None),):
            try:
                schedule = make_schedule(problem, simulate(problem, orders, waits=plan_waits), f"warm:{label}")
            except PpsolveError:
                continue
            if acceptable(schedule):
                out.append(schedule)
    return out


def baseline_warm_starts(problem: Problem, choice: str, time_limit: float | None,
                         until: Callable[[], bool] = lambda: False) -> list[Schedule]:
    """Schedules of the registered baselines that apply ('auto', one at a time until ``until()``),
    or of one named method."""
    if choice == "none":
        return []
    options = RunOptions(time_limit=time_limit, threads=1, seed=0, quiet=True, warm_start="none")
    if choice == "auto":
        out: list[Schedule] = []
        for method in all_methods("baseline"):
            if until():
                break
            out += [s for s in applicable_baselines(problem, options, [method.name]) if acceptable(s)]
        return out
    method = get_method(choice)
    reason = method.why_not(problem)
    if reason is not None:
        raise PpsolveError(f"warm start {method.name} does not apply: {reason}")
    schedule = method.run(problem, options)
    return [schedule] if acceptable(schedule) else []


def best_warm_start(problem: Problem, choice: str = "auto", time_limit: float | None = None,
                    deadline: float | None = None, sink: list[Schedule] | None = None,
                    max_tries: int | None = None) -> Schedule | None:
    """The shortest acceptable schedule among the baselines (per ``choice``) and our own plans,
    trying candidates until ``deadline`` (``time.monotonic()``; None: all of them) or, with
    ``max_tries``, that many (a count that does not depend on the clock). ``sink``, when given,
    receives each group of candidates as soon as it exists (a caller that stops waiting keeps
    what was found)."""
    tries = 0

    def until() -> bool:  # asked before each candidate (a baseline method, or one plan of ours)
        nonlocal tries
        tries += 1
        if max_tries is not None and tries > max_tries:
            return True
        return deadline is not None and time.monotonic() > deadline

    candidates = sink if sink is not None else []
    if choice != "auto":
        candidates += baseline_warm_starts(problem, choice, time_limit, until)
    else:  # the baselines (fast generators, good orders), then our plans, serial first (valid, cheap)
        candidates += baseline_warm_starts(problem, choice, time_limit, until)
        candidates += own_warm_starts(problem, until, at_least_one=not candidates)
    return shortest(candidates)


def shortest(candidates: list[Schedule]) -> Schedule | None:
    """The warm start among candidates: least makespan, then least offloaded, then least peak."""
    return min(candidates, key=lambda s: (s.makespan, s.offloaded, max(s.peak_memory, default=0.0)), default=None)


def greedy_orders(problem: Problem, prefer: str = "BFW", late_first: bool = False) -> list[list[Op]]:
    """A list scheduler for any placement, without offload, that respects the capacity.

    Time advances event by event; an idle device starts the first ready op of
    its stages in the kind order ``prefer`` (per stage and kind in microbatch
    order; among stages, the lowest first, or the highest with ``late_first``). A device admits a new microbatch (the F of its lowest stage) only
    when the memory of all its stages for that microbatch is free, so an
    admitted microbatch always finishes and the plan never deadlocks on memory.
    """
    p = problem
    S, m = p.num_stages, p.microbatches
    kinds = [OpKind(k) for k in prefer if OpKind(k) in p.kinds]
    nxt = {(k, s): 0 for k in p.kinds for s in range(S)}
    end: dict[Op, float] = {}
    orders: list[list[Op]] = [[] for _ in range(p.devices)]
    free_at = [0.0] * p.devices
    level = [0.0] * p.devices
    releases: list[tuple[float, int, float]] = []  # (time, device, amount) not yet applied
    reserve = [sum(p.activation[s] for s in stages) for stages in p.stages_of_device]
    first = [min(stages) for stages in p.stages_of_device]
    cap = [c if c is not None else float("inf") for c in p.capacity]
    total = S * m * len(p.kinds)
    t, done = 0.0, 0
    table = dependency_table(p, p.kinds)

    def ready(op: Op) -> float | None:
        times = [0.0]
        for dep in table[(op.kind, op.stage)]:
            if dep.optional:
                continue  # no transfers in these plans
            done_at = end.get(dep.op(op.microbatch))
            if done_at is None:
                return None
            times.append(done_at + dep.lag)
        return max(times)

    while done < total:
        for rel in [r for r in releases if r[0] <= t + 1e-12]:
            level[rel[1]] += -rel[2]
            releases.remove(rel)
        progressed = False
        for d in range(p.devices):
            if free_at[d] > t + 1e-12:
                continue
            chosen = None
            for k in kinds:
                for s in (reversed(p.stages_of_device[d]) if late_first else p.stages_of_device[d]):
                    j = nxt[(k, s)]
                    if j >= m:
                        continue
                    op = Op(k, s, j)
                    r = ready(op)
                    if r is None or r > t + 1e-12:
                        continue
                    if k is OpKind.F and s == first[d] and level[d] + reserve[d] > cap[d] + 1e-12:
                        continue
                    chosen = op
                    break
                if chosen is not None:
                    break
            if chosen is None:
                continue
            k, s, j = chosen
            dur = p.duration(k, s)
            end[chosen] = t + dur
            free_at[d] = t + dur
            nxt[(k, s)] += 1
            orders[d].append(chosen)
            done += 1
            progressed = True
            if k is OpKind.F and s == first[d]:
                level[d] += reserve[d]
            elif k is not OpKind.F:
                released = p.released_by(k, s)
                if released:
                    releases.append((t + dur, d, released))
        if progressed:
            continue
        # a running op ends at its device's free_at, so that list holds every pending end
        future = [x for x in free_at if x > t + 1e-12] + [r[0] for r in releases if r[0] > t + 1e-12]
        waiting = []
        for k in p.kinds:
            for s in range(S):
                j = nxt[(k, s)]
                if j < m:
                    r = ready(Op(k, s, j))
                    if r is not None and r > t + 1e-12:
                        waiting.append(r)
        future += waiting
        if not future:
            raise DeadlockError("greedy warm start is stuck")
        t = min(future)
    return orders


def fifo_relabel(schedule: Schedule) -> Schedule:
    """The same schedule with microbatches renamed to satisfy the model's symmetry breaking.

    Without transfers each (stage, kind)'s slots go to microbatches in start order (the
    argument in ``constraints.symmetry`` shows this stays valid); with transfers whole
    microbatches are renamed by the start of their F on stage 0. The result is checked;
    if it did not pass, the original is returned.
    """
    ops = list(schedule.ops)
    if any(op.kind.is_transfer for op in ops):
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
