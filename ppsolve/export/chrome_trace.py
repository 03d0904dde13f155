"""A schedule in the Trace Event format that Perfetto and chrome://tracing open.

One process per device, one thread per lane (compute, d2h, h2d), a complete
("X") event per op with its stage, microbatch and chunk in ``args``, and a
counter ("C") event for the memory of each device whenever it changes.
Trace timestamps are microseconds; ``unit_us`` says how many microseconds one
time unit of the problem is (1000: the problem's times are milliseconds).
"""

from __future__ import annotations

from pathlib import Path

from ppsolve.jsonio import write_json_atomic
from ppsolve.memory import memory_curves
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule

LANES = {"compute": 0, "d2h": 1, "h2d": 2, "link": 1}  # thread ids; "link": a half-duplex link's one lane
# Colour names chrome://tracing knows (Perfetto picks its own).
COLOR_OF_KIND = {OpKind.F: "thread_state_running", OpKind.B: "thread_state_iowait", OpKind.W: "good",
                 OpKind.R: "terrible", OpKind.OFFLOAD: "rail_load", OpKind.RELOAD: "rail_animation"}


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 6)


def trace_events(schedule: Schedule, unit_us: float = 1000.0) -> dict:
    """The whole trace as a JSON-ready dict (``{"traceEvents": [...], ...}``)."""
    problem = schedule.problem
    chunk_of = {s: i for stages in problem.stages_of_device for i, s in enumerate(stages)}
    uses_link = problem.can_offload or any(op.kind.is_transfer for op in schedule.ops)
    lanes = ["compute", *problem.link_lanes] if uses_link else ["compute"]
    events: list[dict] = []
    for device in range(problem.devices):
        stages = ",".join(str(s) for s in problem.stages_of_device[device])
        events.append({"ph": "M", "name": "process_name", "pid": device, "tid": 0,
                       "args": {"name": f"device {device} (stages {stages})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": device, "tid": 0,
                       "args": {"sort_index": device}})
        for lane in lanes:
            tid = LANES[lane]
            events.append({"ph": "M", "name": "thread_name", "pid": device, "tid": tid, "args": {"name": lane}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": device, "tid": tid,
                           "args": {"sort_index": tid}})
    for op in sorted(schedule.ops, key=lambda o: (o.device, o.start, o.kind.is_compute)):
        args = {"stage": op.stage, "microbatch": op.microbatch, "chunk": chunk_of[op.stage], "kind": op.kind.value}
        if op.kind.is_transfer:
            args["amount"] = _num(op.amount)
        events.append({"ph": "X", "name": str(op.op), "cat": op.kind.value, "pid": op.device,
                       "tid": LANES[problem.lane_name(op.kind)], "ts": _num(op.start * unit_us),
                       "dur": _num(op.duration * unit_us), "cname": COLOR_OF_KIND[op.kind], "args": args})
    for device, curve in enumerate(memory_curves(problem, schedule.ops)):
        for time, level in curve:
            events.append({"ph": "C", "name": "memory", "pid": device, "tid": 0, "ts": _num(time * unit_us),
                           "args": {"held": _num(round(level, 9))}})
    method = schedule.method
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": "ppsolve", "method": method.name, "status": method.status,
                      "problem": problem.name or "", "makespan": _num(schedule.makespan),
                      "peak_memory": [_num(p) for p in schedule.peak_memory],
                      "capacity": list(problem.capacity), "unit_us": unit_us},
    }


def write(schedule: Schedule, path: str | Path, unit_us: float = 1000.0) -> None:
    """Write the trace JSON atomically."""
    write_json_atomic(path, trace_events(schedule, unit_us))
