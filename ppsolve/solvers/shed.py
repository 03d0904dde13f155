"""Drop memory levers a schedule does not need: a quick pass after the search (``ppsolve.solvers.phases``).

A schedule found by windows, or a warm start, may recompute or offload more than its makespan needs
(the OVERHEAD phase proves the least only when it solves the whole model, and on large problems it
does not). Removing an R op or an OFFLOAD/RELOAD pair moves no other op: every dependency it took
part in only made its B wait, so the times stay valid and the makespan does not grow; only the
device's memory rises, between the F and the removed op. So each lever is dropped, one at a time
(recomputes first, the most expensive first, then transfers, the largest first), when the peaks stay
within the caps. Then each remaining offload moves only what the cap needs: moving δ less leaves δ
more on the device from the offload's end to its reload's start, which is allowed while the device
stays within its cap there, and the shorter transfers end earlier, which waits for nothing. The result
is re-timed as the runtime runs it and checked.

Dust: an offload that moves less than ``DUST`` (1%) of its activation buys next to nothing (a runtime
that moves whole saved tensors may move nothing for it). It is dropped as any lever is when the caps
allow; when its device's cap needs it, it is merged into another offload of that device (the one with
the most room first: that one moves the dust's amount more) when the re-timed schedule keeps the
makespan and the caps. Only a dust offload that neither can remove stays: the cap needs it there.
"""

from __future__ import annotations

import time

from ppsolve.baselines.common import over_capacity
from ppsolve.checker import check
from ppsolve.levers import uses
from ppsolve.memory import memory_curves
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import retime
from ppsolve.tolerance import slack

DUST = 0.01  # an offload of less than this share of its activation is dust (see the module docstring)
DUST_PARTNERS = 8  # offloads of its device tried per dust offload


def _candidates(schedule: Schedule) -> list[tuple[Op, ...]]:
    """What may be dropped, in the order tried: the uses of each lever in its shedding rank (each R, then each
    transfer pair), the largest of a lever first (the longest R, the largest offload)."""
    found = sorted(uses(schedule.ops), key=lambda u: (u[0].shed_rank, -u[0].size(u[1]), -u[1].start))
    return [lever.ops_of(op.stage, op.microbatch) for lever, op in found]


def _room(curve: list[tuple[float, float]], start: float, end: float, cap: float) -> float:
    """How much more a device with step curve ``curve`` could hold over [start, end) within ``cap``."""
    level, top = 0.0, None
    for time_, after in curve:
        if time_ >= end:
            break
        if time_ <= start:
            level = after
        else:
            top = after if top is None else max(top, after)
    top = level if top is None else max(top, level)
    return cap - top


def trim_amounts(problem, ops: list, until: float | None = None, max_tries: int | None = None) -> list:
    """``ops`` with each offload (largest first) moving only what its device's cap needs (see the module
    docstring); an offload that needs to move nothing is left whole (the dropping pass removes those)."""
    ops = list(ops)
    by_key = {(op.kind, op.stage, op.microbatch): i for i, op in enumerate(ops)}
    offloads = sorted((op for op in ops if op.kind is OpKind.OFFLOAD), key=lambda o: (-o.amount, -o.start))
    for off in offloads[:max_tries]:
        if until is not None and time.monotonic() > until:
            break
        cap = problem.capacity[off.device]
        if cap is None:
            continue
        i, k = by_key[(OpKind.OFFLOAD, off.stage, off.microbatch)], by_key[(OpKind.RELOAD, off.stage, off.microbatch)]
        rel = ops[k]
        curve = memory_curves(problem, [op for op in ops if op.device == off.device])[off.device]
        spare = min(_room(curve, ops[i].end, rel.start, cap), ops[i].amount)
        amount = ops[i].amount - spare
        if spare <= slack(cap) or amount <= slack(ops[i].amount):
            continue
        trip = {kind: problem.duration(kind, off.stage, off.microbatch, amount=amount)
                for kind in (OpKind.OFFLOAD, OpKind.RELOAD)}
        ops[i] = ops[i]._replace(end=ops[i].start + trip[OpKind.OFFLOAD], amount=amount)
        ops[k] = rel._replace(end=rel.start + trip[OpKind.RELOAD], amount=amount)
    return ops


