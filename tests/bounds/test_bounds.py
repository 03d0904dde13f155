"""Lower bounds: known figures and the least feasible capacity."""

from __future__ import annotations

import json

import pytest

from ppsolve.bounds.admission import admission_starts
from ppsolve.bounds import (critical_path, heads_and_tails, makespan_lower_bound, min_capacity,
                            require_feasible_capacity)
from ppsolve.checker import check
from ppsolve.errors import InfeasibleError
from ppsolve.bounds.idle import Group, least_starts, most_work
from ppsolve.memory import peak_memory
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import forwards_wait_for_offloads, simulate
from ppsolve.solvers import SolveOptions, solve
from tests.helpers import make_problem, serial_orders
from tests.solvers.cases import proven_optimum
from tests.helpers import ROOT

INSTANCES = ROOT / "instances"


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


def zb_h1_case(p2p: float = 10):
    """The reference's ZB-H1 case at 4 x 8 (capacity 2d uniform: each microbatch holds 2 until B, 1 until W)."""
    return make_problem(devices=4, microbatches=8, time_forward=1000, time_backward_input=1000,
                        time_backward_weight=1000, time_p2p=p2p, memory_activation=2, memory_weight_hold=1,
                        memory_capacity=8)


def test_forced_idle_reaches_the_zb_h1_optimum():
    # Device 0's first B starts no earlier than 7060 (F chain 4 x 1000 + 3 x 10, B chain 3 x 1000 + 3 x 10);
    # before it, the cap 8 holds 4 forwards (4000): idle >= 3060. After its last F ends, 8060 must pass
    # (F1..F3, B3..B0, W0 and 6 latencies) and at most 8 B/W of work can wait (b + w <= 8): idle >= 60.
    # 24000 + 3060 + 60 = 27120, what the reference's ZB-H1 schedule reaches; head + load said 27030.
    bound = makespan_lower_bound(zb_h1_case())
    assert max(bound.device_bounds) == 27030
    assert bound.value == 27120 and bound.binding == "load and forced idle of device 0"
    # with p2p 100: 27300 by head + load, 24000 + (7600 - 4000) + (8600 - 8000) = 28200 by forced idle
    assert makespan_lower_bound(zb_h1_case(100)).value == 28200


def suite_problem(name: str, link_speedup: float = 1.0):
    data = json.loads((INSTANCES / "suite" / f"{name}.json").read_text())
    if link_speedup != 1.0:
        data["offload"]["bandwidth"] = {k: v * link_speedup for k, v in data["offload"]["bandwidth"].items()}
    return problem_from_dict(data)


def test_memory_time_with_the_best_offload_share():
    # 4 x 16 linear, F = B = W = 10, activation 1 (weight hold 0.25), cap 4/3, a transfer of 30 each way
    # (tau = 60). Device 0: round trip L = 80; sending x to host costs area (1 - x) 80 + x (20 + 60 x),
    # least at x = 0.5: 65, plus the hold over W (2.5); 16 microbatches x 67.5 / (4/3) = 810.
    # Head + load said 510. A 100 times faster link makes sending everything cheap: far lower.
    p = suite_problem("lin-d4-m16-split-cap1_3-k2")
    bound = makespan_lower_bound(p)
    assert bound.value == pytest.approx(810, abs=0.01) and bound.binding == "memory cap of device 0"
    assert max(bound.device_bounds) == pytest.approx(510)
    fast = makespan_lower_bound(suite_problem("lin-d4-m16-split-cap1_3-k2", 100))
    assert max(fast.memory_bounds) < 520
    # what binds then is the last device's tail after its last B (40: B of stages 2-0 and W on device 0) less
    # its own W 10 and one held W 10 (the cap 4/3 holds the B's activation 1 and one hold 0.25),
    # which no link helps: head 30 + load 480 + 20
    assert fast.value == pytest.approx(530)
    assert fast.binding.startswith("load of device 3, its forced idle before its first B")


