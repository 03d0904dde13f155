"""Contract version 3: the recompute block, R ops, rules 9 and 10, memory events and metrics."""

from __future__ import annotations

import json

import pytest

from ppsolve.baselines.common import with_recompute as _with_r
from ppsolve.checker import check
from ppsolve.errors import InputError
from ppsolve.memory import memory_events, peak_memory
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import ScheduledOp, load_schedule, make_schedule, schedule_from_dict
from ppsolve.simulator import retime, simulate
from tests.helpers import make_problem, serial_orders


def _recompute_problem(**extra):
    # 2 devices, 3 microbatches, every op 1, activation 4 of which 1 is kept when recomputed, R lasts 2
    return make_problem(memory_activation=4, memory_weight_hold=1, recompute={"keep": 1, "time": 2}, **extra)


def test_recompute_block_is_read_and_written_back():
    p = _recompute_problem()
    assert p.recompute.keep == (1.0, 1.0) and p.recompute.time == (2.0, 2.0)
    assert p.duration(OpKind.R, 0) == 2.0 and p.recompute_saving(1) == 3.0 and p.can_recompute
    assert p.replace(capacity=5).to_dict()["recompute"] == {"keep": 1, "time": 2}
    # time defaults to the forward's
    q = make_problem(time_forward=[3, 5], recompute={"keep": 0})
    assert q.recompute.time == (3.0, 5.0) and "time" not in q.to_dict()["recompute"]
    assert make_problem().recompute is None and not make_problem().can_recompute


@pytest.mark.parametrize("recompute, where, says", [
    ({"keep": 2}, "problem.recompute.keep", "must be <= activation (1) of stage 0, got 2"),
    ({"keep": [0, 2]}, "problem.recompute.keep[1]", "must be <= activation (1) of stage 1, got 2"),
    ({"keep": [0]}, "problem.recompute.keep", "must have 2 entries"),
    ({"keep": -1}, "problem.recompute.keep", "must be >= 0"),
    ({"time": 1}, "problem.recompute.keep", "is required"),
    ({"keep": 0, "tme": 1}, "problem.recompute.tme", "unknown field"),
])
def test_bad_recompute_blocks_name_the_field(recompute, where, says):
    with pytest.raises(InputError) as err:
        make_problem(recompute=recompute)
    assert str(err.value).startswith(where) and says in str(err.value)


def test_memory_of_a_recomputed_forward_is_its_checkpoint_until_its_recompute():
    p = _recompute_problem()
    ops = simulate(p, _with_r(serial_orders(p), {(0, 0)}))
    by_op = {o.op: o for o in ops}
    events = dict(memory_events(p, [o for o in ops if o.device == 0])[0])
    assert events[by_op[Op(OpKind.F, 0, 0)].start] == 1.0  # keeps only keep
    assert events[by_op[Op(OpKind.R, 0, 0)].start] == 3.0  # R rebuilds activation - keep
    assert events[by_op[Op(OpKind.F, 0, 1)].start] == 4.0  # not recomputed: the whole activation
    # the serial plan holds one activation at a time: 4, whether recomputed or not
    assert peak_memory(p, ops) == [4.0, 4.0]
    assert by_op[Op(OpKind.R, 0, 0)].duration == 2.0
    assert by_op[Op(OpKind.R, 0, 0)].start >= by_op[Op(OpKind.F, 0, 0)].end
    assert by_op[Op(OpKind.B, 0, 0)].start >= by_op[Op(OpKind.R, 0, 0)].end


def test_full_recompute_lowers_the_peak_of_a_pipelined_order():
    p = _recompute_problem(microbatches=3)
    # device 0 runs all forwards first: 3 activations held at once, or 3 checkpoints and one rebuilt
    orders = [[Op(OpKind.F, 0, j) for j in range(3)] + [op for j in range(3) for op in
                                                        (Op(OpKind.B, 0, j), Op(OpKind.W, 0, j))],
              [op for j in range(3) for op in (Op(OpKind.F, 1, j), Op(OpKind.B, 1, j), Op(OpKind.W, 1, j))]]
    plain = make_schedule(p, simulate(p, orders), "plain")
    everything = {(s, j) for s in range(2) for j in range(3)}
    recomputed = make_schedule(p, simulate(p, _with_r(orders, everything)), "recomputed")
    assert plain.peak_memory[0] == 12.0
    # F F F (3 x 1), then R(0,0) +3 -> 6, B releases 3 and keeps hold 1 until W, R(0,1) +3 ...
    assert recomputed.peak_memory[0] == 6.0
    assert recomputed.recomputed == 6 and recomputed.metrics()["recomputed"] == 6
    assert recomputed.describe_recompute() == "stage 0: microbatches 0-2; stage 1: microbatches 0-2"
    # the bubble ratio counts only F, B and W: R is overhead
    useful = sum(o.duration for o in recomputed.ops if o.kind is not OpKind.R)
    assert recomputed.bubble_ratio == pytest.approx(1 - useful / (2 * recomputed.makespan))
    report = check(recomputed)
    assert report.ok and report.recomputed == 6, [v.render() for v in report.violations]


