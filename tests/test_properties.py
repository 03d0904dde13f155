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
from ppsolve.simulator import retime, simulate
from tests.helpers import serial_orders


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
    return problem_from_dict(data)


def random_orders(problem: Problem, rng: random.Random, offload: bool) -> tuple[list[list[Op]], dict]:
    """A random topological order of all ops, split into device lists (never deadlocks)."""
    S, m = problem.num_stages, problem.microbatches
    offloaded = {(s, j) for s in range(S) for j in range(m) if offload and rng.random() < 0.5}
    amounts = {key: problem.max_offload(key[0]) * rng.choice([0.5, 1]) for key in offloaded}
    offloaded = {key for key in offloaded if amounts[key] > 0}
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
    ready = [op for op, n in indeg.items() if n == 0]
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    while ready:
        op = ready.pop(rng.randrange(len(ready)))
        orders[problem.placement[op.stage]].append(op)
        for nxt in succ[op]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                ready.append(nxt)
    return orders, {key: amounts[key] for key in offloaded}


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
def test_simulated_schedules_retime_to_themselves_and_respect_bounds(problem, seed):
    orders, amounts = random_orders(problem, random.Random(seed), offload=problem.can_offload)
    ops = simulate(problem, orders, amounts)
    schedule = make_schedule(problem, ops, "random")
    report = check(schedule)
    assert report.ok, [v.render() for v in report.violations]
    assert sorted(retime(problem, ops)) == sorted(ops)
    assert makespan_lower_bound(problem).value <= schedule.makespan + 1e-9
    need = min_capacity(problem, offload=problem.can_offload)
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
@given(problems(), st.integers(0, 10**6))
def test_lower_bound_holds_under_the_schedules_own_memory_cap(problem, seed):
    # Any valid schedule stays valid with each device capped at its own peak: the bound,
    # which now sees the cap, must still not exceed its makespan.
    orders, amounts = random_orders(problem, random.Random(seed), offload=problem.can_offload)
    schedule = make_schedule(problem, simulate(problem, orders, amounts), "random")
    capped = problem.replace(capacity=tuple(schedule.peak_memory))
    assert makespan_lower_bound(capped).value <= schedule.makespan + 1e-9
