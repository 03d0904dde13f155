"""The simulator times plans as SPEC's runtime does and detects deadlocks."""

from __future__ import annotations

import pytest

from ppsolve.errors import DeadlockError, InputError
from ppsolve.ops import B, F, OFFLOAD, RELOAD, W
from ppsolve.simulator import device_waits, issue_order, retime, simulate
from tests.helpers import assert_waits_follow_the_contract, make_problem, one_f_one_b_orders


def test_one_f_one_b_uniform_fused_makespan():
    # 1F1B, fused backward (B = 2 units), d = 4, m = 8: (m + d - 1) * (F + B) = 11 * 3.
    problem = make_problem(devices=4, microbatches=8, backward="fused")
    ops = simulate(problem, one_f_one_b_orders(problem))
    assert max(o.end for o in ops) == 33


def test_p2p_latency_delays_only_cross_device_edges():
    problem = make_problem(devices=2, chunks=2, placement="vshape", microbatches=1, time_p2p=5)
    orders = [[F(0, 0), F(3, 0), B(3, 0), W(3, 0), B(0, 0), W(0, 0)], [F(1, 0), F(2, 0), B(2, 0), B(1, 0),
                                                                         W(2, 0), W(1, 0)]]
    ops = {o.op: o for o in simulate(problem, orders)}
    assert ops[F(1, 0)].start == 1 + 5          # cross-device
    assert ops[F(2, 0)].start == ops[F(1, 0)].end  # same device: no latency
    assert ops[F(3, 0)].start == ops[F(2, 0)].end + 5
    assert ops[B(3, 0)].start == ops[F(3, 0)].end  # the loss turns around on device 0


def test_deadlock_is_reported():
    problem = make_problem(devices=2, microbatches=1)
    orders = [[F(0, 0), B(0, 0), W(0, 0)], [B(1, 0), F(1, 0), W(1, 0)]]
    with pytest.raises(DeadlockError, match="device 1 waits at B\\(1,0\\)"):
        simulate(problem, orders)


def test_incomplete_or_misplaced_plans_are_refused():
    problem = make_problem(devices=2, microbatches=1)
    with pytest.raises(InputError, match="missing"):
        simulate(problem, [[F(0, 0), B(0, 0)], [F(1, 0), B(1, 0), W(1, 0)]])
    with pytest.raises(InputError, match="belongs to device 1"):
        simulate(problem, [[F(0, 0), B(0, 0), W(0, 0), F(1, 0)], [B(1, 0), W(1, 0)]])


