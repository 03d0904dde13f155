"""Memory of each device over time, exactly as SPEC.md counts it."""

from __future__ import annotations

from typing import Iterable, Sequence

from ppsolve.ops import OpKind
from ppsolve.problem import Problem


# Per kind: (time, 0 for a release / 1 for an allocation, signed amount) of the one memory event of an op.
_EVENT = {
    OpKind.F: lambda p, op: (op.start, 1, p.activation[op.stage]),
    OpKind.RELOAD: lambda p, op: (op.start, 1, op.amount),
    OpKind.OFFLOAD: lambda p, op: (op.end, 0, -op.amount),
    OpKind.B: lambda p, op: (op.end, 0, -p.released_by(OpKind.B, op.stage)),
    OpKind.W: lambda p, op: (op.end, 0, -p.released_by(OpKind.W, op.stage)),
}


def memory_events(problem: Problem, ops: Iterable) -> list[list[tuple[float, float]]]:
    """Per device, the (time, delta) events of its activation memory, in the order they count.

    +activation at the start of F, -amount at the end of OFFLOAD, +amount at the
    start of RELOAD, releases at the end of B (and W when split). Events are sorted
    by time with releases before allocations at one instant.
    ``ops`` are ScheduledOp-like objects (kind, stage, device, start, end, amount).
    """
    events: list[list[tuple[float, int, float]]] = [[] for _ in range(problem.devices)]
    for op in ops:
        try:
            event = _EVENT[op.kind]
        except KeyError:
            raise ValueError(f"no memory rule for op kind {op.kind!r}") from None
        time, order, delta = event(problem, op)
        if delta:
            events[problem.placement[op.stage]].append((time, order, delta))
    out = []
    for device_events in events:
        device_events.sort(key=lambda e: (e[0], e[1]))
        out.append([(t, delta) for t, _, delta in device_events])
    return out


def memory_curves(problem: Problem, ops: Iterable) -> list[list[tuple[float, float]]]:
    """Per device, the step curve of held memory: (time, level after the events at that time)."""
    curves = []
    for device_events in memory_events(problem, ops):
        level, curve = 0.0, [(0.0, 0.0)]
        for time, delta in device_events:
            level += delta
            if curve[-1][0] == time:
                curve[-1] = (time, level)
            else:
                curve.append((time, level))
        curves.append(curve)
    return curves


def peak_memory(problem: Problem, ops: Iterable) -> list[float]:
    """Largest running sum of each device's memory events (releases before allocations)."""
    peaks = []
    for device_events in memory_events(problem, ops):
        level = peak = 0.0
        for _, delta in device_events:
            level += delta
            peak = max(peak, level)
        peaks.append(peak)
    return peaks


def peak_time(problem: Problem, ops: Sequence, device: int) -> float:
    """The first instant at which ``device`` reaches its peak."""
    level = peak = 0.0
    when = 0.0
    for time, delta in memory_events(problem, ops)[device]:
        level += delta
        if level > peak:
            peak, when = level, time
    return when
