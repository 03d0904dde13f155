"""What a schedule file's ``metrics`` say that its ops contradict (``check`` warns, one line each).

The metrics are a summary the writer computed; the ops are the schedule. Every metric is
recomputed from the ops and compared: ``makespan``, ``peak_memory``, ``bubble_ratio``,
``offloaded`` and ``recomputed``, each within ``MODEL_EPS`` of its own scale (times of the
makespan, memory of the largest figure, the ratio absolutely, the count exactly).
"""

from __future__ import annotations

from ppsolve.schedule import Schedule
from ppsolve.tolerance import MODEL_EPS


def _close(stated, actual, scale: float) -> bool:
    return isinstance(stated, (int, float)) and not isinstance(stated, bool) and \
        abs(stated - actual) <= MODEL_EPS * max(1.0, scale)


def metric_warnings(schedule: Schedule) -> list[str]:
    """One line per metric written in the file that differs from the one its ops give."""
    stated = schedule.file_metrics or {}
    memory_scale = max([*schedule.peak_memory, schedule.offloaded, 0.0])
    actual = {"makespan": (schedule.makespan, schedule.makespan),
              "bubble_ratio": (round(schedule.bubble_ratio, 9), 0.0),
              "offloaded": (schedule.offloaded, memory_scale),
              "recomputed": (schedule.recomputed, 0.0)}
    out = []
    for name, (value, scale) in actual.items():
        if name in stated and not _close(stated[name], value, scale):
            out.append(f"metrics.{name} says {stated[name]!r}, the ops give {value:g}")
    peaks, ops_peaks = stated.get("peak_memory"), [round(p, 9) for p in schedule.peak_memory]
    if peaks is not None and (not isinstance(peaks, list) or len(peaks) != len(ops_peaks)
                              or not all(_close(a, b, memory_scale) for a, b in zip(peaks, ops_peaks))):
        out.append(f"metrics.peak_memory says {peaks}, the ops give {ops_peaks}")
    return out
