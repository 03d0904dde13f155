"""Property tests on random small problems (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ppsolve.bounds import makespan_lower_bound, min_capacity
from ppsolve.checker import check
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem, problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import device_waits, issue_order, retime, simulate
from tests.helpers import assert_waits_follow_the_contract, serial_orders


@st.composite
def problems(draw) -> Problem:
    devices = draw(st.integers(1, 3))
    placement = draw(st.sampled_from(["linear", "interleaved", "vshape", "explicit"]))
    chunks = 1 if placement == "linear" else draw(st.sampled_from([2] if placement == "vshape" else [1, 2, 3]))
    S = devices * chunks
    times = st.lists(st.integers(0, 6), min_size=S, max_size=S)
    forward = draw(times)
    activation = draw(st.lists(st.integers(1, 4), min_size=S, max_size=S))
    data = {
        "format": "ppsolve/problem@1", "devices": devices, "microbatches": draw(st.integers(1, 4)),
        "chunks": chunks,
        "placement": draw(st.lists(st.integers(0, devices - 1), min_size=S, max_size=S))
        if placement == "explicit" else placement,
        "backward": draw(st.sampled_from(["split", "fused"])),
        "time": {"forward": [f + 1 for f in forward], "backward_input": draw(times),
                 "backward_weight": draw(times), "p2p": draw(st.sampled_from([0, 0.5, 2]))},
        "memory": {"activation": activation,
                   "weight_hold": [draw(st.integers(0, a)) for a in activation]},
    }
    if draw(st.booleans()):
        links = [[d] for d in range(devices)] if draw(st.booleans()) else [list(range(devices))]
        data["offload"] = {"fraction": draw(st.sampled_from([0.5, 1])),
                           "bandwidth": {"d2h": draw(st.sampled_from([0.5, 1, 4])), "h2d": 1},
                           "links": links, "duplex": draw(st.booleans())}
    if draw(st.booleans()):  # contract v3: a forward may keep only its checkpoint and be recomputed
        data["recompute"] = {"keep": [draw(st.integers(0, a)) for a in activation]}
        if draw(st.booleans()):
            data["recompute"]["time"] = draw(times)
    return problem_from_dict(data)


def random_orders(problem: Problem, rng: random.Random, offload: bool) -> tuple[list[list[Op]], dict]:
    """A random topological order of all ops, split into device lists (never deadlocks)."""
    sequence, amounts = random_sequence(problem, rng, offload)
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    for op in sequence:
        orders[problem.placement[op.stage]].append(op)
    return orders, amounts


def random_sequence(problem: Problem, rng: random.Random, offload: bool,
                    eager_transfers: bool = False) -> tuple[list[Op], dict]:
    """A random topological order of all ops of one iteration (rules 1-5 written out here on purpose:
    the tests do not build their reference from the code under test), and the offload amounts."""
    S, m = problem.num_stages, problem.microbatches
    offloaded = {(s, j) for s in range(S) for j in range(m) if offload and rng.random() < 0.5}
    amounts = {key: problem.max_offload(key[0]) * rng.choice([0.5, 1]) for key in offloaded}
    offloaded = {key for key in offloaded if amounts[key] > 0}
    recomputed = {(s, j) for s in range(S) for j in range(m)
                  if problem.recompute is not None and (s, j) not in offloaded and rng.random() < 0.5}
    succ: dict[Op, list[Op]] = {}
    indeg: dict[Op, int] = {}

    def add(op):
        succ.setdefault(op, [])
        indeg.setdefault(op, 0)

    def edge(a, b):
        add(a), add(b)
        succ[a].append(b)
        indeg[b] += 1

    for j in range(m):
        for s in range(S):
            add(Op(OpKind.F, s, j))
            if s:
                edge(Op(OpKind.F, s - 1, j), Op(OpKind.F, s, j))
            edge(Op(OpKind.F, s, j) if s == S - 1 else Op(OpKind.B, s + 1, j), Op(OpKind.B, s, j))
            if problem.split_backward:
                edge(Op(OpKind.B, s, j), Op(OpKind.W, s, j))
            if (s, j) in offloaded:
                edge(Op(OpKind.F, s, j), Op(OpKind.OFFLOAD, s, j))
                edge(Op(OpKind.OFFLOAD, s, j), Op(OpKind.RELOAD, s, j))
                edge(Op(OpKind.RELOAD, s, j), Op(OpKind.B, s, j))
            if (s, j) in recomputed:
                edge(Op(OpKind.F, s, j), Op(OpKind.R, s, j))
                edge(Op(OpKind.R, s, j), Op(OpKind.B, s, j))
    ready = [op for op, n in indeg.items() if n == 0]
    sequence: list[Op] = []
    while ready:
        transfers = [i for i, op in enumerate(ready) if op.kind.is_transfer]
        pick = rng.choice(transfers) if eager_transfers and transfers and rng.random() < 0.8 else None
        op = ready.pop(rng.randrange(len(ready)) if pick is None else pick)
        sequence.append(op)
        for nxt in succ[op]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                ready.append(nxt)
    return sequence, {key: amounts[key] for key in offloaded}


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problems())
def test_serial_schedule_passes_the_checker(problem):
    offload = problem.can_offload
    schedule = make_schedule(problem, simulate(problem, serial_orders(problem, offload=offload)), "serial")
    report = check(schedule)
    assert report.ok, [v.render() for v in report.violations]


@SETTINGS
@given(problems(), st.integers(0, 10**6))
def test_simulated_schedules_run_as_planned_and_respect_bounds(problem, seed):
    orders, amounts = random_orders(problem, random.Random(seed), offload=problem.can_offload)
    ops = simulate(problem, orders, amounts)
    schedule = make_schedule(problem, ops, "random")
    report = check(schedule)
    assert report.ok, [v.render() for v in report.violations]
    # contract v2: the runtime never starts anything later than planned (it may start an op of zero
    # duration earlier than the plan's list put it)
    planned = {o.op: o.start for o in ops}
    assert all(o.start <= planned[o.op] + 1e-9 for o in retime(problem, ops))
    assert makespan_lower_bound(problem).value <= schedule.makespan + 1e-9
    need = min_capacity(problem, offload=problem.can_offload, recompute=problem.can_recompute)
    assert all(n <= peak + 1e-9 for n, peak in zip(need, schedule.peak_memory))


@SETTINGS
@given(problems())
def test_least_capacity_is_reached_by_the_serial_schedule(problem):
    # Without offload, one microbatch at a time with W right after B holds exactly the
    # activations of one microbatch on each device: min_capacity is exact.
    schedule = make_schedule(problem, simulate(problem, serial_orders(problem)), "serial")
    need = min_capacity(problem, offload=False)
    assert all(abs(a - b) < 1e-9 for a, b in zip(schedule.peak_memory, need))


@SETTINGS
@given(problems())
def test_least_capacity_with_offload_is_reached_by_serial_plan_whose_forwards_wait(problem):
    # Contract v2: with every offloadable share moved right after its F and each forward waiting
    # for the offloads before it, one microbatch in flight holds exactly min_capacity(offload=True).
    from ppsolve.simulator import forwards_wait_for_offloads
    if not problem.can_offload:
        return
    orders = [[op for op in order if not (op.kind.is_transfer and problem.max_offload(op.stage) <= 0)]
              for order in serial_orders(problem, offload=True)]
    ops = simulate(problem, orders, waits=forwards_wait_for_offloads(orders))
    need = min_capacity(problem, offload=True)
    schedule = make_schedule(problem.replace(capacity=tuple(need)), ops, "serial+offload+wait")
    assert all(abs(a - b) < 1e-9 for a, b in zip(schedule.peak_memory, need)), (schedule.peak_memory, need)
    assert check(schedule).ok


@SETTINGS
@given(problems(), st.integers(0, 10**6))
def test_lower_bound_holds_under_the_schedules_own_memory_cap(problem, seed):
    # Any valid schedule stays valid with each device capped at its own peak: the bound,
    # which now sees the cap, must still not exceed its makespan.
    orders, amounts = random_orders(problem, random.Random(seed), offload=problem.can_offload)
    schedule = make_schedule(problem, simulate(problem, orders, amounts), "random")
    capped = problem.replace(capacity=tuple(schedule.peak_memory))
    assert makespan_lower_bound(capped).value <= schedule.makespan + 1e-9


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(0, 10**6))
def test_lower_bound_holds_for_random_plans_that_recompute(problem, seed):
    # Contract v3: the same on problems with a recompute block, the plan recomputing about half of
    # its (stage, microbatch) (and offloading some where it may): capped at its own peak, which the
    # recomputes lower, the bound must not exceed the plan's makespan.
    from hypothesis import assume
    assume(problem.can_recompute)
    ops = random_valid_plan(problem, random.Random(seed))
    assume(any(o.kind is OpKind.R for o in ops))
    schedule = make_schedule(problem.replace(capacity=None), ops, "random-plan")
    capped = problem.replace(capacity=tuple(schedule.peak_memory))
    assert makespan_lower_bound(capped).value <= schedule.makespan + 1e-9


def _waits_for(problem: Problem, op: Op) -> list[tuple[Op, float]]:
    """Rules 1-5 and 9 for ``op`` (same microbatch), written out for the test's own planner."""
    s, j, last = op.stage, op.microbatch, problem.num_stages - 1
    if op.kind is OpKind.F:
        return [(Op(OpKind.F, s - 1, j), problem.latency(s - 1, s))] if s else []
    if op.kind is OpKind.B:
        upstream = (Op(OpKind.F, s, j), 0.0) if s == last else (Op(OpKind.B, s + 1, j), problem.latency(s, s + 1))
        return [upstream, (Op(OpKind.RELOAD, s, j), 0.0), (Op(OpKind.R, s, j), 0.0)]
    if op.kind is OpKind.R:
        return [(Op(OpKind.F, s, j), 0.0)]
    if op.kind is OpKind.W:
        return [(Op(OpKind.B, s, j), 0.0)]
    if op.kind is OpKind.OFFLOAD:
        return [(Op(OpKind.F, s, j), 0.0)]
    return [(Op(OpKind.OFFLOAD, s, j), 0.0)]


