"""Contract version 4: values per stage and microbatch, read per op; version-3 files keep their meaning."""

from __future__ import annotations

import copy
import json

import pytest

from ppsolve.checker import check
from ppsolve.costs import PerMicrobatchError
from ppsolve.errors import InputError
from ppsolve.ops import OpKind
from ppsolve.problem import load_problem, problem_from_dict
from ppsolve.schedule import ScheduledOp, make_schedule
from ppsolve.simulator import simulate
from tests.helpers import ROOT

EXAMPLE = ROOT / "instances" / "per-microbatch" / "example.json"

_F, _B, _W = OpKind.F, OpKind.B, OpKind.W


def _two_stages(**time) -> dict:
    """2 devices, 2 microbatches: microbatch 1 costs twice microbatch 0 on stage 1."""
    data = {"format": "ppsolve/problem@1", "devices": 2, "microbatches": 2, "backward": "fused",
            "time": {"forward": [[1, 1], [2, 4]], "backward_input": [[2, 2], [3, 6]], "backward_weight": 0, "p2p": 0},
            "memory": {"activation": [[1, 1], [1, 3]], "capacity": None}}
    data["time"].update(time)
    return data


def test_values_are_read_per_op():
    problem = problem_from_dict(_two_stages())
    assert problem.per_microbatch
    assert problem.duration(_F, 1, 0) == 2 and problem.duration(_F, 1, 1) == 4
    assert problem.duration(_B, 1, 1) == 6
    assert problem.activation.at(1, 1) == 3 and problem.activation.row(1) == (1.0, 3.0)
    assert problem.device_load(1) == 2 + 4 + 3 + 6


def test_a_per_stage_reading_of_a_per_microbatch_value_fails_loudly():
    problem = problem_from_dict(_two_stages())
    with pytest.raises(PerMicrobatchError, match=r"problem\.time\.forward: differs per microbatch"):
        problem.duration(_F, 1)
    with pytest.raises(PerMicrobatchError, match=r"problem\.memory\.activation"):
        max(problem.activation)


@pytest.mark.parametrize("change,where", [
    (lambda d: d["time"].__setitem__("forward", [[1, 1], [2]]), r"problem\.time\.forward\[1\]: must have 2 entries"),
    (lambda d: d["time"].__setitem__("forward", [[1, 1], 2]), r"problem\.time\.forward\[1\]: must be a list of 2"),
    (lambda d: d["time"].__setitem__("forward", [[1, 1], [2, -4]]), r"problem\.time\.forward\[1\]\[1\]: must be >= 0"),
    (lambda d: d["time"].__setitem__("p2p", [1, 2, 3]), r"problem\.time\.p2p: must have 2 entries"),
    (lambda d: d["memory"].__setitem__("weight_hold", [[0, 0], [0, 4]]),
     r"problem\.memory\.weight_hold\[1\]\[1\]: must be <= activation \(3\) of stage 1, microbatch 1, got 4"),
])
def test_a_wrong_grid_is_one_error_naming_the_entry(change, where):
    data = _two_stages()
    change(data)
    with pytest.raises(InputError, match=where):
        problem_from_dict(data)


def test_simulated_times_follow_each_microbatch():
    # hand-timed: F(0,0) 0-1, F(0,1) 1-2; F(1,0) 1-3, F(1,1) 3-7; B(1,0) 7-10 (after F(1,1) on device 1),
    # B(1,1) 10-16; B(0,0) 10-12, B(0,1) 16-18
    problem = problem_from_dict(_two_stages())
    orders = [[(_F, 0, 0), (_F, 0, 1), (_B, 0, 0), (_B, 0, 1)], [(_F, 1, 0), (_F, 1, 1), (_B, 1, 0), (_B, 1, 1)]]
    from ppsolve.ops import Op
    schedule = make_schedule(problem, simulate(problem, [[Op(*o) for o in row] for row in orders]), "hand")
    ends = {(op.kind, op.stage, op.microbatch): (op.start, op.end) for op in schedule.ops}
    assert ends[(_F, 1, 1)] == (3, 7) and ends[(_B, 1, 0)] == (7, 10) and ends[(_B, 1, 1)] == (10, 16)
    assert ends[(_B, 0, 1)] == (16, 18) and schedule.makespan == 18
    assert schedule.peak_memory == [2, 4]  # device 1 holds 1 + 3 from 3 to 10
    assert check(schedule).ok


