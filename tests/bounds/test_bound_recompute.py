"""The makespan lower bound never exceeds the optimum of a problem that may recompute (contract v3):
brute force over which (stage, microbatch) to recompute and every device order, on tiny problems.

Without offload a device's memory changes only at its own ops (F and R allocate at their start,
B and W release at their end) and its compute ops run one after another, so its memory at every
instant follows from its order alone, and the as-soon-as-possible timing of the orders
(``simulate``) is the best one. So the optimum is the least simulated makespan over the device
orders (with their R ops) that fit the cap; each optimum found is checked again with
``peak_memory`` and the checker.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ppsolve.bounds import makespan_lower_bound, min_capacity
from ppsolve.checker import check
from ppsolve.errors import DeadlockError
from ppsolve.memory import peak_memory
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem, problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate

COMBOS = 3000  # the most order combinations a drawn problem may have (keeps 200 problems near 30 s)


def _chain(problem: Problem, s: int, recomputed: bool) -> list[OpKind]:
    kinds = [OpKind.F] + ([OpKind.R] if recomputed else []) + [OpKind.B]
    return kinds + ([OpKind.W] if problem.split_backward else [])


def _size(problem: Problem, op: Op, recomputed: bool) -> float:
    """The memory event of a compute op, as SPEC.md counts it (the test's own model of it)."""
    s = op.stage
    if op.kind is OpKind.F:
        return problem.recompute.keep[s] if recomputed else problem.activation[s]
    if op.kind is OpKind.R:
        return problem.recompute_saving(s)
    return -problem.released_by(op.kind, s)


def device_orders(problem: Problem, device: int) -> list[list[Op]]:
    """Every order of the device's ops (R for any subset of its (stage, microbatch)) that keeps each
    (s, j)'s own ops in order, stage order within a microbatch, and its memory within the cap."""
    keys = [(s, j) for s in problem.stages_of_device[device] for j in range(problem.microbatches)]
    cap = problem.capacity[device]
    out: list[list[Op]] = []
    for mask in itertools.product((False, True), repeat=len(keys)):
        rec = dict(zip(keys, mask))
        chains = {key: _chain(problem, key[0], rec[key]) for key in keys}

        def walk(done: dict, order: list, level: float) -> None:
            if len(order) == sum(len(c) for c in chains.values()):
                out.append(list(order))
                return
            for key, chain in chains.items():
                i = done[key]
                if i == len(chain):
                    continue
                op = Op(chain[i], *key)
                size = _size(problem, op, rec[key])
                if size > 0 and cap is not None and level + size > cap + 1e-9:
                    continue
                done[key] += 1
                order.append(op)
                walk(done, order, level + size)
                order.pop()
                done[key] -= 1

        walk({key: 0 for key in keys}, [], 0.0)
    return out


def brute_force(problem: Problem, per_device: list[list[list[Op]]]) -> float | None:
    """The least makespan over the given device orders (None: every combination deadlocks)."""
    best, best_ops = None, None
    for combo in itertools.product(*per_device):
        try:
            ops = simulate(problem, [list(o) for o in combo])
        except DeadlockError:
            continue
        end = max(o.end for o in ops)
        if best is None or end < best:
            best, best_ops = end, ops
    if best_ops is not None:  # the test's memory model agrees with the library's, and the schedule is valid
        peaks = peak_memory(problem, best_ops)
        assert all(c is None or p <= c + 1e-9 for p, c in zip(peaks, problem.capacity))
        report = check(make_schedule(problem, best_ops, "brute"))
        assert report.ok, [v.render() for v in report.violations]
    return best


@st.composite
def recompute_problems(draw) -> Problem:
    """Tiny problems with a recompute block and a cap between the least that works with recompute
    and that without it plus a little (so recompute is often needed, sometimes free)."""
    devices = draw(st.integers(1, 2))
    split = draw(st.booleans())
    vshape = devices > 1 and not split and draw(st.booleans())
    chunks = 2 if vshape else 1
    S = devices * chunks
    m = 1 if vshape else draw(st.integers(1, 3 if devices == 1 and not split else 2))
    times = st.lists(st.integers(1, 5), min_size=S, max_size=S)
    activation = draw(st.lists(st.integers(1, 4), min_size=S, max_size=S))
    data = {"format": "ppsolve/problem@1", "devices": devices, "microbatches": m, "chunks": chunks,
            "placement": "vshape" if vshape else "linear", "backward": "split" if split else "fused",
            "time": {"forward": draw(times), "backward_input": draw(times),
                     "backward_weight": draw(st.lists(st.integers(0, 4), min_size=S, max_size=S)),
                     "p2p": draw(st.sampled_from([0, 1]))},
            "memory": {"activation": activation, "weight_hold": [draw(st.integers(0, a)) for a in activation]},
            "recompute": {"keep": [draw(st.integers(0, a)) for a in activation]}}
    if draw(st.booleans()):
        data["recompute"]["time"] = draw(st.lists(st.integers(0, 5), min_size=S, max_size=S))
    problem = problem_from_dict(data)
    low, high = min_capacity(problem, recompute=True), min_capacity(problem)
    caps = [draw(st.sampled_from([lo, lo, (lo + hi) / 2, (lo + hi) / 2, hi, hi + 2])) for lo, hi in zip(low, high)]
    return problem.replace(capacity=tuple(caps))


def _orders_or_none(problem: Problem) -> list[list[list[Op]]] | None:
    per_device = [device_orders(problem, d) for d in range(problem.devices)]
    combos = 1
    for orders in per_device:
        combos *= len(orders)
    return per_device if 0 < combos <= COMBOS else None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(recompute_problems())
@pytest.mark.slow
def test_bound_never_exceeds_the_brute_force_optimum_with_recompute(problem):
    per_device = _orders_or_none(problem)
    assume(per_device is not None)  # too many to enumerate quickly: drawn again, not counted in the 200
    best = brute_force(problem, per_device)
    assert best is not None  # min_capacity(recompute=True) is reachable: some order fits
    bound = makespan_lower_bound(problem)
    assert bound.value <= best + 1e-9, (bound, best)


def test_a_cap_that_forces_recompute_raises_the_bound_and_stays_under_the_optimum():
    # Device 0 (F = B = 3, cap 4 = one activation) sees its round trip through device 1 take 12:
    # keeping both activations whole does not fit the memory x time its cap allows by the load's
    # end, so some forward must be recomputed (keep 1, R 2), which lengthens the device's work.
    problem = problem_from_dict({
        "format": "ppsolve/problem@1", "devices": 2, "microbatches": 2, "backward": "fused",
        "time": {"forward": [3, 1], "backward_input": [3, 1], "backward_weight": 0, "p2p": 2},
        "memory": {"activation": 4, "capacity": [4, 100]}, "recompute": {"keep": 1, "time": 2}})
    best = brute_force(problem, [device_orders(problem, d) for d in range(2)])
    bound = makespan_lower_bound(problem)
    assert bound.forced_recompute[0] > 0 and bound.forced_recompute[1] == 0
    others = (bound.device_bounds, bound.idle_bounds, bound.memory_bounds, bound.admission_bounds)
    assert bound.recompute_bounds[0] > max(max(f) for f in others)
    # the drain (ppsolve.bounds.drain) pays the R after the last forward too: 12 + 4 = 16, the largest
    assert bound.value == max(bound.drain_bounds) == 16 > bound.recompute_bounds[0]
    assert bound.value <= best + 1e-9


@st.composite
def long_trip_problems(draw) -> Problem:
    """Two devices, the first heavy and far from the second (long p2p), its cap near one activation:
    where the memory x time of device 0 forces recompute (``ppsolve.bounds.recompute``)."""
    f0 = draw(st.integers(2, 4))
    data = {"format": "ppsolve/problem@1", "devices": 2, "microbatches": 2, "backward": "fused",
            "time": {"forward": [f0, 1], "backward_input": [f0, 1], "backward_weight": 0,
                     "p2p": draw(st.integers(1, 4))},
            "memory": {"activation": [draw(st.integers(3, 5)), 1]},
            "recompute": {"keep": [draw(st.integers(0, 1)), 1], "time": [draw(st.integers(1, f0 + 1)), 1]}}
    problem = problem_from_dict(data)
    low = min_capacity(problem, recompute=True)[0]
    return problem.replace(capacity=(draw(st.sampled_from([low, low + 0.5, low + 1, low + 2])), 100))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_trip_problems())
def test_forced_recompute_bound_never_exceeds_the_brute_force_optimum(problem):
    best = brute_force(problem, [device_orders(problem, d) for d in range(problem.devices)])
    assert best is not None
    assert makespan_lower_bound(problem).recompute_bounds[0] <= best + 1e-9