def shed_levers(schedule: Schedule, until: float | None = None, max_tries: int | None = None) -> Schedule:
    """``schedule`` without the recomputes and offloads it can do without at its makespan, and moving
    no more than its caps need (or itself); stops trying at ``until`` (``time.monotonic()``) or after
    ``max_tries`` (deterministic mode)."""
    problem = schedule.problem
    ops = list(schedule.ops)
    for tries, group in enumerate(_candidates(schedule)):
        if (until is not None and time.monotonic() > until) or (max_tries is not None and tries >= max_tries):
            break
        trial = [op for op in ops if op.op not in group]
        if not over_capacity(problem, trial):
            ops = trial
    if problem.offload is not None:
        ops = trim_amounts(problem, ops, until, max_tries)
        ops = absorb_dust(problem, ops, schedule.makespan, until, max_tries)
    if ops == list(schedule.ops):
        return schedule
    for build in (lambda: retime(problem, ops), lambda: ops):
        shed = make_schedule(problem, build(), schedule.method.name)
        if shed.makespan <= schedule.makespan + slack(schedule.makespan) and check(shed).ok:
            return Schedule(problem, schedule.method, shed.ops)
    return schedule


def is_dust(problem, op) -> bool:
    """Whether transfer ``op`` moves less than ``DUST`` of its (stage, microbatch)'s activation."""
    return op.amount < DUST * problem.activation.at(op.stage, op.microbatch)


def absorb_dust(problem, ops: list, makespan: float, until: float | None = None,
                max_tries: int | None = None) -> list:
    """``ops`` with each dust offload the caps need merged into another offload of its device, where
    the re-timed schedule keeps ``makespan`` and the caps (see the module docstring)."""
    ops = list(ops)
    dust = sorted((op for op in ops if op.kind is OpKind.OFFLOAD and is_dust(problem, op)), key=lambda o: o.amount)
    for tries, small in enumerate(dust[:max_tries]):
        if until is not None and time.monotonic() > until:
            break
        pair = {Op(OpKind.OFFLOAD, small.stage, small.microbatch), Op(OpKind.RELOAD, small.stage, small.microbatch)}
        rest = [op for op in ops if op.op not in pair]
        partners = sorted((op for op in rest if op.kind is OpKind.OFFLOAD and op.device == small.device
                           and problem.max_offload(op.stage, op.microbatch) - op.amount >= small.amount
                           and not is_dust(problem, op)),
                          key=lambda o: o.amount - problem.max_offload(o.stage, o.microbatch))
        for partner in partners[:DUST_PARTNERS]:
            trial = _grown(problem, rest, partner, partner.amount + small.amount)
            if trial is not None and make_schedule(problem, trial, "dust").makespan <= makespan + slack(makespan):
                ops = trial
                break
    return ops


def _grown(problem, ops: list, offload, amount: float) -> list | None:
    """``ops`` with the pair of ``offload`` moving ``amount`` (the OFFLOAD from its start, the RELOAD up to
    its end), re-timed as the runtime runs it; None when the result is not valid within the caps."""
    out = []
    for op in ops:
        if op.kind.is_transfer and (op.stage, op.microbatch) == (offload.stage, offload.microbatch):
            length = problem.duration(op.kind, op.stage, op.microbatch, amount=amount)
            op = (op._replace(end=op.start + length, amount=amount) if op.kind is OpKind.OFFLOAD
                  else op._replace(start=op.end - length, amount=amount))
        out.append(op)
    try:
        timed = retime(problem, out)
    except Exception:  # noqa: BLE001 - an order the runtime cannot run is simply not taken
        return None
    if over_capacity(problem, timed) or not check(make_schedule(problem, timed, "dust")).ok:
        return None
    return timed