def test_the_host_link_enters_the_forced_idle():
    # Device 0 (F = B = W = 10) is the slow one: load 240. Its first B starts no earlier than 40 (F of
    # stages 1-3 and B of 3-1 at 5 each). Cap 1.5, activation 1, all of it may go to host at 0.2 (5 per
    # activation): the k-th forward waits for k - 1.5 to have left, each share after its forward ends,
    # so forwards start no earlier than 0, 12.5, 25, 37.5, 50: with f of them before the first B it
    # starts at max(40, start_f + 10), and idle >= min over f of that - 10 f = 7.5 (f = 4).
    def problem(bandwidth):
        return make_problem(devices=4, microbatches=8, time_forward=[10, 5, 5, 5], time_backward_input=[10, 5, 5, 5],
                            time_backward_weight=[10, 5, 5, 5], memory_activation=1, memory_capacity=1.5,
                            offload={"fraction": 1, "bandwidth": {"d2h": bandwidth, "h2d": bandwidth}})
    bound = makespan_lower_bound(problem(0.2))
    assert bound.value == pytest.approx(247.5) and bound.binding == "load and forced idle of device 0"
    assert max(max(bound.device_bounds), max(bound.memory_bounds), bound.critical_path) == 240
    assert makespan_lower_bound(problem(0.05)).value > 255  # slower link: more idle
    assert makespan_lower_bound(problem(100)).value < 240.1  # the link no longer limits


def test_a_running_backward_needs_its_own_share_back():
    # Interleaved 4 x 8, fused, a cap of 4 chunk activations, half of each may go to host: after its
    # last F, device 0 can run at most 7 B's (8 x 0.5 - 7 x 0.25 > 2: the running B's share is back),
    # where the memory knapsack alone allowed 8 (8 x 0.25 <= 2).
    p = suite_problem("int2-d4-m8-fused-cap1_2-k2-f0.5")
    bound = makespan_lower_bound(p)
    old = max(max(bound.device_bounds), max(bound.memory_bounds), bound.critical_path)
    assert bound.value > old + 10 and bound.binding.startswith("load and forced idle")


def test_least_starts_wait_for_offloads():
    # F = 10, activation 1, cap 1.5, a share of 1 leaves in 5 (rate 0.2): the second forward needs 0.5
    # gone (2.5 after the first ends), the third 1.5 (the first's 1 and half of the second's).
    assert least_starts(0, 10, 1, 1, 1.5, 0.2, 4) == [0, 12.5, 25, 37.5]
    # no offload: two forwards fit, the third cannot start before a B
    assert least_starts(0, 10, 1, 0, 2, 0, 4) == [0, 10]


def test_most_work_is_exact_for_one_stage_and_bounds_several():
    # one stage: items (2, 2000) and (1, 1000), at most 8, budget 8: 8000 (e.g. 8 of the second)
    assert most_work([Group(8, ((2, 2000), (1, 1000)))], 8) == 8000
    assert most_work([Group(8, ((2, 1000),))], 7) == 3000
    # two stages of one item each: exact (3 items of weight 2 fit 7, not the relaxation's 3.5), and
    # the counts matter: one item of the heavier stage and the rest of the lighter
    assert most_work([Group(8, ((2, 1000),)), Group(8, ((2, 1000),))], 7) == 3000
    assert most_work([Group(1, ((0.75, 8),)), Group(32, ((0.5, 3.5),))], 5) == pytest.approx(36)
    # several stages with two items each: the linear relaxation (here 3.5 items of value 1000)
    two = ((2, 1000), (3, 1000))
    assert most_work([Group(8, two), Group(8, two)], 7) == pytest.approx(3500)


def test_forwards_before_the_first_b_are_limited_by_their_earliest_ends():
    # V-shape, 2 devices: device 0 holds the light first stage (F 2, activation 1) and the heavy last
    # one (F 6, activation 2), cap 5; its load is 88. Its first B (of stage 3) starts no sooner than
    # 2 + 1 + 3 + 3 + 1 + 6 = 16. By the cap alone, two F of stage 3 and one of stage 0 (14 of work)
    # could run before it: idle >= 2, bound 90. But the second F of stage 3 cannot end before
    # 10 + 2 x 6 = 22, so by 16 at most one F of stage 3 and three of stage 0 fit (12): idle >= 4,
    # bound 92 (and waiting until 22 to fit the second leaves no less idle). The optimum, proven
    # with the solver's own cut switched off, is 92.
    problem = problem_from_dict({
        "format": "ppsolve/problem@1", "devices": 2, "microbatches": 4, "chunks": 2, "placement": "vshape",
        "backward": "split", "time": {"forward": [2, 3, 3, 6], "backward_input": [2, 3, 3, 7],
                                      "backward_weight": [1, 2, 2, 4], "p2p": 1},
        "memory": {"activation": [1, 1, 1, 2], "weight_hold": [0.5, 0.5, 0.5, 1], "capacity": 5}})
    bound = makespan_lower_bound(problem)
    assert bound.idle_bounds[0] == pytest.approx(92) and bound.value == pytest.approx(92)
    assert proven_optimum(problem, time_limit=30) == pytest.approx(92)


