"""Dust offloads (less than 1% of their activation): the shedding pass merges one the cap needs into
another offload of its device, and leaves the schedule valid at its makespan."""

from __future__ import annotations

from ppsolve.checker import check
from ppsolve.memory import peak_memory
from ppsolve.ops import B, F, OFFLOAD, RELOAD, W, OpKind
from ppsolve.solvers.shed import DUST, shed_levers
from ppsolve.schedule import make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from tests.helpers import make_problem


def _three_forwards(cap: float, dust: float):
    """One device, three forwards in a row: microbatch 0 offloads 0.5 and microbatch 1 ``dust`` before
    F2 allocates (F2 waits for them), so F2's start peaks at 2.5 - dust (activations of 1, transfers
    of 1/100 per unit)."""
    memory = {"activation": 1, "weight_hold": 0, "capacity": cap}
    problem = make_problem(devices=1, microbatches=3, memory=memory,
                           offload={"bandwidth": {"d2h": 100, "h2d": 100}})
    orders = [[F(0, 0), OFFLOAD(0, 0), F(0, 1), OFFLOAD(0, 1), F(0, 2), B(0, 2), W(0, 2),
               RELOAD(0, 1), B(0, 1), W(0, 1), RELOAD(0, 0), B(0, 0), W(0, 0)]]
    ops = simulate(problem, orders, {(0, 0): 0.5, (0, 1): dust}, waits=forwards_wait_for_offloads(orders))
    return make_schedule(problem, ops, "dust")


def test_a_dust_offload_the_cap_needs_is_merged_into_another_offload():
    start = _three_forwards(cap=2.495, dust=0.005)
    assert check(start).ok
    without = [op for op in start.ops if not (op.kind.is_transfer and op.microbatch == 1)]
    assert peak_memory(start.problem, without)[0] > 2.495  # plain dropping would break the cap
    shed = shed_levers(start)
    assert check(shed).ok and shed.makespan <= start.makespan
    amounts = {op.microbatch: op.amount for op in shed.ops if op.kind is OpKind.OFFLOAD}
    assert amounts == {0: 0.505}
    assert max(peak_memory(shed.problem, shed.ops)) <= 2.495 + 1e-9


def test_a_dust_offload_the_cap_does_not_need_is_dropped():
    start = _three_forwards(cap=2.5, dust=0.005)
    shed = shed_levers(start)
    assert check(shed).ok
    assert [op.microbatch for op in shed.ops if op.kind is OpKind.OFFLOAD] == [0]


def test_an_offload_above_the_dust_share_is_not_merged():
    start = _three_forwards(cap=2.48, dust=0.02)
    assert 0.02 >= DUST * 1
    shed = shed_levers(start)
    assert check(shed).ok
    assert sorted(op.microbatch for op in shed.ops if op.kind is OpKind.OFFLOAD) == [0, 1]