def random_valid_plan(problem: Problem, rng: random.Random) -> list:
    """Random valid timed ops, not as soon as possible: random idle gaps, transfers that start inside
    compute ops, forwards held until an offload of their device has ended, shared lanes."""
    from ppsolve.schedule import ScheduledOp
    sequence, amounts = random_sequence(problem, rng, offload=problem.can_offload, eager_transfers=True)
    end: dict[Op, float] = {}
    compute_free = [0.0] * problem.devices
    lane_free: dict[int, float] = {}
    last_offload_end = [0.0] * problem.devices
    out = []
    for op in sequence:
        device = problem.placement[op.stage]
        t = max([0.0] + [end[dep] + lag for dep, lag in _waits_for(problem, op) if dep in end])
        amount = amounts.get((op.stage, op.microbatch), 0.0)
        if op.kind.is_compute:
            t = max(t, compute_free[device])
            if op.kind is OpKind.F and rng.random() < 0.8:
                t = max(t, last_offload_end[device])  # a forward that waits for an offload
        else:
            t = max(t, lane_free.get(problem.lane(device, op.kind), 0.0))
        t += rng.choice([0, 0, 0, 0.25, 0.5, 1.5])
        duration = problem.duration(op.kind, op.stage, op.microbatch, amount=amount)
        end[op] = t + duration
        if op.kind.is_compute:
            compute_free[device] = t + duration
        else:
            lane_free[problem.lane(device, op.kind)] = t + duration
            if op.kind is OpKind.OFFLOAD:
                last_offload_end[device] = max(last_offload_end[device], t + duration)
        out.append(ScheduledOp(op.kind, op.stage, op.microbatch, device, t, t + duration, amount))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(0, 10**6))
