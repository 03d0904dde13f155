"""ppsolve export --to chrome-trace: Trace Event JSON with an event per op and memory counters."""

from __future__ import annotations

import json

from tests.plot.helpers import serial_schedule, tiny_problem  # noqa: E402

from ppsolve.cli import main
from ppsolve.memory import memory_curves
from ppsolve.ops import OpKind

OFFLOAD = {"fraction": 0.5, "bandwidth": {"d2h": 2, "h2d": 1}, "links": [[0, 1]]}


def export(tmp_path, schedule, *extra) -> dict:
    src, out = tmp_path / "s.json", tmp_path / "trace.json"
    schedule.save(src)
    assert main(["export", str(src), "--to", "chrome-trace", "-o", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_one_complete_event_per_op(tmp_path):
    schedule = serial_schedule(tiny_problem(2, 3, capacity=2, offload=OFFLOAD), offload=True)
    trace = export(tmp_path, schedule)
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(schedule.ops)
    for e in events:
        assert {"ph", "pid", "name"} <= e.keys()
        if e["ph"] in ("X", "C"):
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
    want = sorted((op.device, str(op.op), op.start * 1000, op.duration * 1000) for op in schedule.ops)
    got = sorted((e["pid"], e["name"], e["ts"], e["dur"]) for e in complete)
    assert got == want
    for e in complete:
        assert {"stage", "microbatch"} <= e["args"].keys()


def test_lanes_are_threads_and_devices_processes(tmp_path):
    schedule = serial_schedule(tiny_problem(2, 2, capacity=2, offload=OFFLOAD), offload=True)
    events = export(tmp_path, schedule)["traceEvents"]
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(d, lane) for d in (0, 1) for lane in ("compute", "d2h", "h2d")}
    names = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0, 1}
    by_kind = {e["args"]["kind"]: e["tid"] for e in events if e["ph"] == "X"}
    assert by_kind["OFFLOAD"] != by_kind["RELOAD"] != by_kind["F"] == by_kind["B"]
    amounts = [e["args"]["amount"] for e in events if e["ph"] == "X" and e["args"]["kind"] == "OFFLOAD"]
    assert amounts and all(a == 0.5 for a in amounts)


def test_memory_counters_follow_the_memory_curve(tmp_path):
    schedule = serial_schedule(tiny_problem(2, 3))
    trace = export(tmp_path, schedule, "--unit-us", "1")
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    curves = memory_curves(schedule.problem, schedule.ops)
    assert len(counters) == sum(len(c) for c in curves)
    peak0 = max(e["args"]["held"] for e in counters if e["pid"] == 0)
    assert peak0 == schedule.peak_memory[0]
    assert trace["otherData"]["makespan"] == schedule.makespan
    assert not any(e["tid"] for e in trace["traceEvents"] if e["ph"] == "X")  # no link lanes without offload
    assert all(e["args"]["kind"] != OpKind.OFFLOAD.value for e in trace["traceEvents"] if e["ph"] == "X")


def test_unknown_format_lists_known_ones(tmp_path, capsys):
    schedule = serial_schedule(tiny_problem(2, 1))
    src = tmp_path / "s.json"
    schedule.save(src)
    assert main(["export", str(src), "--to", "svg", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--to" in err and "chrome-trace" in err


def test_a_half_duplex_link_is_one_lane_for_both_directions(tmp_path):
    schedule = serial_schedule(tiny_problem(2, 3, capacity=2, offload={**OFFLOAD, "duplex": False}), offload=True)
    trace = export(tmp_path, schedule)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {(d, lane) for d in range(2) for lane in ("compute", "link")}
    transfers = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in ("OFFLOAD", "RELOAD")}
    assert transfers == {1}
