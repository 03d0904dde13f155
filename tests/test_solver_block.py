"""The building block: one microbatch's pattern repeated every period (``ppsolve.solvers.block``)."""

from __future__ import annotations

import pytest

from ppsolve.checker import check
from ppsolve.schedule import make_schedule
from ppsolve.simulator import retime
from ppsolve.solvers.block import (period_lower_bound, search_blocks, serial_block, solve_block, unroll,
                                   unrolled_lower_bound)
from ppsolve.solvers.scaling import build_scaling
from tests.helpers import make_problem

FAST_LINK = {"fraction": 1, "bandwidth": {"d2h": 4, "h2d": 4}}


def _linear(capacity=None, offload=None, microbatches=8):
    extra = {"offload": offload} if offload else {}
    return make_problem(devices=3, microbatches=microbatches, time_forward=[1, 2, 3], time_backward_input=[1, 2, 3],
                        time_backward_weight=[1, 1, 2], time_p2p=0.5, memory_activation=1,
                        memory_weight_hold=0.5, memory_capacity=capacity, **extra)


def _vshape(capacity=None):
    return make_problem(devices=2, chunks=2, placement="vshape", microbatches=6, time_forward=[1, 1, 1, 2],
                        time_backward_input=[1, 1, 2, 2], time_backward_weight=1, memory_activation=1,
                        memory_weight_hold=0.5, memory_capacity=capacity)


def _unrolled(problem, block):
    sc = build_scaling(problem)
    return make_schedule(problem, unroll(problem, sc, block), "block")


@pytest.mark.parametrize("size", [1, 2])
def test_serial_block_unrolls_to_a_valid_schedule(size):
    problem = _vshape(capacity=2)
    block = serial_block(problem, build_scaling(problem), size)
    schedule = _unrolled(problem, block)
    assert check(schedule).ok
    assert schedule.makespan * build_scaling(problem).time_scale == pytest.approx(block.makespan(problem.microbatches))


@pytest.mark.parametrize("problem", [_linear(), _linear(capacity=2), _vshape(), _vshape(capacity=3)],
                         ids=["linear", "linear-capped", "vshape", "vshape-capped"])
def test_best_block_is_valid_and_never_below_its_bounds(problem):
    sc = build_scaling(problem)
    found = search_blocks(problem, 10.0, threads=2, scaling=sc)
    assert found.best is not None
    serial = serial_block(problem, sc, found.best.size)
    assert found.best.makespan(problem.microbatches) < serial.makespan(problem.microbatches)
    schedule = _unrolled(problem, found.best)
    report = check(schedule)
    assert report.ok, report.errors[:3]
    assert found.best.period >= period_lower_bound(problem, sc, found.best.size)
    assert schedule.makespan >= unrolled_lower_bound(problem, found.best.size) - 1e-9
    assert schedule.makespan * sc.time_scale == pytest.approx(found.best.makespan(problem.microbatches))
    # a valid plan re-timed as the runtime runs it is never later (contract v2)
    timed = make_schedule(problem, retime(problem, schedule.ops), "block")
    assert check(timed).ok and timed.makespan <= schedule.makespan + 1e-9


def test_uncapped_block_reaches_the_compute_period():
    """Without a cap nothing but compute limits the period: the bound is met."""
    problem = _linear()
    sc = build_scaling(problem)
    low = period_lower_bound(problem, sc)
    block, _ = solve_block(problem, sc, 1, low, 10.0, threads=2)
    assert block is not None and block.period == low
    below, proven = solve_block(problem, sc, 1, low - 1, 10.0, threads=2)
    assert below is None and proven  # two copies of the busiest device's ops cannot share a shorter circle


def test_a_cap_lengthens_the_period_and_offload_shortens_it_again():
    """Cap 1 (one activation): without offload device 0 holds one microbatch for a whole round trip
    (14), so there is no block at period 12 (the compute bound is 8); moving activations to host
    memory between F and B lets the next microbatch in."""
    tight = _linear(capacity=1)
    sc = build_scaling(tight)
    assert sc.to_time(period_lower_bound(tight, sc)) == 8
    none, proven = solve_block(tight, sc, 1, sc.time(12), 10.0, offload=False, threads=2)
    assert none is None and proven
    offloading = _linear(capacity=1, offload=FAST_LINK)
    sc = build_scaling(offloading)
    block, _ = solve_block(offloading, sc, 1, sc.time(12), 10.0, threads=2)
    assert block is not None and block.offloaded
    schedule = _unrolled(offloading, block)
    report = check(schedule)
    assert report.ok, report.errors[:3]
    assert schedule.offloaded > 0 and max(schedule.peak_memory) <= 1 + 1e-9


def test_blocks_of_two_microbatches_unroll_for_odd_counts():
    problem = _linear(capacity=2, microbatches=7)
    found = search_blocks(problem, 6.0, threads=2, sizes=(2,))
    assert found.best is not None and found.best.size == 2
    schedule = _unrolled(problem, found.best)
    assert check(schedule).ok
    assert sorted({op.microbatch for op in schedule.ops}) == list(range(7))