def test_retiming_a_valid_plan_is_never_later_nor_higher(problem, seed):
    # Contract v2: every action waits for its data, its lane and every action of its device that is
    # planned to end by its start; so nothing starts later than planned and no device holds more.
    from ppsolve.memory import peak_memory
    ops = random_valid_plan(problem, random.Random(seed))
    schedule = make_schedule(problem.replace(capacity=None), ops, "random-plan")
    capped = make_schedule(problem.replace(capacity=tuple(schedule.peak_memory)), ops, "random-plan")
    report = check(capped)
    assert report.valid, [v.render() for v in report.violations]
    retimed = {o.op: o for o in retime(problem, ops)}  # raises DeadlockError on a deadlock
    for op in ops:
        assert retimed[op.op].start <= op.start + 1e-9, (op, retimed[op.op])
    assert max(o.end for o in retimed.values()) <= capped.makespan + 1e-9
    planned = peak_memory(problem, ops)
    for device, peak in enumerate(peak_memory(problem, list(retimed.values()))):
        assert peak <= planned[device] + 1e-9, (device, peak, planned[device])
    # what makes the peak hold: a release planned at or before an allocation of the same device, and
    # issued before it, still happens at or before it (at one instant a B of zero duration may
    # depend on an R of zero duration of the same (stage, microbatch): it is issued after it)
    issued = {o.op: k for k, o in enumerate(issue_order(problem, ops))}
    releases = [o for o in ops if o.kind in (OpKind.B, OpKind.W, OpKind.OFFLOAD)]
    allocations = [o for o in ops if o.kind in (OpKind.F, OpKind.R, OpKind.RELOAD)]
    for x in releases:
        for y in allocations:
            if x.device == y.device and x.end <= y.start and issued[x.op] < issued[y.op]:
                assert retimed[x.op].end <= retimed[y.op].start + 1e-9, (x, y, retimed[x.op], retimed[y.op])
    assert report.ok, [v.render() for v in report.violations]


@SETTINGS
@given(problems(), st.integers(0, 10**6))
def test_device_waits_are_the_contracts_waits(problem, seed):
    # device_waits, read by the re-timing and by the executor, names exactly what contract v2 says
    # an action waits for on its device, on random valid plans (transfers inside compute ops,
    # forwards held for offloads, shared and half-duplex links), all devices at once or one by one.
    ops = random_valid_plan(problem, random.Random(seed))
    issued = issue_order(problem, ops)
    assert_waits_follow_the_contract(problem, issued, device_waits(problem, issued))
    for device in range(problem.devices):
        mine = issue_order(problem, [op for op in ops if op.device == device])
        alone = device_waits(problem, mine)
        together = [[issued[u].op for u in awaited] for op, awaited in zip(issued, device_waits(problem, issued))
                    if op.device == device]
        assert [[mine[u].op for u in awaited] for awaited in alone] == together