def test_shared_link_is_served_first_come_first_served():
    # Two devices on one link; both offload right after their first F.
    problem = make_problem(devices=2, microbatches=1,
                           offload={"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}, "links": [[0, 1]]})
    orders = [[F(0, 0), OFFLOAD(0, 0), RELOAD(0, 0), B(0, 0), W(0, 0)],
              [F(1, 0), OFFLOAD(1, 0), RELOAD(1, 0), B(1, 0), W(1, 0)]]
    ops = {o.op: o for o in simulate(problem, orders)}
    assert (ops[OFFLOAD(0, 0)].start, ops[OFFLOAD(0, 0)].end) == (1, 3)
    assert ops[OFFLOAD(1, 0)].start == 3  # ready at 2, waits for the shared d2h lane
    assert sorted(retime(problem, list(ops.values()))) == sorted(ops.values())


def test_transfer_starts_when_its_lane_frees_even_inside_a_compute_op():
    # Contract v2: a transfer needs no compute-op boundary. OFFLOAD(0,1) is ready at 2 (after F(0,1)),
    # the lane is busy with OFFLOAD(0,0) until 3.5, so it starts at 3.5, inside B(0,2) [3,5].
    problem = make_problem(devices=1, microbatches=3, backward="fused",
                           offload={"fraction": 1, "bandwidth": {"d2h": 0.4, "h2d": 1}})
    orders = [[F(0, 0), OFFLOAD(0, 0), F(0, 1), OFFLOAD(0, 1), F(0, 2), B(0, 2), RELOAD(0, 1), B(0, 1),
               RELOAD(0, 0), B(0, 0)]]
    ops = simulate(problem, orders)
    by = {o.op: o for o in ops}
    assert by[OFFLOAD(0, 0)].end == 3.5
    assert by[OFFLOAD(0, 1)].start == 3.5
    assert by[B(0, 2)].start == 3 and by[B(0, 2)].end == 5
    assert sorted(retime(problem, ops)) == sorted(ops)


def test_plan_comes_back_timed_in_list_order():
    problem = make_problem(devices=2, microbatches=2)
    orders = one_f_one_b_orders(problem)
    assert [o.op for o in simulate(problem, orders)] == [op for actions in orders for op in actions]


def test_zero_length_compute_op_does_not_jump_the_link_queue():
    # d = 2, v = 2, one half-duplex link for both devices. At t = 2 OFFLOAD(1,0) is ready (F(1,0)
    # ends) and so is OFFLOAD(2,0): F(2,0) lasts 0 and starts at 2, when OFFLOAD(0,0) has freed
    # its memory. Transfers ready at an instant go before compute ops starting then, so
    # OFFLOAD(1,0) takes the link first, although device 0 would win a tie between the two.
    problem = make_problem(devices=2, microbatches=1, chunks=2, placement="interleaved", backward="fused",
                           time_forward=[1, 1, 0, 0], time_backward_input=[0, 1, 2, 1],
                           time_backward_weight=[1, 1, 2, 0],
                           offload={"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}, "duplex": False,
                                    "links": [[0, 1]]})
    orders = [[F(0, 0), OFFLOAD(0, 0), RELOAD(2, 0), F(2, 0), OFFLOAD(2, 0), RELOAD(0, 0), B(2, 0), B(0, 0)],
              [F(1, 0), OFFLOAD(1, 0), F(3, 0), RELOAD(1, 0), B(3, 0), B(1, 0)]]
    by = {o.op: o for o in simulate(problem, orders, waits={F(2, 0): [OFFLOAD(0, 0)], F(3, 0): [OFFLOAD(1, 0)]})}
    assert (by[F(2, 0)].start, by[F(2, 0)].end) == (2, 2)
    assert (by[OFFLOAD(1, 0)].start, by[OFFLOAD(2, 0)].start) == (2, 3)


def test_device_waits_skip_what_is_planned_to_still_run():
    # The plan above: OFFLOAD(0,0) [1, 3.5] runs beside F(0,1) and F(0,2); OFFLOAD(0,1) [3.5, 6]
    # starts inside B(0,2) [3, 5]. Each action waits, per other lane, for the last action of the
    # device planned to end by its start, and for nothing still running then.
    problem = make_problem(devices=1, microbatches=3, backward="fused",
                           offload={"fraction": 1, "bandwidth": {"d2h": 0.4, "h2d": 1}})
    orders = [[F(0, 0), OFFLOAD(0, 0), F(0, 1), OFFLOAD(0, 1), F(0, 2), B(0, 2), RELOAD(0, 1), B(0, 1),
               RELOAD(0, 0), B(0, 0)]]
    issued = issue_order(problem, simulate(problem, orders))
    waits = device_waits(problem, issued)
    named = {op.op: [issued[u].op for u in awaited] for op, awaited in zip(issued, waits)}
    assert named[F(0, 1)] == named[F(0, 2)] == []        # not for OFFLOAD(0,0), still running
    assert named[OFFLOAD(0, 0)] == [F(0, 0)]
    assert named[OFFLOAD(0, 1)] == [F(0, 2)]              # not for B(0,2), still running
    assert named[RELOAD(0, 1)] == [B(0, 2), OFFLOAD(0, 1)]
    assert named[B(0, 1)] == [OFFLOAD(0, 1), RELOAD(0, 1)]
    assert_waits_follow_the_contract(problem, issued, waits)


def test_forward_waits_for_an_offload_it_is_told_to_wait_for():
    # One device, cap 1 activation: F(0,1) may only start once OFFLOAD(0,0) has freed F(0,0)'s memory.
    problem = make_problem(devices=1, microbatches=2, backward="fused",
                           offload={"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}})
    orders = [[F(0, 0), OFFLOAD(0, 0), F(0, 1), B(0, 1), RELOAD(0, 0), B(0, 0)]]
    free = {o.op: o for o in simulate(problem, orders)}
    assert free[F(0, 1)].start == 1  # without the wait it follows F(0,0) at once
    ops = simulate(problem, orders, waits={F(0, 1): [OFFLOAD(0, 0)]})
    by = {o.op: o for o in ops}
    assert by[OFFLOAD(0, 0)].end == 3 and by[F(0, 1)].start == 3
    from ppsolve.memory import peak_memory
    assert peak_memory(problem, ops) == [1.0] and peak_memory(problem, list(free.values())) == [2.0]
    # the runtime of contract v2 keeps the wait: re-timed, the forward still starts after the offload
    assert sorted(retime(problem, ops)) == sorted(ops)


def test_transfer_after_zero_duration_ops_retimes_to_itself():
    # Found by hypothesis: B and W last 0, so an offload planned after W(1,2) would start at
    # W's instant; the runtime puts a transfer before a compute op of the same start and
    # issues it after the previous op instead. The plan must already time it that way.
    import random

    from tests.core.test_properties import random_orders
    problem = make_problem(devices=3, microbatches=3, placement=[0, 0, 1], time_forward=1,
                           time_backward_input=0, time_backward_weight=0,
                           offload={"fraction": 0.5, "bandwidth": {"d2h": 0.5, "h2d": 1},
                                    "links": [[0], [1], [2]], "duplex": False})
    orders, amounts = random_orders(problem, random.Random(0), offload=True)
    ops = simulate(problem, orders, amounts)
    assert sorted(retime(problem, ops)) == sorted(ops)


def test_unknown_op_kinds_are_refused_not_guessed():
    # Per-kind dispatch: a kind without a rule raises instead of being treated as another kind.
    import pytest

    from ppsolve.dependencies import depth, stage_dependencies
    from ppsolve.memory import memory_events
    from ppsolve.schedule import ScheduledOp
    problem = make_problem(devices=2, microbatches=1)
    for bad in ("RECOMPUTE", None):
        with pytest.raises(ValueError, match="no dependency rule"):
            stage_dependencies(problem, bad, 0)
        with pytest.raises(ValueError, match="no dependency rule"):
            depth(problem, bad, 0)
        with pytest.raises(ValueError, match="no memory rule"):
            memory_events(problem, [ScheduledOp(bad, 0, 0, 0, 0.0, 1.0)])
    with pytest.raises(ValueError, match="only B and W release"):
        problem.released_by(F(0, 0).kind, 0)