def test_per_microbatch_latency_is_the_latency_of_each_message():
    problem = problem_from_dict(_two_stages(p2p=[0.5, 2]))
    ops = [ScheduledOp(_F, 0, 0, 0, 0, 1), ScheduledOp(_F, 0, 1, 0, 1, 2), ScheduledOp(_F, 1, 0, 1, 1.5, 3.5),
           ScheduledOp(_F, 1, 1, 1, 4, 8), ScheduledOp(_B, 1, 0, 1, 8, 11), ScheduledOp(_B, 1, 1, 1, 11, 17),
           ScheduledOp(_B, 0, 0, 0, 11.5, 13.5), ScheduledOp(_B, 0, 1, 0, 19, 21)]
    assert check(make_schedule(problem, ops, "hand")).ok
    late = [o if o.kind is not _F or o.stage != 1 or o.microbatch != 1 else o._replace(start=3.9, end=7.9)
            for o in ops]  # F(1,1) may start at 2 + 2 = 4 at the earliest
    report = check(make_schedule(problem, late, "hand"))
    assert any(v.rule == "R1" and "F(1,1)" in v.message for v in report.violations)


def test_a_version_3_file_written_per_microbatch_gives_the_same_schedules():
    """Every bundled problem, its per-stage values repeated m times: the same timings, peaks and checks."""
    for path in sorted((ROOT / "instances").glob("*.json")):
        data = json.loads(path.read_text())
        grid = copy.deepcopy(data)
        m = data["microbatches"]
        stages = data["devices"] * data.get("chunks", 1)
        for block, key in [("time", "forward"), ("time", "backward_input"), ("time", "backward_weight"),
                           ("memory", "activation"), ("memory", "weight_hold")]:
            if key in data[block]:
                raw = data[block][key]
                per_stage = raw if isinstance(raw, list) else [raw] * stages
                grid[block][key] = [[v] * m for v in per_stage]
        grid["time"]["p2p"] = [data["time"].get("p2p", 0)] * m
        plain, gridded = load_problem(path), problem_from_dict(grid)
        assert not gridded.per_microbatch
        from ppsolve.baselines.families.onef1b import onef1b_orders
        if plain.chunks != 1:
            continue
        a = make_schedule(plain, simulate(plain, onef1b_orders(plain)), "1f1b")
        b = make_schedule(gridded, simulate(gridded, onef1b_orders(plain)), "1f1b")
        assert a.ops == b.ops, path.name
        assert a.peak_memory == b.peak_memory
        assert [(v.rule, v.message) for v in check(a).violations] == [(v.rule, v.message) for v in check(b).violations]


def test_zero_length_forward_and_backward_at_one_instant_hold_their_activation():
    """SPEC v4's tie rule: an activation's own allocation counts before its own release."""
    data = {"format": "ppsolve/problem@1", "devices": 1, "microbatches": 1, "backward": "fused",
            "time": {"forward": 0, "backward_input": 0, "backward_weight": 0},
            "memory": {"activation": 1, "capacity": 0.5}}
    problem = problem_from_dict(data)
    schedule = make_schedule(problem, [ScheduledOp(_F, 0, 0, 0, 0, 0), ScheduledOp(_B, 0, 0, 0, 0, 0)], "hand")
    assert schedule.peak_memory == [1.0]
    assert any(v.rule == "memory" for v in check(schedule).violations)


def test_the_bundled_example_loads_and_round_trips():
    problem = load_problem(EXAMPLE)
    assert problem.per_microbatch and problem.microbatches == 8
    again = problem_from_dict(problem.to_dict())
    assert again == problem
