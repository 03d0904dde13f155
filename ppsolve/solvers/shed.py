"""Drop memory levers a schedule does not need: a quick pass after the search (``ppsolve.solvers.phases``).

A schedule found by windows, or a warm start, may recompute or offload more than its makespan needs
(the OVERHEAD phase proves the least only when it solves the whole model, and on large problems it
does not). Removing an R op or an OFFLOAD/RELOAD pair moves no other op: every dependency it took
part in only made its B wait, so the times stay valid and the makespan does not grow; only the
device's memory rises, between the F and the removed op. So each lever is dropped, one at a time
(recomputes first, the most expensive first, then transfers, the largest first), when the peaks stay
within the caps; the result is re-timed as the runtime runs it and checked.
"""

from __future__ import annotations

import time

from ppsolve.checker import check
from ppsolve.memory import peak_memory
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import retime


def _fits(problem, ops) -> bool:
    return all(cap is None or peak <= cap + 1e-9 * max(1.0, cap)
               for peak, cap in zip(peak_memory(problem, ops), problem.capacity))


def _candidates(schedule: Schedule) -> list[tuple[Op, ...]]:
    """What may be dropped, in the order tried: each R (longest first), then each transfer pair (largest first)."""
    recomputes = sorted((op for op in schedule.ops if op.kind is OpKind.R),
                        key=lambda o: (-(o.end - o.start), -o.start))
    offloads = sorted((op for op in schedule.ops if op.kind is OpKind.OFFLOAD), key=lambda o: (-o.amount, -o.start))
    return ([(op.op,) for op in recomputes]
            + [(op.op, Op(OpKind.RELOAD, op.stage, op.microbatch)) for op in offloads])


def shed_levers(schedule: Schedule, until: float | None = None, max_tries: int | None = None) -> Schedule:
    """``schedule`` without the recomputes and offloads it can do without at its makespan (or itself);
    stops trying at ``until`` (``time.monotonic()``) or after ``max_tries`` (deterministic mode)."""
    problem = schedule.problem
    ops = list(schedule.ops)
    dropped = False
    for tries, group in enumerate(_candidates(schedule)):
        if (until is not None and time.monotonic() > until) or (max_tries is not None and tries >= max_tries):
            break
        trial = [op for op in ops if op.op not in group]
        if _fits(problem, trial):
            ops, dropped = trial, True
    if not dropped:
        return schedule
    for build in (lambda: retime(problem, ops), lambda: ops):
        shed = make_schedule(problem, build(), schedule.method.name)
        if shed.makespan <= schedule.makespan + 1e-9 * max(1.0, schedule.makespan) and check(shed).ok:
            return Schedule(problem, schedule.method, shed.ops)
    return schedule