def test_admission_spaces_the_microbatches_by_the_cap_of_stage_0s_device():
    # Device 0 holds one activation: each microbatch's round trip (F0, F1, B1, B0 = 1 + 1 + 2 + 2: a fused
    # B is B + W) ends before the next may start, so the starts are 0, 6, 12 and device 1 cannot end
    # before 12 + 6 = 18, the serial schedule.
    problem = make_problem(devices=2, microbatches=3, backward="fused", memory_capacity=1)
    heads, tails = heads_and_tails(problem)
    assert admission_starts(problem, heads) == [0, 6, 12]
    bound = makespan_lower_bound(problem)
    assert bound.admission_bounds[1] == 18 and bound.value == 18
    # no cap, or an activation that may all go to host memory: nothing to space
    assert admission_starts(make_problem(devices=2, microbatches=3), heads) is None
    offloadable = make_problem(devices=2, microbatches=3, memory_capacity=1,
                               offload={"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}})
    assert admission_starts(offloadable, heads_and_tails(offloadable)[0]) is None


def test_one_machine_bound_is_the_preemptive_optimum():
    import numpy as np

    from ppsolve.bounds.sequence import _in_order, _one_machine

    # job 0 (0..3, no tail) is preempted at 1 by job 1 (tail 5): 1..2 + 5 = 7, job 0 ends at 4
    assert _one_machine(np.array([0.0, 1.0]), np.array([3.0, 1.0]), np.array([0.0, 5.0])) == 7
    assert _one_machine(np.array([2.0, 0.0]), np.array([1.0, 1.0]), np.array([0.0, 0.0])) == 3
    # ops of duration 2 in order: each starts no sooner than its release and the previous end
    assert _in_order(np.array([0.0, 0.0, 7.0, 0.0]), 2.0).tolist() == [0.0, 2.0, 7.0, 9.0]


def test_sequence_bound_reaches_the_optimum_of_an_interleaved_case():
    # two devices, two chunks each: device 0 holds stages 0 and 2, device 1 stages 1 and 3; the
    # other figures give 84, the ops of one device with their in-order heads and tails 86, the optimum
    problem = problem_from_dict({
        "format": "ppsolve/problem@1", "devices": 2, "microbatches": 4, "chunks": 2, "placement": "interleaved",
        "backward": "split",
        "time": {"forward": [4, 1, 2, 5], "backward_input": [4, 4, 2, 4], "backward_weight": [2, 3, 2, 3], "p2p": 0},
        "memory": {"activation": 2, "weight_hold": 1, "capacity": 6}})
    bound = makespan_lower_bound(problem)
    assert bound.value == pytest.approx(86)
    assert "in order" in bound.binding
    result = solve(problem, SolveOptions(time_limit=10, threads=1))
    assert result.status == "optimal" and result.schedule.makespan == pytest.approx(86)


def test_sequence_bound_is_left_out_when_the_problem_may_offload():
    problem = make_problem(devices=2, microbatches=4, memory_capacity=2,
                           offload={"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}})
    assert makespan_lower_bound(problem).sequence_bounds == (0.0, 0.0)


def test_memory_lags_divide_model_units_exactly_and_other_numbers_with_a_tolerance():
    from ppsolve.memory import memory_lags
    from ppsolve.ops import OpKind

    assert memory_lags(4, 1, 0) == [(OpKind.B, 4)]
    assert memory_lags(7, 2, 1) == [(OpKind.B, 3), (OpKind.W, 6)]  # (7 - 2) // 1 + 1
    assert memory_lags(0.9, 0.3, 0.0) == [(OpKind.B, 3)]  # 0.9 / 0.3 is 2.9999999999999996
    assert memory_lags(0.9, 0.3, 0.3) == [(OpKind.B, 3), (OpKind.W, 3)]
    for cap, act, hold in ((10, 3, 2), (9, 3, 1), (5, 5, 5)):  # scaled by 1/10: the same lags
        assert memory_lags(cap / 10, act / 10, hold / 10) == memory_lags(cap, act, hold)
