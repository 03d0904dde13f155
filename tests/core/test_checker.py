"""The checker catches a violation of each SPEC rule and accepts valid schedules."""

from __future__ import annotations

import dataclasses

import pytest

from ppsolve.checker import check
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, ScheduledOp, make_schedule
from tests.helpers import make_problem, one_f_one_b_orders, schedule_from_orders, serial_orders

OFFLOAD = {"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}}


def _base(**kw) -> Schedule:
    problem = make_problem(devices=3, microbatches=4, time_p2p=0.5, **kw)
    return schedule_from_orders(problem, one_f_one_b_orders(problem))


def _with_offload() -> Schedule:
    problem = make_problem(devices=2, microbatches=3, offload=dict(OFFLOAD, links=[[0, 1]]))
    return schedule_from_orders(problem, serial_orders(problem, offload=True))


def _edit(schedule: Schedule, op: Op, **changes) -> Schedule:
    ops = [o._replace(**changes) if o.op == op else o for o in schedule.ops]
    return dataclasses.replace(schedule, ops=tuple(ops))


def _shift(schedule: Schedule, op: Op, delta: float) -> Schedule:
    target = next(o for o in schedule.ops if o.op == op)
    return _edit(schedule, op, start=target.start + delta, end=target.end + delta)


def _rules(schedule: Schedule) -> set[str]:
    return {v.rule for v in check(schedule).violations}


@pytest.mark.parametrize("name,make", [
    ("1f1b split", lambda: _base()),
    ("1f1b fused", lambda: _base(backward="fused")),
    ("offload on a shared link", _with_offload),
    ("vshape", lambda: (lambda p: schedule_from_orders(p, serial_orders(p)))(
        make_problem(devices=2, chunks=2, placement="vshape", microbatches=3))),
    ("interleaved, half duplex", lambda: (lambda p: schedule_from_orders(p, serial_orders(p, offload=True)))(
        make_problem(devices=2, chunks=2, placement="interleaved", offload=dict(OFFLOAD, duplex=False)))),
])
def test_valid_schedules_are_accepted(name, make):
    report = check(make())
    assert report.violations == []
    assert report.ok and report.valid and report.executable
    assert report.retimed_makespan == report.makespan


def test_missing_and_duplicate_ops():
    s = _base()
    missing = dataclasses.replace(s, ops=tuple(o for o in s.ops if o.op != Op(OpKind.W, 1, 2)))
    assert _rules(missing) == {"complete"}
    dup = dataclasses.replace(s, ops=s.ops + (s.ops[0],))
    assert "complete" in _rules(dup)


def test_offload_without_reload():
    s = _with_offload()
    lonely = dataclasses.replace(s, ops=tuple(o for o in s.ops if o.op != Op(OpKind.RELOAD, 1, 0)))
    assert "complete" in _rules(lonely)


def test_wrong_device():
    assert "device" in _rules(_edit(_base(), Op(OpKind.F, 0, 0), device=2))


def test_wrong_duration_rule8():
    s = _base()
    f = next(o for o in s.ops if o.op == Op(OpKind.F, 2, 3))
    assert _rules(_edit(s, f.op, end=f.end + 0.25)) >= {"duration"}


def test_negative_start_rule8():
    s = _base()
    assert "start" in _rules(_shift(s, Op(OpKind.F, 0, 0), -1))


def test_forward_dependency_with_latency_rule1():
    s = _base()
    # F(1,0) starts exactly at F(0,0).end + p2p; 0.25 earlier breaks only the latency.
    assert "R1" in _rules(_shift(s, Op(OpKind.F, 1, 0), -0.25))


def test_loss_turnaround_rule2():
    s = _base()
    f = next(o for o in s.ops if o.op == Op(OpKind.F, 2, 0))
    b = next(o for o in s.ops if o.op == Op(OpKind.B, 2, 0))
    assert "R2" in _rules(_shift(s, b.op, f.end - 0.5 - b.start))


def test_backward_dependency_rule3():
    assert "R3" in _rules(_shift(_base(), Op(OpKind.B, 0, 1), -0.25))


def test_weight_after_backward_rule4():
    s = _base()
    b = next(o for o in s.ops if o.op == Op(OpKind.B, 1, 1))
    w = next(o for o in s.ops if o.op == Op(OpKind.W, 1, 1))
    assert "R4" in _rules(_shift(s, w.op, b.end - 0.5 - w.start))


def test_offload_order_rule5():
    s = _with_offload()
    off = next(o for o in s.ops if o.op == Op(OpKind.OFFLOAD, 0, 1))
    assert "R5" in _rules(_shift(s, off.op, -0.5))
    rel = next(o for o in s.ops if o.op == Op(OpKind.RELOAD, 1, 2))
    assert "R5" in _rules(_shift(s, rel.op, 0.25))


def test_compute_overlap_rule6():
    s = _base()
    # Move the last W of device 0 onto the op before it.
    last = max((o for o in s.ops if o.device == 0), key=lambda o: o.start)
    assert "R6" in _rules(_shift(s, last.op, -0.5))


def test_link_lane_overlap_rule7():
    problem = make_problem(devices=2, microbatches=1, offload=dict(OFFLOAD, links=[[0, 1]]))
    # Both devices offload at the same time on one shared link.
    ops = [
        ScheduledOp(OpKind.F, 0, 0, 0, 0, 1), ScheduledOp(OpKind.F, 1, 0, 1, 1, 2),
        ScheduledOp(OpKind.OFFLOAD, 0, 0, 0, 1.5, 2.0, 1), ScheduledOp(OpKind.OFFLOAD, 1, 0, 1, 2, 2.5, 1),
        ScheduledOp(OpKind.RELOAD, 1, 0, 1, 2.5, 3.0, 1), ScheduledOp(OpKind.B, 1, 0, 1, 3, 4),
        ScheduledOp(OpKind.W, 1, 0, 1, 4, 5), ScheduledOp(OpKind.RELOAD, 0, 0, 0, 3.0, 3.5, 1),
        ScheduledOp(OpKind.B, 0, 0, 0, 4, 5), ScheduledOp(OpKind.W, 0, 0, 0, 5, 6),
    ]
    good = make_schedule(problem, ops, "hand")
    assert check(good).valid
    clash = _shift(good, Op(OpKind.OFFLOAD, 1, 0), -0.25)  # overlaps device 0's offload on the d2h lane
    assert "R7" in _rules(clash)
    split_links = make_problem(devices=2, microbatches=1, offload=OFFLOAD)
    assert "R7" not in _rules(dataclasses.replace(clash, problem=split_links))


def test_half_duplex_link_serialises_both_directions():
    # RELOAD(0,0) [2.5,3.5] overlaps OFFLOAD(0,1) [2,3]: fine on a duplex link, not on a half-duplex one.
    ops = [ScheduledOp(OpKind.F, 0, 0, 0, 0, 1), ScheduledOp(OpKind.OFFLOAD, 0, 0, 0, 1, 2, 1),
           ScheduledOp(OpKind.F, 0, 1, 0, 1, 2), ScheduledOp(OpKind.OFFLOAD, 0, 1, 0, 2, 3, 1),
           ScheduledOp(OpKind.RELOAD, 0, 0, 0, 2.5, 3.5, 1), ScheduledOp(OpKind.B, 0, 0, 0, 3.5, 5.5),
           ScheduledOp(OpKind.RELOAD, 0, 1, 0, 3.5, 4.5, 1), ScheduledOp(OpKind.B, 0, 1, 0, 5.5, 7.5)]
    duplex = make_problem(devices=1, microbatches=2, backward="fused", offload=dict(OFFLOAD, bandwidth={"d2h": 1, "h2d": 1}))
    half = make_problem(devices=1, microbatches=2, backward="fused",
                        offload=dict(OFFLOAD, bandwidth={"d2h": 1, "h2d": 1}, duplex=False))
    assert check(make_schedule(duplex, ops, "hand")).valid
    assert "R7" in _rules(make_schedule(half, ops, "hand"))


def test_memory_over_capacity():
    s = _base()
    tight = dataclasses.replace(s, problem=s.problem.replace(capacity=2))  # 1F1B needs 3 on device 0
    report = check(tight)
    assert {v.rule for v in report.violations} >= {"memory"}
    assert any("device 0 holds 3" in v.message for v in report.violations)


def test_amount_above_fraction_and_mismatch():
    s = _with_offload()
    off = next(o for o in s.ops if o.kind is OpKind.OFFLOAD)
    too_much = _edit(s, off.op, amount=1.5, end=off.start + 0.75)
    assert "amount" in _rules(too_much)


def test_reload_planned_after_an_offload_frees_memory_runs_as_planned():
    # One device, one stage, fused backward, d2h = h2d = 0.25 (an amount of 0.5 takes 2).
    # As planned, RELOAD(0,0) waits until OFFLOAD(0,1) has freed memory at t=8, and the
    # peak is 1.5. Under contract v1 a runtime issued RELOAD(0,0) right after F(0,1) (t=4),
    # holding 2.0; under v2 it waits for the offload that ends at or before its planned start.
    problem = make_problem(devices=1, microbatches=2, backward="fused", memory_capacity=1.5,
                           offload={"fraction": 1, "bandwidth": {"d2h": 0.25, "h2d": 0.25}})
    ops = [ScheduledOp(OpKind.F, 0, 0, 0, 0, 1), ScheduledOp(OpKind.OFFLOAD, 0, 0, 0, 1, 3, 0.5),
           ScheduledOp(OpKind.F, 0, 1, 0, 3, 4), ScheduledOp(OpKind.OFFLOAD, 0, 1, 0, 4, 8, 1),
           ScheduledOp(OpKind.RELOAD, 0, 0, 0, 8, 10, 0.5), ScheduledOp(OpKind.B, 0, 0, 0, 10, 12),
           ScheduledOp(OpKind.RELOAD, 0, 1, 0, 12, 16, 1), ScheduledOp(OpKind.B, 0, 1, 0, 16, 18)]
    schedule = make_schedule(problem, ops, "hand")
    report = check(schedule)
    assert report.ok, [v.render() for v in report.violations]
    assert schedule.peak_memory == [1.5]
    assert report.retimed_peak_memory == [1.5] and report.retimed_makespan == 18


def test_transfer_planned_inside_a_compute_op_runs_as_planned():
    # Stages 0 and 1 on one device, fused B lasts 2; the reload is planned at 2.5, inside
    # B(1,0) [2,4]. Contract v1 issued it after B(1,0) ended (makespan 7); v2 keeps the plan.
    problem = make_problem(devices=1, chunks=2, placement="interleaved", microbatches=1, backward="fused",
                           offload={"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}})
    ops = [ScheduledOp(OpKind.F, 0, 0, 0, 0, 1), ScheduledOp(OpKind.OFFLOAD, 0, 0, 0, 1, 2, 1),
           ScheduledOp(OpKind.F, 1, 0, 0, 1, 2), ScheduledOp(OpKind.B, 1, 0, 0, 2, 4),
           ScheduledOp(OpKind.RELOAD, 0, 0, 0, 2.5, 3.5, 1), ScheduledOp(OpKind.B, 0, 0, 0, 4, 6)]
    report = check(make_schedule(problem, ops, "hand"))
    assert report.ok, [v.render() for v in report.violations]
    assert report.retimed_makespan == 6


def test_retiming_later_than_planned_is_reported_as_a_ppsolve_bug(monkeypatch):
    # Re-timing a valid schedule can never be later (SPEC, contract v2); if it were, the
    # checker must blame ppsolve, not the user's schedule.
    import ppsolve.checker as checker_module
    schedule = _base()
    real = checker_module.retime

    def late(problem, ops):
        return [o._replace(start=o.start + 1, end=o.end + 1) for o in real(problem, ops)]

    monkeypatch.setattr(checker_module, "retime", late)
    report = check(schedule)
    assert report.valid and not report.executable
    message = next(v.message for v in report.violations if v.rule == "retime")
    assert "bug in ppsolve" in message and "later than planned" in message


def test_order_violation_shows_a_grid():
    s = _shift(_base(), Op(OpKind.B, 0, 1), -0.25)
    violation = next(v for v in check(s).violations if v.rule == "R3")
    assert violation.grid is not None
    assert ">B(0,1)" in violation.grid and "device 1:" in violation.grid
