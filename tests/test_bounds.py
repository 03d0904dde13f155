"""Lower bounds: known figures and the least feasible capacity."""

from __future__ import annotations

import pytest

from ppsolve.bounds import critical_path, makespan_lower_bound, min_capacity, require_feasible_capacity
from ppsolve.checker import check
from ppsolve.errors import InfeasibleError
from ppsolve.memory import peak_memory
from ppsolve.schedule import make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from tests.helpers import make_problem, serial_orders


def test_device_load_bound_uniform():
    # d = 4, m = 8, F = B = W = 10: the last device starts at 3F = 30 and has 8 * 30 of work.
    p = make_problem(devices=4, microbatches=8, time_forward=10, time_backward_input=10, time_backward_weight=10)
    bound = makespan_lower_bound(p)
    assert bound.value == 270 and bound.binding == "load of device 3"


def test_critical_path_with_latency():
    # F chain 3 x 2 + 2 latencies, B chain 3 x 3 + 2 latencies, then W of stage 0 (1).
    p = make_problem(devices=3, microbatches=1, time_forward=2, time_backward_input=3, time_p2p=1.5)
    assert critical_path(p) == 6 + 3 + 9 + 3 + 1


def test_fused_bound_counts_the_backward_tail():
    # Fused: device 0 starts at 0, works m*(F+B+W) = 2*3 and its last op is B(0,1): no tail.
    # Device 1 starts at 1, works 6, and after its last B (B(1,1)) B(0,1) (2 units) must still run.
    p = make_problem(devices=2, microbatches=2, backward="fused")
    assert makespan_lower_bound(p).device_bounds == (6, 1 + 6 + 2)


def test_min_capacity_vshape_and_offload():
    p = make_problem(devices=2, chunks=2, placement="vshape", memory_activation=[1, 2, 3, 4],
                     offload={"fraction": [0.5, 1, 1, 1], "bandwidth": {"d2h": 1, "h2d": 1}})
    # Device 0 holds stages 0 and 3: 1 + 4; with offload 0.5 of stage 0 can be on host first.
    # Device 1 holds stages 1 and 2: 2 + 3; with offload F(2, j) waits for stage 1's offload
    # (contract v2), so 3 (under v1 the forward could not wait: 3 + 2).
    assert min_capacity(p, offload=False) == [5, 5]
    assert min_capacity(p, offload=True) == [4.5, 3]


def test_a_forward_waits_for_the_offload_of_the_stage_before_on_its_device():
    # V-shape on 2 devices: device 1 runs stage 1 then stage 2. Under contract v1 it held 2
    # activations; under v2 F(2, j) waits until stage 1's activation has gone to host: 1 each,
    # and the serial plan with forwards waiting for offloads reaches exactly that.
    p = make_problem(devices=2, chunks=2, placement="vshape", microbatches=4, memory_weight_hold=1,
                     offload={"bandwidth": {"d2h": 100, "h2d": 100}})
    assert min_capacity(p, offload=True) == [1, 1]
    orders = serial_orders(p, offload=True)
    ops = simulate(p, orders, waits=forwards_wait_for_offloads(orders))
    assert peak_memory(p, ops) == [1, 1]
    assert check(make_schedule(p.replace(capacity=1), ops, "serial+wait")).ok
    with pytest.raises(InfeasibleError, match=r"device 0 needs at least 1 .*; 1 other device"):
        require_feasible_capacity(p.replace(capacity=0.5))


def test_infeasible_capacity_names_the_least_that_works():
    p = make_problem(devices=2, chunks=2, placement="vshape", memory_capacity=[4, 10])
    with pytest.raises(InfeasibleError, match=r"device 0 needs at least 2 \(one microbatch on stages 0, 3\)"):
        require_feasible_capacity(make_problem(devices=2, chunks=2, placement="vshape", memory_capacity=[1, 10]))
    require_feasible_capacity(p)