def _schedule_file(p, ops):
    return make_schedule(p, ops, "test").to_dict()


def test_checker_reports_rule_9_both_ways():
    p = _recompute_problem()
    ops = simulate(p, _with_r(serial_orders(p), {(1, 0)}))
    r = next(o for o in ops if o.kind is OpKind.R)
    f = next(o for o in ops if o.op == Op(OpKind.F, 1, 0))
    early = [o._replace(start=f.start, end=f.start + 2) if o is r else o for o in ops]
    messages = [v.message for v in check(make_schedule(p, early, "x")).violations if v.rule == "R9"]
    assert any("R(1,0) starts at" in m and "the forward it recomputes" in m for m in messages)
    late = [o._replace(start=o.start + 10, end=o.end + 10) if o is r else o for o in ops]
    messages = [v.message for v in check(make_schedule(p, late, "x")).violations if v.rule == "R9"]
    assert any(m.startswith("B(1,0) starts at") and "its recomputed activation" in m for m in messages)


def test_a_recomputed_activation_is_not_also_offloaded():
    p = _recompute_problem(offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    orders = serial_orders(p, offload=True)
    ops = simulate(p, orders)
    f = next(o for o in ops if o.op == Op(OpKind.F, 0, 0))
    extra = ScheduledOp(OpKind.R, 0, 0, 0, f.end + 100, f.end + 102)
    report = check(make_schedule(p, ops + [extra], "x"))
    assert any(v.rule == "R10" for v in report.violations)
    with pytest.raises(InputError, match="rule 10"):
        simulate(p, _with_r(orders, {(0, 0)}))


def test_r_without_a_recompute_block_is_one_error_line():
    p = make_problem()
    data = _schedule_file(p, simulate(p, serial_orders(p)))
    data["ops"].append({"kind": "R", "stage": 0, "microbatch": 0, "device": 0, "start": 0, "end": 1})
    with pytest.raises(InputError) as err:
        schedule_from_dict(data)
    assert str(err.value) == (f"schedule.ops[{len(data['ops']) - 1}].kind: R needs a recompute block in "
                              "schedule.problem, which has none")
    with pytest.raises(InputError, match="no recompute block"):
        simulate(p, _with_r(serial_orders(p), {(0, 0)}))


def test_version_2_files_keep_their_meaning(tmp_path):
    # a schedule without R on a problem with a recompute block is the same schedule
    p = _recompute_problem()
    plain = make_problem(memory_activation=4, memory_weight_hold=1)
    a, b = simulate(p, serial_orders(p)), simulate(plain, serial_orders(plain))
    assert [(o.op, o.start, o.end) for o in a] == [(o.op, o.start, o.end) for o in b]
    assert peak_memory(p, a) == peak_memory(plain, b)


def test_schedule_file_round_trip_and_retiming_with_r(tmp_path):
    p = _recompute_problem(offload={"bandwidth": {"d2h": 2, "h2d": 2}}, memory_capacity=8)
    orders = serial_orders(p, offload=True)
    # recompute stage 1's microbatches instead of offloading them
    orders[1] = [op for op in orders[1] if op.kind.is_compute]
    orders = _with_r(orders, {(1, j) for j in range(3)})
    schedule = make_schedule(p, simulate(p, orders), "mixed")
    path = tmp_path / "s.json"
    schedule.save(path)
    again = load_schedule(path)
    assert again.recomputed == 3 and again.offloaded == schedule.offloaded > 0
    assert json.loads(path.read_text())["metrics"]["recomputed"] == 3
    report = check(again)
    assert report.ok, [v.render() for v in report.violations]
    retimed = {o.op: o for o in retime(p, again.ops)}
    assert all(retimed[o.op].start <= o.start + 1e-9 for o in again.ops)
